//! Our checkpoints load in Python with `safetensors.numpy.load_file`: same names, dtypes, shapes, values
//! and metadata.

use anyhow::{Context, Result, bail, ensure};
use engine_estimator::checkpoint::{CheckpointManager, CheckpointMeta};
use engine_estimator::model_dir::ModelDir;
use engine_graph::{HostData, HostTensor};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$ENGINE_TEST_PYTHON`, else the repository's `.venv`; missing is a failure, never a skip.
fn python() -> Result<PathBuf> {
    let python = match std::env::var_os("ENGINE_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => repo_root().join(".venv/bin/python"),
    };
    ensure!(
        python.exists(),
        "Python for tests not found at {}: run scripts/setup-test-env.sh (or set ENGINE_TEST_PYTHON)",
        python.display()
    );
    Ok(python)
}

#[test]
fn python_safetensors_loads_our_checkpoint() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let manager = CheckpointManager::new(ModelDir::open(&tmp.path().to_string_lossy())?, 5, None);
    let mut vars = BTreeMap::new();
    vars.insert("dense/kernel".to_string(), HostTensor::f32(vec![2, 3], vec![0.5, -1.25, 3.0, 1e-7, -0.0, 42.0])?);
    vars.insert("dense/kernel/Adam".to_string(), HostTensor::f32(vec![2, 3], vec![0.125; 6])?);
    vars.insert("dense/bias".to_string(), HostTensor::f32(vec![3], vec![0.1, 0.2, 0.3])?);
    vars.insert("global_step".to_string(), HostTensor::scalar_i64(1234));
    vars.insert("input/offsets".to_string(), HostTensor::i64(vec![2], vec![-5, i64::MAX])?);
    vars.insert("mask".to_string(), HostTensor::new(vec![2, 1], HostData::Bool(vec![true, false]))?);
    let meta = CheckpointMeta {
        fingerprint: "fp:abc123".into(),
        input_state: r#"{"epoch":2,"batch":17}"#.into(),
        examples_seen: None,
    };
    let info = manager.save(1234, &vars, &meta)?;

    let file = tmp.path().join("model.ckpt-1234.safetensors");
    let output = Command::new(python()?).arg(repo_root().join("scripts/read_safetensors.py")).arg(&file).output()?;
    if !output.status.success() {
        bail!("read_safetensors.py failed on {}: {}", file.display(), String::from_utf8_lossy(&output.stderr));
    }
    let read: serde_json::Value = serde_json::from_slice(&output.stdout)?;

    let metadata = &read["metadata"];
    assert_eq!(metadata["global_step"], "1234");
    assert_eq!(metadata["fingerprint"], "fp:abc123");
    assert_eq!(metadata["input_state"], r#"{"epoch":2,"batch":17}"#);
    assert!(metadata["checksum"].as_str().is_some_and(|c| c.starts_with("crc32c:")), "{metadata}");
    let created: f64 = metadata["created_unix"].as_str().context("created_unix")?.parse()?;
    let expected_created = info.created.duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    assert!((created - expected_created).abs() < 1e-3, "{created} vs {expected_created}");

    let tensors = read["tensors"].as_object().context("tensors")?;
    let names: Vec<&String> = tensors.keys().collect();
    assert_eq!(names, vars.keys().collect::<Vec<_>>());
    for (name, tensor) in &vars {
        let py = &tensors[name];
        let expected_dtype = match tensor.data {
            HostData::F32(_) => "float32",
            HostData::I64(_) => "int64",
            HostData::Bool(_) => "bool",
        };
        assert_eq!(py["dtype"], expected_dtype, "{name}");
        let shape: Vec<usize> = serde_json::from_value(py["shape"].clone())?;
        assert_eq!(shape, tensor.shape, "{name}");
        let values = py["values"].as_array().context("values")?;
        match &tensor.data {
            HostData::F32(v) => {
                let got: Vec<f32> = values.iter().map(|x| x.as_f64().unwrap_or(f64::NAN) as f32).collect();
                assert_eq!(
                    got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    "{name}"
                );
            }
            HostData::I64(v) => {
                let got: Vec<i64> = values.iter().map(|x| x.as_i64().unwrap_or(0)).collect();
                assert_eq!(&got, v, "{name}");
            }
            HostData::Bool(v) => {
                let got: Vec<bool> = values.iter().map(|x| x.as_bool().unwrap_or(false)).collect();
                assert_eq!(&got, v, "{name}");
            }
        }
    }
    Ok(())
}
