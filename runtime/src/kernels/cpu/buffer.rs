//! Zero-copy access to flex tensors and the element types the native kernels support.

use crate::{
    Precision, Value,
    value::{B, T},
};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{BackendTensor, DispatchDevice, DispatchTensorKind, read_sync};
use burn::tensor::{DType, Element, TensorData};
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// f32 for training, f64 for gradient checks: the same kernel code serves both.
pub(crate) trait Elem:
    num_traits::Float + std::ops::AddAssign + Element + bytemuck::Pod + Default + Send + Sync + std::iter::Sum + 'static
{
}
impl Elem for f32 {}
impl Elem for f64 {}

fn flex(t: &T) -> Option<&FlexTensor> {
    match &t.kind {
        DispatchTensorKind::Flex(BackendTensor::Float(f)) => Some(f),
        _ => None,
    }
}

/// Whether a value can be read natively: a flex float tensor in the working precision, or
/// an int/bool tensor (which native kernels read through `ints`).
pub(super) fn is_native(v: &Value, precision: Precision) -> bool {
    match v {
        Value::Float(t) => {
            let want = if precision.is_f64() { DType::F64 } else { DType::F32 };
            flex(t).is_some_and(|f| f.dtype() == want)
        }
        Value::Int(t) | Value::Bool(t) => matches!(t.kind, DispatchTensorKind::Flex(_)),
        Value::Unit => false,
    }
}

/// The elements in row-major order: borrowed when the tensor is contiguous.
pub(super) fn view<E: Elem>(t: &T) -> Cow<'_, [E]> {
    match flex(t) {
        Some(f) => elements::<E>(f),
        None => Cow::Owned(Vec::new()),
    }
}

/// A flex tensor's elements of type `X` in row-major order: borrowed when contiguous.
fn elements<X: Element + bytemuck::Pod>(f: &FlexTensor) -> Cow<'_, [X]> {
    match f.layout().contiguous_offsets() {
        Some((s, e)) => Cow::Borrowed(&f.storage::<X>()[s..e]),
        None => {
            let c = f.to_contiguous();
            let (s, e) = c.layout().contiguous_offsets().unwrap_or((0, 0));
            Cow::Owned(c.storage::<X>()[s..e].to_vec())
        }
    }
}

/// Whether `t` is the only reference to a whole contiguous buffer, which `into_vec` then
/// takes over without copying.
pub(super) fn is_whole_and_unique(t: &T) -> bool {
    flex(t).is_some_and(|f| f.is_unique() && f.layout().contiguous_offsets() == Some((0, f.layout().num_elements())))
}

/// The elements as an owned vector; no copy when the executor handed over the only
/// reference to a contiguous buffer, which lets elementwise kernels work in place.
pub(super) fn into_vec<E: Elem>(t: T) -> Vec<E> {
    if !is_whole_and_unique(&t) {
        return view::<E>(&t).into_owned();
    }
    match read_sync(B::float_into_data(t)) {
        Ok(data) => data.try_into_vec::<E>().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

pub(super) fn tensor<E: Elem>(data: Vec<E>, shape: &[usize], device: &DispatchDevice) -> T {
    B::float_from_data(TensorData::new(data, shape.to_vec()), device)
}

/// Integer elements (argmax positions) as i64.
pub(super) fn ints(t: &T) -> Cow<'_, [i64]> {
    match &t.kind {
        DispatchTensorKind::Flex(BackendTensor::Int(f)) if f.dtype() == DType::I64 => elements::<i64>(f),
        DispatchTensorKind::Flex(BackendTensor::Int(f)) if f.dtype() == DType::I32 => {
            Cow::Owned(argmax_cells(t).iter().map(|&v| i64::from(v)).collect())
        }
        _ => Cow::Owned(Vec::new()),
    }
}

/// A max pool's argmax (each output's cell `y * w + x` of the input plane) as the native
/// kernels keep it: 32-bit, where the graph's `I64` would be twice the bytes to write
/// forward and read backward. The tutorial CNN's argmax is 346,112 positions a step, and
/// its pooling convolution and that convolution's filter gradient took 225 and 149 µs
/// with 64-bit positions against 210 and 122 with 32-bit (profiled, one pinned Zen 5
/// core). A cell is below the plane's size, which a tensor's bounded shape keeps far
/// below `i32::MAX`; reading the value back widens it to the graph's `I64`.
pub(super) fn argmax_tensor(data: Vec<i32>, shape: &[usize], device: &DispatchDevice) -> T {
    use burn::backend::ops::IntTensorOps;
    B::int_from_data(TensorData::new(data, shape.to_vec()), device)
}

/// An argmax as 32-bit cells: borrowed when the native kernels made it ([`argmax_tensor`]);
/// narrowed from 64 bits otherwise, a cell that does not fit becoming -1 (outside every
/// plane, so it routes no gradient, as an out-of-range cell already does).
pub(super) fn argmax_cells(t: &T) -> Cow<'_, [i32]> {
    match &t.kind {
        DispatchTensorKind::Flex(BackendTensor::Int(f)) if f.dtype() == DType::I32 => elements::<i32>(f),
        _ => Cow::Owned(ints(t).iter().map(|&v| i32::try_from(v).unwrap_or(-1)).collect()),
    }
}

