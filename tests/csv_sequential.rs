//! A table trained the way a Keras user writes it: a `Sequential(input_shape: [k])` over a
//! `Csv` input whose numeric and categorical columns are packed into the model's input,
//! without one input and one `Reshape` per column. `engine run`, `eval` and `predict` all
//! read it so.

mod common;

use anyhow::{Result, ensure};
use common::{engine, printed_dict};
use std::path::Path;

/// A separable table: three numeric columns, a categorical one (`colour`, whose index
/// matters for the label) and an integer label.
fn write_data(dir: &Path) -> Result<String> {
    let mut text = String::from("a,b,colour,c,label\n");
    let mut state = 11u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    let colours = ["red", "green", "blue"];
    for _ in 0..400 {
        let x: Vec<f64> = (0..4).map(|_| next()).collect();
        let colour = ((x[3] + 1.0) * 1.5).floor().clamp(0.0, 2.0) as usize;
        let label = u8::from(x[0] - x[1] + 0.5 * colour as f64 - 0.5 > 0.0);
        text.push_str(&format!("{:.4},{:.4},{},{:.4},{label}\n", x[0], x[1], colours[colour], x[2]));
    }
    std::fs::write(dir.join("table.csv"), text)?;
    let input = r#"Csv(path: "DIR/table.csv", label: "label", categorical: {"colour": ["red", "green", "blue"]}"#;
    let spec = format!(
        r#"Job(
    model: Sequential(input_shape: [4], layers: [Dense(units: 16, activation: Relu), Dense(units: 2)]),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Sgd(learning_rate: 0.1),
    metrics: [Accuracy],
    train_input: {input}, batch_size: 16, shuffle_buffer: 100, seed: 1),
    eval_input: {input}, batch_size: 100),
    run_config: (model_dir: "DIR/run", random_seed: 1, save_summary_steps: 1000),
    train_spec: (max_steps: 300),
)"#
    );
    let path = dir.join("spec.ron");
    std::fs::write(&path, spec.replace("DIR", &dir.to_string_lossy()))?;
    Ok(path.to_string_lossy().into_owned())
}

#[test]
fn a_sequential_model_trains_on_the_columns_of_a_csv() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = write_data(tmp.path())?;
    let run = engine(&["run", &spec])?.ok()?;
    let result = printed_dict(&run.stdout)?;
    ensure!(result["global_step"] == 300.0 && result["accuracy"] >= 0.9, "{result:?}\n{}", run.stderr);
    let plan = engine(&["plan", &spec])?.ok()?;
    ensure!(plan.stdout.contains("x") && plan.stdout.contains("[N, 4]"), "{}", plan.stdout);
    let predicted = engine(&["predict", &spec, "--model-dir", &tmp.path().join("run").to_string_lossy()])?.ok()?;
    ensure!(predicted.stdout.lines().count() == 400, "{} prediction lines", predicted.stdout.lines().count());
    // A wrong input_shape is named with what the table provides.
    let wrong = engine(&["run", &spec, "--set", "model.input_shape=[3]"])?;
    ensure!(wrong.code == Some(1) && wrong.stderr.contains("f32[N, 4]"), "{:?}\n{}", wrong.code, wrong.stderr);
    Ok(())
}

