//! `engine`: a graph-compiling training engine in the style of TensorFlow's Estimator.
//!
//! This root package re-exports the workspace's crates under short names, so examples and
//! end-to-end tests use one dependency: the graph IR ([`graph`]), the executor
//! ([`runtime`]), the Estimator workflow ([`estimator`]) and the command line with its
//! RON job specs ([`cli`]).

pub use engine_cli as cli;
pub use engine_estimator as estimator;
pub use engine_graph as graph;
pub use engine_runtime as runtime;

/// Installs the engine's logger, as `engine` does: info lines on stderr (dated, with the
/// task in a cluster, through the progress bar on a terminal); `ENGINE_LOG=debug|info|warn|
/// error|off` sets the level and `ENGINE_LOG_FORMAT=json` writes JSON lines. Without it a
/// program that uses the library logs nothing.
pub fn init_logging() {
    engine_cli::cli::logging::init();
}

/// What a training program needs, in one `use engine::prelude::*;`: the Estimator API,
/// input pipelines, metrics, the graph builder with Keras-named layers, optimizers, and
/// the custom-loop API.
///
/// ```no_run
/// use engine::prelude::*;
///
/// fn model_fn(features: &Features, labels: Option<Outlet>, mode: Mode, _: &Params, b: &mut GraphBuilder<'_>) -> engine::estimator::Result<EstimatorSpec> {
///     let x = Flatten.apply(b, features["x"])?;
///     let logits = Dense::new(10).apply(b, x)?;
///     let mut spec = EstimatorSpec::new(mode);
///     spec.predictions.insert("classes".into(), b.argmax(logits, -1)?);
///     if let Some(labels) = labels {
///         let per_example = b.sparse_softmax_cross_entropy(logits, labels)?;
///         spec.loss = Some(b.reduce_mean(per_example, &[], false)?);
///         spec.train_op = Some(TrainOp::Minimize(OptimizerConfig::sgd(0.1)));
///     }
///     Ok(spec)
/// }
///
/// fn input_fn(_: Mode, _: &InputContext) -> Result<Dataset, InputError> {
///     let dir = "/usr/share/datasets/fashion-mnist";
///     let ds = Dataset::from_idx(format!("{dir}/train-images-idx3-ubyte.gz"), format!("{dir}/train-labels-idx1-ubyte.gz"))?;
///     Ok(ds.map(Map::Scale(255.0)).batch(64).repeat(None))
/// }
///
/// init_logging();
/// let estimator = Estimator::new(model_fn, RunConfig::new("runs/linear"))?;
/// estimator.train(&input_fn, Vec::new(), StepLimit::MaxSteps(100), Vec::new())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod prelude {
    pub use crate::init_logging;
    pub use engine_estimator::distribute::{DistributionStrategy, PerReplica, ReduceOp};
    pub use engine_estimator::input::{AutoShardPolicy, Dataset, InputContext, InputError, Map};
    pub use engine_estimator::metrics::Metric;
    pub use engine_estimator::strategy::{StrategyKind, StrategyOptions};
    pub use engine_estimator::{
        Estimator, EstimatorError, EstimatorSpec, EvalSpec, Features, InputFn, Mode, ModelFn, Params, RunConfig,
        StepLimit, TrainOp, TrainSpec, train_and_evaluate,
    };
    pub use engine_graph::layers::{
        Activation, Add, AddPositionEmbedding, AveragePooling2D, BatchNormalization, Concatenate, Conv2D, Dense,
        Dropout, Embedding, Flatten, GlobalAveragePooling1D, GlobalAveragePooling2D, LayerNormalization, MaxPooling2D,
        MultiHeadAttention, Multiply, Reshape, ZeroPadding2D,
    };
    pub use engine_graph::ops::Padding;
    pub use engine_graph::optimizer::{LearningRate, Optimizer, OptimizerConfig};
    pub use engine_graph::{DeviceName, GraphBuilder, HostTensor, Initializer, Outlet};
}
