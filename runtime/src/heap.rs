//! Keeping freed activation buffers in the process between steps.
//!
//! A training step allocates and frees the same large buffers every step (a ResNet's
//! 128 × 28 × 28 × 32 activations are 12.8 MB each). glibc's malloc serves a block that
//! large with `mmap` until one is freed, and returns the top of its heap to the system
//! whenever more than twice that is free there: both happen every step, so every buffer
//! came back as fresh pages that the kernel faulted in and zeroed, 14,000 faults per
//! ResNet step (a quarter of its time). TensorFlow's BFC allocator and PyTorch's caching
//! allocator keep freed memory for the same reason. Setting both thresholds fixes them
//! (glibc then stops adjusting them), so blocks up to 32 MiB, glibc's largest
//! heap-served size, come from the heap, and up to 1 GiB of freed memory stays mapped.
//! `engine serve` still returns memory after large requests with `malloc_trim`, which
//! ignores the threshold.

/// Tunes the process's allocator once, unless `GLIBC_TUNABLES` already sets malloc's
/// options (the user's choice wins). Other C libraries are left alone.
pub fn retain_freed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
            return;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes the allocator's thresholds; it is called before
        // the executor allocates its buffers and takes the allocator's own lock.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        }
    });
}
