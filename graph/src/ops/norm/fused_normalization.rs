//! `gamma * (x - mean) / sqrt(var + epsilon) + beta`, the statistics taken per feature
//! (batch normalization) or per example (layer normalization), and for batch
//! normalization optionally a ReLU of that (TensorFlow's `_FusedBatchNormEx`).

use super::FusedNormalizationGrad;
use crate::{
    DType, Dim, Fact, GraphBuilder, NodeId, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Which statistics: the input is seen as `[rows, features]`, its last axis the features,
/// and `gamma` and `beta` are per feature either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Normalization {
    /// Mean and variance of each feature over every other axis (training-mode
    /// `BatchNormalization`); the statistics have shape `[features]`.
    Batch,
    /// Mean and variance of each row over its features (`LayerNormalization`); the
    /// statistics keep the input's shape with a last axis of 1.
    Layer,
}

/// Inputs: `(x, [gamma], [beta])`, gamma when `scale`, beta when `center`. Outputs:
/// `(y, mean, variance)`, the variance biased (divided by the count, as Keras' layers
/// normalize with), so the layers' moving averages read them as they read the composite's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedNormalization {
    pub kind: Normalization,
    pub epsilon: f32,
    pub scale: bool,
    pub center: bool,
    /// `y` is the ReLU of the normalized input (batch normalization only): a pass folds a
    /// following `Relu` in, so the activations are written once, not written and then
    /// read and written again, and the gradient masks inside its own passes.
    #[serde(default)]
    pub relu: bool,
}

impl FusedNormalization {
    /// The axes the statistics reduce, for an input of rank `rank`.
    pub fn axes(&self, rank: usize) -> Vec<usize> {
        match self.kind {
            Normalization::Batch => (0..rank - 1).collect(),
            Normalization::Layer => vec![rank - 1],
        }
    }

    /// The shape of the mean and variance for an input of shape `x`.
    pub fn stats_shape(&self, x: &Shape) -> Shape {
        let dims = x.dims();
        match self.kind {
            Normalization::Batch => Shape(dims[dims.len() - 1..].to_vec()),
            Normalization::Layer => Shape(dims[..dims.len() - 1].iter().copied().chain([Dim::Known(1)]).collect()),
        }
    }

    /// The gradient op that goes with this one.
    pub fn grad_op(&self) -> FusedNormalizationGrad {
        FusedNormalizationGrad {
            kind: self.kind,
            epsilon: self.epsilon,
            scale: self.scale,
            relu: self.relu,
            center: self.relu && self.center,
        }
    }
}

/// The feature count of `x`, checked: rank 2 or more, f32, a known last axis.
pub(super) fn features(x: &Fact) -> std::result::Result<usize, String> {
    rules::expect_dtype(x, DType::F32, "input")?;
    match x.shape.dims().last().and_then(|d| d.known()) {
        Some(c) if x.rank() >= 2 => Ok(c),
        _ => Err(format!("input {} must have rank 2 or more and a known last axis", x.shape)),
    }
}

/// `gamma` or `beta`: f32 of shape `[features]`.
pub(super) fn per_feature(f: &Fact, c: usize, what: &str) -> std::result::Result<(), String> {
    rules::expect_dtype(f, DType::F32, what)?;
    if f.shape != Shape::known(&[c]) {
        return Err(format!("{what} {} must be [{c}], one per feature", f.shape));
    }
    Ok(())
}

