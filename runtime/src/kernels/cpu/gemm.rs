//! A bounds-checked wrapper over the `gemm` crate's strided matrix product.

use super::buffer::Elem;

/// A read-only matrix: elements, row stride, column stride.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a, E> {
    pub data: &'a [E],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, E> Mat<'a, E> {
    pub fn row_major(data: &'a [E], cols: usize) -> Self {
        Mat { data, rs: cols, cs: 1 }
    }

    /// The transpose of a row-major matrix with `cols` columns, without moving data.
    pub fn transposed(data: &'a [E], cols: usize) -> Self {
        Mat { data, rs: 1, cs: cols }
    }

    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `dst (m x n, row-major) = [dst +] lhs (m x k) * rhs (k x n)`.
///
/// Returns false (computing nothing) if a matrix does not fit its slice, which callers
/// turn into a kernel error; the unsafe call below is only reached with checked bounds.
#[allow(clippy::too_many_arguments, reason = "BLAS's own shape: sizes, operands, and whether to accumulate")]
pub(super) fn gemm<E: Elem>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [E],
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
    threads: usize,
) -> bool {
    if dst.len() < m * n || !lhs.fits(m, k) || !rhs.fits(k, n) {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].iter_mut().for_each(|x| *x = E::zero());
        }
        return true;
    }
    // SAFETY: every index the product touches was checked above: dst holds m*n row-major
    // elements, lhs and rhs fit their strides; the slices outlive the call and dst is
    // borrowed mutably, so nothing aliases it.
    unsafe { raw(m, n, k, dst.as_mut_ptr(), accumulate, lhs, rhs, threads) };
    true
}

/// `lhs (m x k) * rhs (k x n)` in a new row-major buffer that the product writes once:
/// zeroing it first (as `vec![0; m * n]` does) was a pass over every output of a dense
/// layer's gradients for nothing. `None` if a matrix does not fit its slice.
pub(super) fn product<E: Elem>(
    m: usize,
    n: usize,
    k: usize,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
    threads: usize,
) -> Option<Vec<E>> {
    if !lhs.fits(m, k) || !rhs.fits(k, n) {
        return None;
    }
    if m == 0 || n == 0 || k == 0 {
        return Some(vec![E::zero(); m * n]);
    }
    let mut out = Vec::with_capacity(m * n);
    // SAFETY: lhs and rhs fit their strides (checked above) and `out` has room for m*n
    // elements. With `accumulate` false neither kernel reads the destination before writing
    // it: the packed kernel's first block of the sum stores every element; the gemm crate
    // zeroes its alpha and the first pass over the inner dimension stores `beta · acc`
    // into every element (later passes read only what the first one wrote). So every
    // element is initialized when the call returns and `set_len` exposes no uninitialized
    // memory.
    unsafe {
        raw(m, n, k, out.as_mut_ptr(), false, lhs, rhs, threads);
        out.set_len(m * n);
    }
    Some(out)
}

/// An f32 matrix as its own type (the caller checked that `E` is f32).
#[cfg(target_arch = "x86_64")]
fn as_f32<E: Elem>(m: Mat<'_, E>) -> Mat<'_, f32> {
    Mat { data: bytemuck::cast_slice(m.data), rs: m.rs, cs: m.cs }
}

/// The kernel large f32 products run on this CPU, for `engine plan` and the log.
pub(crate) fn large_f32_kernel() -> String {
    #[cfg(target_arch = "x86_64")]
    if let Some(packed) = super::packed_gemm::describe() {
        return packed;
    }
    "the gemm crate's kernels".into()
}

/// The product, unchecked: the `gemm` crate's, or the packed AVX2 kernel for f32 where
/// `packed_gemm::chosen_for` picks it (large products on AVX2 without AVX-512).
///
/// # Safety
/// `dst` must be valid for writes of `m * n` row-major elements (and reads, with
/// `accumulate`), and `lhs`/`rhs` must fit `m x k` and `k x n`; m, n and k are non-zero.
#[allow(clippy::too_many_arguments)]
unsafe fn raw<E: Elem>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut E,
    accumulate: bool,
    lhs: Mat<'_, E>,
    rhs: Mat<'_, E>,
    threads: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<E>() == std::any::TypeId::of::<f32>() && super::packed_gemm::chosen_for(m, n, k) {
        // E is f32 (checked above), so these casts change only the static type.
        let (lhs, rhs) = (as_f32(lhs), as_f32(rhs));
        // SAFETY: the caller's contract, and the CPU has AVX2 and FMA (`chosen_for`).
        unsafe {
            super::packed_gemm::product(
                m,
                n,
                k,
                dst.cast::<f32>(),
                accumulate,
                lhs,
                rhs,
                threads,
                super::packed_gemm::Blocking::get(),
            )
        };
        return;
    }
    let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the caller's contract.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            E::one(),
            E::one(),
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `product` writes every element of its uninitialized buffer and reads none: the
    /// allocator is handed back NaN-filled blocks of the same size first, so a read of the
    /// destination would show. Shapes cover the gemv paths (m or n = 1), transposed
    /// operands, and an inner dimension past the crate's depth blocking (later depth
    /// blocks accumulate into what the first wrote).
    #[test]
    fn a_product_into_a_new_buffer_writes_every_element() {
        for (m, n, k) in [(1, 7, 5), (9, 1, 4), (13, 17, 3), (64, 48, 1100), (5, 5, 0)] {
            let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
            let rhs: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
            let mut want = vec![0.0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    want[i * n + j] = (0..k).map(|t| lhs[i * k + t] * rhs[t * n + j]).sum();
                }
            }
            for transposed in [false, true] {
                drop(std::hint::black_box(vec![f32::NAN; m * n]));
                let (l, lt): (Vec<f32>, _) = if transposed {
                    let t = (0..k * m).map(|i| lhs[(i % m) * k + i / m]).collect();
                    (t, true)
                } else {
                    (lhs.clone(), false)
                };
                let a = if lt { Mat::transposed(&l, m) } else { Mat::row_major(&l, k) };
                let got = product(m, n, k, a, Mat::row_major(&rhs, n), 1);
                assert_eq!(got.as_deref(), Some(&want[..]), "{m}x{n}x{k} transposed {transposed}");
            }
        }
        assert!(product(3, 3, 3, Mat::row_major(&[0.0f32; 8], 3), Mat::row_major(&[0.0f32; 9], 3), 1).is_none());
    }
}

