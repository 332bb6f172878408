//! Every kind of spec error, with its exact `line:col` and field path.
#![allow(clippy::panic, clippy::expect_used, reason = "test helpers fail the test by panicking")]

use engine_cli::{
    lower::{self, LowerError, Mode},
    spec::{ErrorKind, Layer, Loss, Metric, Model, Override, Spec, SpecError, StrategyKind},
};
use engine_estimator::CheckpointTrigger;
use engine_graph::optimizer::LearningRate;
use std::time::Duration;

const CNN: &str = include_str!("../../specs/fashion_mnist_cnn.ron");

/// The CNN spec with one substring replaced (it must occur exactly once).
fn cnn_with(from: &str, to: &str) -> String {
    assert_eq!(CNN.matches(from).count(), 1, "`{from}` must occur once in the CNN spec");
    CNN.replacen(from, to, 1)
}

/// The 1-based `(line, col)` of the first `needle` at or after line `line` of `text`.
fn position(text: &str, line: usize, needle: &str) -> (usize, usize) {
    for (i, l) in text.lines().enumerate().skip(line - 1) {
        if let Some(byte) = l.find(needle) {
            return (i + 1, l[..byte].chars().count() + 1);
        }
    }
    panic!("`{needle}` not found from line {line}");
}

struct Failure {
    line: usize,
    col: usize,
    path: String,
    kind: ErrorKind,
    message: String,
}

fn fail_with(text: &str, overrides: &[Override]) -> Failure {
    match Spec::parse(text, "job.ron", overrides) {
        Err(e) => failure(e),
        Ok(_) => panic!("the spec should be refused"),
    }
}

fn fail(text: &str) -> Failure {
    fail_with(text, &[])
}

fn failure(e: SpecError) -> Failure {
    let Some(loc) = e.location() else { panic!("error without a location: {e}") };
    Failure { line: loc.line, col: loc.col, path: e.path().to_string(), kind: e.kind().clone(), message: e.to_string() }
}

fn unknown_name(f: &Failure) -> (&str, &str, &[String]) {
    match &f.kind {
        ErrorKind::UnknownName { what, name, expected } => (what, name, expected),
        other => panic!("expected an unknown name, got {other:?}"),
    }
}

#[test]
fn the_issue_example_parses_as_written_with_tensorflow_defaults() -> Result<(), SpecError> {
    let spec = Spec::parse(CNN, "cnn.ron", &[])?;
    let job = &spec.job;
    let Model::Sequential(model) = &job.model else { panic!("a Sequential model") };
    assert_eq!(model.input_shape, [28, 28, 1]);
    let names: Vec<&str> = model.layers.iter().map(Layer::spec_name).collect();
    assert_eq!(names, ["Conv2D", "MaxPooling2D", "Flatten", "Dense", "Dense"]);
    let Layer::MaxPool2d(pool) = &model.layers[1] else { panic!() };
    assert_eq!(pool.strides().0, [2, 2]);
    assert_eq!(job.loss.kind, Loss::SparseSoftmaxCrossEntropy);
    assert_eq!(job.optimizer.learning_rate(), &LearningRate::Constant(0.05));
    assert_eq!(job.metrics, [Metric::Accuracy]);
    assert_eq!((job.train_input.kind.as_str(), job.train_input.path.to_string().as_str()), ("Idx", "train_input"));
    assert_eq!(engine_cli::spec::input_batch_size(&spec, &job.train_input), Some(64));
    let rc = job.run_config.to_estimator();
    assert_eq!((rc.model_dir.as_str(), rc.seed()), ("runs/fashion_mnist_cnn", 42));
    assert_eq!((rc.save_summary_steps, rc.log_step_count_steps, rc.keep_checkpoint_max), (100, 100, 5));
    assert_eq!(rc.checkpoint_trigger(), CheckpointTrigger::Secs(Duration::from_secs(600)));
    assert_eq!(job.train_spec.max_steps, Some(2814));
    assert_eq!((job.eval_spec.steps, job.eval_spec.start_delay_secs, job.eval_spec.throttle_secs), (None, 120, 600));
    Ok(())
}

#[test]
fn every_spec_in_the_repository_compiles_in_every_mode() -> Result<(), Box<dyn std::error::Error>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../specs");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "ron") {
            let spec = Spec::from_file(&path, &[])?;
            for mode in [Mode::Train, Mode::Eval, Mode::Predict] {
                lower::compile(&spec, mode, StrategyKind::Default)?;
            }
            seen += 1;
        }
    }
    assert!(seen >= 3, "found {seen} specs");
    Ok(())
}

