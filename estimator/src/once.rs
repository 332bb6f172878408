//! Lines a process says once: a note repeated each time a dataset is built or a device is
//! placed says nothing new.

use std::sync::Mutex;

/// Whether `key` is asked about for the first time in this process.
pub(crate) fn first_time(key: &str) -> bool {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let new = !seen.iter().any(|k| k == key);
    if new {
        seen.push(key.to_string());
    }
    new
}
