//! Permutes axes.

use crate::{
    Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef},
};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Transpose {
    pub perm: Vec<usize>,
}

impl OpDef for Transpose {
    fn name(&self) -> &'static str {
        "Transpose"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let x = &inputs[0];
        let mut seen = self.perm.clone();
        seen.sort_unstable();
        if seen != (0..x.rank()).collect::<Vec<_>>() {
            return Err(format!("{:?} is not a permutation of the axes of {}", self.perm, x.shape));
        }
        Ok(vec![Fact::new(x.dtype, Shape(self.perm.iter().map(|&p| x.shape.dim(p)).collect()))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let mut inverse = vec![0; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inverse[p] = i;
        }
        let g = ctx.b.transpose(gy, &inverse)?;
        ctx.set(0, g);
        Ok(())
    }
}

impl GraphBuilder<'_> {
    pub fn transpose(&mut self, x: Outlet, perm: &[usize]) -> Result<Outlet> {
        self.op(Transpose { perm: perm.to_vec() }.into(), &[x])
    }
}