#[cfg(test)]
mod probe {
    use super::*;

    /// The fastest of `runs` calls of `f`: the figure least disturbed by other work.
    pub(super) fn fastest(runs: usize, f: &mut dyn FnMut()) -> std::time::Duration {
        (0..runs)
            .map(|_| {
                let t = std::time::Instant::now();
                f();
                t.elapsed()
            })
            .min()
            .unwrap_or_default()
    }

    /// Times `dst = lhs · rhs` for the dense layer's three products, as written and as the
    /// transposed product `dstᵀ = rhsᵀ · lhsᵀ` (the same memory, other strides).
    #[test]
    #[ignore = "timing probe"]
    fn dense_products_probe() {
        let (b, d, u) = (64usize, 5408usize, 64usize);
        let x: Vec<f32> = (0..b * d).map(|i| (i % 7) as f32).collect();
        let w: Vec<f32> = (0..d * u).map(|i| (i % 5) as f32).collect();
        let gh: Vec<f32> = (0..b * u).map(|i| (i % 3) as f32).collect();
        let best = |f: &mut dyn FnMut()| fastest(20, f);
        let mut out = vec![0.0f32; b * d.max(u)];
        let mut outw = vec![0.0f32; d * u];
        // forward: [b x d] · [d x u]
        let fwd = best(&mut || {
            gemm(b, u, d, &mut out, false, Mat::row_major(&x, d), Mat::row_major(&w, u), 1);
        });
        // grad input: [b x u] · [d x u]ᵀ -> [b x d]
        let gin = best(&mut || {
            gemm(b, d, u, &mut out, false, Mat::row_major(&gh, u), Mat::transposed(&w, u), 1);
        });
        // grad weights: [b x d]ᵀ · [b x u] -> [d x u]
        let gw = best(&mut || {
            gemm(d, u, b, &mut outw, false, Mat::transposed(&x, d), Mat::row_major(&gh, u), 1);
        });
        println!("fwd {fwd:?} grad input {gin:?} grad weights {gw:?}");
    }
}

#[cfg(test)]
mod conv_probe {
    use super::*;

    /// GFLOP/s of the three per-image products of a 3x3 convolution with 64 input and 64
    /// output channels on a 28x28 image (the VGG spec's second layer).
    #[test]
    #[ignore = "timing probe"]
    fn conv_products_probe() {
        let (p, k, f) = (784usize, 576usize, 64usize);
        let cols: Vec<f32> = (0..p * k).map(|i| (i % 7) as f32).collect();
        let w: Vec<f32> = (0..k * f).map(|i| (i % 5) as f32).collect();
        let dy: Vec<f32> = (0..p * f).map(|i| (i % 3) as f32).collect();
        let rate = |g: &mut dyn FnMut()| 2.0 * (p * k * f) as f64 / probe::fastest(30, g).as_secs_f64() / 1e9;
        let mut y = vec![0.0f32; p * f];
        let mut dw = vec![0.0f32; k * f];
        let mut dcols = vec![0.0f32; p * k];
        let fwd = rate(&mut || {
            gemm(p, f, k, &mut y, false, Mat::row_major(&cols, k), Mat::row_major(&w, f), 1);
        });
        let filter = rate(&mut || {
            gemm(k, f, p, &mut dw, true, Mat::transposed(&cols, k), Mat::row_major(&dy, f), 1);
        });
        let input = rate(&mut || {
            gemm(p, k, f, &mut dcols, false, Mat::row_major(&dy, f), Mat::transposed(&w, f), 1);
        });
        println!("GFLOP/s: forward {fwd:.1} filter {filter:.1} input {input:.1}");
    }
}
