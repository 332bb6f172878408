use super::*;
use crate::spec::{ErrorKind, FieldPath, Override, Spec, SpecError, StrategyKind};
use engine_graph::{DType, Graph, GraphBuilder, Op, Plan, derive_seed, ops::ElementOp};

const CNN: &str = include_str!("../../../specs/fashion_mnist_cnn.ron");
const RESIDUAL: &str = include_str!("../../../specs/fashion_mnist_residual.ron");
const MLP: &str = include_str!("../../../specs/fashion_mnist_mlp.ron");

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn spec(text: &str) -> Result<Spec, SpecError> {
    Spec::parse(text, "test.ron", &[])
}

/// A job around a model section, with every other section minimal.
fn job(model: &str, loss: &str) -> String {
    format!(
        "Job(\n  model: {model},\n  loss: {loss},\n  optimizer: Sgd(learning_rate: 0.1),\n  \
         train_input: Idx(images: \"i\", labels: \"l\", batch_size: 4),\n  run_config: (model_dir: \"m\"),\n)"
    )
}

fn build(spec: &Spec, mode: Mode) -> Result<(Graph, ModelGraph), LowerError> {
    let mut graph = Graph::new();
    let model = build_model(spec, mode, &mut GraphBuilder::new(&mut graph), 42)?;
    Ok((graph, model))
}

fn shapes(graph: &Graph, model: &ModelGraph) -> Vec<(String, String)> {
    model
        .layers
        .iter()
        .map(|l| (l.name.clone(), graph.fact(l.output).map(|f| f.shape.to_string()).unwrap_or_default()))
        .collect()
}

fn op_names(plan: &Plan) -> Vec<&'static str> {
    plan.schedule.iter().map(|&id| plan.graph.node(id).op.name()).collect()
}

fn variable_names(graph: &Graph, trainable_only: bool) -> Vec<String> {
    let ids = if trainable_only { graph.trainable_variables() } else { graph.variables() };
    ids.into_iter().map(|id| graph.node(id).name.clone()).collect()
}

/// The shape error a model section produces, as `(line, col, path)`.
fn shape_error(text: &str) -> (usize, usize, String, String) {
    let spec = match spec(text) {
        Ok(s) => s,
        Err(e) => panic!("the spec should parse: {e}"),
    };
    match build(&spec, Mode::Train) {
        Err(LowerError::Spec(e)) => match (e.location(), e.kind()) {
            (Some(l), ErrorKind::Shape(m)) => (l.line, l.col, e.path().to_string(), m.clone()),
            _ => panic!("expected a located shape error, got {e}"),
        },
        Err(e) => panic!("expected a spec error, got {e}"),
        Ok(_) => panic!("expected a shape error"),
    }
}

