//! Bad data never passes silently. A NaN in the training data never reaches the weights: by
//! default the run stops at the first step it would have poisoned, naming the step, the
//! variable whose gradient is not finite and the CSV line that holds the NaN;
//! `run_config.non_finite: Skip` skips those batches instead (counted in TensorBoard's
//! summaries) and the model trains as if the bad line were not there, in one process and
//! with mirrored replicas. An evaluation that reads no example is an error, not a NaN loss.

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine, idx, printed_dict, python_json};
use engine::estimator::checkpoint::read_checkpoint;
use std::path::Path;

/// A separable 4-feature table with one NaN cell (the data line on file line 18).
fn write_data(dir: &Path) -> Result<()> {
    let mut text = String::from("a,b,c,d,label\n");
    let mut state = 7u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    for row in 0..400 {
        let x: Vec<f64> = (0..4).map(|_| next()).collect();
        let label = u8::from(x[0] + x[1] - x[2] > 0.0);
        let c = if row == 16 { "NaN".to_string() } else { format!("{:.4}", x[2]) };
        text.push_str(&format!("{:.4},{:.4},{c},{:.4},{label}\n", x[0], x[1], x[3]));
    }
    std::fs::write(dir.join("train.csv"), text)?;
    let spec = r#"Job(
    model: Functional(
        inputs: {"a": [1], "b": [1], "c": [1], "d": [1]},
        nodes: [
            ("all", Concatenate(axis: -1), ["a", "b", "c", "d"]),
            ("h", Dense(units: 16, activation: Relu), ["all"]),
            ("logits", Dense(units: 2), ["h"]),
        ],
        outputs: ["logits"],
    ),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Sgd(learning_rate: 0.1),
    metrics: [Accuracy],
    train_input: Csv(path: "DIR/train.csv", label: "label", batch_size: 16, shuffle_buffer: 100, seed: 1,
        maps: [Reshape(feature: "a", shape: [1]), Reshape(feature: "b", shape: [1]),
               Reshape(feature: "c", shape: [1]), Reshape(feature: "d", shape: [1])]),
    eval_input: Csv(path: "DIR/train.csv", label: "label", batch_size: 100,
        filters: [AllFinite],
        maps: [Reshape(feature: "a", shape: [1]), Reshape(feature: "b", shape: [1]),
               Reshape(feature: "c", shape: [1]), Reshape(feature: "d", shape: [1])]),
    run_config: (model_dir: "DIR/run", random_seed: 1, save_summary_steps: 10),
    train_spec: (max_steps: 200),
)"#;
    std::fs::write(dir.join("spec.ron"), spec.replace("DIR", &dir.to_string_lossy()))?;
    Ok(())
}

fn all_finite(model_dir: &Path, step: u64) -> Result<bool> {
    let checkpoint = read_checkpoint(&model_dir.join(format!("model.ckpt-{step}")).to_string_lossy(), None)?;
    Ok(checkpoint.tensors.values().all(|t| t.to_f64_vec().iter().all(|x| x.is_finite())))
}

#[test]
fn a_nan_in_the_data_stops_the_run_naming_the_line_and_no_weight_is_touched() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    write_data(tmp.path())?;
    let spec = tmp.path().join("spec.ron").to_string_lossy().into_owned();
    let run = engine(&["run", &spec])?;
    ensure!(
        run.code == Some(1),
        "a NaN in the data is a permanent error (status 1), got {:?}:\n{}",
        run.code,
        run.stderr
    );
    let error = run.stderr.lines().find(|l| l.starts_with("error: ")).context("no error line")?;
    ensure!(error.contains("was not applied: the gradient of h/kernel has"), "{error}");
    ensure!(error.contains("the input is to blame: feature `c` is NaN (value 1 of 1) in "), "{error}");
    ensure!(error.contains("train.csv:18"), "{error}");
    let run_dir = tmp.path().join("run");
    let step = common::latest_step(&run_dir).context("no checkpoint")?;
    ensure!(all_finite(&run_dir, step)?, "a weight is not finite");
    Ok(())
}

