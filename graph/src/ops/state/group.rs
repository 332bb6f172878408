//! Waits for its inputs and produces nothing useful: a train op fetches one of these.

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Group;

impl OpDef for Group {
    fn name(&self) -> &'static str {
        "NoOp"
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(0)
    }
    fn infer(&self, _: &[Fact]) -> Result<Vec<Fact>, String> {
        Ok(vec![Fact::scalar(DType::Bool)])
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    pub fn group(&mut self, name: &str, inputs: &[Outlet]) -> Result<Outlet> {
        let name = self.name(name);
        self.op_named(&name, Group.into(), inputs)
    }
}
