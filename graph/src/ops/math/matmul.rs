//! Matrix product of two rank-2 tensors, either optionally transposed.

use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct MatMul {
    pub transpose_a: bool,
    pub transpose_b: bool,
}

impl MatMul {
    fn dims(&self, a: &Shape, b: &Shape) -> (Dim, Dim, Dim, Dim) {
        let (m, k1) = if self.transpose_a { (a.dim(1), a.dim(0)) } else { (a.dim(0), a.dim(1)) };
        let (k2, n) = if self.transpose_b { (b.dim(1), b.dim(0)) } else { (b.dim(0), b.dim(1)) };
        (m, k1, k2, n)
    }
}

impl OpDef for MatMul {
    fn name(&self) -> &'static str {
        "MatMul"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (a, b) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(a, DType::F32, "a")?;
        rules::expect_dtype(b, DType::F32, "b")?;
        rules::expect_rank(a, 2, "a")?;
        rules::expect_rank(b, 2, "b")?;
        let (m, k1, k2, n) = self.dims(&a.shape, &b.shape);
        if k1 != k2 {
            return Err(format!("inner dimensions differ: {} x {} (contracting {k1} with {k2})", a.shape, b.shape));
        }
        Ok(vec![Fact::f32(Shape(vec![m, n]))])
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        let gy = ctx.out_grad(0)?;
        let (a, b) = (ctx.input(0), ctx.input(1));
        // TensorFlow's _MatMulGrad, case by case.
        let (ga, gb) = match (self.transpose_a, self.transpose_b) {
            (false, false) => ((gy, b, false, true), (a, gy, true, false)),
            (false, true) => ((gy, b, false, false), (gy, a, true, false)),
            (true, false) => ((b, gy, false, true), (a, gy, false, false)),
            (true, true) => ((b, gy, true, true), (gy, a, true, true)),
        };
        if ctx.needs(0) {
            let g = ctx.b.matmul_t(ga.0, ga.1, ga.2, ga.3)?;
            ctx.set(0, g);
        }
        if ctx.needs(1) {
            let g = ctx.b.matmul_t(gb.0, gb.1, gb.2, gb.3)?;
            ctx.set(1, g);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], _: &[Fact], batch: usize) -> u64 {
        let (m, k, _, n) = self.dims(&inputs[0].shape, &inputs[1].shape);
        2 * (m.resolve(batch) * k.resolve(batch) * n.resolve(batch)) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn matmul(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
        self.matmul_t(a, b, false, false)
    }

    pub fn matmul_t(&mut self, a: Outlet, b: Outlet, transpose_a: bool, transpose_b: bool) -> Result<Outlet> {
        self.op(MatMul { transpose_a, transpose_b }.into(), &[a, b])
    }
}
