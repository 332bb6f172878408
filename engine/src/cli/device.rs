//! Device names for `--device`: `cpu`, `wgpu[:N]`, `cuda[:N]`.

use std::{fmt, str::FromStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    #[default]
    Cpu,
    Wgpu(usize),
    Cuda(usize),
}

impl Device {
    pub const NAMES: &'static [&'static str] = &["cpu", "wgpu[:N]", "cuda[:N]"];
}

impl FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, index) = match s.split_once(':') {
            Some((k, i)) => (k, Some(i)),
            None => (s, None),
        };
        let index = match index {
            None => 0,
            Some(i) => i.parse().map_err(|_| format!("`{i}` in `{s}` is not a device index"))?,
        };
        match kind {
            "cpu" if index == 0 => Ok(Device::Cpu),
            "wgpu" => Ok(Device::Wgpu(index)),
            "cuda" => Ok(Device::Cuda(index)),
            _ => Err(format!("unknown device `{s}`, expected one of: {}", Device::NAMES.join(", "))),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse() {
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("wgpu".parse(), Ok(Device::Wgpu(0)));
        assert_eq!("cuda:1".parse(), Ok(Device::Cuda(1)));
        assert!("tpu".parse::<Device>().is_err_and(|e| e.contains("cpu, wgpu[:N], cuda[:N]")));
        assert!("cuda:x".parse::<Device>().is_err());
    }
}
