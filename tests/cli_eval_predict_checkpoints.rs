//! `engine eval`, `engine predict` and `engine checkpoints` on the model dir of a real
//! `engine run`: evaluation reproduces the run's own final evaluation, predictions agree
//! with evaluation's accuracy, and the listing shows steps, sizes, the latest and leases.

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine, printed_dict, run_args, spec_path, strs};
use engine::estimator::{checkpoint::CheckpointManager, input::Dataset, model_dir::ModelDir};
use serde_json::Value;
use std::time::Duration;

const T10K_IMAGES: &str = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
const T10K_LABELS: &str = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

/// A model dir trained to step 20 with checkpoints at 0, 10 and 20, and what the run printed.
fn trained() -> Result<(tempfile::TempDir, String, String)> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("model").to_string_lossy().into_owned();
    let run = engine(&strs(&run_args(&dir, 20, &["--set", "run_config.save_checkpoints_steps=10"])))?.ok()?;
    Ok((tmp, dir, run.stdout))
}

fn lines(text: &str) -> Result<Vec<Value>> {
    text.lines().map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}"))).collect()
}

#[test]
fn eval_reproduces_the_final_evaluation_and_reads_any_checkpoint() -> Result<()> {
    let (_tmp, dir, run_stdout) = trained()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    let latest = engine(&["eval", &spec, "--model-dir", &dir, "--set", "eval_spec.steps=1"])?.ok()?;
    // Same checkpoint, same 1000 examples: the same dict, to the printed digit.
    let dict = latest.stdout.lines().last().unwrap_or_default();
    ensure!(run_stdout.trim_end().ends_with(dict) && dict.contains("'global_step': 20"), "{dict} vs {run_stdout}");
    ensure!(latest.stderr.contains("Saving dict for global step 20"), "{}", latest.stderr);

    let older_run =
        engine(&["eval", &spec, "--model-dir", &dir, "--checkpoint", "model.ckpt-10", "--set", "eval_spec.steps=1"])?
            .ok()?;
    let older = printed_dict(&older_run.stdout)?;
    ensure!(older["global_step"] == 10.0 && older["loss"] != printed_dict(&run_stdout)?["loss"], "{older:?}");

    // Step 10 is behind eval/'s curve (the run evaluated 10 and 20, `engine eval` 20
    // again): its summaries go beside it, in eval_backfill/, so TensorBoard's eval curve
    // does not bend back.
    let steps_in = |sub: &str| -> Result<Vec<i64>> {
        let model_dir = engine::estimator::model_dir::ModelDir::open(&dir)?;
        let mut steps = Vec::new();
        for file in engine::estimator::summary::event_files(&model_dir, sub)? {
            let events = engine::estimator::summary::read_event_file(&model_dir, &file)?;
            steps.extend(events.into_iter().filter(|e| e.summary.is_some()).map(|e| e.step));
        }
        Ok(steps)
    };
    ensure!(steps_in("eval")? == [10, 20, 20], "{:?}", steps_in("eval")?);
    ensure!(steps_in("eval_backfill")? == [10], "{:?}", steps_in("eval_backfill")?);
    ensure!(older_run.stderr.contains("behind the evaluation curve"), "{}", older_run.stderr);

    // A path works as well as a name.
    let by_path = format!("{dir}/model.ckpt-10");
    let same =
        engine(&["eval", &spec, "--model-dir", &dir, "--checkpoint", &by_path, "--set", "eval_spec.steps=1"])?.ok()?;
    ensure!(printed_dict(&same.stdout)? == older);

    let missing = engine(&["eval", &spec, "--model-dir", &dir, "--checkpoint", "model.ckpt-15"])?;
    ensure!(missing.code == Some(1) && missing.stderr.contains("model.ckpt-15"), "{}", missing.stderr);
    let nowhere = format!("{dir}-typo");
    let missing = engine(&["eval", &spec, "--model-dir", &nowhere])?;
    ensure!(missing.code == Some(1) && missing.stderr.contains("does not exist"), "{}", missing.stderr);
    ensure!(!std::path::Path::new(&nowhere).exists(), "eval must not create a model dir");
    Ok(())
}

