//! `warm_start_from` in the spec: a new run starts the selected trainable variables from
//! another run's checkpoint, and everything else (other variables, optimizer slots, the
//! global step) fresh, as TensorFlow's `WarmStartSettings` does.

mod common;

use anyhow::{Result, ensure};
use common::{engine, spec_path};
use engine::estimator::checkpoint::read_checkpoint;
use std::path::Path;

fn variables(dir: &Path, step: u64) -> Result<std::collections::BTreeMap<String, engine::graph::HostTensor>> {
    let path = dir.join(format!("model.ckpt-{step}"));
    Ok(read_checkpoint(&path.to_string_lossy(), None)?.tensors)
}

#[test]
fn selected_variables_start_from_the_other_runs_checkpoint() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    let old = tmp.path().join("old");
    engine(&["run", &spec, "--max-steps", "20", "--model-dir", &old.to_string_lossy()])?.ok()?;
    let new = tmp.path().join("new");
    let from = old.join("model.ckpt-20");
    let set = format!(
        r#"warm_start_from=Some(WarmStart(checkpoint: "{}", vars_to_warm_start: "conv2d/.*"))"#,
        from.display()
    );
    let out =
        engine(&["run", &spec, "--max-steps", "1", "--model-dir", &new.to_string_lossy(), "--set", &set])?.ok()?;
    ensure!(out.stderr.contains("Warm-started 2 variables"), "{}", out.stderr);
    let (trained, fresh, started) = (variables(&old, 20)?, variables(&old, 0)?, variables(&new, 0)?);
    for name in ["conv2d/kernel", "conv2d/bias"] {
        ensure!(started[name] == trained[name], "{name} did not start from the old run");
    }
    // Not selected: the same seeded initial values a fresh run has.
    ensure!(started["dense/kernel"] == fresh["dense/kernel"] && started["dense/kernel"] != trained["dense/kernel"]);
    ensure!(started["global_step"].scalar_value() == Some(0.0));

    // A bad expression is a spec error with its place, before anything runs.
    let out = engine(&[
        "run",
        &spec,
        "--set",
        r#"warm_start_from=Some(WarmStart(checkpoint: "x", vars_to_warm_start: "(("))"#,
    ])?;
    ensure!(out.code != Some(0) && out.stderr.contains("warm_start_from.vars_to_warm_start"), "{}", out.stderr);
    Ok(())
}
