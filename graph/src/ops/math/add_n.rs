//! The sum of several tensors of one fact: how fan-out gradients are accumulated.

use crate::{
    Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AddN;

impl OpDef for AddN {
    fn name(&self) -> &'static str {
        "AddN"
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        if let Some(f) = inputs.iter().find(|f| **f != inputs[0]) {
            return Err(format!("all inputs must share one fact; found {} and {f}", inputs[0]));
        }
        Ok(vec![inputs[0].clone()])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        for i in 0..ctx.num_inputs() {
            ctx.set(i, gy);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        (inputs.len().saturating_sub(1) * outputs[0].shape.num_elements(batch)) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn add_n(&mut self, xs: &[Outlet]) -> Result<Outlet> {
        self.op(AddN.into(), xs)
    }
}