#[test]
fn the_tutorial_cnn_lowers_to_keras_shapes_and_names() -> TestResult {
    let (graph, model) = build(&spec(CNN)?, Mode::Train)?;
    let expected = [
        ("conv2d", "[N, 26, 26, 32]"),
        ("max_pooling2d", "[N, 13, 13, 32]"),
        ("flatten", "[N, 5408]"),
        ("dense", "[N, 64]"),
        ("dense_1", "[N, 10]"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(shapes(&graph, &model), expected);
    assert_eq!(
        variable_names(&graph, true),
        ["conv2d/kernel", "conv2d/bias", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
    );
    let labels = model.labels.ok_or("no labels")?;
    assert_eq!(graph.fact(labels)?.to_string(), "i64[N]");
    assert_eq!(graph.fact(model.features["x"])?.to_string(), "f32[N, 28, 28, 1]");
    assert_eq!(graph.fact(model.loss.ok_or("no loss")?)?.to_string(), "f32[]");
    let keys: Vec<&str> = model.predictions.keys().map(String::as_str).collect();
    assert_eq!(keys, ["classes", "logits", "probabilities"]);
    assert_eq!(graph.fact(model.predictions["classes"])?.to_string(), "i64[N]");
    let inputs: Vec<&str> = graph.roles.inputs.keys().map(String::as_str).collect();
    assert_eq!(inputs, ["labels", "x"]);
    Ok(())
}

#[test]
fn the_training_plan_differentiates_every_variable_but_not_the_input() -> TestResult {
    let plan = training_plan(&spec(CNN)?, StrategyKind::Default)?;
    let with_gradients: Vec<String> =
        plan.graph.roles.gradients.iter().map(|(v, _)| plan.graph.node(*v).name.clone()).collect();
    assert_eq!(with_gradients, variable_names(&plan.graph, true));
    assert_eq!(with_gradients.len(), 6);
    for (var, grad) in &plan.graph.roles.gradients {
        assert_eq!(plan.graph.fact(*grad)?, plan.graph.fact((*var).into())?);
    }
    let ops = op_names(&plan);
    // The convolution is pooled, so its filter gradient reads the pooled gradient directly.
    assert!(ops.contains(&"_FusedMaxPoolConv2DBackpropFilter"), "{ops:?}");
    assert!(!ops.contains(&"Conv2DBackpropInput"), "the first conv's input is a placeholder");
    assert!(plan.graph.roles.train_op.is_some());
    let names: Vec<&str> = plan.passes.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "fuse-normalization",
            "fuse-attention",
            "autodiff",
            "apply-optimizer",
            "check-numerics",
            "placement",
            "common-subexpression-elimination",
            "fuse-bias-activation",
            "fuse-residual-add",
            "fuse-relu-into-pool-grad",
            "fuse-bias-into-filter-grad",
            "fuse-conv-pool",
            "fuse-elementwise",
            "merge-elementwise",
            "dead-code-elimination"
        ]
    );
    // Fusion leaves no bias add or ReLU of the convolution behind, and one pass over the
    // convolution's output gradient yields both the filter and the bias gradient.
    assert!(ops.contains(&"_FusedConv2DMaxPool") && ops.contains(&"_FusedMatMul"));
    assert!(!ops.contains(&"MaxPool") && !ops.contains(&"MaxPoolGrad"), "{ops:?}");
    assert!(!ops.contains(&"Relu"), "{ops:?}");
    assert_eq!(
        ops.iter().filter(|o| **o == "ReluGrad").count(),
        1,
        "only the dense layer's ReLU gradient stays: {ops:?}"
    );
    Ok(())
}

#[test]
fn evaluation_and_prediction_graphs_have_no_training_parts() -> TestResult {
    let spec = spec(MLP)?;
    let train = training_plan(&spec, StrategyKind::Default)?;
    let eval = eval_plan(&spec, StrategyKind::Default)?;
    let predict = predict_plan(&spec, StrategyKind::Default)?;
    assert!(op_names(&train).contains(&"Dropout"));
    for plan in [&eval, &predict] {
        let ops = op_names(plan);
        assert!(!ops.contains(&"Dropout") && !ops.contains(&"Assign"), "{ops:?}");
        assert!(plan.graph.roles.train_op.is_none() && plan.graph.roles.gradients.is_empty());
        // Checkpoints are shared across modes, so the model's variables are named alike.
        assert_eq!(variable_names(&plan.graph, true), variable_names(&train.graph, true));
    }
    assert!(eval.graph.roles.loss.is_some() && eval.graph.roles.inputs.contains_key("labels"));
    assert!(predict.graph.roles.loss.is_none() && !predict.graph.roles.inputs.contains_key("labels"));
    // The normalization and attention fusions, placement, then the optimizations: no
    // gradient or optimizer pass outside training.
    assert_eq!(predict.passes.len(), engine_graph::passes::optimization_passes().len() + 3);
    assert_eq!(predict.passes[0].0, "fuse-normalization");
    assert_eq!(predict.passes[1].0, "fuse-attention");
    assert_eq!(predict.passes[2].0, "placement");
    Ok(())
}

#[test]
fn dropout_masks_derive_from_the_job_seed_and_the_layer_name() -> TestResult {
    let (graph, _) = build(&spec(MLP)?, Mode::Train)?;
    let seeds: Vec<(String, u64)> = graph
        .nodes()
        .filter_map(|(_, n)| match &n.op {
            Op::Dropout(d) => Some((n.name.clone(), d.seed)),
            _ => None,
        })
        .collect();
    assert_eq!(seeds, [("dropout/Dropout".to_string(), derive_seed(42, "dropout"))]);
    let pinned = spec(&MLP.replace("Dropout(rate: 0.2)", "Dropout(rate: 0.2, seed: 7)"))?;
    let (graph, _) = build(&pinned, Mode::Train)?;
    let seed = graph.nodes().find_map(|(_, n)| match &n.op {
        Op::Dropout(d) => Some(d.seed),
        _ => None,
    });
    assert_eq!(seed, Some(derive_seed(7, "dropout")));
    Ok(())
}

#[test]
fn a_residual_functional_model_lowers() -> TestResult {
    let spec = spec(RESIDUAL)?;
    let (graph, model) = build(&spec, Mode::Train)?;
    let shapes = shapes(&graph, &model);
    let get = |name: &str| shapes.iter().find(|s| s.0 == name).map(|s| s.1.as_str());
    assert_eq!(get("stem"), Some("[N, 28, 28, 16]"));
    assert_eq!(get("block_sum"), Some("[N, 28, 28, 16]"));
    assert_eq!(get("pool"), Some("[N, 14, 14, 16]"));
    assert_eq!(get("logits"), Some("[N, 10]"));
    assert!(graph.contains_name("block_sum/Add"));
    assert!(graph.roles.fetches.contains_key("regularization_loss"));
    assert_eq!(graph.roles.inputs.keys().map(String::as_str).collect::<Vec<_>>(), ["image", "labels"]);
    let plan = training_plan(&spec, StrategyKind::OneDevice)?;
    // The stem's output feeds the block and the sum: its two gradients are summed, in the
    // same elementwise pass as the stem ReLU's gradient.
    let stem_grad_sums = plan
        .schedule
        .iter()
        .map(|&id| plan.graph.node(id))
        .filter(|n| match &n.op {
            Op::FusedElementwise(f) => {
                n.name.contains("stem/Relu") && f.program.iter().map(|i| i.op).eq([ElementOp::Add, ElementOp::ReluGrad])
            }
            op => op.name() == "AddN" && n.name.contains("stem/Relu"),
        })
        .count();
    assert_eq!(stem_grad_sums, 1);
    assert_eq!(plan.graph.roles.gradients.len(), 10);
    assert!(op_names(&plan).contains(&"Conv2DBackpropInput"), "the block's convolutions pass gradients back");
    Ok(())
}

#[test]
fn two_towers_concatenated_lower() -> TestResult {
    let model = r#"Functional(
    inputs: {"image": [28, 28, 1], "extra": [5]},
    nodes: [
      ("tower_a", Conv2d(filters: 8, kernel_size: 3, activation: Relu), ["image"]),
      ("pool_a", MaxPool2d(), ["tower_a"]),
      ("tower_b", Conv2d(filters: 4, kernel_size: (5, 5), strides: 2, padding: Same), ["image"]),
      ("pool_b", AvgPool2d(pool_size: 2, strides: 1), ["tower_b"]),
      ("towers", Concatenate(axis: -1), ["pool_a", "pool_b"]),
      ("flat", Flatten, ["towers"]),
      ("extra_dense", Dense(units: 12, activation: Tanh), ["extra"]),
      ("flat_dense", Dense(units: 12, activation: Sigmoid), ["flat"]),
      ("joined", Multiply, ["extra_dense", "flat_dense"]),
      ("logits", Dense(units: 3), ["joined"]),
    ],
    outputs: ["logits"],
  )"#;
    let spec = spec(&job(model, "SoftmaxCrossEntropy"))?;
    let (graph, built) = build(&spec, Mode::Eval)?;
    let shapes = shapes(&graph, &built);
    let get = |name: &str| shapes.iter().find(|s| s.0 == name).map(|s| s.1.as_str());
    assert_eq!(get("pool_a"), Some("[N, 13, 13, 8]"));
    assert_eq!(get("tower_b"), Some("[N, 14, 14, 4]"));
    assert_eq!(get("pool_b"), Some("[N, 13, 13, 4]"));
    assert_eq!(get("towers"), Some("[N, 13, 13, 12]"));
    assert_eq!(get("joined"), Some("[N, 12]"));
    let labels = built.labels.ok_or("no labels")?;
    assert_eq!(graph.fact(labels)?.to_string(), "f32[N, 3]");
    let plan = training_plan(&spec, StrategyKind::Default)?;
    assert_eq!(plan.graph.roles.gradients.len(), 10);
    Ok(())
}

