//! Runtime instruction-set dispatch for the kernels' inner loops.
//!
//! Rust compiles for baseline x86-64 (SSE2) unless told otherwise, while `gemm` picks AVX2
//! or AVX-512 at run time; loops written here would otherwise run at a quarter of the
//! width. `multiversion!` compiles a function body twice, once with AVX2 and FMA enabled,
//! and picks at run time, so one portable binary uses the wide instructions where the CPU
//! has them. Bodies must not spawn rayon tasks: the features apply to the body itself.
//!
//! The macro is exported (`engine_runtime::multiversion!`) for the other crates' hot
//! loops, the input pipeline's decoding among them, so there is one dispatcher.

/// Compiles a function body for baseline x86-64 and for AVX2 + FMA, picking at run time
/// (an `unsafe fn` keeps its contract in both builds).
#[macro_export]
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident $(<$($g:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn wide $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
                body($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            if $crate::has_avx2() {
                // SAFETY: `wide` was compiled for AVX2 and FMA, which the CPU was just
                // checked to support.
                return unsafe { wide($($arg),*) };
            }
            body($($arg),*)
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis unsafe fn $name:ident $(<$($g:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        $vis unsafe fn $name $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            unsafe fn body $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn wide $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's contract, passed on.
                unsafe { body($($arg),*) }
            }

            #[cfg(target_arch = "x86_64")]
            if $crate::has_avx2() {
                // SAFETY: `wide` was compiled for AVX2 and FMA, which the CPU was just
                // checked to support; the rest is the caller's contract.
                return unsafe { wide($($arg),*) };
            }
            // SAFETY: the caller's contract.
            unsafe { body($($arg),*) }
        }
    };
}

pub(crate) use crate::multiversion;

/// Whether the CPU has AVX2 and FMA (checked once).
#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"))
}

/// Whether the CPU has AVX-512F (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx512f"))
}

/// One `prefetcht1` per 64-byte line of the `bytes` bytes from `start`: the lines come into
/// L2 while the caller works on something else. A prefetch is a hint that never faults,
/// so the addresses need not be readable (or initialized).
fn prefetch_lines(start: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..bytes).step_by(64) {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        // SAFETY: a prefetch never faults and reads nothing the program can see.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(start.wrapping_add(offset).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

/// Brings image `i + 1` of a batch of `len`-element images into L2 (nothing past the
/// last), to call as image `i`'s work starts: a per-image kernel reads each image once,
/// and a batch that was written long before (a layer's input, read again by its filter
/// gradient) comes from memory, where one image's read at the pace of the kernel's loads
/// ran at a fraction of a long stream's rate.
pub(crate) fn prefetch_next_image<E>(batch: &[E], i: usize, len: usize) {
    if let Some(next) = batch.get((i + 1) * len..(i + 2) * len) {
        prefetch_lines(next.as_ptr().cast(), std::mem::size_of_val(next));
    }
}

/// A batch's output buffer, to bring the next image's part of it into L2 as each image
/// starts: a line of a buffer last written a step ago is read from memory before a store
/// can own it, and one image's stores waited on those reads one after another. Held as an
/// address, since the buffer itself is split among the tasks that write it.
#[derive(Clone, Copy)]
pub(crate) struct OutputLines {
    base: usize,
    bytes: usize,
}

impl OutputLines {
    pub(crate) fn of<T>(buffer: &[T]) -> Self {
        OutputLines { base: buffer.as_ptr() as usize, bytes: std::mem::size_of_val(buffer) }
    }

    /// Image `i + 1` of images of `len` elements of `T` (nothing past the buffer's end).
    pub(crate) fn prefetch_next<T>(&self, i: usize, len: usize) {
        let image = len * std::mem::size_of::<T>();
        if (i + 2) * image <= self.bytes {
            prefetch_lines((self.base + (i + 1) * image) as *const u8, image);
        }
    }
}
