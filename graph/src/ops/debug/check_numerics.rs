//! Passes its input through and reports whether every element is finite.

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// TensorFlow's `CheckNumerics`, with one difference: instead of failing the step where it
/// runs, a non-finite input is reported to the executor, which then commits none of the
/// step's assignments. Every check of a step runs, so the report names each non-finite
/// value, and the training loop decides what to do (stop, or skip the batch).
///
/// `message` names the value in reports (`gradient of dense/kernel`); `order` ranks the
/// checks of a graph, so that "the first non-finite value" means the same on every replica
/// whatever the schedule (gradients in model order first, then updates).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckNumerics {
    pub message: String,
    pub order: usize,
}

impl OpDef for CheckNumerics {
    fn name(&self) -> &'static str {
        "CheckNumerics"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> std::result::Result<Vec<Fact>, String> {
        rules::expect_dtype(&inputs[0], DType::F32, "input")?;
        Ok(vec![inputs[0].clone()])
    }
    /// The identity: a check does not change what flows through it.
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        ctx.set(0, gy);
        Ok(())
    }
    /// It reports: two checks of one value are two reports, never merged.
    fn is_pure(&self) -> bool {
        false
    }
}

impl GraphBuilder<'_> {
    /// A check named `{scope}/CheckNumerics` of `x`, reported as `message`.
    pub fn check_numerics(&mut self, x: Outlet, message: &str, order: usize) -> Result<Outlet> {
        self.op(CheckNumerics { message: message.to_string(), order }.into(), &[x])
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Graph, GraphBuilder, Op, Result, Shape};

    #[test]
    fn the_output_is_the_input_and_floats_only_are_checked() -> Result<()> {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let x = b.placeholder("x", DType::F32, Shape::batched(&[3]))?;
        let y = b.check_numerics(x, "x", 0)?;
        assert_eq!(b.fact(y)?, b.fact(x)?);
        assert!(matches!(b.graph().node(y.node).op, Op::CheckNumerics(ref c) if c.message == "x"));
        let i = b.placeholder("i", DType::I64, Shape::batched(&[]))?;
        let err = b.check_numerics(i, "i", 1).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("must be f32"), "{err}");
        Ok(())
    }
}