/// String labels without a vocabulary: the classes are the training table's distinct values,
/// sorted, kept in the model dir; predictions print them; an evaluation table with a class
/// the model never had is refused naming it.
#[test]
fn string_labels_get_an_inferred_vocabulary_that_predict_prints() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = write_data(tmp.path())?;
    let table = tmp.path().join("table.csv");
    let text = std::fs::read_to_string(&table)?;
    let named: String = text
        .lines()
        .map(|l| match l.rsplit_once(',') {
            Some((rest, "0")) => format!("{rest},no\n"),
            Some((rest, "1")) => format!("{rest},yes\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&table, named)?;
    let run = engine(&["run", &spec])?.ok()?;
    let result = printed_dict(&run.stdout)?;
    ensure!(result["accuracy"] >= 0.9, "{result:?}");
    let stored = std::fs::read_to_string(tmp.path().join("run/label_vocabulary.txt"))?;
    ensure!(stored == "no\nyes\n", "{stored:?}");
    let predicted = engine(&["predict", &spec, "--keys", "classes"])?.ok()?;
    let first = predicted.stdout.lines().next().unwrap_or_default();
    ensure!(first == r#"{"class_ids":0,"classes":"no"}"# || first == r#"{"class_ids":1,"classes":"yes"}"#, "{first}");
    // An evaluation table naming a class training never saw.
    let other = tmp.path().join("other.csv");
    std::fs::write(&other, "a,b,colour,c,label\n0.1,0.2,red,0.3,maybe\n")?;
    let set = format!("eval_input.path={:?}", other.to_string_lossy());
    let eval = engine(&["eval", &spec, "--set", &set])?;
    ensure!(eval.code != Some(0) && eval.stderr.contains("`maybe` is not in its vocabulary"), "{}", eval.stderr);
    // The stored vocabulary edited by hand (two lines swapped) would relabel the model
    // silently: refused, against the fingerprint saved with it.
    std::fs::write(tmp.path().join("run/label_vocabulary.txt"), "yes\nno\n")?;
    let eval = engine(&["eval", &spec])?;
    ensure!(eval.code != Some(0), "an edited vocabulary was used: {}", eval.stdout);
    ensure!(
        eval.stderr.contains("label_vocabulary.txt in ") && eval.stderr.contains("was changed after"),
        "{}",
        eval.stderr
    );
    Ok(())
}

/// A weight column (Keras' `sample_weight`): it weighs each example's training loss and is
/// not one of the model's inputs, so a table whose weights are all 2 trained at half the
/// learning rate is the same run as the plain table (SGD's step is `lr * grad`); all-zero
/// weights train nothing; a negative weight is refused naming its line. The served model's
/// signature carries no weight.
#[test]
fn a_weight_column_weighs_the_training_loss() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = write_data(tmp.path())?;
    let table = tmp.path().join("table.csv");
    let text = std::fs::read_to_string(&table)?;
    let with_weight = |w: &str| -> String {
        text.lines().enumerate().map(|(i, l)| if i == 0 { format!("{l},w\n") } else { format!("{l},{w}\n") }).collect()
    };
    std::fs::write(tmp.path().join("twice.csv"), with_weight("2"))?;
    std::fs::write(tmp.path().join("zero.csv"), with_weight("0"))?;
    let dir = tmp.path().to_string_lossy().into_owned();
    let run = |csv: &str, lr: &str, name: &str| -> Result<common::Run> {
        let train = format!(
            r#"train_input=Csv(path: "{dir}/{csv}", label: "label", weight: "w", categorical: {{"colour": ["red", "green", "blue"]}}, batch_size: 16, shuffle_buffer: 100, seed: 1)"#
        );
        let model_dir = format!("{dir}/{name}");
        engine(&[
            "run",
            &spec,
            "--max-steps",
            "50",
            "--model-dir",
            &model_dir,
            "--set",
            &train,
            "--set",
            &format!("optimizer=SGD(learning_rate: {lr})"),
        ])
    };
    let plain = engine(&["run", &spec, "--max-steps", "50", "--model-dir", &format!("{dir}/plain")])?.ok()?;
    let twice = run("twice.csv", "0.05", "twice")?.ok()?;
    let (plain, twice) = (printed_dict(&plain.stdout)?, printed_dict(&twice.stdout)?);
    ensure!(
        (plain["loss"] - twice["loss"]).abs() <= 1e-6 * plain["loss"] && plain["accuracy"] == twice["accuracy"],
        "weights of 2 at lr 0.05: {twice:?}; no weights at lr 0.1: {plain:?}"
    );
    let zero = printed_dict(&run("zero.csv", "0.1", "zero")?.ok()?.stdout)?;
    let untrained = printed_dict(
        &engine(&["eval", &spec, "--model-dir", &format!("{dir}/zero"), "--checkpoint", "model.ckpt-0"])?.ok()?.stdout,
    )?;
    ensure!(zero["loss"] == untrained["loss"], "zero weights trained: {zero:?} against {untrained:?}");

    let export = engine(&["export", &spec, "--model-dir", &format!("{dir}/twice"), "--set", &format!(r#"eval_input=Csv(path: "{dir}/twice.csv", label: "label", weight: "w", categorical: {{"colour": ["red", "green", "blue"]}}, batch_size: 100)"#)])?.ok()?;
    let manifest = std::fs::read_to_string(Path::new(export.stdout.trim()).join("saved_model.json"))?;
    ensure!(!manifest.contains("sample_weight") && manifest.contains("\"x\""), "{manifest}");

    std::fs::write(tmp.path().join("negative.csv"), with_weight("-1"))?;
    let bad = run("negative.csv", "0.1", "negative")?;
    ensure!(bad.code == Some(1) && bad.stderr.contains("negative.csv:2:"), "{}", bad.stderr);
    ensure!(bad.stderr.contains("weight must be a finite number >= 0"), "{}", bad.stderr);
    Ok(())
}
