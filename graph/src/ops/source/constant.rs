//! A value baked into the graph.

use crate::{
    Fact, GraphBuilder, HostTensor, Outlet, Result, Shape,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Constant {
    pub value: HostTensor,
}

impl Constant {
    pub fn scalar(v: f32) -> Self {
        Constant { value: HostTensor::scalar_f32(v) }
    }
}

impl OpDef for Constant {
    fn name(&self) -> &'static str {
        "Const"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _: &[Fact]) -> Result<Vec<Fact>, String> {
        Ok(vec![Fact::new(self.value.dtype(), Shape::known(&self.value.shape))])
    }
    fn flops(&self, _: &[Fact], _: &[Fact], _: usize) -> u64 {
        0
    }
}

impl GraphBuilder<'_> {
    pub fn constant(&mut self, value: HostTensor) -> Result<Outlet> {
        self.op(Constant { value }.into(), &[])
    }

    pub fn scalar(&mut self, v: f32) -> Result<Outlet> {
        self.constant(HostTensor::scalar_f32(v))
    }
}