/// Keras' losses take probabilities unless `from_logits: true`: a final softmax (sigmoid)
/// is looked under, so the loss and predictions read the same logits as a linear output
/// with `from_logits: true`; an output that is no probability is refused at that layer.
#[test]
fn from_logits_false_reads_the_logits_under_the_final_squashing() -> TestResult {
    let model = |activation: &str| {
        format!(
            "Sequential(input_shape: [3], layers: [Dense(units: 4, activation: Relu), Dense(units: 3{activation})])"
        )
    };
    for (loss, squash) in [
        ("SparseCategoricalCrossentropy", "Softmax"),
        ("CategoricalCrossentropy", "Softmax"),
        ("BinaryCrossentropy", "Sigmoid"),
    ] {
        let probabilities = spec(&job(&model(&format!(", activation: {squash}")), loss))?;
        let logits = spec(&job(&model(""), &format!("{loss}(from_logits: true)")))?;
        let (pg, p) = build(&probabilities, Mode::Train)?;
        let (lg, l) = build(&logits, Mode::Train)?;
        // The head's logits are the last Dense's output (a BiasAdd or fused matmul), not the squashing.
        assert_ne!(pg.node(p.logits.node).op.name(), squash, "{loss}");
        assert_eq!(pg.node(p.logits.node).op.name(), lg.node(l.logits.node).op.name(), "{loss}");
        let ops = |g: &Graph, loss_node: Option<engine_graph::Outlet>| {
            loss_node.map(|o| g.node(o.node).op.name()).unwrap_or_default()
        };
        assert_eq!(ops(&pg, p.loss), ops(&lg, l.loss), "{loss}");
        assert_eq!(p.predictions.keys().collect::<Vec<_>>(), l.predictions.keys().collect::<Vec<_>>(), "{loss}");
        // The training step is the same computation: the model's own squashing is dead code.
        let steps = |s: &Spec| training_plan(s, StrategyKind::Default).map(|p| op_names(&p).join(" "));
        assert_eq!(steps(&probabilities)?, steps(&logits)?, "{loss}");

        // Keras' default with a linear output: refused at the output layer, naming the fix.
        let err = match build(&spec(&job(&model(""), loss))?, Mode::Train) {
            Err(e) => e.to_string(),
            Ok(_) => return Err(format!("{loss} without from_logits accepted a linear output").into()),
        };
        assert!(err.contains("model.layers[1]") && err.contains("reads the model's output as probabilities"), "{err}");
        assert!(err.contains(&format!("activation: {squash}")) && err.contains("from_logits: true"), "{err}");
    }
    Ok(())
}

