//! Arithmetic, activations, reductions and losses.

use crate::harness::{check, input, labels, positive, unit};
use anyhow::Result;
use engine_graph::{DType, HostTensor};

#[test]
fn matmul_all_transposes() -> Result<()> {
    check(&[input(&[3, 4]), input(&[4, 2])], |b, x| b.matmul_t(x[0], x[1], false, false))?;
    check(&[input(&[4, 3]), input(&[4, 2])], |b, x| b.matmul_t(x[0], x[1], true, false))?;
    check(&[input(&[3, 4]), input(&[2, 4])], |b, x| b.matmul_t(x[0], x[1], false, true))?;
    check(&[input(&[4, 3]), input(&[2, 4])], |b, x| b.matmul_t(x[0], x[1], true, true))
}

/// Attention's per-head products: rank 3 and 4, every transpose of the last two axes.
#[test]
fn batched_matmul_all_transposes() -> Result<()> {
    check(&[input(&[2, 3, 4]), input(&[2, 4, 2])], |b, x| b.matmul_t(x[0], x[1], false, false))?;
    check(&[input(&[2, 4, 3]), input(&[2, 4, 2])], |b, x| b.matmul_t(x[0], x[1], true, false))?;
    check(&[input(&[2, 3, 4]), input(&[2, 2, 4])], |b, x| b.matmul_t(x[0], x[1], false, true))?;
    check(&[input(&[2, 2, 4, 3]), input(&[2, 2, 2, 4])], |b, x| b.matmul_t(x[0], x[1], true, true))
}

#[test]
fn add_broadcasts_both_ways() -> Result<()> {
    check(&[input(&[3, 4]), input(&[4])], |b, x| b.add(x[0], x[1]))?;
    check(&[input(&[3, 1]), input(&[1, 4])], |b, x| b.add(x[0], x[1]))
}

#[test]
fn sub() -> Result<()> {
    check(&[input(&[2, 3]), input(&[3])], |b, x| b.sub(x[0], x[1]))
}

#[test]
fn mul() -> Result<()> {
    check(&[input(&[2, 3]), input(&[2, 1])], |b, x| b.mul(x[0], x[1]))
}

#[test]
fn div() -> Result<()> {
    check(&[input(&[2, 3]), positive(&[3])], |b, x| b.div(x[0], x[1]))
}

#[test]
fn maximum_and_minimum() -> Result<()> {
    check(&[input(&[2, 3]), input(&[2, 3])], |b, x| b.maximum(x[0], x[1]))?;
    check(&[input(&[2, 3]), input(&[3])], |b, x| b.minimum(x[0], x[1]))?;
    // Scalars: a learning-rate schedule clamps the step with them. On cubecl devices the
    // choice mask was allocated in the node's rank-0 shape, which cubecl cannot allocate.
    check(&[input(&[]), input(&[])], |b, x| b.maximum(x[0], x[1]))?;
    check(&[input(&[]), input(&[])], |b, x| b.minimum(x[0], x[1]))
}

#[test]
fn add_n() -> Result<()> {
    check(&[input(&[2, 3]), input(&[2, 3]), input(&[2, 3])], |b, x| b.add_n(x))
}

#[test]
fn unary_functions() -> Result<()> {
    check(&[input(&[2, 3])], |b, x| b.neg(x[0]))?;
    check(&[input(&[2, 3])], |b, x| b.exp(x[0]))?;
    check(&[positive(&[2, 3])], |b, x| b.log(x[0]))?;
    check(&[positive(&[2, 3])], |b, x| b.sqrt(x[0]))?;
    check(&[input(&[2, 3])], |b, x| b.square(x[0]))?;
    check(&[input(&[2, 3])], |b, x| b.cos(x[0]))?;
    check(&[input(&[2, 3])], |b, x| b.sin(x[0]))?;
    check(&[input(&[2, 3])], |b, x| b.erf(x[0]))?;
    check(&[input(&[2, 3])], |b, x| b.gelu(x[0]))
}

