//! The backward of [`FusedNormalization`](super::FusedNormalization) through its
//! normalized output (TensorFlow's `FusedBatchNormGradV3`).

use super::fused_normalization::{Normalization, features, per_feature};
use crate::{
    DType, Fact, Shape,
    ops::{Arity, OpDef},
};

/// Inputs: `(dy, x, [gamma], mean, variance, [beta])`, the statistics the forward op
/// output, beta only with `relu` and `center`. Outputs: `(dx, dgamma, dbeta)`, the last two
/// `[features]` (dgamma is computed without a gamma too, for uniformity; nothing reads it
/// then).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedNormalizationGrad {
    pub kind: Normalization,
    pub epsilon: f32,
    pub scale: bool,
    /// The forward op applied a ReLU: `dy` reaches only where the normalized input was
    /// positive, and that mask is recomputed from `x` (TensorFlow's `_FusedBatchNormGradEx`
    /// reads the output for it; recomputing reads one tensor fewer, twice).
    #[serde(default)]
    pub relu: bool,
    /// With `relu`: the forward op had a beta, which the mask needs.
    #[serde(default)]
    pub center: bool,
}

impl OpDef for FusedNormalizationGrad {
    fn name(&self) -> &'static str {
        match (self.kind, self.relu) {
            (Normalization::Batch, false) => "FusedBatchNormGradV3",
            (Normalization::Batch, true) => "_FusedBatchNormGradEx",
            (Normalization::Layer, _) => "FusedLayerNormGrad",
        }
    }
    fn arity(&self) -> Arity {
        Arity::Exact(4 + usize::from(self.scale) + usize::from(self.relu && self.center))
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (dy, x) = (&inputs[0], &inputs[1]);
        let c = features(x)?;
        if dy != x {
            return Err(format!("gradient {} must match the input {}", dy.shape, x.shape));
        }
        if self.relu && self.kind == Normalization::Layer {
            return Err("only batch normalization folds a ReLU".to_string());
        }
        if self.scale {
            per_feature(&inputs[2], c, "gamma")?;
        }
        let beta = self.relu && self.center;
        if beta {
            per_feature(&inputs[inputs.len() - 1], c, "beta")?;
        }
        let forward = super::FusedNormalization {
            kind: self.kind,
            epsilon: self.epsilon,
            scale: false,
            center: false,
            relu: false,
        };
        let stats = forward.stats_shape(&x.shape);
        let stats_at = inputs.len() - 2 - usize::from(beta);
        for f in &inputs[stats_at..stats_at + 2] {
            if f.shape != stats || f.dtype != DType::F32 {
                return Err(format!("statistics {} must be f32 of shape {stats}", f.shape));
            }
        }
        let affine = Fact::new(DType::F32, Shape::known(&[c]));
        Ok(vec![x.clone(), affine.clone(), affine])
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        10 * inputs[1].shape.num_elements(batch) as u64
    }
}
