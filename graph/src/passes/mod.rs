//! Named graph rewrites and the driver that runs them.
//!
//! A strategy, an optimization level or a lowering step is a list of passes. The driver
//! runs them in order and checks the graph's invariants after each one, so a broken
//! rewrite is reported with the pass's name rather than as a wrong number later.

mod check_numerics;
mod cse;
mod dce;
mod fuse_attention;
mod fuse_bias_activation;
mod fuse_bias_into_filter_grad;
mod fuse_conv_pool;
mod fuse_elementwise;
mod fuse_normalization;
mod fuse_relu_grad_into_input_grad;
mod fuse_relu_into_normalization;
mod fuse_relu_into_pool_grad;
mod fuse_residual_add;
mod liveness;
mod merge_elementwise;
mod replace;
mod schedule;
pub mod strategy;

pub use check_numerics::CheckNumericsPass;
pub use cse::CommonSubexpressionElimination;
pub use dce::DeadCodeElimination;
pub use fuse_attention::FuseAttention;
pub use fuse_bias_activation::FuseBiasActivation;
pub use fuse_bias_into_filter_grad::FuseBiasIntoFilterGrad;
pub use fuse_conv_pool::FuseConvPool;
pub use fuse_elementwise::FuseElementwise;
pub use fuse_normalization::FuseNormalization;
pub use fuse_relu_grad_into_input_grad::FuseReluGradIntoInputGrad;
pub use fuse_relu_into_normalization::FuseReluIntoNormalization;
pub use fuse_relu_into_pool_grad::FuseReluIntoPoolGrad;
pub use fuse_residual_add::FuseResidualAdd;
pub use liveness::{Liveness, liveness};
pub use merge_elementwise::MergeElementwise;
pub use schedule::schedule;

use crate::{Graph, GraphError, Result};

pub trait Pass {
    fn name(&self) -> &str;
    /// Rewrites the graph; returns whether anything changed.
    fn run(&self, g: &mut Graph) -> Result<bool>;
}

/// The optimizations every compiled graph gets after its rewrites: merge duplicates,
/// fuse what kernels can do in one pass, drop what no role needs.
pub fn optimization_passes() -> Vec<Box<dyn Pass>> {
    optimization_passes_with(Fusions::default())
}

/// Fusions that are built and tested but not on by default, because they measured no
/// faster where they were tried (see each field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fusions {
    /// `fuse-relu-grad-into-input-grad`: on a Zen 4 and a Zen 5 the residual model's step
    /// ran slower with it (docs/performance-history.md, "the ReLU gradient in the input
    /// gradient's epilogue" and "Issue 41 on a Zen 5 at 89bf64d"), where a pass over memory
    /// is cheap; it is kept for the cores where such a pass costs two to four times as much
    /// (the Intel VM), to be measured there.
    pub relu_grad_into_input_grad: bool,
    /// `fuse-relu-into-normalization`: the ResNet's normalization-and-ReLU ops went from
    /// 7.5 to 6.2 ms a step on a Zen 5, but `down1`'s input gradient, which it does not
    /// touch, ran 0.55–0.75 ms slower beside it, and end to end it measured +1.5 % in one
    /// alternation and −2.6 % in another (docs/performance-history.md, "the ReLU folded
    /// into it"); kept for the Intel VM, where a pass over the stem's 12.8 MB costs two to
    /// four times as much, to be measured there.
    pub relu_into_normalization: bool,
}

/// [`optimization_passes`] with the optional fusions `fusions` turns on.
pub fn optimization_passes_with(fusions: Fusions) -> Vec<Box<dyn Pass>> {
    let mut passes: Vec<Box<dyn Pass>> = vec![
        Box::new(CommonSubexpressionElimination),
        Box::new(FuseBiasActivation),
        Box::new(FuseResidualAdd),
        Box::new(FuseReluIntoPoolGrad),
    ];
    if fusions.relu_into_normalization {
        passes.push(Box::new(FuseReluIntoNormalization));
    }
    if fusions.relu_grad_into_input_grad {
        passes.push(Box::new(FuseReluGradIntoInputGrad));
    }
    passes.extend([
        Box::new(FuseBiasIntoFilterGrad) as Box<dyn Pass>,
        Box::new(FuseConvPool),
        Box::new(FuseElementwise),
        Box::new(MergeElementwise),
        Box::new(DeadCodeElimination),
    ]);
    passes
}

/// Runs passes in order, checking consistency after each.
#[derive(Default)]
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
    log: Vec<(String, bool)>,
}

impl PassManager {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, pass: impl Pass + 'static) -> Self {
        self.passes.push(Box::new(pass));
        self
    }

    pub fn push(&mut self, pass: Box<dyn Pass>) {
        self.passes.push(pass);
    }

    pub fn run(&mut self, g: &mut Graph) -> Result<()> {
        for pass in &self.passes {
            let wrap = |e: GraphError| GraphError::Pass { pass: pass.name().to_string(), source: Box::new(e) };
            let changed = pass.run(g).map_err(wrap)?;
            g.check().map_err(wrap)?;
            self.log.push((pass.name().to_string(), changed));
        }
        Ok(())
    }

    /// `(pass name, changed)` for every pass run so far.
    pub fn log(&self) -> &[(String, bool)] {
        &self.log
    }

    pub fn names(&self) -> Vec<&str> {
        self.passes.iter().map(|p| p.name()).collect()
    }
}
