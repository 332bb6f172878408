//! Matrix product of two tensors of rank 2, or of equal rank above 2 with equal leading
//! (batch) dimensions (TensorFlow's `BatchMatMulV2` without broadcasting: attention's
//! per-head products), either optionally transposed in its last two axes.

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
    /// `(m, k_a, k_b, n)` from the last two axes.
    fn dims(&self, a: &Shape, b: &Shape) -> (Dim, Dim, Dim, Dim) {
        let (ra, rb) = (a.rank(), b.rank());
        let (a0, a1) = (a.dim(ra - 2), a.dim(ra - 1));
        let (b0, b1) = (b.dim(rb - 2), b.dim(rb - 1));
        let (m, k1) = if self.transpose_a { (a1, a0) } else { (a0, a1) };
        let (k2, n) = if self.transpose_b { (b1, b0) } else { (b0, b1) };
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
        if a.rank() < 2 || a.rank() != b.rank() {
            return Err(format!(
                "operands must be matrices, or batches of matrices of equal rank; found {} and {}",
                a.shape, b.shape
            ));
        }
        let lead = &a.shape.dims()[..a.rank() - 2];
        if lead != &b.shape.dims()[..b.rank() - 2] {
            return Err(format!("batch dimensions differ: {} x {}", a.shape, b.shape));
        }
        let (m, k1, k2, n) = self.dims(&a.shape, &b.shape);
        if k1 != k2 {
            return Err(format!("inner dimensions differ: {} x {} (contracting {k1} with {k2})", a.shape, b.shape));
        }
        let mut dims = lead.to_vec();
        dims.extend([m, n]);
        Ok(vec![Fact::f32(Shape(dims))])
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
        let a = &inputs[0].shape;
        let (m, k, _, n) = self.dims(a, &inputs[1].shape);
        let lead: usize = a.dims()[..a.rank() - 2].iter().map(|d| d.resolve(batch)).product();
        2 * (lead * m.resolve(batch) * k.resolve(batch) * n.resolve(batch)) as u64
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
