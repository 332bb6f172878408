//! Inverted dropout for training graphs (evaluation graphs simply do not contain it).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Outputs: `(x * mask, mask)` where `mask` is 0 or `1 / (1 - rate)`. The mask is drawn
/// from `(seed, global step)`, so a resumed run drops the same units as an unbroken one.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dropout {
    pub rate: f32,
    pub seed: u64,
}

impl OpDef for Dropout {
    fn name(&self) -> &'static str {
        "Dropout"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        rules::expect_dtype(&inputs[0], DType::F32, "input")?;
        if !(0.0..1.0).contains(&self.rate) {
            return Err(format!("rate must be in [0, 1), found {}", self.rate));
        }
        Ok(vec![inputs[0].clone(), inputs[0].clone()])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let mask = ctx.output(1);
        let g = ctx.b.mul(gy, mask)?;
        ctx.set(0, g);
        Ok(())
    }
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    pub fn dropout(&mut self, x: Outlet, rate: f32, seed: u64) -> Result<Outlet> {
        Ok(Outlet::from(self.node("Dropout", Dropout { rate, seed }.into(), &[x])?))
    }
}
