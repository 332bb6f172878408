//! Export and serving end to end, against real consumers: onnxruntime loads every spec's
//! `model.onnx` and agrees with `engine predict`; `engine serve` answers TensorFlow
//! Serving's REST API to a real HTTP client, batching concurrent requests; exporters in
//! `eval_spec` write, keep and replace exports on disk and on S3 (moto).

mod common;

use anyhow::{Context, Result, ensure};
use common::{Moto, engine, engine_command, finish, python, repo_root, spec_path};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TEST_IMAGES: &str = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

/// Trains `spec` a few steps into `dir`, evaluating one batch.
fn train(spec: &str, dir: &Path, steps: u32, extra: &[&str]) -> Result<()> {
    let d = dir.to_string_lossy();
    let steps = steps.to_string();
    let mut args = vec!["run", spec, "--max-steps", &steps, "--model-dir", &d, "--set", "eval_spec.steps=1"];
    args.extend(extra);
    engine(&args)?.ok()?;
    Ok(())
}

/// `engine predict` on the first `n` test images, as JSON Lines in `dir/predictions.jsonl`.
fn predict(spec: &str, dir: &Path, n: usize) -> Result<std::path::PathBuf> {
    let out = dir.join("predictions.jsonl");
    let take = format!("eval_input.take={n}");
    let (d, o) = (dir.to_string_lossy(), out.to_string_lossy());
    engine(&["predict", spec, "--model-dir", &d, "--set", &take, "--output", &o])?.ok()?;
    Ok(out)
}

fn python_check(script: &str, args: &[&str]) -> Result<serde_json::Value> {
    let out = Command::new(python()?).arg(repo_root().join("scripts").join(script)).args(args).output()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{script}: {}", String::from_utf8_lossy(&out.stderr)))?;
    ensure!(out.status.success(), "{script} found problems: {report}");
    Ok(report)
}

#[test]
fn onnxruntime_agrees_with_engine_predict_for_every_spec() -> Result<()> {
    // The image specs: the checker feeds onnxruntime the test images (the table spec's
    // export is checked in csv_sequential.rs).
    let mut specs: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("specs"))? {
        let path = entry?.path();
        if std::fs::read_to_string(&path)?.contains("Idx(") {
            specs.push(path.to_string_lossy().into_owned());
        }
    }
    specs.sort();
    specs.push(repo_root().join("tests/specs/export_branches.ron").to_string_lossy().into_owned());
    ensure!(specs.len() >= 5, "{specs:?}");
    for spec in &specs {
        let tmp = tempfile::tempdir()?;
        train(spec, tmp.path(), 3, &[])?;
        let export = tmp.path().join("exported");
        let e = export.to_string_lossy();
        let run = engine(&["export", spec, "--model-dir", &tmp.path().to_string_lossy(), "--output", &e])?.ok()?;
        ensure!(run.stdout.trim() == e, "{}", run.stdout);
        for file in ["saved_model.json", "graph.json", "variables.safetensors", "model.onnx"] {
            ensure!(export.join(file).is_file(), "{spec}: no {file}");
        }
        let predictions = predict(spec, tmp.path(), 300)?;
        let report = python_check("check_onnx.py", &[&e, &predictions.to_string_lossy(), TEST_IMAGES, "255"])
            .with_context(|| spec.clone())?;
        ensure!(report["examples"] == 300, "{report}");
        // An export is never overwritten.
        let again = engine(&["export", spec, "--model-dir", &tmp.path().to_string_lossy(), "--output", &e])?;
        ensure!(again.code == Some(1) && again.stderr.contains("already exists"), "{}", again.stderr);
    }
    Ok(())
}

#[test]
fn serve_answers_the_tf_serving_rest_api_and_batches_concurrent_requests() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    // A Latest exporter keeping 2 of the 3 evaluations' exports: the server takes the newest.
    let exporters = "eval_spec.exporters=[Latest(exports_to_keep: 2)]";
    train(&spec, tmp.path(), 30, &["--set", "eval_spec.every_n_steps=10", "--set", exporters])?;
    let base = tmp.path().join("export/latest");
    let mut versions: Vec<String> = std::fs::read_dir(&base)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    versions.sort();
    ensure!(versions.len() == 2, "{versions:?}");
    let predictions = predict(&spec, tmp.path(), 64)?;

    let mut server = engine_command(&[
        "serve",
        &base.to_string_lossy(),
        "--port",
        "0",
        "--max-batch-size",
        "16",
        "--batch-timeout-micros",
        "20000",
    ])?
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()?;
    let mut url = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut url)?;
    let url = url.trim().to_string();
    ensure!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1/models/model"), "{url:?}");
    let report = python_check("serve_client.py", &[&url, &predictions.to_string_lossy(), TEST_IMAGES, "255"]);
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let started = Instant::now();
    let (ok, log) = finish(server, Duration::from_secs(30))?;
    let report = report?;
    ensure!(ok && started.elapsed() < Duration::from_secs(10), "{log}");
    ensure!(log.contains(&format!("version {}", versions[1])), "not the newest export: {log}");
    // 64 single-image requests from 16 threads ran in fewer batches than requests.
    let served = log.lines().find(|l| l.contains("Served")).context("no summary")?.to_string();
    let numbers: Vec<u64> = served.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
    let (requests, batches) = (numbers[numbers.len() - 3], numbers[numbers.len() - 1]);
    ensure!(requests >= 65 && batches < requests, "{served}\n{report}");
    Ok(())
}

#[test]
fn exporters_write_to_an_s3_model_dir_and_serve_reads_them() -> Result<()> {
    let moto = Moto::start()?;
    moto.create_bucket("models")?;
    let url = "s3://models/jobs/exported";
    let spec = spec_path("fashion_mnist_mlp.ron");
    let mut run = engine_command(&[
        "run",
        &spec,
        "--max-steps",
        "20",
        "--model-dir",
        url,
        "--set",
        "eval_spec.steps=1",
        "--set",
        "eval_spec.every_n_steps=10",
        "--set",
        r#"eval_spec.exporters=[Best(metric: "accuracy", higher_is_better: true), Final()]"#,
    ])?;
    run.envs(moto.env());
    let out = common::finished(run.output()?)?.ok()?;
    ensure!(out.stderr.contains("Exporter final wrote s3://models/jobs/exported/export/final/"), "{}", out.stderr);

    let mut serve = engine_command(&["serve", &format!("{url}/export/final"), "--port", "0"])?;
    serve.envs(moto.env()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut server = serve.spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut line)?;
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let (ok, log) = finish(server, Duration::from_secs(30))?;
    ensure!(ok && line.contains("/v1/models/model"), "{line}\n{log}");
    ensure!(log.contains("(step 20)"), "{log}");
    Ok(())
}
