//! What a real `engine run` writes is read by the Python ecosystem's own readers: TensorBoard's
//! `EventAccumulator` sees the training and evaluation summaries, and `safetensors.numpy`
//! loads the checkpoint with every variable, slot and the global step.

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine, printed_dict, python_json, run_args, strs};
use engine::estimator::{
    checkpoint::read_checkpoint,
    model_dir::ModelDir,
    summary::{event_files, read_event_file},
};
use engine::graph::HostData;
use serde_json::Value;

fn series(view: &Value, tag: &str) -> Result<Vec<(u64, f64)>> {
    let points = view["scalars"][tag].as_array().with_context(|| format!("no scalar `{tag}` in {view}"))?;
    points.iter().map(|p| Ok((p[0].as_u64().context("step")?, p[1].as_f64().context("value")?))).collect()
}

#[test]
fn tensorboard_reads_the_summaries_of_a_real_run() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_string_lossy().into_owned();
    let extra = [
        "--set",
        "run_config.save_summary_steps=10",
        "--set",
        "run_config.log_step_count_steps=10",
        "--set",
        "run_config.save_checkpoints_steps=15",
        "--set",
        "eval_spec.throttle_secs=0",
    ];
    let run = engine(&strs(&run_args(&dir, 30, &extra)))?.ok()?;
    let printed = printed_dict(&run.stdout)?;

    let view = python_json("read_events.py", tmp.path())?;
    ensure!(view["file_version"] == 2.0, "{view}");
    let loss = series(&view, "loss")?;
    ensure!(loss.iter().map(|p| p.0).collect::<Vec<_>>() == [0, 10, 20], "{loss:?}");
    ensure!(loss.iter().all(|p| p.1.is_finite() && p.1 > 0.0), "{loss:?}");
    // The spec's SGD learning rate.
    let lr = series(&view, "learning_rate")?;
    ensure!(lr.iter().all(|p| (p.1 - 0.05).abs() < 1e-7), "{lr:?}");
    let rate = series(&view, "global_step/sec")?;
    ensure!(rate.iter().map(|p| p.0).collect::<Vec<_>>() == [10, 20, 30] && rate.iter().all(|p| p.1 > 0.0), "{rate:?}");

    // The Graphs tab: the compiled training plan, scoped names, op types, inputs, shapes.
    let nodes = view["graph"].as_array().with_context(|| format!("TensorBoard finds no graph: {}", view["graph"]))?;
    let node = |name: &str| nodes.iter().find(|n| n["name"] == name);
    let kernel = node("conv2d/kernel").context("no conv2d/kernel node in the graph")?;
    ensure!(kernel["op"] == "VariableV2" && kernel["shapes"] == serde_json::json!([[3, 3, 1, 32]]), "{kernel}");
    ensure!(nodes.iter().any(|n| n["op"] == "Conv2DBackpropFilter" || n["op"] == "_FusedMaxPoolConv2DBackpropFilter"));
    let train_op =
        nodes.iter().find(|n| n["name"].as_str().is_some_and(|s| s.ends_with("train_op"))).context("no train op")?;
    ensure!(train_op["input"].as_array().is_some_and(|i| i.len() > 5), "{train_op}");
    ensure!(nodes.iter().all(|n| n["device"] != ""), "a node without a device");

    // The HParams dashboard: the spec's optimizer, learning rate, batch, and the strategy.
    let hparams = &view["hparams"];
    ensure!(hparams["optimizer"] == "SGD" && hparams["batch_size"] == 64.0, "{hparams}");
    ensure!((hparams["learning_rate"].as_f64().unwrap_or(0.0) - 0.05).abs() < 1e-7, "{hparams}");
    ensure!(hparams["strategy"] == "default" && hparams["loss"] == "SparseCategoricalCrossentropy", "{hparams}");

    // TensorBoard's values are exactly what our own reader decodes from the same files.
    let model_dir = ModelDir::open(&dir)?;
    let mut ours = Vec::new();
    for file in event_files(&model_dir, "")? {
        for event in read_event_file(&model_dir, &file)? {
            for v in event.summary.map(|s| s.value).unwrap_or_default() {
                if v.tag == "loss"
                    && let Some(x) = v.simple_value
                {
                    ours.push((event.step as u64, x as f64));
                }
            }
        }
    }
    ensure!(ours == loss, "{ours:?} vs {loss:?}");

    // Evaluations after the saves at 15 and 30, under eval/.
    let eval = python_json("read_events.py", &tmp.path().join("eval"))?;
    let accuracy = series(&eval, "accuracy")?;
    ensure!(accuracy.iter().map(|p| p.0).collect::<Vec<_>>() == [15, 30], "{accuracy:?}");
    ensure!((accuracy[1].1 - printed["accuracy"]).abs() < 1e-6, "{accuracy:?} vs {printed:?}");
    let eval_loss = series(&eval, "loss")?;
    ensure!((eval_loss[1].1 - printed["loss"]).abs() < 1e-5 * printed["loss"], "{eval_loss:?} vs {printed:?}");
    Ok(())
}