/// The spec's normalization, pooling and padding layers build through the graph's
/// Keras-named layers, so the same model written in Rust has the same variables, updates
/// and ops.
#[test]
fn spec_layers_and_rust_layers_build_the_same_model() -> TestResult {
    use engine_graph::layers::{
        AveragePooling2D, BatchNormalization, Conv2D, Dense, GlobalAveragePooling2D, LayerNormalization, ZeroPadding2D,
    };
    let model = "Sequential(input_shape: [8, 8, 3], layers: [Conv2D(filters: 4, kernel_size: 3, use_bias: false), \
                 BatchNormalization, ZeroPadding2D(padding: 1), AveragePooling2D(pool_size: 2), LayerNormalization, \
                 GlobalAveragePooling2D, Dense(units: 3)])";
    let (spec_graph, _) = build(&spec(&job(model, "SparseCategoricalCrossentropy(from_logits: true)"))?, Mode::Train)?;

    let mut graph = Graph::new();
    let mut b = GraphBuilder::new(&mut graph);
    let x = b.placeholder("x", DType::F32, engine_graph::Shape::batched(&[8, 8, 3]))?;
    let x = Conv2D { use_bias: false, ..Conv2D::new(4, 3) }.apply(&mut b, x)?;
    let x = BatchNormalization::default().apply(&mut b, x, true)?;
    let x = ZeroPadding2D { padding: [1, 1] }.apply(&mut b, x)?;
    let x = AveragePooling2D::new(2).apply(&mut b, x)?;
    let x = LayerNormalization::default().apply(&mut b, x)?;
    let x = GlobalAveragePooling2D.apply(&mut b, x)?;
    Dense::new(3).apply(&mut b, x)?;

    let variables = |g: &Graph| {
        let mut v: Vec<(String, String)> = g
            .variables()
            .into_iter()
            .map(|id| (g.node(id).name.clone(), g.fact(id.into()).map(|f| f.to_string()).unwrap_or_default()))
            .collect();
        v.retain(|(n, _)| n != "global_step");
        v.sort();
        v
    };
    assert_eq!(variables(&spec_graph), variables(&graph));
    assert_eq!(spec_graph.roles.updates.len(), graph.roles.updates.len());
    // Every op of the Rust model appears in the spec's (which adds the head and the loss).
    let ops = |g: &Graph, prefix: &str| {
        let mut o: Vec<String> = g
            .nodes()
            .filter(|(_, n)| n.name.split('/').next().is_some_and(|s| s.starts_with(prefix)))
            .map(|(_, n)| format!("{} {}", n.name, n.op.name()))
            .collect();
        o.sort();
        o
    };
    for layer in ["conv2d", "batch_normalization", "zero_padding2d", "average_pooling2d", "layer_normalization"] {
        assert_eq!(ops(&spec_graph, layer), ops(&graph, layer), "{layer}");
    }
    Ok(())
}

