//! Running the real `engine` binary.

#![allow(dead_code)]

pub mod feeds;

use std::{path::PathBuf, process::Command};

pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn engine(args: &[&str]) -> anyhow::Result<Output> {
    let out = Command::new(env!("CARGO_BIN_EXE_engine")).args(args).output()?;
    Ok(Output {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout)?,
        stderr: String::from_utf8(out.stderr)?,
    })
}

pub fn spec_path(name: &str) -> String {
    format!("{}/../specs/{name}", env!("CARGO_MANIFEST_DIR"))
}

pub fn cnn_text() -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(spec_path("fashion_mnist_cnn.ron"))?)
}

/// Writes `text` as `name` in a fresh temporary directory (kept alive by the returned guard).
pub fn write_spec(name: &str, text: &str) -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(name);
    std::fs::write(&path, text)?;
    Ok((dir, path))
}
