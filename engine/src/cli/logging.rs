//! Log lines on stderr, dated, in the shape TensorFlow users read:
//! `I 2026-11-21 21:05:29.123 engine] loss = ...` (UTC).

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

struct Logger {
    level: LevelFilter,
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = t.as_secs() % 86_400;
        let (year, month, day) = civil_date(t.as_secs() / 86_400);
        let letter = match record.level() {
            Level::Error => 'E',
            Level::Warn => 'W',
            Level::Info => 'I',
            Level::Debug | Level::Trace => 'D',
        };
        let prefix = std::env::var("ENGINE_LOG_PREFIX").unwrap_or_default();
        // One write per line: stderr is unbuffered, and a line written in pieces can be cut
        // by another thread's (or, through a launcher's pipe, another task's) output.
        let line = format!(
            "{prefix}{letter} {year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} engine] {}\n",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            t.subsec_millis(),
            record.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`), so that log lines carry a date without a time-zone library.
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_become_dates() {
        assert_eq!(super::civil_date(0), (1970, 1, 1));
        assert_eq!(super::civil_date(11_016), (2000, 2, 29));
        assert_eq!(super::civil_date(20_781), (2026, 11, 24));
    }
}

/// Installs the logger; `ENGINE_LOG=debug|info|warn|error` sets the level (info by default).
pub fn init() {
    let level = match std::env::var("ENGINE_LOG").unwrap_or_default().to_ascii_lowercase().as_str() {
        "debug" | "trace" => LevelFilter::Debug,
        "warn" | "warning" => LevelFilter::Warn,
        "error" => LevelFilter::Error,
        "off" => LevelFilter::Off,
        _ => LevelFilter::Info,
    };
    let logger: &'static Logger = Box::leak(Box::new(Logger { level }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}
