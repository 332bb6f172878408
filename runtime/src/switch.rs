//! The engine's on/off environment switches, read one way (`ENGINE_STEP_GRAPH`,
//! `ENGINE_PIPELINE`).

/// Whether environment variable `name` turns its feature off: `off`, `0` or `false`, in any
/// case. Unset or anything else leaves it on.
pub fn switched_off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "off" | "0" | "false"))
}
