//! Matrix products with transposes expressed as strides (no copies).

use super::{
    buffer::{Elem, tensor, view},
    gemm::{self, Mat},
};
use crate::{
    Result, Value,
    kernels::{KernelCtx, dims},
    value::T,
};
use engine_graph::ops::{Activation, FusedMatMul, MatMul};

pub(super) fn matmul<E: Elem>(mm: &MatMul, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [a, b] = ctx.floats(inputs)?;
    product::<E>(mm, a, b, None, ctx)
}

pub(super) fn fused<E: Elem>(fm: &FusedMatMul, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [a, b, bias] = ctx.floats(inputs)?;
    let bias = view::<E>(&bias);
    product::<E>(&fm.matmul(), a, b, Some((&bias, fm.activation)), ctx)
}

fn product<E: Elem>(mm: &MatMul, a: T, b: T, post: Option<(&[E], Activation)>, ctx: &KernelCtx<'_>) -> Result<T> {
    let (ad, bd) = (dims(&a), dims(&b));
    if ad.len() != 2 || bd.len() != 2 {
        return Err(ctx.err("matmul operands must be matrices"));
    }
    let (m, k) = if mm.transpose_a { (ad[1], ad[0]) } else { (ad[0], ad[1]) };
    let n = if mm.transpose_b { bd[0] } else { bd[1] };
    let (av, bv) = (view::<E>(&a), view::<E>(&b));
    let lhs = if mm.transpose_a { Mat::transposed(&av, ad[1]) } else { Mat::row_major(&av, ad[1]) };
    let rhs = if mm.transpose_b { Mat::transposed(&bv, bd[1]) } else { Mat::row_major(&bv, bd[1]) };
    let Some(mut out) = gemm::product(m, n, k, lhs, rhs, rayon::current_num_threads()) else {
        return Err(ctx.err(format!("matrices {ad:?} and {bd:?} do not fit")));
    };
    if let Some((bias, act)) = post {
        if bias.len() != n {
            return Err(ctx.err("bias length differs from the output columns"));
        }
        super::elementwise::bias_activation(&mut out, bias, act);
    }
    Ok(tensor(out, &[m, n], ctx.device))
}
