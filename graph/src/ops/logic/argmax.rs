//! Index of the maximum along an axis (predicted classes).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result, Shape,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArgMax {
    pub axis: usize,
}

impl OpDef for ArgMax {
    fn name(&self) -> &'static str {
        "ArgMax"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        rules::expect_dtype(x, DType::F32, "input")?;
        if self.axis >= x.rank() {
            return Err(format!("axis {} is out of range for {}", self.axis, x.shape));
        }
        let dims = x.shape.dims().iter().enumerate().filter(|(i, _)| *i != self.axis).map(|(_, d)| *d).collect();
        Ok(vec![Fact::new(DType::I64, Shape(dims))])
    }
}

impl GraphBuilder<'_> {
    pub fn argmax(&mut self, x: Outlet, axis: i64) -> Result<Outlet> {
        let axis = self.axis_of(x, axis)?;
        self.op(ArgMax { axis }.into(), &[x])
    }
}