#[test]
fn python_safetensors_loads_a_checkpoint_of_a_real_run() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_string_lossy().into_owned();
    engine(&strs(&run_args(&dir, 20, &["--set", "run_config.save_checkpoints_steps=10"])))?.ok()?;
    let file = tmp.path().join("model.ckpt-20.safetensors");
    let python = python_json("read_safetensors.py", &file)?;
    let ours = read_checkpoint(&file.to_string_lossy(), None)?;

    let tensors = python["tensors"].as_object().context("no tensors")?;
    let names: Vec<&String> = tensors.keys().collect();
    ensure!(names.iter().copied().eq(ours.tensors.keys()), "{names:?} vs {:?}", ours.tensors.keys());
    for name in ["conv2d/kernel", "conv2d/bias", "dense/kernel", "dense_1/bias", "global_step"] {
        ensure!(tensors.contains_key(name), "{name} missing from {names:?}");
    }
    for (name, tensor) in &ours.tensors {
        let loaded = &tensors[name];
        let shape: Vec<usize> = serde_json::from_value(loaded["shape"].clone())?;
        ensure!(shape == tensor.shape, "{name}: shape {shape:?} vs {:?}", tensor.shape);
        let values: Vec<f64> = serde_json::from_value(loaded["values"].clone())?;
        match &tensor.data {
            HostData::F32(v) => {
                ensure!(loaded["dtype"] == "float32", "{name}: {}", loaded["dtype"]);
                // numpy widens float32 to an exact double: compare bit for bit as f32.
                ensure!(v.iter().zip(&values).all(|(a, b)| a.to_bits() == (*b as f32).to_bits()), "{name} differs");
            }
            HostData::I64(v) => {
                ensure!(loaded["dtype"] == "int64", "{name}: {}", loaded["dtype"]);
                ensure!(v.iter().zip(&values).all(|(a, b)| *a as f64 == *b), "{name} differs");
            }
            HostData::Bool(_) => ensure!(loaded["dtype"] == "bool", "{name}"),
        }
        ensure!(values.len() == tensor.len(), "{name}: {} values", values.len());
    }
    ensure!(tensors["global_step"]["values"] == serde_json::json!([20]), "{}", tensors["global_step"]);
    let metadata = &python["metadata"];
    ensure!(metadata["global_step"] == "20", "{metadata}");
    ensure!(metadata["fingerprint"] == ours.meta.fingerprint.as_str(), "{metadata}");
    ensure!(metadata["input_state"] == ours.meta.input_state.as_str(), "{metadata}");
    Ok(())
}

/// A summary saver in the spec replaces the default one (from `save_summary_steps`), as a
/// step counter does: with both, every scalar was written twice at their common steps.
#[test]
fn a_spec_summary_saver_replaces_the_default_one() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_string_lossy().into_owned();
    let extra =
        ["--set", "run_config.save_summary_steps=10", "--set", "train_spec.hooks=[SummarySaver(save_steps: 5)]"];
    engine(&strs(&run_args(&dir, 20, &extra)))?.ok()?;
    let view = python_json("read_events.py", tmp.path())?;
    let steps: Vec<u64> = series(&view, "loss")?.into_iter().map(|p| p.0).collect();
    ensure!(steps == [0, 5, 10, 15], "{steps:?}");
    Ok(())
}

