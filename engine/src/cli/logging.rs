//! Log lines on stderr, dated, in the shape TensorFlow users read:
//! `I 2026-11-21 21:05:29.123 engine] loss = ...` (UTC), or one JSON object per line for
//! machines (`ENGINE_LOG_FORMAT=json`). Lines are written above training's progress bar,
//! never through it.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::time::{SystemTime, UNIX_EPOCH};

struct Logger {
    level: LevelFilter,
    json: bool,
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
        let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let millis = since_epoch.subsec_millis();
        let prefix = std::env::var("ENGINE_LOG_PREFIX").unwrap_or_default();
        let line = if self.json {
            let object = serde_json::json!({
                "time": format!("{}.{millis:03}Z", super::utc::utc(now).replace(' ', "T")),
                "unix_time": since_epoch.as_secs_f64(),
                "level": record.level().as_str(),
                "task": prefix.trim().trim_start_matches('[').trim_end_matches(']'),
                "message": record.args().to_string(),
            });
            format!("{object}\n")
        } else {
            let letter = match record.level() {
                Level::Error => 'E',
                Level::Warn => 'W',
                Level::Info => 'I',
                Level::Debug | Level::Trace => 'D',
            };
            format!("{prefix}{letter} {}.{millis:03} engine] {}\n", super::utc::utc(now), record.args())
        };
        // One write per line: stderr is unbuffered, and a line written in pieces can be cut
        // by another thread's (or, through a launcher's pipe, another task's) output.
        engine_estimator::hooks::print_line(&line);
    }

    fn flush(&self) {}
}

/// Installs the logger: `ENGINE_LOG=debug|info|warn|error|off` sets the level (info by
/// default), `ENGINE_LOG_FORMAT=json` writes JSON lines (`time`, `unix_time`, `level`,
/// `task`, `message`).
pub fn init() {
    let level = match std::env::var("ENGINE_LOG").unwrap_or_default().to_ascii_lowercase().as_str() {
        "debug" | "trace" => LevelFilter::Debug,
        "warn" | "warning" => LevelFilter::Warn,
        "error" => LevelFilter::Error,
        "off" => LevelFilter::Off,
        _ => LevelFilter::Info,
    };
    let json = std::env::var("ENGINE_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let logger: &'static Logger = Box::leak(Box::new(Logger { level, json }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}
