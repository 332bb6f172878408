//! Helpers shared by the input pipeline's integration tests.
#![allow(dead_code)]

use anyhow::{Context, Result, bail};
use engine_estimator::input::{Batch, Dataset};
use engine_graph::HostTensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const FASHION_DIR: &str = "/usr/share/datasets/fashion-mnist";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The Fashion-MNIST file, or an error saying how to get it.
pub fn fashion(name: &str) -> Result<PathBuf> {
    let path = Path::new(FASHION_DIR).join(name);
    if !path.is_file() {
        bail!("{} is missing: install the Debian package dataset-fashion-mnist", path.display());
    }
    Ok(path)
}

/// The test interpreter (`$ENGINE_TEST_PYTHON`, else `<repo>/.venv/bin/python`).
pub fn python() -> Result<PathBuf> {
    let path = match std::env::var_os("ENGINE_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(".venv/bin/python"),
    };
    if !path.exists() {
        bail!("no test Python at {}: run scripts/setup-test-env.sh (or set ENGINE_TEST_PYTHON)", path.display());
    }
    Ok(path)
}

/// TFRecord files written by Python's `tfrecord` package (see scripts/write_tfrecord.py).
pub fn tfrecord_fixture() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let script = repo_root().join("scripts/write_tfrecord.py");
    let out = Command::new(python()?).arg(&script).arg(dir.path()).output().context("running write_tfrecord.py")?;
    if !out.status.success() {
        bail!(
            "{} failed (run scripts/setup-test-env.sh to install the `tfrecord` package): {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(dir)
}

fn idx_bytes(type_byte: u8, dims: &[u32], values: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, type_byte, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(values);
    out
}

pub fn pixel(example: usize, k: usize) -> u8 {
    ((example * 31 + k * 7) % 256) as u8
}

/// IDX images `[n, h, w]` (pixel(i, k)) and labels `i % 10`, gzipped when asked.
pub fn write_idx(dir: &Path, n: usize, h: usize, w: usize, gz: bool) -> Result<(PathBuf, PathBuf)> {
    let pixels: Vec<u8> = (0..n).flat_map(|i| (0..h * w).map(move |k| pixel(i, k))).collect();
    let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    let images = idx_bytes(0x08, &[n as u32, h as u32, w as u32], &pixels);
    let labels = idx_bytes(0x08, &[n as u32], &labels);
    let suffix = if gz { ".gz" } else { "" };
    let (ip, lp) = (dir.join(format!("images{suffix}")), dir.join(format!("labels{suffix}")));
    let write = |path: &Path, bytes: &[u8]| -> Result<()> {
        if gz {
            use std::io::Write;
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(bytes)?;
            std::fs::write(path, enc.finish()?)?;
        } else {
            std::fs::write(path, bytes)?;
        }
        Ok(())
    };
    write(&ip, &images)?;
    write(&lp, &labels)?;
    Ok((ip, lp))
}

/// `n` examples: feature `x` = [i, 10 i], label `i % 5`.
pub fn tensors(n: usize) -> Result<Dataset> {
    let mut features = BTreeMap::new();
    let x: Vec<f32> = (0..n).flat_map(|i| [i as f32, 10.0 * i as f32]).collect();
    features.insert("x".to_string(), HostTensor::f32(vec![n, 2], x)?);
    let labels = HostTensor::i64(vec![n], (0..n as i64).map(|i| i % 5).collect())?;
    Ok(Dataset::from_tensors(features, Some(labels))?)
}

/// Every batch of a finite dataset.
pub fn collect(dataset: &Dataset) -> Result<Vec<Batch>> {
    Ok(dataset.iter()?.collect::<Result<Vec<_>, _>>()?)
}

/// The source indices of the batches, flattened.
pub fn ids(batches: &[Batch]) -> Vec<u64> {
    batches.iter().flat_map(|b| b.ids.iter().copied()).collect()
}

/// CSV files `part-{k}.csv` with `counts[k]` rows; row `i` overall is `a = i, b = 2i, y = i % 3`.
pub fn write_csv_parts(dir: &Path, counts: &[usize]) -> Result<String> {
    let mut i = 0;
    for (k, &count) in counts.iter().enumerate() {
        let mut text = String::from("a,b,y\n");
        for _ in 0..count {
            text += &format!("{i},{},{}\n", 2 * i, i % 3);
            i += 1;
        }
        std::fs::write(dir.join(format!("part-{k}.csv")), text)?;
    }
    Ok(format!("{}/part-*.csv", dir.display()))
}