#[test]
fn predict_writes_one_json_object_per_example_consistent_with_eval() -> Result<()> {
    let (_tmp, dir, _) = trained()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    // The first 1000 test images (eval_input's first batch), classes only, to a file.
    let out_file = format!("{dir}/predictions.jsonl");
    let predict = engine(&[
        "predict",
        &spec,
        "--model-dir",
        &dir,
        "--keys",
        "classes",
        "--output",
        &out_file,
        "--set",
        "eval_input.take=1000",
    ])?
    .ok()?;
    ensure!(predict.stdout.is_empty(), "{}", predict.stdout);
    let predictions = lines(&std::fs::read_to_string(&out_file)?)?;
    ensure!(predictions.len() == 1000, "{} lines", predictions.len());
    ensure!(predictions.iter().all(|p| p.as_object().is_some_and(|o| o.len() == 1 && o["classes"].is_u64())));

    // Their accuracy against the labels is what `engine eval` reports for those examples.
    let labels = Dataset::from_idx(T10K_IMAGES, T10K_LABELS)?.batch(1000).iter()?.next().context("no batch")??;
    let labels = labels.labels.context("no labels")?.to_f64_vec();
    let correct = predictions.iter().zip(&labels).filter(|(p, l)| p["classes"].as_f64() == Some(**l)).count();
    let eval = engine(&["eval", &spec, "--model-dir", &dir, "--set", "eval_spec.steps=1"])?.ok()?;
    let accuracy = printed_dict(&eval.stdout)?["accuracy"];
    ensure!((correct as f64 / 1000.0 - accuracy).abs() < 1e-9, "{correct}/1000 vs {accuracy}");

    // All keys on stdout; `--input` changes eval_input (here 5 examples in batches of 2).
    let input =
        format!(r#"Idx(images: "{T10K_IMAGES}", labels: "{T10K_LABELS}", scale: 255.0, batch_size: 2, take: 5)"#);
    let all = engine(&["predict", &spec, "--model-dir", &dir, "--input", &input])?.ok()?;
    let all = lines(&all.stdout)?;
    ensure!(all.len() == 5, "{all:?}");
    for (p, first) in all.iter().zip(&predictions) {
        let keys: Vec<&String> = p.as_object().context("object")?.keys().collect();
        ensure!(keys == ["classes", "logits", "probabilities"], "{keys:?}");
        let probabilities: Vec<f64> = serde_json::from_value(p["probabilities"].clone())?;
        ensure!(probabilities.len() == 10 && (probabilities.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        let argmax = (0..10).max_by(|&a, &b| probabilities[a].total_cmp(&probabilities[b])).unwrap_or(0);
        ensure!(p["classes"].as_u64() == Some(argmax as u64) && p["classes"] == first["classes"], "{p}");
    }

    // `--input` of eval_input's kind changes only what it names: without `scale` or
    // `labels`, the spec's scale still applies and no labels are read, so the predictions
    // are the same.
    let input = format!(r#"Idx(images: "{T10K_IMAGES}", batch_size: 2, take: 5)"#);
    let short = engine(&["predict", &spec, "--model-dir", &dir, "--input", &input])?.ok()?;
    ensure!(lines(&short.stdout)? == all, "predictions changed when --input left out scale and labels");
    // Another kind would drop the spec's transforms: refused, saying why.
    let other = engine(&["predict", &spec, "--model-dir", &dir, "--input", r#"Csv(path: "a.csv", batch_size: 2)"#])?;
    ensure!(
        other.code == Some(2) && other.stderr.contains("transforms (scale, maps, filters) would not apply"),
        "{}",
        other.stderr
    );
    // Training and evaluation need the labels an Idx input may leave out for prediction.
    let nolabels = engine(&["eval", &spec, "--model-dir", &dir, "--set", "eval_input.labels=None"])?;
    ensure!(
        nolabels.code == Some(1) && nolabels.stderr.contains("eval_input.labels: required to evaluate"),
        "{}",
        nolabels.stderr
    );

    let bad_key = engine(&["predict", &spec, "--model-dir", &dir, "--keys", "scores"])?;
    ensure!(
        bad_key.code == Some(1)
            && bad_key.stderr.contains("'scores'; the model predicts: classes, logits, probabilities"),
        "{}",
        bad_key.stderr
    );
    let bad_input = engine(&[
        "predict",
        &spec,
        "--model-dir",
        &dir,
        "--input",
        "Idx(images: \"a.gz\", labls: \"b\", batch_size: 2)",
    ])?;
    ensure!(
        bad_input.code == Some(1) && bad_input.stderr.contains("(column 29): eval_input.labls: unknown field `labls`"),
        "{}",
        bad_input.stderr
    );
    Ok(())
}

#[test]
fn checkpoints_lists_steps_times_sizes_status_the_latest_and_leases() -> Result<()> {
    let (_tmp, dir, _) = trained()?;
    let manager = CheckpointManager::new(ModelDir::open(&dir)?, 0, None);
    let lease = manager.acquire_lease("model.ckpt-10", "evaluator-0", Duration::from_secs(3600))?;
    let listed = engine(&["checkpoints", &dir])?.ok()?;
    let rows: Vec<Vec<&str>> = listed.stdout.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
    ensure!(
        listed.stdout.lines().nth(1).is_some_and(|h| h.starts_with("PATH") && h.contains("CREATED (UTC)")),
        "{}",
        listed.stdout
    );
    ensure!(rows.len() == 3, "{}", listed.stdout);
    let sizes = manager.list()?;
    for (row, (step, info)) in rows.iter().zip([0u64, 10, 20].iter().zip(&sizes)) {
        ensure!(row[0] == format!("model.ckpt-{step}") && row[1] == step.to_string(), "{row:?}");
        // Date and time, then the size in MiB (a CNN of ~100k parameters with no slots).
        ensure!(row[2].len() == 10 && row[3].len() == 8 && row[5] == "MiB" && row[6] == "ok", "{row:?}");
        let mib: f64 = row[4].parse()?;
        ensure!((mib - info.size_bytes as f64 / 1048576.0).abs() <= 0.05, "{row:?} vs {} bytes", info.size_bytes);
    }
    ensure!(rows[2].last() == Some(&"latest") && rows[0].len() == 7, "{}", listed.stdout);
    ensure!(rows[1][7..].join(" ").starts_with("leased by evaluator-0 until "), "{}", listed.stdout);
    lease.release()?;

    let missing = engine(&["checkpoints", &format!("{dir}-typo")])?;
    ensure!(missing.code == Some(1) && missing.stderr.contains("does not exist"), "{}", missing.stderr);
    let empty = tempfile::tempdir()?;
    let none = engine(&["checkpoints", &empty.path().to_string_lossy()])?.ok()?;
    ensure!(none.stdout.starts_with("no checkpoints in "), "{}", none.stdout);
    Ok(())
}
