//! The error function, elementwise: the exact GELU (`0.5 x (1 + erf(x / sqrt 2))`, Keras'
//! default `approximate=False`) is built from it.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Erf;

impl OpDef for Erf {
    fn name(&self) -> &'static str {
        "Erf"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::unary_float(inputs)
    }
    /// `d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2)`.
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let x = ctx.input(0);
        let x2 = ctx.b.square(x)?;
        let neg = ctx.b.neg(x2)?;
        let e = ctx.b.exp(neg)?;
        let c = ctx.b.scalar(std::f32::consts::FRAC_2_SQRT_PI)?;
        let d = ctx.b.mul(e, c)?;
        let g = ctx.b.mul(gy, d)?;
        ctx.set(0, g);
        Ok(())
    }
    fn flops(&self, _: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        // A rational approximation: about a dozen operations per element.
        12 * outputs[0].shape.num_elements(batch) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn erf(&mut self, x: Outlet) -> Result<Outlet> {
        self.op(Erf.into(), &[x])
    }

    /// The exact GELU, `0.5 x (1 + erf(x / sqrt 2))`, as primitives.
    pub fn gelu(&mut self, x: Outlet) -> Result<Outlet> {
        self.with_scope("gelu", |b| {
            let inv_sqrt2 = b.scalar(std::f32::consts::FRAC_1_SQRT_2)?;
            let scaled = b.mul(x, inv_sqrt2)?;
            let e = b.erf(scaled)?;
            let one = b.scalar(1.0)?;
            let s = b.add(e, one)?;
            let half = b.scalar(0.5)?;
            let h = b.mul(x, half)?;
            b.mul(h, s)
        })
    }
}