#[test]
fn syntax_error() {
    let text = cnn_with("Flatten,", "Flatten");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (10, 13, ""));
    assert_eq!(f.message, "job.ron:10:13: syntax error: expected `,` or `]` between list elements, found `D`");
}

#[test]
fn unknown_field() {
    let text = cnn_with("Dense(units: 64", "Dense(unit: 64");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (10, 19, "model.layers[3].unit"));
    assert!(
        f.message.starts_with(
            "job.ron:10:19: model.layers[3].unit: unknown field `unit` (did you mean `units`?), expected one of: \
             units, activation, use_bias"
        ),
        "{}",
        f.message
    );
}

#[test]
fn wrong_type() {
    let text = cnn_with("units: 64", "units: \"64\"");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (10, 26, "model.layers[3].units"));
    assert_eq!(
        f.kind,
        ErrorKind::WrongType { expected: "a non-negative integer".into(), found: "string \"64\"".into() }
    );
    let text = cnn_with("random_seed: 42", "random_seed: 4.2");
    let f = fail(&text);
    assert_eq!((f.path.as_str(), (f.line, f.col)), ("run_config.random_seed", position(&text, 1, "4.2")));
    let text = cnn_with("train_spec: (max_steps: 2814)", "train_spec: [2814]");
    let f = fail(&text);
    assert_eq!((f.path.as_str(), (f.line, f.col)), ("train_spec", position(&text, 1, "[2814]")));
    assert!(f.message.ends_with("expected `TrainSpec(field: value, ...)`, found a list `[...]`"), "{}", f.message);
}

#[test]
fn missing_field() {
    let text = cnn_with("Dense(units: 10)", "Dense(activation: Relu)");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (11, 13, "model.layers[4].units"));
    assert_eq!(f.message, "job.ron:11:13: model.layers[4].units: missing field `units`");
    let text = cnn_with("    loss: SparseCategoricalCrossentropy(from_logits: true),\n", "");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (3, 1, "loss"));
}

#[test]
fn unknown_layer_name() {
    let text = cnn_with("MaxPooling2D(pool_size: 2)", "MaxPool2D(pool_size: 2)");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (8, 13, "model.layers[1]"));
    let (what, name, expected) = unknown_name(&f);
    assert_eq!((what, name), ("layer", "MaxPool2D"));
    // Keras' names only: the earlier spellings are accepted, not offered.
    assert_eq!(
        expected,
        [
            "Dense",
            "Conv2D",
            "MaxPooling2D",
            "AveragePooling2D",
            "Flatten",
            "Reshape",
            "Dropout",
            "Activation",
            "Add",
            "Multiply",
            "Concatenate",
            "BatchNormalization",
            "LayerNormalization",
            "GlobalAveragePooling2D",
            "GlobalAveragePooling1D",
            "ZeroPadding2D",
            "MultiHeadAttention",
            "AddPositionEmbedding",
            "Embedding"
        ]
    );
    assert!(
        f.message.starts_with(
            "job.ron:8:13: model.layers[1]: unknown layer `MaxPool2D` (did you mean `MaxPooling2D`?), expected one \
             of: Dense, "
        ),
        "{}",
        f.message
    );
}

#[test]
fn unknown_activation_loss_optimizer_metric_and_padding_names() {
    let cases = [
        (
            "kernel_size: 3, activation: Relu",
            "kernel_size: 3, activation: ReLU",
            "ReLU",
            "model.layers[0].activation",
            "activation",
            6,
        ),
        (
            "loss: SparseCategoricalCrossentropy(from_logits: true)",
            "loss: CrossEntropy",
            "CrossEntropy",
            "loss",
            "loss",
            4,
        ),
        ("SGD(learning_rate", "Momentum(learning_rate", "Momentum", "optimizer", "optimizer", 5),
        ("metrics: [Accuracy]", "metrics: [Accuracy, F1]", "F1", "metrics[1]", "metric", 8),
        (
            "MaxPooling2D(pool_size: 2)",
            "MaxPooling2D(pool_size: 2, padding: Full)",
            "Full",
            "model.layers[1].padding",
            "padding",
            2,
        ),
        ("scale: 255.0, batch_size: 64", "scale: 255.0, batch_size: 64, shard_policy: Auto", "", "", "", 0),
    ];
    for (from, to, name, path, what, choices) in cases {
        if name.is_empty() {
            continue;
        }
        let text = cnn_with(from, to);
        let f = fail(&text);
        let (w, n, expected) = unknown_name(&f);
        assert_eq!((f.path.as_str(), w, n, expected.len()), (path, what, name, choices), "{}", f.message);
        assert_eq!((f.line, f.col), position(&text, 3, name), "{}", f.message);
    }
}

