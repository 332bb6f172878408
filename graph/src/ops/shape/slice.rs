//! A rectangular window of a tensor.

use crate::{
    Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

/// `begin[a]..begin[a] + size[a]` along each axis; `size[a] = None` takes the rest of the
/// axis, which is the only choice along a batch-sized axis (with `begin = 0`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slice {
    pub begin: Vec<usize>,
    pub size: Vec<Option<usize>>,
}

impl OpDef for Slice {
    fn name(&self) -> &'static str {
        "Slice"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        if self.begin.len() != x.rank() || self.size.len() != x.rank() {
            return Err(format!("begin and size must have one entry per axis of {}", x.shape));
        }
        let mut dims = Vec::new();
        for (a, d) in x.shape.dims().iter().enumerate() {
            let (b, s) = (self.begin[a], self.size[a]);
            dims.push(match (*d, s) {
                (Dim::Known(n), Some(s)) if b + s <= n => Dim::Known(s),
                (Dim::Known(n), None) if b <= n => Dim::Known(n - b),
                (Dim::Batch(_), None) if b == 0 => *d,
                _ => return Err(format!("window {b}..{s:?} does not fit axis {a} of {}", x.shape)),
            });
        }
        Ok(vec![Fact::new(x.dtype, Shape(dims))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let x = ctx.input_fact(0)?;
        let y = ctx.b.fact(ctx.output(0))?.clone();
        let mut pads = Vec::new();
        for (a, d) in x.shape.dims().iter().enumerate() {
            let before = self.begin[a];
            let after = match (d, y.shape.dim(a)) {
                (Dim::Known(n), Dim::Known(s)) => n - before - s,
                _ => 0,
            };
            pads.push((before, after));
        }
        let g = ctx.b.pad(gy, &pads)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
}

impl GraphBuilder<'_> {
    pub fn slice(&mut self, x: Outlet, begin: &[usize], size: &[Option<usize>]) -> Result<Outlet> {
        self.op(Slice { begin: begin.to_vec(), size: size.to_vec() }.into(), &[x])
    }
}