/// `part` zeroed, as initialized elements. A kernel writing a fresh output (taken with
/// `Vec::with_capacity`) zeroes each part in the task that writes it next, while it is in
/// cache: `vec![0; n]` zeroed a whole activation first (3 MB on the residual model), which
/// was out of cache again by the time the kernel wrote it, so each line was fetched twice.
pub(super) fn zeroed<E: bytemuck::Zeroable>(part: &mut [std::mem::MaybeUninit<E>]) -> &mut [E] {
    // SAFETY: `E` is `Zeroable`, so all-zero bytes are a valid `E` (0.0 for floats); once
    // written, the elements are initialized, and `MaybeUninit<E>` has `E`'s layout.
    unsafe {
        std::ptr::write_bytes(part.as_mut_ptr(), 0, part.len());
        &mut *(part as *mut [std::mem::MaybeUninit<E>] as *mut [E])
    }
}

/// A cache line's bytes: an AVX-512 vector is one line, an AVX2 vector half of one.
const LINE: usize = 64;

/// `len` elements of `scratch`, starting on a cache line. `malloc` returns 16-byte-aligned
/// blocks, so every 64-byte vector a kernel stores into its scratch straddles two lines and
/// costs two accesses; the Winograd transforms and products store and reload whole images
/// of tiles that way (see `winograd::transformed_image`).
pub(super) fn line_aligned<E: Elem>(scratch: &mut Vec<E>, len: usize) -> &mut [E] {
    let spare = LINE / std::mem::size_of::<E>().max(1);
    scratch.resize(len + spare, E::zero());
    // `align_offset` may answer "never" (usize::MAX); the slice is then merely unaligned.
    let skip = scratch.as_ptr().align_offset(LINE).min(spare);
    &mut scratch[skip..skip + len]
}

/// `s` as f32, when `E` is f32: the hand-written SIMD kernels are f32 only.
pub(super) fn as_f32<E: Elem>(s: &[E]) -> Option<&[f32]> {
    if std::any::TypeId::of::<E>() != std::any::TypeId::of::<f32>() {
        return None;
    }
    bytemuck::try_cast_slice(s).ok()
}

/// An optional operand as f32: `Some(None)` where there is none, `None` only where there
/// is one and `E` is not f32 (so the caller's f32 kernel cannot run).
pub(super) fn optional_f32<E: Elem>(v: Option<&[E]>) -> Option<Option<&[f32]>> {
    v.map_or(Some(None), |b| as_f32(b).map(Some))
}

/// Initialized elements as slots a kernel that writes every element may take (one that also
/// accepts a buffer left uninitialized).
///
/// # Safety
/// Only initialized values may be written through the result: the caller's slice stays
/// readable as `T` afterwards.
pub(super) unsafe fn as_uninit<T>(s: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout; the caller keeps every element initialized.
    unsafe { &mut *(s as *mut [T] as *mut [MaybeUninit<T>]) }
}

/// Slots a kernel has written in full, as initialized elements.
///
/// # Safety
/// Every element of `part` must have been written.
pub(super) unsafe fn assume_init<E>(part: &mut [MaybeUninit<E>]) -> &mut [E] {
    // SAFETY: `MaybeUninit<E>` has `E`'s layout, and the caller wrote every element.
    unsafe { &mut *(part as *mut [MaybeUninit<E>] as *mut [E]) }
}

