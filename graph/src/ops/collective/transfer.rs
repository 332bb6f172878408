//! Moves a value to another device (central storage: variables live on the host and
//! replicas read them through a transfer).

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Transfer {
    /// The partition the value is delivered to.
    pub to: crate::Placement,
}

impl OpDef for Transfer {
    fn name(&self) -> &'static str {
        "Transfer"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        Ok(vec![inputs[0].clone()])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        ctx.set(0, gy);
        Ok(())
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    pub fn transfer(&mut self, x: Outlet, to: crate::Placement) -> Result<Outlet> {
        self.op(Transfer { to }.into(), &[x])
    }
}
