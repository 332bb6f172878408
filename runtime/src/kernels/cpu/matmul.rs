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
use engine_graph::ops::{FusedActivation, FusedMatMul, MatMul};

pub(super) fn matmul<E: Elem>(mm: &MatMul, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [a, b] = ctx.floats(inputs)?;
    product::<E>(mm, a, b, None, ctx)
}

pub(super) fn fused<E: Elem>(fm: &FusedMatMul, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    let [a, b, bias] = ctx.floats(inputs)?;
    let bias = view::<E>(&bias);
    product::<E>(&fm.matmul(), a, b, Some((&bias, fm.activation)), ctx)
}

fn product<E: Elem>(mm: &MatMul, a: T, b: T, post: Option<(&[E], FusedActivation)>, ctx: &KernelCtx<'_>) -> Result<T> {
    let (ad, bd) = (dims(&a), dims(&b));
    let rank = ad.len();
    if rank < 2 || bd.len() != rank || ad[..rank - 2] != bd[..rank - 2] {
        return Err(ctx.err(format!("operands {ad:?} and {bd:?} are not matrices or equal batches of them")));
    }
    let (ar, ac, br, bc) = (ad[rank - 2], ad[rank - 1], bd[rank - 2], bd[rank - 1]);
    let (m, k) = if mm.transpose_a { (ac, ar) } else { (ar, ac) };
    let n = if mm.transpose_b { br } else { bc };
    let batch: usize = ad[..rank - 2].iter().product();
    let (av, bv) = (view::<E>(&a), view::<E>(&b));
    // A batch of small products (attention's heads) runs one product per thread; a single
    // large one spreads its blocks over the threads instead.
    let threads = if batch > 1 { 1 } else { rayon::current_num_threads() };
    let one = |i: usize| -> Option<Vec<E>> {
        let (sa, sb) = (&av[i * ar * ac..(i + 1) * ar * ac], &bv[i * br * bc..(i + 1) * br * bc]);
        let lhs = if mm.transpose_a { Mat::transposed(sa, ac) } else { Mat::row_major(sa, ac) };
        let rhs = if mm.transpose_b { Mat::transposed(sb, bc) } else { Mat::row_major(sb, bc) };
        gemm::product(m, n, k, lhs, rhs, threads)
    };
    let parts: Option<Vec<Vec<E>>> = if batch > 1 {
        use rayon::prelude::*;
        (0..batch).into_par_iter().map(one).collect()
    } else {
        (0..batch).map(one).collect()
    };
    let Some(parts) = parts else {
        return Err(ctx.err(format!("matrices {ad:?} and {bd:?} do not fit")));
    };
    let mut out = if parts.len() == 1 { parts.into_iter().next().unwrap_or_default() } else { parts.concat() };
    if let Some((bias, act)) = post {
        if bias.len() != n {
            return Err(ctx.err("bias length differs from the output columns"));
        }
        super::elementwise::bias_activation(&mut out, bias, act);
    }
    let mut shape = ad[..rank - 2].to_vec();
    shape.extend([m, n]);
    Ok(tensor(out, &shape, ctx.device))
}