#[test]
fn unknown_strategy_and_input_source_names() {
    let text = cnn_with("random_seed: 42", "random_seed: 42, train_distribute: \"mirorred\"");
    let f = fail(&text);
    assert_eq!((f.path.as_str(), (f.line, f.col)), ("run_config.train_distribute", position(&text, 1, "\"mirorred\"")));
    assert_eq!(unknown_name(&f).0, "strategy");
    assert!(f.message.ends_with(
        "unknown strategy `mirorred` (did you mean `mirrored`?), expected one of: default, one_device, mirrored, \
         central_storage, multi_worker, parameter_server"
    ));
    let text = cnn_with("train_input: Idx(", "train_input: Parquet(");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (17, 18, "train_input"));
    assert_eq!(
        unknown_name(&f),
        ("input source", "Parquet", &["Idx".to_string(), "Csv".into(), "ImageFolder".into(), "TfRecord".into()][..])
    );
}

#[test]
fn invalid_values_are_located() {
    let text = cnn_with("Flatten,", "Flatten,\n            Dropout(rate: 1.5),");
    let f = fail(&text);
    assert_eq!((f.line, f.col, f.path.as_str()), (10, 27, "model.layers[3].rate"));
    assert_eq!(f.kind, ErrorKind::Invalid("must be in [0, 1), found 1.5".into()));
    let text = cnn_with("random_seed: 42", "random_seed: 42, save_checkpoints_steps: 100, save_checkpoints_secs: 60");
    let f = fail(&text);
    assert_eq!((f.path.as_str(), (f.line, f.col)), ("run_config.save_checkpoints_secs", position(&text, 1, "60)")));
    let text = cnn_with(
        "SGD(learning_rate: 0.05)",
        "SGD(learning_rate: PiecewiseConstant(boundaries: [10, 5], values: [1.0, 0.5, 0.1]))",
    );
    let f = fail(&text);
    assert_eq!(f.path, "optimizer.learning_rate.boundaries[1]");
    assert_eq!((f.line, f.col), position(&text, 15, "5]"));
}

#[test]
fn elastic_bounds_are_checked_at_their_field() {
    for (fields, path, message) in [
        ("min_workers: Some(0)", "run_config.min_workers", "must be from 1 to 1024"),
        ("max_workers: Some(5000)", "run_config.max_workers", "must be from 1 to 1024"),
        ("min_workers: Some(3), max_workers: Some(2)", "run_config.min_workers", "must be at most max_workers (2)"),
        (
            "min_workers: Some(2), train_distribute: \"mirrored\"",
            "run_config.min_workers",
            "is for train_distribute: \"multi_worker\" (an elastic job re-forms its workers)",
        ),
    ] {
        let text = cnn_with("random_seed: 42", &format!("random_seed: 42, {fields}"));
        let f = fail(&text);
        assert_eq!(f.path, path, "{fields}");
        assert_eq!(f.kind, ErrorKind::Invalid(message.into()), "{fields}: {}", f.message);
    }
}

#[test]
fn functional_references_to_unknown_names_are_located() {
    let text = r#"Job(
    model: Functional(
        inputs: {"image": [4, 4, 1]},
        nodes: [
            ("flat", Flatten, ["image"]),
            ("out", Dense(units: 2), ["flat", "imag"]),
        ],
        outputs: ["out"],
    ),
    loss: MeanSquaredError,
    optimizer: Adam(),
    train_input: Csv(path: "x.csv", batch_size: 2),
    run_config: (model_dir: "m"),
)"#;
    let f = fail(text);
    assert_eq!((f.line, f.col, f.path.as_str()), (6, 38, "model.nodes[1].2"));
    assert_eq!(f.kind, ErrorKind::Invalid("`Dense` takes exactly one input, found 2".into()));
    let f = fail(&text.replace(", \"imag\"]", "]").replace("[\"image\"]", "[\"imgae\"]"));
    assert_eq!((f.line, f.col, f.path.as_str()), (5, 32, "model.nodes[0].2[0]"));
    let (what, name, expected) = unknown_name(&f);
    assert_eq!(
        (what, name, expected),
        ("input of node `flat` (an input or an earlier node)", "imgae", &["image".to_string()][..])
    );
    let f = fail(&text.replace(", \"imag\"]", "]").replace("outputs: [\"out\"]", "outputs: [\"logits\"]"));
    assert_eq!((f.line, f.col, f.path.as_str()), (8, 19, "model.outputs[0]"));
    assert_eq!(unknown_name(&f).2, ["image", "flat", "out"]);
}

