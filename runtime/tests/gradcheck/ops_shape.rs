//! Data movement ops.

use crate::harness::{check, input};
use anyhow::Result;
use engine_graph::{HostData, HostTensor, Shape, ops::ReduceOp};

#[test]
fn reshape() -> Result<()> {
    check(&[input(&[2, 3, 4])], |b, x| b.reshape(x[0], Shape::known(&[6, 4])))
}

#[test]
fn transpose() -> Result<()> {
    check(&[input(&[2, 3, 4])], |b, x| b.transpose(x[0], &[2, 0, 1]))
}

#[test]
fn concat() -> Result<()> {
    check(&[input(&[2, 3]), input(&[2, 5])], |b, x| b.concat(x, -1))?;
    check(&[input(&[2, 3]), input(&[1, 3])], |b, x| b.concat(x, 0))
}

#[test]
fn slice() -> Result<()> {
    check(&[input(&[4, 5])], |b, x| b.slice(x[0], &[1, 2], &[Some(2), None]))
}

#[test]
fn pad() -> Result<()> {
    check(&[input(&[2, 3])], |b, x| b.pad(x[0], &[(1, 0), (2, 1)]))
}

#[test]
fn broadcast_to() -> Result<()> {
    check(&[input(&[3, 1])], |b, x| b.broadcast_to(x[0], Shape::known(&[2, 3, 4])))
}

/// Embedding lookups: repeated and unused rows, indices of rank 2; the gradient of the
/// scatter-add is a gather.
#[test]
fn gather_and_scatter_add_rows() -> Result<()> {
    check(&[input(&[5, 3])], |b, x| {
        let idx = b.constant(HostTensor::new(vec![2, 3], HostData::I64(vec![4, 0, 4, 2, 2, 1]))?)?;
        b.gather(x[0], idx)
    })?;
    check(&[input(&[2, 3, 2])], |b, x| {
        let idx = b.constant(HostTensor::new(vec![2, 3], HostData::I64(vec![4, 0, 4, 2, 2, 1]))?)?;
        b.scatter_add_rows(idx, x[0], 6)
    })
}

/// The cross-replica sum of an embedding's rows, with one replica (its gradient reads the
/// reduced output gradient at each update's row).
#[test]
fn all_gather_rows() -> Result<()> {
    for reduce in [ReduceOp::Sum, ReduceOp::Mean] {
        check(&[input(&[2, 3, 2])], |b, x| {
            let idx = b.constant(HostTensor::new(vec![2, 3], HostData::I64(vec![4, 0, 4, 2, 2, 1]))?)?;
            Ok(b.all_gather_rows(idx, x[0], 6, reduce)?.0)
        })?;
    }
    Ok(())
}