#[test]
fn activations() -> Result<()> {
    check(&[input(&[3, 4])], |b, x| b.relu(x[0]))?;
    check(&[input(&[3, 4])], |b, x| b.sigmoid(x[0]))?;
    check(&[input(&[3, 4])], |b, x| b.tanh(x[0]))?;
    check(&[input(&[3, 4])], |b, x| b.softmax(x[0], -1))?;
    check(&[input(&[3, 4])], |b, x| b.softmax(x[0], 0))?;
    check(&[input(&[3, 4])], |b, x| b.log_softmax(x[0], -1))
}

#[test]
fn relu_grad_second_order() -> Result<()> {
    check(&[input(&[3, 4]), input(&[3, 4])], |b, x| {
        let y = b.relu(x[0])?;
        b.relu_grad(y, x[1])
    })
}

#[test]
fn reductions() -> Result<()> {
    check(&[input(&[2, 3, 4])], |b, x| b.reduce_sum(x[0], &[1], false))?;
    check(&[input(&[2, 3, 4])], |b, x| b.reduce_sum(x[0], &[0, 2], true))?;
    check(&[input(&[2, 3, 4])], |b, x| b.reduce_mean(x[0], &[2], false))?;
    check(&[input(&[2, 3, 4])], |b, x| b.reduce_mean(x[0], &[], false))?;
    check(&[input(&[2, 3, 4])], |b, x| b.reduce_max(x[0], &[1], false))?;
    check(&[input(&[2, 3, 4])], |b, x| b.reduce_max(x[0], &[0, 2], true))
}

#[test]
fn sparse_softmax_cross_entropy() -> Result<()> {
    check(&[input(&[4, 5])], |b, x| {
        let l = labels(b, &[0, 3, 4, 1])?;
        b.sparse_softmax_cross_entropy(x[0], l)
    })
}

#[test]
fn softmax_cross_entropy_wrt_logits_and_labels() -> Result<()> {
    check(&[input(&[3, 4]), unit(&[3, 4])], |b, x| b.softmax_cross_entropy(x[0], x[1]))
}

#[test]
fn sigmoid_cross_entropy_wrt_logits_and_labels() -> Result<()> {
    check(&[input(&[3, 4]), unit(&[3, 4])], |b, x| b.sigmoid_cross_entropy(x[0], x[1]))
}

#[test]
fn mean_squared_error_and_l2_loss() -> Result<()> {
    check(&[input(&[3, 4]), input(&[3, 4])], |b, x| b.mean_squared_error(x[0], x[1]))?;
    check(&[input(&[3, 4])], |b, x| b.l2_loss(x[0]))
}

#[test]
fn select_routes_gradients() -> Result<()> {
    check(&[input(&[2, 3]), input(&[2, 3])], |b, x| {
        let c = b.constant(HostTensor::new(
            vec![2, 3],
            engine_graph::HostData::Bool(vec![true, false, true, false, false, true]),
        )?)?;
        b.select(c, x[0], x[1])
    })
}

#[test]
fn size_stops_gradients_through_means() -> Result<()> {
    check(&[input(&[3, 4])], |b, x| {
        let s = b.reduce_sum(x[0], &[1], false)?;
        let n = b.size(x[0], &[1])?;
        b.div(s, n)
    })
}

#[test]
fn cast_between_floats_is_identity_for_gradients() -> Result<()> {
    check(&[input(&[2, 2])], |b, x| {
        let m = b.greater(x[0], x[0])?;
        let f = b.cast(m, DType::F32)?;
        let y = b.add(x[0], f)?;
        b.cast(y, DType::F32)
    })
}

#[test]
fn check_numerics_passes_values_and_gradients_through() -> Result<()> {
    check(&[input(&[2, 3])], |b, x| {
        let y = b.square(x[0])?;
        b.check_numerics(y, "y", 0)
    })
}
