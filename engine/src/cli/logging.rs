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
        let now = SystemTime::now();
        let millis = now.duration_since(UNIX_EPOCH).unwrap_or_default().subsec_millis();
        let letter = match record.level() {
            Level::Error => 'E',
            Level::Warn => 'W',
            Level::Info => 'I',
            Level::Debug | Level::Trace => 'D',
        };
        let prefix = std::env::var("ENGINE_LOG_PREFIX").unwrap_or_default();
        // One write per line: stderr is unbuffered, and a line written in pieces can be cut
        // by another thread's (or, through a launcher's pipe, another task's) output.
        let line = format!("{prefix}{letter} {}.{millis:03} engine] {}\n", super::utc::utc(now), record.args());
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
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