/// Multi-class precision, recall and ROC AUC (one class against the rest, macro and micro
/// averages) and the confusion matrix (printed, and in TensorBoard) agree with
/// scikit-learn's on the same predictions: `engine eval`'s figures
/// against `sklearn.metrics` over `engine predict`'s classes and probabilities and the test
/// set's labels. The AUCs are Keras' area at 200 thresholds, written out with numpy in the
/// script (the engine's is checked against Keras itself in estimator/tests/graph_values.rs).
#[test]
fn multi_class_precision_and_recall_agree_with_scikit_learn() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_string_lossy().into_owned();
    let metrics = "metrics=[Accuracy, Precision(average: Macro), Precision(average: Micro), Recall(average: Macro), \
                   Precision(class_id: 3), Recall(class_id: 6), AUC(average: Macro), AUC(average: Micro), \
                   AUC(class_id: 6)]";
    engine(&strs(&run_args(&dir, 40, &["--set", metrics])))?.ok()?;
    let spec = common::spec_path("fashion_mnist_cnn.ron");
    let (take, n) = ("eval_input.take=500", "500");
    let eval =
        engine(&["eval", &spec, "--model-dir", &dir, "--set", metrics, "--set", take, "--confusion-matrix"])?.ok()?;
    let ours = printed_dict(&eval.stdout)?;
    let predictions = tmp.path().join("predictions.jsonl").display().to_string();
    engine(&["predict", &spec, "--model-dir", &dir, "--set", take, "--output", &predictions])?.ok()?;
    let labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    let script = common::repo_root().join("scripts/sklearn_metrics.py");
    let out = std::process::Command::new(common::python()?).arg(script).args([&predictions, labels, n]).output()?;
    ensure!(out.status.success(), "sklearn_metrics.py: {}", String::from_utf8_lossy(&out.stderr));
    let mut theirs: serde_json::Map<String, Value> = serde_json::from_slice(&out.stdout)?;
    // The confusion matrix: as engine eval prints it, and as TensorBoard's Text dashboard
    // shows the evaluation's summary, against scikit-learn's.
    let want: Vec<Vec<u64>> = serde_json::from_value(theirs.remove("confusion_matrix").context("no matrix")?)?;
    let printed: Vec<Vec<u64>> = eval
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("confusion matrix"))
        .skip(2)
        .map(|l| l.split_whitespace().skip(1).map(str::parse).collect::<Result<Vec<u64>, _>>())
        .collect::<Result<_, _>>()?;
    ensure!(printed == want, "engine eval --confusion-matrix printed {printed:?}, scikit-learn {want:?}");
    let view = python_json("read_events.py", &tmp.path().join("eval"))?;
    let texts = view["texts"]["confusion_matrix"].as_array().context("no confusion_matrix text in TensorBoard")?;
    let markdown = texts.last().and_then(|t| t[1].as_str()).context("no text")?;
    let shown: Vec<Vec<u64>> = markdown
        .lines()
        .skip(2)
        .map(|l| l.split('|').skip(2).filter(|c| !c.trim().is_empty()).map(|c| c.trim().parse()).collect())
        .collect::<Result<_, _>>()?;
    ensure!(shown == want, "TensorBoard shows {shown:?}, scikit-learn {want:?}");
    for (key, want) in &theirs {
        let want = want.as_f64().context("a number")?;
        let got = *ours.get(key).with_context(|| format!("engine eval reported no `{key}`: {ours:?}"))?;
        // engine eval prints 7 decimals.
        ensure!((got - want).abs() < 1e-6, "{key}: engine {got}, scikit-learn or Keras {want}");
    }
    Ok(())
}
