//! Same elements, new shape.

use crate::{
    Dim, Fact, GraphBuilder, GraphError, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reshape {
    pub shape: Shape,
}

impl OpDef for Reshape {
    fn name(&self) -> &'static str {
        "Reshape"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        let (from, to) = (x.shape.volume(), self.shape.volume());
        if from.is_none() || from != to {
            return Err(format!("cannot reshape {} into {}: element counts differ", x.shape, self.shape));
        }
        Ok(vec![Fact::new(x.dtype, self.shape.clone())])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let shape = ctx.input_fact(0)?.shape;
        let g = ctx.b.reshape(gy, shape)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
}

impl GraphBuilder<'_> {
    pub fn reshape(&mut self, x: Outlet, shape: Shape) -> Result<Outlet> {
        if self.fact(x)?.shape == shape {
            return Ok(x);
        }
        self.op(Reshape { shape }.into(), &[x])
    }

    /// `[N, a, b, ...] -> [N, a*b*...]`, Keras' `Flatten`.
    pub fn flatten(&mut self, x: Outlet) -> Result<Outlet> {
        let shape = self.fact(x)?.shape.clone();
        if shape.rank() == 0 {
            return Err(GraphError::invalid("flatten", "cannot flatten a scalar"));
        }
        let rest = Shape(shape.dims()[1..].to_vec())
            .volume()
            .ok_or_else(|| GraphError::invalid("flatten", format!("{shape} has more than one batch dimension")))?;
        self.reshape(x, Shape(vec![shape.dim(0), rest]))
    }

    /// Reshape with Keras' `target_shape` convention: the batch dimension is kept and not
    /// listed; one entry may be -1 to be inferred.
    pub fn reshape_batched(&mut self, x: Outlet, target: &[i64]) -> Result<Outlet> {
        let shape = self.fact(x)?.shape.clone();
        let bad = || GraphError::invalid("reshape", format!("cannot reshape {shape} into [N, {target:?}]"));
        let per_example =
            Shape(shape.dims().get(1..).ok_or_else(bad)?.to_vec()).volume().and_then(Dim::known).ok_or_else(bad)?;
        let known: usize = target.iter().filter(|&&d| d >= 0).map(|&d| d as usize).product();
        let holes = target.iter().filter(|&&d| d < 0).count();
        let mut dims = vec![shape.dim(0)];
        for &d in target {
            dims.push(Dim::Known(if d >= 0 {
                d as usize
            } else if holes == 1 && known > 0 && per_example % known == 0 {
                per_example / known
            } else {
                return Err(bad());
            }));
        }
        self.reshape(x, Shape(dims))
    }
}