#[test]
fn labels_and_predictions_follow_the_loss() -> TestResult {
    let model = "Sequential(input_shape: [3], layers: [Dense(units: 2)])";
    let cases = [
        ("SigmoidCrossEntropy", DType::F32, "[N, 2]", vec!["classes", "logits", "probabilities"]),
        ("MeanSquaredError", DType::F32, "[N, 2]", vec!["logits", "predictions"]),
        ("SparseSoftmaxCrossEntropy", DType::I64, "[N]", vec!["classes", "logits", "probabilities"]),
    ];
    for (loss, dtype, shape, keys) in cases {
        let (graph, built) = build(&spec(&job(model, loss))?, Mode::Eval)?;
        let labels = graph.fact(built.labels.ok_or("no labels")?)?;
        assert_eq!((labels.dtype, labels.shape.to_string()), (dtype, shape.to_string()), "{loss}");
        assert_eq!(built.predictions.keys().map(String::as_str).collect::<Vec<_>>(), keys, "{loss}");
    }
    Ok(())
}

#[test]
fn l2_regularization_is_added_to_the_loss() -> TestResult {
    let model = "Sequential(input_shape: [3], layers: [Dense(units: 4, kernel_regularizer: L2(0.01), \
                 bias_regularizer: L2(0.5)), Dense(units: 2)])";
    let (graph, _) = build(&spec(&job(model, "SparseSoftmaxCrossEntropy"))?, Mode::Train)?;
    let loss = graph.node(graph.roles.loss.ok_or("no loss")?.node);
    assert_eq!(loss.op.name(), "Add");
    let reg = graph.roles.fetches["regularization_loss"];
    assert!(loss.inputs.contains(&reg));
    assert_eq!(graph.node(reg.node).op.name(), "AddN");
    let factors: Vec<f32> = graph
        .nodes()
        .filter(|(_, n)| n.name.starts_with("loss/regularization/Const"))
        .filter_map(|(_, n)| match &n.op {
            Op::Constant(c) => c.value.as_f32().and_then(|v| v.first().copied()),
            _ => None,
        })
        .collect();
    assert_eq!(factors, [0.01, 0.5]);
    Ok(())
}

#[test]
fn dense_after_conv_without_flatten_is_a_shape_error_at_the_dense_layer() {
    let model = "Sequential(\n    input_shape: [28, 28, 1],\n    layers: [\n      Conv2d(filters: 4, kernel_size: 3),\n      \
                 Dense(units: 10),\n    ],\n  )";
    let (line, col, path, message) = shape_error(&job(model, "SparseSoftmaxCrossEntropy"));
    assert_eq!((line, col, path.as_str()), (6, 7, "model.layers[1]"));
    assert_eq!(
        message,
        "Dense needs an input of shape [batch, features] or [batch, tokens, features], got [N, 26, 26, 4]; add a Flatten layer before it"
    );
}

