//! Zero padding (the gradient of `Slice`, and asymmetric SAME padding).

use crate::{
    Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pad {
    /// `(before, after)` per axis.
    pub pads: Vec<(usize, usize)>,
}

impl OpDef for Pad {
    fn name(&self) -> &'static str {
        "Pad"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        if self.pads.len() != x.rank() {
            return Err(format!("{} pads given for {}", self.pads.len(), x.shape));
        }
        let mut dims = Vec::new();
        for (d, (b, a)) in x.shape.dims().iter().zip(&self.pads) {
            dims.push(match d {
                Dim::Known(n) => Dim::Known(n + b + a),
                Dim::Batch(_) if b + a == 0 => *d,
                Dim::Batch(_) => return Err("cannot pad a batch-sized axis".to_string()),
            });
        }
        Ok(vec![Fact::new(x.dtype, Shape(dims))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let x = ctx.input_fact(0)?;
        let begin: Vec<usize> = self.pads.iter().map(|p| p.0).collect();
        let size: Vec<Option<usize>> = x.shape.dims().iter().map(|d| d.known()).collect();
        let g = ctx.b.slice(gy, &begin, &size)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn pad(&mut self, x: Outlet, pads: &[(usize, usize)]) -> Result<Outlet> {
        if pads.iter().all(|p| *p == (0, 0)) {
            return Ok(x);
        }
        self.op(Pad { pads: pads.to_vec() }.into(), &[x])
    }
}
