//! Bounds on every size an input section can ask for, derived from this machine's memory and
//! cores, so that a typo (`prefetch: 1000000000`) is an error naming the field instead of an
//! allocation failure that aborts the process.

use super::error::{InputError, Result};

/// Hard ceilings that hold whatever the machine: they keep index arithmetic and channel
/// allocations sane even for the Rust API, where no memory figure is consulted.
pub const MAX_PREFETCH: usize = 1 << 12;
pub const MAX_PARALLEL_CALLS: usize = 1 << 10;
pub const MAX_BATCH_SIZE: usize = 1 << 24;

/// Which field of an input section an error is about (`maps`, index 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputField {
    pub name: &'static str,
    pub index: Option<usize>,
}

impl InputField {
    pub fn named(name: &'static str) -> InputField {
        InputField { name, index: None }
    }

    pub fn at(name: &'static str, index: usize) -> InputField {
        InputField { name, index: Some(index) }
    }
}

impl std::fmt::Display for InputField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}[{i}]", self.name),
            None => f.write_str(self.name),
        }
    }
}

/// `size` must be in `1..=max`; `what` says what it counts.
pub(crate) fn check_range(field: &'static str, size: u64, min: u64, max: u64, why: &str) -> Result<()> {
    if (min..=max).contains(&size) {
        return Ok(());
    }
    let detail = if size < min { format!("must be at least {min}") } else { format!("is {size}, at most {max} {why}") };
    Err(InputError::Field { field: InputField::named(field), source: Box::new(InputError::OutOfBounds(detail)) })
}

/// `1.5 GiB`, for messages.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_their_field() {
        assert!(check_range("prefetch", 8, 0, 16, "").is_ok());
        let err = check_range("prefetch", 1 << 30, 0, 16, "(batches in memory)").unwrap_err();
        assert!(matches!(&err, InputError::Field { field, .. } if field.name == "prefetch"));
        assert_eq!(err.to_string(), "prefetch: is 1073741824, at most 16 (batches in memory)");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
    }
}