#[test]
fn merging_incompatible_shapes_is_a_shape_error_at_the_merge_node() {
    let model = "Functional(\n    inputs: {\"a\": [8], \"b\": [4]},\n    nodes: [\n      (\"d\", Dense(units: 4), [\"a\"]),\n      \
                 (\"sum\", Add, [\"a\", \"d\"]),\n      (\"cat\", Concatenate(), [\"d\", \"b\"]),\n    ],\n    outputs: [\"sum\"],\n  )";
    let (line, col, path, message) = shape_error(&job(model, "MeanSquaredError"));
    assert_eq!((line, col, path.as_str()), (6, 7, "model.nodes[1]"));
    assert_eq!(message, "Add needs inputs of one shape: `a` gives [N, 8], `d` gives [N, 4]");
    let towers = "Functional(inputs: {\"img\": [8, 8, 3]}, nodes: [\n  (\"p\", MaxPool2d(), [\"img\"]),\n  \
                  (\"cat\", Concatenate(axis: 3), [\"img\", \"p\"])], outputs: [\"cat\"])";
    let (line, col, path, message) = shape_error(&job(towers, "MeanSquaredError"));
    assert_eq!((line, col, path.as_str()), (4, 3, "model.nodes[1]"));
    assert!(message.contains("`img` gives [N, 8, 8, 3], `p` gives [N, 4, 4, 3]"), "{message}");
}

#[test]
fn other_shape_errors_name_the_layer_and_the_shapes() {
    let case = |layers: &str, loss: &str| {
        let model = format!("Sequential(input_shape: [6, 6, 2], layers: [{layers}])");
        let (_, _, path, message) = shape_error(&job(&model, loss));
        format!("{path}: {message}")
    };
    assert_eq!(
        case("Flatten, Conv2d(filters: 2, kernel_size: 2)", "MeanSquaredError"),
        "model.layers[1]: Conv2D needs an input of shape [batch, height, width, channels], got [N, 72]; a Reshape layer can make one"
    );
    assert!(case("Conv2d(filters: 2, kernel_size: 7)", "MeanSquaredError").starts_with(
        "model.layers[0]: kernel_size (7, 7) does not fit the input [N, 6, 6, 2]: input size 6 is smaller than the window 7"
    ));
    assert!(
        case("MaxPool2d(pool_size: 8)", "MeanSquaredError")
            .starts_with("model.layers[0]: pool_size (8, 8) does not fit")
    );
    assert_eq!(
        case("Reshape(target_shape: [5, -1])", "MeanSquaredError"),
        "model.layers[0].target_shape: cannot reshape [N, 6, 6, 2] (72 elements per example) to [batch, 5, -1]"
    );
    assert_eq!(
        case("Conv2d(filters: 3, kernel_size: 3)", "SparseSoftmaxCrossEntropy"),
        "model.layers[0]: SparseCategoricalCrossentropy needs the model to output logits of shape [batch, classes] \
         with at least 2 classes, got [N, 4, 4, 3]"
    );
}

#[test]
fn metrics_that_need_classes_are_checked_against_the_output() -> TestResult {
    let model = "Sequential(input_shape: [3], layers: [Dense(units: 4)])";
    let text = job(model, "SparseSoftmaxCrossEntropy")
        .replace("  optimizer:", "  metrics: [Accuracy, TopKAccuracy(k: 5)],\n  optimizer:");
    let spec = spec(&text)?;
    match build(&spec, Mode::Eval) {
        Err(LowerError::Spec(e)) => {
            assert_eq!(e.path(), &FieldPath::root().field("metrics").index(1).field("k"));
            assert_eq!(e.location().map(|l| (l.line, l.col)), Some((4, 39)));
        }
        other => panic!("expected a metric error, got {other:?}"),
    }
    Ok(())
}

