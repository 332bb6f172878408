//! What a replayed step needs from a cubecl tensor that burn's tensor ops do not give:
//! whether two values share one device buffer, bytes written into an existing buffer,
//! and a copy from one buffer into another.
//!
//! A captured graph replays against the raw buffers it was recorded with, so its inputs
//! are refreshed by writing into those buffers and its results carried over by copying
//! into them; burn's ops always return a fresh tensor instead.

use crate::{Value, value::T};
use burn::backend::{BackendTensor, DispatchAutodiffContext, DispatchTensor, DispatchTensorKind};
use burn::tensor::{BoolStore, DType, Shape as BurnShape, TensorData};
use cubecl::ir::{ElemType, FloatKind, IntKind, UIntKind};

pub(crate) type Cube = <burn::backend::Cube as burn::backend::BackendTypes>::FloatTensorPrimitive;

pub(crate) fn cube(t: &T) -> Option<&Cube> {
    match &t.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(c) | BackendTensor::Int(c) | BackendTensor::Bool(c)) => Some(c),
        _ => None,
    }
}

/// A float tensor's cubecl buffer and its element type, where it is of a type our own
/// kernels are built for (f32, f64, and bfloat16: mixed precision's convolution operands).
pub(crate) fn float_buffer(t: &T) -> Option<(&Cube, ElemType)> {
    let DispatchTensorKind::Cube(BackendTensor::Float(c)) = &t.kind else { return None };
    elem_type(c.dtype).filter(|e| matches!(e, ElemType::Float(_))).map(|e| (c, e))
}

/// A fresh contiguous buffer of `shape`, on `like`'s device and of its element type: our
/// kernels write their outputs by linear index, which burn's allocator does not promise
/// (it pads the rows of some allocations).
pub(crate) fn empty_contiguous(like: &Cube, shape: Vec<usize>) -> Cube {
    let elements: usize = shape.iter().product();
    let handle = like.client.empty(elements * like.dtype.size());
    Cube::new_contiguous(like.client.clone(), like.device.clone(), BurnShape::from(shape), handle, like.dtype)
}

/// A buffer as the executor's float tensor.
pub(crate) fn float_tensor(c: Cube) -> T {
    DispatchTensor {
        kind: DispatchTensorKind::Cube(BackendTensor::Float(c)),
        autodiff: DispatchAutodiffContext::Disabled,
    }
}

/// Runs a cubecl launch; `false` where it was refused. cubecl reports a launch it cannot
/// do by panicking, which is a refusal here: the caller falls back to burn's ops.
pub(crate) fn launched(launch: impl FnOnce()) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(launch)).is_ok()
}

/// Whether `a` and `b` are views of one device buffer (clones share it).
pub(crate) fn same_buffer(a: &T, b: &T) -> bool {
    match (cube(a), cube(b)) {
        (Some(a), Some(b)) => std::ptr::eq(a.handle.memory.descriptor(), b.handle.memory.descriptor()),
        _ => false,
    }
}

/// Whether a buffer's elements lie in order from its start, so that a linear index
/// reaches them: contiguous, and starting at the buffer's start (an allocation may run
/// past its end, and a view may begin past its start).
pub(crate) fn whole(c: &Cube) -> bool {
    c.is_contiguous() && c.handle.offset_start.is_none_or(|o| o == 0)
}

/// Writes `data` into `dst`'s buffer, in place, on the calling thread's stream. `false`
/// (nothing written) where the bytes would not land element for element: another element
/// type, a strided or offset tensor (cubecl pads the rows of some allocations), another size.
pub(crate) fn write(dst: &T, data: TensorData) -> bool {
    let Some(c) = cube(dst) else { return false };
    let elements: usize = c.meta.shape().iter().product();
    if data.dtype() != c.dtype || !whole(c) || data.as_bytes().len() != elements * c.dtype.size() {
        return false;
    }
    c.client.write(&c.handle, data.into_bytes());
    true
}

/// Copies `src` into `dst`'s buffer, element for element (`dst` keeps its buffer). `false`
/// where the two differ in shape or element type, or the type has no cubecl copy here.
pub(crate) fn copy(src: &Value, dst: &Value) -> bool {
    // cubecl's copy indexes by the last axis: a scalar is copied as its one element.
    let one = |v: &Value| if v.shape().is_empty() { v.clone().reshaped(&[1]) } else { v.clone() };
    let (src, dst) = (one(src), one(dst));
    let (Some(s), Some(d)) = (src.tensor().and_then(cube), dst.tensor().and_then(cube)) else { return false };
    let Some(elem) = elem_type(s.dtype) else { return false };
    if s.dtype != d.dtype || s.meta.shape() != d.meta.shape() {
        return false;
    }
    launched(|| cubecl::std::tensor::copy_into(&d.client, s.clone().binding(), d.clone().binding(), elem))
}

/// The element types a step's values take on a device.
pub(crate) fn elem_type(dtype: DType) -> Option<ElemType> {
    Some(match dtype {
        DType::F64 => ElemType::Float(FloatKind::F64),
        DType::F32 => ElemType::Float(FloatKind::F32),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        DType::I64 => ElemType::Int(IntKind::I64),
        DType::I32 => ElemType::Int(IntKind::I32),
        DType::U32 => ElemType::UInt(UIntKind::U32),
        DType::U8 => ElemType::UInt(UIntKind::U8),
        DType::Bool(BoolStore::U8) => ElemType::UInt(UIntKind::U8),
        DType::Bool(BoolStore::U32) => ElemType::UInt(UIntKind::U32),
        _ => return None,
    })
}
