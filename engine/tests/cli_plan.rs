//! `engine plan` on good and bad specs, through the real binary.

mod common;

use anyhow::{Result, ensure};
use common::{cnn_text, engine, spec_path, write_spec};

#[test]
fn plan_prints_the_cnn_schedule_shapes_variables_and_memory() -> Result<()> {
    let out = engine(&["plan", &spec_path("fashion_mnist_cnn.ron")])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    for expected in [
        "mode: train  strategy: default  batch: 64",
        "passes: fuse-normalization -> fuse-attention -> autodiff -> apply-optimizer -> check-numerics -> placement -> common-subexpression-elimination -> fuse-bias-activation -> fuse-residual-add -> fuse-relu-into-pool-grad -> fuse-bias-into-filter-grad -> fuse-conv-pool -> fuse-elementwise -> merge-elementwise -> dead-code-elimination",
        "dense_1/kernel                                   f32[64, 10]            trainable  GlorotUniform",
        // The convolution, its bias and ReLU and the pool are one node with the argmax.
        "_FusedConv2DMaxPool    f32[N, 13, 13, 32], i64[N, 13, 13, 32] <- x, conv2d/kernel, conv2d/bias",
        "f32[3, 3, 1, 32], f32[32]",
        "f32[N, 5408]",
        "_FusedMaxPoolConv2DBackpropFilter",
        "GradientDescent/train_op",
        "statistics at batch 64 (per replica):",
        "peak activations",
    ] {
        ensure!(out.stdout.contains(expected), "missing `{expected}` in:\n{}", out.stdout);
    }
    ensure!(!out.stdout.contains("Conv2DBackpropInput"));
    ensure!(!out.stdout.contains("precision:"), "f32 needs no precision line:\n{}", out.stdout);
    Ok(())
}

/// Mixed precision names the ops it narrows: the CNN's convolution (fused with its pool),
/// both dense layers' products and their gradients.
#[test]
fn plan_names_the_ops_mixed_precision_computes_in_bfloat16() -> Result<()> {
    let out = engine(&["plan", &spec_path("fashion_mnist_cnn.ron"), "--set", "run_config.precision=Bf16Mixed"])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    let line = out.stdout.lines().find(|l| l.starts_with("precision: Bf16Mixed: ")).unwrap_or_default();
    for expected in ["_FusedConv2DMaxPool", "_FusedMaxPoolConv2DBackpropFilter", "MatMul", "ops multiply in bfloat16"] {
        ensure!(line.contains(expected), "missing `{expected}` in the precision line of:\n{}", out.stdout);
    }
    Ok(())
}

#[test]
fn plan_compiles_each_mode_with_its_batch_size() -> Result<()> {
    let eval = engine(&["plan", &spec_path("fashion_mnist_cnn.ron"), "--mode", "eval"])?;
    ensure!(eval.code == Some(0), "{}", eval.stderr);
    ensure!(eval.stdout.contains("batch: 1000") && eval.stdout.contains("loss/Mean"));
    ensure!(!eval.stdout.contains("apply-optimizer") && !eval.stdout.contains("gradients/"));
    let predict = engine(&["plan", &spec_path("fashion_mnist_residual.ron"), "--mode", "predict", "--batch", "8"])?;
    ensure!(predict.code == Some(0), "{}", predict.stderr);
    ensure!(predict.stdout.contains("statistics at batch 8 (per replica):") && predict.stdout.contains("head/ArgMax"));
    ensure!(!predict.stdout.contains("labels"), "{}", predict.stdout);
    let bad = engine(&["plan", &spec_path("fashion_mnist_cnn.ron"), "--batch", "0"])?;
    ensure!(bad.code == Some(2) && bad.stderr.contains("expected a batch size from 1 to 65536"), "{}", bad.stderr);
    let bad = engine(&["plan", &spec_path("fashion_mnist_cnn.ron"), "--mode", "serve"])?;
    ensure!(bad.code == Some(2) && bad.stderr.contains("expected one of: train, eval, predict"), "{}", bad.stderr);
    Ok(())
}