#[test]
fn in_process_strategies_compile_and_cluster_strategies_are_refused_by_name() -> TestResult {
    let spec = spec(CNN)?;
    let mirrored = training_plan(&spec, StrategyKind::Mirrored)?;
    let names: Vec<&str> = mirrored.passes.iter().map(|p| p.0.as_str()).collect();
    assert!(names.contains(&"all-reduce-gradients") && names.contains(&"all-reduce-fusion"), "{names:?}");
    let err = training_plan(&spec, StrategyKind::ParameterServer).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("strategy 'parameter_server' needs a cluster")), "{err:?}");
    Ok(())
}

#[test]
fn overrides_change_what_is_lowered() -> TestResult {
    let set = Override::parse("model.layers[3].units=32")?;
    let spec = Spec::parse(CNN, "cnn.ron", &[set])?;
    let (graph, model) = build(&spec, Mode::Predict)?;
    assert_eq!(shapes(&graph, &model)[3].1, "[N, 32]");
    Ok(())
}

const RESNET: &str = include_str!("../../../specs/fashion_mnist_resnet.ron");
const VIT: &str = include_str!("../../../specs/fashion_mnist_vit.ron");

#[test]
fn batch_norm_updates_moving_statistics_in_training_only() -> TestResult {
    let spec = spec(RESNET)?;
    let (graph, _) = build(&spec, Mode::Train)?;
    let bns = 7;
    // Two non-trainable statistics per layer, each updated once per step.
    assert_eq!(graph.roles.updates.len(), 2 * bns);
    let trainable = variable_names(&graph, true);
    let all = variable_names(&graph, false);
    for v in ["stem_bn/moving_mean", "stem_bn/moving_variance"] {
        assert!(all.iter().any(|n| n == v) && !trainable.iter().any(|n| n == v), "{v}: {all:?}");
    }
    for (var, _) in &graph.roles.updates {
        assert!(graph.node(*var).name.contains("/moving_"), "{}", graph.node(*var).name);
    }
    assert!(graph.roles.cross_replica_means.is_empty(), "not synchronized");
    // Evaluation reads the moving statistics: no update, no mean over the batch.
    let (graph, _) = build(&spec, Mode::Eval)?;
    assert!(graph.roles.updates.is_empty());
    let batch_means = graph
        .nodes()
        .filter(|(_, n)| n.name.contains("_bn/") && matches!(&n.op, Op::ReduceMean(r) if r.axes.contains(&0)))
        .count();
    assert_eq!(batch_means, 0);
    Ok(())
}

#[test]
fn synchronized_batch_norm_asks_for_its_two_means() -> TestResult {
    let text = job(
        "Sequential(input_shape: [4, 4, 2], layers: [BatchNormalization(synchronized: true), Flatten, Dense(units: 3)])",
        "SparseSoftmaxCrossEntropy",
    );
    let (graph, _) = build(&spec(&text)?, Mode::Train)?;
    assert_eq!(graph.roles.cross_replica_means.len(), 2);
    Ok(())
}

#[test]
fn the_vit_spec_has_the_shapes_of_a_transformer() -> TestResult {
    let spec = spec(VIT)?;
    let (graph, model) = build(&spec, Mode::Train)?;
    let shapes = shapes(&graph, &model);
    let of = |name: &str| shapes.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).unwrap_or_default();
    assert_eq!(of("tokens"), "[N, 49, 64]");
    assert_eq!(of("block1_attention"), "[N, 49, 64]");
    assert_eq!(of("block2_mlp1"), "[N, 49, 128]");
    assert_eq!(of("pool"), "[N, 64]");
    let vars = variable_names(&graph, true);
    for v in ["block1_attention/query/kernel", "block1_attention/attention_output/bias", "embedded/pos_embedding"] {
        assert!(vars.iter().any(|n| n == v), "{v}: {vars:?}");
    }
    let q = graph.find("block1_attention/query/kernel")?;
    assert_eq!(graph.node(q).outputs[0].shape.to_string(), "[64, 4, 16]", "Keras' [features, heads, key_dim]");
    // Per-head products: batched matrix products over N*heads.
    let batched = graph.nodes().filter(|(_, n)| matches!(n.op, Op::MatMul(_)) && n.outputs[0].rank() == 3).count();
    assert_eq!(batched, 2 * 2, "scores and context in each of two blocks");
    // Compiled, each block's attention is one fused op forward and one backward: no
    // head-major copy is left, and the dropouts left are the MLPs'.
    let ops = op_names(&training_plan(&spec, StrategyKind::Default)?);
    for (op, count) in [("FusedAttention", 2), ("FusedAttentionGrad", 2), ("Dropout", 2), ("Transpose", 0)] {
        assert_eq!(ops.iter().filter(|&&o| o == op).count(), count, "{op}: {ops:?}");
    }
    Ok(())
}