#[test]
fn skip_leaves_out_the_bad_batches_and_counts_them_in_one_process_and_mirrored() -> Result<()> {
    for strategy in [&["--strategy", "default"][..], &["--strategy", "mirrored", "--devices", "cpu:0,cpu:1"]] {
        let tmp = tempfile::tempdir()?;
        write_data(tmp.path())?;
        let spec = tmp.path().join("spec.ron").to_string_lossy().into_owned();
        let mut args = vec!["run", &spec, "--set", "run_config.non_finite=Skip(max_consecutive: 5)"];
        args.extend(strategy);
        let run = engine(&args)?.ok()?;
        let skipped = run.stderr.matches("Skipping a batch: ").count();
        ensure!(skipped >= 1, "{strategy:?}: nothing was skipped:\n{}", run.stderr);
        ensure!(run.stderr.contains("train.csv:18"), "{}", run.stderr);
        let result = printed_dict(&run.stdout)?;
        ensure!(result["global_step"] == 200.0 && result["accuracy"] >= 0.9, "{strategy:?}: {result:?}");
        ensure!(all_finite(&tmp.path().join("run"), 200)?, "{strategy:?}: a weight is not finite");
        let view = python_json("read_events.py", &tmp.path().join("run"))?;
        let counted = view["scalars"]["non_finite_batches_skipped"].as_array().map(Vec::len).unwrap_or(0);
        ensure!(counted == skipped, "{strategy:?}: {skipped} skips logged, {counted} in the summaries");
    }
    Ok(())
}

#[test]
fn an_evaluation_of_no_examples_is_an_error_not_a_nan() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    write_data(tmp.path())?;
    let spec = tmp.path().join("spec.ron").to_string_lossy().into_owned();
    engine(&["run", &spec, "--set", "run_config.non_finite=Skip", "--max-steps", "5"])?.ok()?;
    let eval = engine(&["eval", &spec, "--set", "eval_input.take=0"])?;
    ensure!(eval.code == Some(1), "{:?}:\n{}\n{}", eval.code, eval.stdout, eval.stderr);
    ensure!(eval.stderr.contains("evaluation read no examples"), "{}", eval.stderr);
    ensure!(!eval.stdout.contains("nan") && !eval.stdout.contains("NaN"), "{}", eval.stdout);
    Ok(())
}

/// NaN in the evaluation data is caught like NaN in the training data: the evaluation
/// stops, naming the line, instead of reporting metrics computed through it.
#[test]
fn a_nan_in_the_evaluation_data_names_the_line_instead_of_reporting_metrics() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    write_data(tmp.path())?;
    let spec = tmp.path().join("spec.ron").to_string_lossy().into_owned();
    engine(&["run", &spec, "--set", "run_config.non_finite=Skip", "--max-steps", "5"])?.ok()?;
    let eval = engine(&["eval", &spec, "--set", "eval_input.filters=[]"])?;
    ensure!(eval.code == Some(1), "{:?}:\n{}\n{}", eval.code, eval.stdout, eval.stderr);
    let error = eval.stderr.lines().find(|l| l.starts_with("error: ")).context("no error line")?;
    ensure!(error.contains("evaluation stopped at batch 1: `c` holds a NaN or an infinity"), "{error}");
    ensure!(error.contains("feature `c` is NaN (value 1 of 1) in ") && error.contains("train.csv:18"), "{error}");
    ensure!(!eval.stdout.contains("accuracy"), "metrics were reported: {}", eval.stdout);
    Ok(())
}

/// An output layer narrower than the labels' classes (5 units for Fashion-MNIST's 10)
/// fails at the first step, naming the spec's `units`, the example and the fix.
#[test]
fn labels_past_the_output_layer_name_the_spec_field_and_the_example_and_leave_no_checkpoint() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_string_lossy().into_owned();
    let spec = common::spec_path("fashion_mnist_mlp.ron");
    let run = engine(&["run", &spec, "--set", "model.layers[4].units=5", "--max-steps", "1", "--model-dir", &dir])?;
    ensure!(run.code == Some(1), "{:?}:\n{}", run.code, run.stderr);
    let error = run.stderr.lines().find(|l| l.starts_with("error: ")).context("no error line")?;
    // The width came from the override, so that is where the error points.
    ensure!(error.contains("`--set model.layers[4].units=5` (column 29): model.layers[4].units: label "), "{error}");
    ensure!(error.contains("of the example at example ") && error.contains("train-labels-idx1-ubyte.gz)"), "{error}");
    ensure!(error.contains("outside the model's 5 classes") && error.contains("units"), "{error}");
    // The failed first run leaves no checkpoint of its too-narrow model behind: the
    // corrected spec trains in the same model dir (it failed on restoring one before).
    ensure!(!tmp.path().join("model.ckpt-0.safetensors").exists(), "model.ckpt-0 was left behind");
    ensure!(run.stderr.contains("Removed model.ckpt-0: training failed before its first step"), "{}", run.stderr);
    let fixed = engine(&["run", &spec, "--max-steps", "1", "--set", "eval_spec.steps=1", "--model-dir", &dir])?;
    ensure!(fixed.code == Some(0), "{:?}:\n{}", fixed.code, fixed.stderr);
    Ok(())
}

