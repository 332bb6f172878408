//! Losses. The cross entropies are fused ops (computed stably from logits); the
//! regression losses are composites of primitives.

mod l2_loss;
mod mean_squared_error;
mod sigmoid_cross_entropy;
mod softmax_cross_entropy;
mod sparse_softmax_cross_entropy;

pub use sigmoid_cross_entropy::SigmoidCrossEntropy;
pub use softmax_cross_entropy::SoftmaxCrossEntropy;
pub use sparse_softmax_cross_entropy::SparseSoftmaxCrossEntropy;

use crate::{Dim, GraphBuilder, Outlet, Result, Shape};

impl GraphBuilder<'_> {
    /// `[.., C] <- [..]`: appends a unit axis so a per-example value broadcasts over classes.
    pub(crate) fn expand_last(&mut self, x: Outlet) -> Result<Outlet> {
        let mut dims = self.fact(x)?.shape.dims().to_vec();
        dims.push(Dim::Known(1));
        self.reshape(x, Shape(dims))
    }
}
