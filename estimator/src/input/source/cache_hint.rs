//! Asks the CPU to start loading memory that will be read soon.
//!
//! A shuffled batch reads its examples from random places of a source held in memory
//! (Fashion-MNIST's training images are 47 MB), so each example's first bytes miss every
//! cache, and the hardware prefetcher, which follows sequential streams, only helps
//! within an example. Profiled on the MLP at one thread, three quarters of the decode
//! thread's time in `IdxSource::read` was that one load waiting for memory, and the
//! label's load most of the rest. Hinting every example of a batch before the first is
//! read lets those misses overlap instead of following one another: the MLP's input wait
//! at one thread went from 0.22–0.25 to 0.10–0.14 ms per step of 128 examples.

/// Hints that the bytes of `values` will be read soon: one prefetch per cache line, into
/// L2 (a batch of 128 images of 784 bytes fits there, not in L1).
pub(crate) fn prefetch<T>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        const LINE: usize = 64;
        let start = values.as_ptr() as *const i8;
        let bytes = std::mem::size_of_val(values);
        for offset in (0..bytes).step_by(LINE) {
            // SAFETY: a prefetch is a hint that never faults; the address is inside
            // `values` (`offset < bytes`) anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(start.add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}