/// A label outside the classes in an IDX labels file names both files and the example.
#[test]
fn an_idx_label_out_of_range_names_the_labels_file_and_the_example() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    std::fs::write(dir.join("images.idx"), idx(&[4, 2, 2], [9; 16]))?;
    std::fs::write(dir.join("labels.idx"), idx(&[4], [1, 2, 200, 3]))?;
    let spec = r#"Job(
    model: Sequential(input_shape: [2, 2, 1], layers: [Flatten, Dense(units: 10)]),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Sgd(learning_rate: 0.1),
    train_input: Idx(images: "DIR/images.idx", labels: "DIR/labels.idx", batch_size: 4),
    run_config: (model_dir: "DIR/run"),
    train_spec: (max_steps: 1),
)"#;
    let path = dir.join("spec.ron");
    std::fs::write(&path, spec.replace("DIR", &dir.to_string_lossy()))?;
    let run = engine(&["run", &path.to_string_lossy()])?;
    let error = run.stderr.lines().find(|l| l.starts_with("error: ")).context("no error line")?;
    ensure!(
        error.contains("model.layers[1].units") && error.contains("label 200 of the example at example 3 of "),
        "{error}"
    );
    ensure!(error.contains("images.idx (its label in ") && error.contains("labels.idx)"), "{error}");
    ensure!(error.contains("at least 201 units"), "{error}");
    Ok(())
}

/// An IDX path that is a device, or a gzip member that inflates past its header, is refused
/// at once (bounded reads), naming the file: `engine plan` once read /dev/zero until the
/// machine ran out of memory.
#[test]
fn unbounded_idx_inputs_are_refused_before_they_are_read() -> Result<()> {
    use std::io::Write;
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let mut bomb = idx(&[1, 2, 2], [1; 4]);
    bomb.extend(std::iter::repeat_n(0u8, 256 << 20));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&bomb)?;
    drop(bomb);
    std::fs::write(dir.join("bomb.idx.gz"), gz.finish()?)?;
    std::fs::write(dir.join("labels.idx"), idx(&[1], [3]))?;
    for images in ["/dev/zero", &format!("{}/bomb.idx.gz", dir.display())] {
        let spec = format!(
            r#"Job(
    model: Sequential(input_shape: [2, 2, 1], layers: [Flatten, Dense(units: 10)]),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Sgd(learning_rate: 0.1),
    train_input: Idx(images: "{images}", labels: "{dir}/labels.idx", batch_size: 4),
    run_config: (model_dir: "{dir}/run"),
    train_spec: (max_steps: 1),
)"#,
            dir = dir.display()
        );
        let path = dir.join("spec.ron");
        std::fs::write(&path, spec)?;
        let started = std::time::Instant::now();
        let plan = engine(&["plan", &path.to_string_lossy()])?;
        ensure!(plan.code == Some(1) || plan.code == Some(2), "{images}: {:?}\n{}", plan.code, plan.stderr);
        ensure!(plan.stderr.contains(images), "{images}: {}", plan.stderr);
        ensure!(
            plan.stderr.contains("not a regular file") || plan.stderr.contains("inflates past the 4 bytes"),
            "{images}: {}",
            plan.stderr
        );
        ensure!(started.elapsed() < std::time::Duration::from_secs(60), "{images}: took {:?}", started.elapsed());
    }
    Ok(())
}
