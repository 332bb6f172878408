//! `cond ? a : b` elementwise, with broadcasting (piecewise schedules, masks).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Select;

impl OpDef for Select {
    fn name(&self) -> &'static str {
        "SelectV2"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (c, a, b) = (&inputs[0], &inputs[1], &inputs[2]);
        rules::expect_dtype(c, DType::Bool, "condition")?;
        let ab = rules::broadcast(&[a.clone(), b.clone()], None)?;
        let shape = c
            .shape
            .broadcast(&ab[0].shape)
            .ok_or_else(|| format!("condition {} does not broadcast with {}", c.shape, ab[0].shape))?;
        Ok(vec![Fact::new(a.dtype, shape)])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let cond = ctx.input(0);
        let zero = ctx.b.zeros_like(gy)?;
        for (i, (on, off)) in [(1, (gy, zero)), (2, (zero, gy))] {
            if ctx.needs(i) {
                let shape = ctx.input_fact(i)?.shape;
                let routed = ctx.b.select(cond, on, off)?;
                let g = ctx.b.sum_to(routed, &shape)?;
                ctx.set(i, g);
            }
        }
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn select(&mut self, cond: Outlet, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.op(Select.into(), &[cond, a, b])
    }
}