#[test]
fn shape_mismatch_is_located_at_the_layer() -> Result<(), SpecError> {
    let text = cnn_with("            Flatten,\n", "");
    let spec = Spec::parse(&text, "job.ron", &[])?;
    match lower::training_plan(&spec, StrategyKind::Default) {
        Err(LowerError::Spec(e)) => {
            let f = failure(e);
            assert_eq!((f.line, f.col, f.path.as_str()), (9, 13, "model.layers[2]"));
            assert_eq!(
                f.message,
                "job.ron:9:13: model.layers[2]: shape mismatch: Dense needs an input of shape [batch, features] or [batch, tokens, features], \
                 got [N, 13, 13, 32]; add a Flatten layer before it"
            );
        }
        other => panic!("expected a located shape error, got {other:?}"),
    }
    Ok(())
}

#[test]
fn overrides_apply_and_their_errors_point_at_the_command_line() -> Result<(), SpecError> {
    let sets = [
        Override::parse("run_config.save_checkpoints_steps=200")?,
        Override::parse(
            "optimizer=Adam(learning_rate: ExponentialDecay(initial: 0.01, decay_steps: 100, decay_rate: 0.9))",
        )?,
        Override::parse("model.layers[0].kernel_size=(5, 5)")?,
        Override::parse("run_config.model_dir=runs/other dir")?,
        Override::parse("eval_spec.name=\"holdout\"")?,
    ];
    let spec = Spec::parse(CNN, "cnn.ron", &sets)?;
    assert_eq!(spec.job.run_config.to_estimator().checkpoint_trigger(), CheckpointTrigger::Steps(200));
    assert_eq!(spec.job.optimizer.to_config().optimizer.name(), "Adam");
    let Model::Sequential(m) = &spec.job.model else { panic!() };
    let Layer::Conv2d(c) = &m.layers[0] else { panic!() };
    assert_eq!(c.kernel_size.0, [5, 5]);
    assert_eq!(spec.job.run_config.model_dir, "runs/other dir");
    assert_eq!(spec.job.eval_spec.name.as_deref(), Some("holdout"));
    assert!(matches!(spec.job.optimizer.learning_rate(), LearningRate::ExponentialDecay { staircase: false, .. }));

    let f = fail_with(CNN, &[Override::parse("train_spec.max_steps=-5")?]);
    assert_eq!((f.line, f.col, f.path.as_str()), (1, 28, "train_spec.max_steps"));
    assert_eq!(
        f.message,
        "`--set train_spec.max_steps=-5` (column 28): train_spec.max_steps: expected a non-negative integer, found integer `-5`"
    );
    let f = fail_with(CNN, &[Override::parse("run_config.save_checkpoint_steps=5")?]);
    assert_eq!((f.col, f.path.as_str()), (7, "run_config.save_checkpoint_steps"));
    assert!(matches!(f.kind, ErrorKind::UnknownField { .. }));
    let f = fail_with(CNN, &[Override::parse("model.layers[7].units=5")?]);
    assert_eq!((f.col, f.path.as_str()), (7, "model.layers"));
    assert_eq!(f.kind, ErrorKind::Override("index 7 is out of range: `model.layers` has 5 element(s)".into()));
    let f = fail_with(CNN, &[Override::parse("train_spec.max_steps.every=2")?]);
    assert_eq!((f.col, f.path.as_str()), (7, "train_spec.max_steps"));
    assert_eq!(
        f.kind,
        ErrorKind::Override("`train_spec.max_steps` is integer `2814`, which has no part `every`".into())
    );
    // A bare word is a string on the command line, but not in a file (RON needs quotes there).
    let spec = Spec::parse(CNN, "cnn.ron", &[Override::parse("run_config.model_dir=runs")?])?;
    assert_eq!(spec.job.run_config.model_dir, "runs");
    let f = fail(&cnn_with("\"runs/fashion_mnist_cnn\"", "runs"));
    assert_eq!(f.kind, ErrorKind::WrongType { expected: "a string".into(), found: "`runs`".into() });
    assert!(Override::parse("no_equals_sign").is_err());
    assert!(Override::parse("model.layers[x]=1").is_err());
    let bad_ron = Override::parse("optimizer=Adam(").err().map(failure);
    assert_eq!(
        bad_ron.map(|f| (f.line, f.col, f.message)),
        Some((1, 21, "`--set optimizer=Adam(` (column 21): syntax error: this `(` is never closed".to_string()))
    );
    Ok(())
}

#[test]
fn an_unreadable_file_is_named() {
    let err = Spec::from_file("/nonexistent/job.ron", &[]).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.starts_with("cannot read the spec: /nonexistent/job.ron: "), "{err}");
}