#[test]
fn plan_draws_graphviz_to_stdout_or_a_file() -> Result<()> {
    // `--dot` before or after the spec: it never takes the spec for its file.
    for args in
        [["plan", &spec_path("fashion_mnist_mlp.ron"), "--dot"], ["plan", "--dot", &spec_path("fashion_mnist_mlp.ron")]]
    {
        let out = engine(&args)?;
        ensure!(out.code == Some(0), "{}", out.stderr);
        ensure!(out.stdout.starts_with("digraph engine {") && out.stdout.trim_end().ends_with('}'));
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("mlp.dot");
    let file_arg = file.display().to_string();
    let out = engine(&["plan", &spec_path("fashion_mnist_mlp.ron"), &format!("--dot={file_arg}")])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    ensure!(out.stdout.contains("schedule (") && out.stdout.contains(&format!("graph written to {file_arg}")));
    ensure!(std::fs::read_to_string(&file)?.contains("dense_2/MatMul"));
    Ok(())
}

#[test]
fn plan_applies_set_overrides() -> Result<()> {
    let spec = spec_path("fashion_mnist_cnn.ron");
    let out = engine(&["plan", &spec, "--set", "model.layers[3].units=32", "--set", "optimizer=Adam()"])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    ensure!(out.stdout.contains("dense/kernel                                     f32[5408, 32]"), "{}", out.stdout);
    ensure!(out.stdout.contains("dense/kernel/Adam "), "{}", out.stdout);
    let out = engine(&["plan", &spec, "--set", "model.layers[3].units=6 4"])?;
    ensure!(out.code == Some(1));
    ensure!(
        out.stderr.trim_end()
            == "error: `--set model.layers[3].units=6 4` (column 29): model.layers[3].units: \
                expected a non-negative integer, found string \"6 4\"",
        "{}",
        out.stderr
    );
    let out = engine(&["plan", &spec, "--set", "model.layers[3].units=many"])?;
    // A bare word on the command line is a string (so string fields take one as it is).
    ensure!(
        out.stderr
            .contains("(column 29): model.layers[3].units: expected a non-negative integer, found string \"many\""),
        "{}",
        out.stderr
    );
    Ok(())
}

#[test]
fn strategies_are_validated_against_the_registry() -> Result<()> {
    let spec = spec_path("fashion_mnist_cnn.ron");
    let out = engine(&["plan", &spec, "--strategy", "mirrorred"])?;
    ensure!(out.code == Some(2), "clap refuses unknown names: {:?}", out.code);
    ensure!(
        out.stderr.contains(
            "unknown strategy `mirrorred`, expected one of: default, one_device, mirrored, central_storage, multi_worker, parameter_server"
        ),
        "{}",
        out.stderr
    );
    let out = engine(&["plan", &spec, "--strategy", "one_device"])?;
    ensure!(out.code == Some(0) && out.stdout.contains("strategy: one_device"), "{}", out.stderr);
    let out = engine(&["plan", &spec, "--strategy", "mirrored"])?;
    ensure!(out.code == Some(0) && out.stdout.contains("strategy: mirrored"), "{}", out.stderr);
    ensure!(out.stdout.contains("AllReduce"), "the mirrored plan all-reduces gradients:\n{}", out.stdout);
    // A split plan's partition labels are given their devices.
    let out = engine(&["plan", &spec, "--strategy", "central_storage", "--devices", "cpu:0,cpu:1"])?;
    let want = "devices: host = cpu:0 (variables and their updates); replica = cpu:0, cpu:1 (one copy per replica)";
    ensure!(out.code == Some(0) && out.stdout.contains(want), "missing `{want}`:\n{}{}", out.stdout, out.stderr);
    // Placed for `--ps` ps tasks: each variable's task, and the traffic of a step.
    let out = engine(&["plan", &spec, "--strategy", "parameter_server", "--ps", "2"])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    for want in
        ["@ps:0", "@ps:1", "@worker", "Transfer", "per step, each training task reads", "devices: worker = cpu:0"]
    {
        ensure!(out.stdout.contains(want), "the parameter_server plan lacks {want}:\n{}", out.stdout);
    }
    Ok(())
}

/// Bad specs written to a temporary directory: each error names the file, line, column and path.
#[test]
fn bad_specs_fail_with_located_messages() -> Result<()> {
    let cnn = cnn_text()?;
    let cases = [
        (
            "units: 64",
            "units: -64",
            "10:26: model.layers[3].units: expected a non-negative integer, found integer `-64`",
        ),
        (
            "Dense(units: 10)",
            "Dense(units: 10, activaton: Relu)",
            "11:30: model.layers[4].activaton: unknown field `activaton`",
        ),
        (
            "MaxPooling2D(pool_size: 2)",
            "MaxPool(pool_size: 2)",
            "8:13: model.layers[1]: unknown layer `MaxPool`, expected one of: Dense, Conv2D,",
        ),
        (
            "optimizer: SGD(learning_rate: 0.05)",
            "optimizer: SGD(momentum: 0.9)",
            "15:16: optimizer.learning_rate: missing field `learning_rate`",
        ),
        (
            "            Flatten,\n",
            "",
            "9:13: model.layers[2]: shape mismatch: Dense needs an input of shape [batch, features] or [batch, tokens, features], got [N, 13, 13, 32]",
        ),
        ("metrics: [Accuracy]", "metrics: [Accuracy, Accuracy]", "16:25: metrics[1]: `accuracy` is listed twice"),
        (
            "    run_config:",
            "    run_config",
            "27:16: syntax error: expected `:` after field name `run_config`, found `(`",
        ),
    ];
    for (from, to, expected) in cases {
        let (_dir, path) = write_spec("bad.ron", &cnn.replacen(from, to, 1))?;
        let path = path.display().to_string();
        let out = engine(&["plan", &path])?;
        ensure!(out.code == Some(1), "{from} -> {to}: exit {:?}", out.code);
        let want = format!("error: {path}:{expected}");
        ensure!(out.stderr.starts_with(&want), "expected `{want}`, got `{}`", out.stderr);
        ensure!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    let out = engine(&["plan", "/nonexistent/spec.ron"])?;
    ensure!(out.code == Some(1) && out.stderr.starts_with("error: cannot read the spec: /nonexistent/spec.ron:"));
    Ok(())
}

/// "What `engine plan` prints is what `engine run` trains", with no seed set: both take the
/// spec through one settings chain to one seed, so the graph `plan` prints (dropout seeds
/// and initializer seeds included) is the one whose fingerprint the checkpoint records.
#[test]
fn plan_and_run_compile_the_same_graph_without_a_seed() -> Result<()> {
    let spec = spec_path("fashion_mnist_mlp.ron");
    let unseeded = "run_config.random_seed=None";
    let plan = engine(&["plan", &spec, "--set", unseeded])?;
    ensure!(plan.code == Some(0), "{}", plan.stderr);
    let printed = plan
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("graph fingerprint: "))
        .ok_or_else(|| anyhow::anyhow!("no fingerprint in:\n{}", plan.stdout))?
        .to_string();
    let dir = tempfile::tempdir()?;
    let model_dir = dir.path().join("model").display().to_string();
    let run = engine(&[
        "run",
        &spec,
        "--set",
        unseeded,
        "--max-steps",
        "1",
        "--model-dir",
        &model_dir,
        "--set",
        "eval_spec.steps=1",
    ])?;
    ensure!(run.code == Some(0), "{}", run.stderr);
    let checkpoint = engine_estimator::checkpoint::read_checkpoint(&format!("{model_dir}/model.ckpt-1"), None)?;
    let trained = checkpoint.meta.fingerprint.split('-').next().unwrap_or_default();
    ensure!(trained == printed, "engine plan printed graph {printed}, engine run trained {trained}");
    Ok(())
}

/// `engine plan --summary` is Keras' `model.summary()`: the tutorial CNN has Keras' counts
/// (3·3·1·32 + 32, 5408·64 + 64, 64·10 + 10), and in every spec each parameter belongs to
/// one layer, so the rows add up to the total.
#[test]
fn plan_summarizes_layers_and_parameters_as_keras_does() -> Result<()> {
    let out = engine(&["plan", &spec_path("fashion_mnist_cnn.ron"), "--summary"])?;
    ensure!(out.code == Some(0), "{}", out.stderr);
    for expected in [
        "conv2d (Conv2D)                          [N, 26, 26, 32]                   320",
        "dense (Dense)                            [N, 64]                        346176",
        "dense_1 (Dense)                          [N, 10]                           650",
        "Total params: 347146 (1.32 MiB)",
        "Trainable params: 347146",
    ] {
        ensure!(out.stdout.contains(expected), "missing `{expected}` in:\n{}", out.stdout);
    }
    ensure!(!out.stdout.contains("passes:"), "--summary prints the summary alone:\n{}", out.stdout);
    for entry in std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs"))? {
        let path = entry?.path();
        let spec = engine_cli::spec::Spec::from_file(&path, &[])?;
        let s = engine_cli::lower::summary(&spec)?;
        let rows: u64 = s.layers.iter().map(|l| l.params).sum();
        ensure!(rows == s.trainable + s.non_trainable, "{}: rows add to {rows}, total {s}", path.display());
    }
    Ok(())
}

/// Frictions a newcomer met, each now an error that names the fix or no error at all: `--ps`
/// without `parameter_server`, a relative data path that is not there, a bare word given
/// to a string field on the command line.
#[test]
fn newcomer_frictions_name_their_fix() -> Result<()> {
    let cnn = spec_path("fashion_mnist_cnn.ron");
    let out = engine(&["plan", &cnn, "--ps", "2"])?;
    ensure!(out.code == Some(2) && out.stderr.contains("add --strategy parameter_server"), "{}", out.stderr);
    let table = spec_path("fashion_mnist_table.ron");
    let out = engine(&["plan", &table, "--set", "train_input.path=no/such.csv"])?;
    ensure!(
        out.code == Some(1) && out.stderr.contains("a relative path is read from the working directory"),
        "{}",
        out.stderr
    );
    // `Label` is taken as the string it is, and refused as a column the file lacks.
    let csv = format!("train_input.path={}/../data/fashion_mnist_table/train.csv", env!("CARGO_MANIFEST_DIR"));
    let out = engine(&["plan", &table, "--set", &csv, "--set", "train_input.label=Label"])?;
    ensure!(out.code == Some(1) && out.stderr.contains("CSV column `Label` not found"), "{}", out.stderr);
    Ok(())
}
