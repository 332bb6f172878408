//! Joins tensors along one axis (two towers of a functional model).

use crate::{
    Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Concat {
    pub axis: usize,
}

impl OpDef for Concat {
    fn name(&self) -> &'static str {
        "ConcatV2"
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let first = &inputs[0];
        if self.axis >= first.rank() {
            return Err(format!("axis {} is out of range for {}", self.axis, first.shape));
        }
        let mut total = Dim::Known(0);
        for f in inputs {
            if f.dtype != first.dtype || f.rank() != first.rank() {
                return Err(format!("cannot concatenate {f} with {first}"));
            }
            for a in 0..f.rank() {
                if a != self.axis && f.shape.dim(a) != first.shape.dim(a) {
                    return Err(format!("dimension {a} differs: {} and {}", f.shape, first.shape));
                }
            }
            total = match (total, f.shape.dim(self.axis)) {
                (Dim::Known(a), Dim::Known(b)) => Dim::Known(a + b),
                (Dim::Batch(a), Dim::Batch(b)) => Dim::Batch(a + b),
                (Dim::Known(0), d) => d,
                _ => return Err("cannot concatenate batch-sized and fixed-size dimensions".to_string()),
            };
        }
        let mut dims = first.shape.dims().to_vec();
        dims[self.axis] = total;
        Ok(vec![Fact::new(first.dtype, Shape(dims))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let mut offset = 0;
        for i in 0..ctx.num_inputs() {
            let f = ctx.input_fact(i)?;
            let width = f.shape.dim(self.axis).known().ok_or_else(|| ctx.no_gradient())?;
            if ctx.needs(i) {
                let rank = f.rank();
                let mut begin = vec![0; rank];
                let mut size = vec![None; rank];
                begin[self.axis] = offset;
                size[self.axis] = Some(width);
                let g = ctx.b.slice(gy, &begin, &size)?;
                ctx.set(i, g);
            }
            offset += width;
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn concat(&mut self, xs: &[Outlet], axis: i64) -> Result<Outlet> {
        let axis = self.axis_of(xs[0], axis)?;
        self.op(Concat { axis }.into(), xs)
    }
}