/// Sections the engine keeps raw (inputs, hooks) are decoded later by their owner, with
/// the same located errors.
#[test]
fn raw_sections_decode_later_with_located_errors() -> Result<(), SpecError> {
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    enum Input {
        Idx { images: String, labels: String, scale: f32, batch_size: usize, shuffle_buffer: usize, seed: u64 },
    }
    let spec = Spec::parse(CNN, "cnn.ron", &[])?;
    let Input::Idx { batch_size, .. } = spec.decode::<Input>(&spec.job.train_input.path)?;
    assert_eq!(batch_size, 64);
    let eval = spec.job.eval_input.as_ref().map(|e| e.path.clone()).unwrap_or_default();
    let e = spec.decode::<Input>(&eval).err().map(failure).map(|f| (f.line, f.col, f.path, f.kind));
    assert_eq!(
        e,
        Some((
            22,
            17,
            "eval_input.shuffle_buffer".to_string(),
            ErrorKind::MissingField { field: "shuffle_buffer".into() }
        ))
    );
    Ok(())
}

/// Mangled specs (characters dropped, duplicated or replaced) are refused with a located
/// error or accepted; nothing panics, whatever the damage.
#[test]
fn mangled_specs_never_panic() {
    let chars: Vec<char> = CNN.chars().collect();
    let noise =
        ['(', ')', '[', ']', '{', '}', ',', ':', '"', '\'', '-', '.', '0', '9', 'e', 'r', '#', '/', '*', ' ', '\n'];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..3000 {
        let mut text = chars.clone();
        for _ in 0..1 + next(3) {
            let at = next(text.len());
            match next(3) {
                0 => {
                    text.remove(at);
                }
                1 => text.insert(at, text[at]),
                _ => text[at] = noise[next(noise.len())],
            }
        }
        let text: String = text.into_iter().collect();
        match Spec::parse(&text, "mangled.ron", &[]) {
            Ok(spec) => {
                accepted += 1;
                for mode in [Mode::Train, Mode::Eval] {
                    match lower::compile(&spec, mode, StrategyKind::Default) {
                        Ok(_) => {}
                        Err(LowerError::Spec(e)) => assert!(e.location().is_some(), "{e}"),
                        Err(other) => panic!("an accepted spec failed to compile: {other}\n{text}"),
                    }
                }
            }
            Err(e) => {
                refused += 1;
                assert!(e.location().is_some(), "unlocated error for a mangled spec: {e}");
            }
        }
    }
    assert!(accepted > 0 && refused > 0, "{accepted} accepted, {refused} refused");
}

/// Input sections are opened and checked when a job is built from the spec (`engine plan`
/// and `engine run` alike): a file that does not open, a size past what the machine holds,
/// a wrong type in an optional field are each reported at their field, with `line:col`.
#[test]
fn input_sections_are_checked_at_their_fields() {
    let input_error = |text: &str| -> Failure {
        let spec = Spec::parse(text, "job.ron", &[]).unwrap_or_else(|e| panic!("should parse: {e}"));
        match engine_cli::job::train_input_fn(&spec) {
            Err(e) => failure(e),
            Ok(_) => panic!("the input should be refused"),
        }
    };
    let text = cnn_with(
        "images: \"/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz\"",
        "images: \"/nonexistent.gz\"",
    );
    let f = input_error(&text);
    assert_eq!(f.path, "train_input.images");
    assert_eq!((f.line, f.col), position(&text, 1, "\"/nonexistent.gz\""));
    assert!(f.message.contains("/nonexistent.gz"), "{}", f.message);

    let text = cnn_with("batch_size: 64", "batch_size: 64, prefetch: 1000000000");
    let f = input_error(&text);
    assert_eq!(f.path, "train_input.prefetch");
    assert_eq!((f.line, f.col), position(&text, 1, "1000000000"));
    assert!(f.message.contains("at most") && !f.message.contains("invalid dataset"), "{}", f.message);

    let text = cnn_with("batch_size: 64", "batch_size: 64, num_parallel_calls: 100000");
    assert_eq!(input_error(&text).path, "train_input.num_parallel_calls");
    let text = cnn_with("batch_size: 64", "batch_size: 100000");
    let f = input_error(&text);
    assert_eq!(f.path, "train_input.batch_size");
    assert!(f.message.contains("fewer than one step"), "{}", f.message);

    // A wrong type in a field written bare or as an option: located at the field, with
    // no serde internals in the message.
    let f = input_error(&cnn_with("batch_size: 64", "batch_size: 64, take: \"abc\""));
    assert_eq!(f.path, "train_input.take");
    assert!(!f.message.contains("untagged"), "{}", f.message);
}