impl OpDef for FusedNormalization {
    fn name(&self) -> &'static str {
        match (self.kind, self.relu) {
            (Normalization::Batch, false) => "FusedBatchNormV3",
            (Normalization::Batch, true) => "_FusedBatchNormEx",
            (Normalization::Layer, _) => "FusedLayerNorm",
        }
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1 + usize::from(self.scale) + usize::from(self.center))
    }
    fn infer(&self, inputs: &[Fact]) -> std::result::Result<Vec<Fact>, String> {
        let x = &inputs[0];
        let c = features(x)?;
        if self.relu && self.kind == Normalization::Layer {
            return Err("only batch normalization folds a ReLU".to_string());
        }
        for (i, what) in inputs[1..].iter().zip(["gamma", "beta"].iter().skip(usize::from(!self.scale))) {
            per_feature(i, c, what)?;
        }
        let stats = Fact::new(DType::F32, self.stats_shape(&x.shape));
        Ok(vec![x.clone(), stats.clone(), stats])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let x = ctx.input(0);
        let gamma = self.scale.then(|| ctx.input(1));
        let (mean, var) = (ctx.output(1), ctx.output(2));
        let mut dx = None;
        if let Some(gy) = ctx.out_grad_opt(0) {
            let mut inputs = vec![gy, x];
            inputs.extend(gamma);
            inputs.extend([mean, var]);
            // With the ReLU, the gradient op recomputes its mask from x, which needs beta.
            if self.relu && self.center {
                inputs.push(ctx.input(ctx.num_inputs() - 1));
            }
            let node = ctx.b.node(self.grad_op().name(), self.grad_op().into(), &inputs)?;
            dx = Some(Outlet::new(node, 0));
            set_affine(ctx, self, node);
        } else {
            // y reaches no loss: gamma and beta get zero gradients.
            for i in 1..ctx.num_inputs() {
                let z = ctx.b.zeros_like(ctx.input(i))?;
                ctx.set(i, z);
            }
        }
        if let Some(dx) = self.through_statistics(ctx, dx)? {
            ctx.set(0, dx);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        8 * inputs[0].shape.num_elements(batch) as u64
    }
}

impl FusedNormalization {
    /// `dx` plus what reaches the statistics, which are outputs too (the moving averages
    /// read them): d mean / dx = 1/n and d var / dx = 2 (x - mean) / n. Builds nothing
    /// when no gradient reaches them, as in training graphs.
    fn through_statistics(&self, ctx: &mut GradCtx<'_, '_>, mut dx: Option<Outlet>) -> Result<Option<Outlet>> {
        let (gm, gv) = (ctx.out_grad_opt(1), ctx.out_grad_opt(2));
        if gm.is_none() && gv.is_none() {
            return Ok(dx);
        }
        let (x, mean) = (ctx.input(0), ctx.output(1));
        let axes = self.axes(ctx.input_fact(0)?.rank());
        let count = ctx.b.size(x, &axes)?;
        if let Some(gm) = gm {
            let t = ctx.b.div(gm, count)?;
            dx = Some(accumulate(ctx.b, dx, t, x)?);
        }
        if let Some(gv) = gv {
            let centered = ctx.b.sub(x, mean)?;
            let two = ctx.b.scalar(2.0)?;
            let scaled = ctx.b.mul(gv, two)?;
            let per = ctx.b.div(scaled, count)?;
            let t = ctx.b.mul(centered, per)?;
            dx = Some(accumulate(ctx.b, dx, t, x)?);
        }
        Ok(dx)
    }
}

/// The gradient op's dgamma and dbeta outputs, for the inputs that have them.
fn set_affine(ctx: &mut GradCtx<'_, '_>, op: &FusedNormalization, grad: NodeId) {
    let mut i = 1;
    if op.scale {
        ctx.set(i, Outlet::new(grad, 1));
        i += 1;
    }
    if op.center {
        ctx.set(i, Outlet::new(grad, 2));
    }
}

/// `dx + t`, with `t` broadcast to `x`'s shape when it is the first term.
fn accumulate(b: &mut GraphBuilder<'_>, dx: Option<Outlet>, t: Outlet, x: Outlet) -> Result<Outlet> {
    match dx {
        Some(dx) => b.add(dx, t),
        None => {
            let shape = b.fact(x)?.shape.clone();
            b.broadcast_to(t, shape)
        }
    }
}

impl GraphBuilder<'_> {
    /// The fused normalization of `x`; returns the node, whose outputs are `(y, mean,
    /// variance)`.
    pub fn fused_normalization(
        &mut self,
        op: FusedNormalization,
        x: Outlet,
        gamma: Option<Outlet>,
        beta: Option<Outlet>,
    ) -> Result<NodeId> {
        let op = FusedNormalization { scale: gamma.is_some(), center: beta.is_some(), ..op };
        let mut inputs = vec![x];
        inputs.extend(gamma);
        inputs.extend(beta);
        self.node(op.name(), op.into(), &inputs)
    }
}