#[test]
fn attention_shape_errors_name_the_layer() -> TestResult {
    let text = job(
        "Sequential(input_shape: [8], layers: [MultiHeadAttention(num_heads: 2, key_dim: 4), Dense(units: 2)])",
        "SparseSoftmaxCrossEntropy",
    );
    let (_, _, path, message) = shape_error(&text);
    assert_eq!(path, "model.layers[0]");
    assert!(message.contains("[batch, tokens, features]"), "{message}");
    let four = "Functional(inputs: {\"q\": [3, 4]}, nodes: [(\"a\", MultiHeadAttention(num_heads: 1, key_dim: 2), \
                [\"q\", \"q\", \"q\", \"q\"]), (\"p\", GlobalAveragePooling1D, [\"a\"]), (\"o\", Dense(units: 2), [\"p\"])], \
                outputs: [\"o\"])";
    let err = spec(&job(four, "SparseSoftmaxCrossEntropy")).err().ok_or("four inputs were accepted")?;
    assert!(err.to_string().contains("takes 1 to 3 inputs, found 4"), "{err}");
    Ok(())
}

#[test]
fn embedding_maps_ids_to_rows_of_a_table() -> TestResult {
    let text = job(
        "Sequential(input_shape: [5], layers: [Embedding(input_dim: 100, output_dim: 8), GlobalAveragePooling1D, \
         Dense(units: 2)])",
        "SparseSoftmaxCrossEntropy",
    );
    let (graph, model) = build(&spec(&text)?, Mode::Train)?;
    let shapes = shapes(&graph, &model);
    assert_eq!(shapes[0], ("embedding".to_string(), "[N, 5, 8]".to_string()));
    assert_eq!(shapes[1].1, "[N, 8]");
    let table = graph.find("embedding/embeddings")?;
    assert_eq!(graph.node(table).outputs[0].shape.to_string(), "[100, 8]");
    Ok(())
}

#[test]
fn grouped_and_dilated_convolutions_shape_their_kernels_and_refuse_misfits() -> TestResult {
    let text = job(
        "Sequential(input_shape: [10, 10, 4], layers: [Conv2d(filters: 8, kernel_size: 3, groups: 4, \
         dilation_rate: 2), Flatten, Dense(units: 2)])",
        "SparseSoftmaxCrossEntropy",
    );
    let (graph, model) = build(&spec(&text)?, Mode::Train)?;
    // Depthwise with a multiplier of 2: one input channel per group; dilation 2 spans 5.
    let kernel = graph.find("conv2d/kernel")?;
    assert_eq!(graph.node(kernel).outputs[0].shape.to_string(), "[3, 3, 1, 8]");
    assert_eq!(shapes(&graph, &model)[0].1, "[N, 6, 6, 8]");
    let misfit = job(
        "Sequential(input_shape: [10, 10, 3], layers: [Conv2d(filters: 4, kernel_size: 3, groups: 2), Flatten, \
         Dense(units: 2)])",
        "SparseSoftmaxCrossEntropy",
    );
    let (_, _, path, message) = shape_error(&misfit);
    assert_eq!(path, "model.layers[0].groups");
    assert!(message.contains("3 channels do not split into 2 groups"), "{message}");
    let strided = job(
        "Sequential(input_shape: [10, 10, 1], layers: [Conv2d(filters: 4, kernel_size: 3, strides: 2, \
         dilation_rate: 2), Flatten, Dense(units: 2)])",
        "SparseSoftmaxCrossEntropy",
    );
    let err = spec(&strided).err().ok_or("strides with dilation were accepted")?;
    assert!(err.to_string().contains("dilation_rate: cannot be combined with strides"), "{err}");
    Ok(())
}