/// `s` as f32 slots, when `E` is f32 (an output the SIMD kernels write in full).
pub(super) fn as_f32_uninit<E: Elem>(s: &mut [MaybeUninit<E>]) -> Option<&mut [MaybeUninit<f32>]> {
    if std::any::TypeId::of::<E>() != std::any::TypeId::of::<f32>() {
        return None;
    }
    // SAFETY: `E` is f32 (checked above), so the two slices have one layout.
    Some(unsafe { &mut *(s as *mut [MaybeUninit<E>] as *mut [MaybeUninit<f32>]) })
}

pub(super) fn as_f32_mut<E: Elem>(s: &mut [E]) -> Option<&mut [f32]> {
    if std::any::TypeId::of::<E>() != std::any::TypeId::of::<f32>() {
        return None;
    }
    bytemuck::try_cast_slice_mut(s).ok()
}

/// The fewest items a rayon task takes, for `with_min_len` on a loop over images: all of
/// them when the pool has one thread, so the loop runs on the calling thread. Otherwise
/// rayon splits it at least once, and the executor's thread (not one of the pool's) hands
/// the work to the pool's only thread and sleeps until it is done: two context switches
/// per op, and the pool's thread spinning on the caller's CPU before it sleeps (22 context
/// switches per step of the residual model at one thread). With more threads, 1: rayon
/// splits as it steals.
pub(super) fn min_len() -> usize {
    if rayon::current_num_threads() <= 1 { usize::MAX } else { 1 }
}

/// Rayon chunking of work whose results do not depend on how it is split (elementwise
/// passes, rows normalized on their own): one piece per thread of the pool.
pub(super) fn chunks(n: usize) -> usize {
    n.div_ceil(rayon::current_num_threads().max(1)).max(1)
}

/// The items each partial sum of a reduction covers: fixed by the problem size and the
/// machine (`HostCpu::sum_parts`), never by the pool's thread count, so that a gradient or
/// a batch statistic rounds the same at one thread as at two, and the thread count can be
/// chosen by timing without changing a run's last bits. A loop over these parts takes
/// `with_min_len(min_len())` too: at one thread the parts are then summed in turn on the
/// calling thread (the same parts, so the same bits) instead of being handed to the pool,
/// which cost the tutorial CNN's 64-element loss `Sum` 30 µs where 3 would do.
pub(super) fn sum_chunks(n: usize) -> usize {
    n.div_ceil(crate::HostCpu::get().sum_parts()).max(1)
}

#[cfg(test)]
mod tests {
    use super::{argmax_cells, argmax_tensor, ints, line_aligned};

    /// Whatever the vector held or where the allocator put it, the slice starts on a line
    /// and is as long as asked.
    #[test]
    fn line_aligned_starts_on_a_line() {
        let mut scratch: Vec<f32> = Vec::new();
        for len in [0, 1, 15, 16, 17, 1000, 3, 50_000] {
            let s = line_aligned(&mut scratch, len);
            assert_eq!(s.len(), len);
            assert_eq!(s.as_ptr() as usize % 64, 0, "len {len}");
        }
        let mut doubles: Vec<f64> = vec![1.0; 7];
        let s = line_aligned(&mut doubles, 9);
        assert_eq!((s.len(), s.as_ptr() as usize % 64), (9, 0));
    }

    /// The native argmax is 32-bit and read back as the graph's `I64`; a 64-bit argmax
    /// (from elsewhere) is narrowed, a cell too large for 32 bits becoming -1, which names
    /// no cell.
    #[test]
    fn argmax_cells_are_32_bit_and_read_back_as_64() -> crate::Result<()> {
        use burn::backend::ops::IntTensorOps;
        let device = burn::backend::DispatchDevice::Flex(burn::backend::FlexDevice);
        let native = argmax_tensor(vec![0, 5, -1, 7], &[2, 2], &device);
        assert!(matches!(argmax_cells(&native), std::borrow::Cow::Borrowed(&[0, 5, -1, 7])));
        assert_eq!(ints(&native).as_ref(), &[0i64, 5, -1, 7]);
        let host = crate::Value::Int(native).to_host()?;
        assert_eq!(host.data, engine_graph::HostData::I64(vec![0, 5, -1, 7]));
        let wide = super::B::int_from_data(burn::tensor::TensorData::new(vec![3i64, 1 << 40, -1], vec![3]), &device);
        assert_eq!(argmax_cells(&wide).as_ref(), &[3, -1, -1]);
        Ok(())
    }
}
