//! A packed f32 matrix product for cores with AVX2 and FMA but not AVX-512 (Zen 1–3,
//! Intel before Skylake-SP, the E-cores of hybrid parts).
//!
//! On such a core it runs the large products (`LARGE` multiply-adds or more), where the
//! `gemm` crate's x86-v3 kernels fall behind: on a Zen 3 on 2026-12-07, alternated in one
//! binary, 2048³ ran at 78–86 GFLOP/s here against the crate's 72–83 and OpenBLAS's best
//! of 87–92, and 1024³ at 80–84 against 61–86. Smaller products stay on the crate, which
//! packs less and was faster there (384³: 93 against 87). `ENGINE_CPU_GEMM=packed` sends
//! every product large enough to tile here (on any core with AVX2), `ENGINE_CPU_GEMM=crate`
//! none, so one binary can run both.
//!
//! Each output element is summed in the same order whatever the thread count (threads
//! split the output's rows, never the sum), so a step's bits do not depend on threads.
//! x86-64 only: elsewhere every product runs through the `gemm` crate.

use super::gemm::Mat;
use crate::host_cpu::HostCpu;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Rows of the register tile.
pub(super) const MR: usize = 6;
/// Columns of the register tile: two 8-float registers.
pub(super) const NR: usize = 16;

/// The block sizes, from the detected caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// The sum's block: a `kc x NR` panel of the right operand fills half of L1, so that
    /// it stays there while every `MR`-row panel of the left operand passes over it.
    pub kc: usize,
    /// Rows of the left operand packed at once: `mc x kc` fills half of L2.
    pub mc: usize,
    /// Columns of the right operand packed at once: `kc x nc` fills a quarter of L3.
    pub nc: usize,
}

impl Blocking {
    pub(crate) fn for_caches([l1, l2, l3]: [usize; 3]) -> Blocking {
        let l1 = if l1 == 0 { 32 << 10 } else { l1 };
        let l2 = if l2 == 0 { 256 << 10 } else { l2 };
        let l3 = if l3 == 0 { 8 << 20 } else { l3 };
        let float = std::mem::size_of::<f32>();
        let kc = (l1 / 2 / (NR * float)).clamp(64, 512) / 8 * 8;
        let mc = (l2 / 2 / (kc * float)).clamp(MR * 4, 1024) / MR * MR;
        let nc = (l3 / 4 / (kc * float)).clamp(NR * 16, 8192) / NR * NR;
        Blocking { kc, mc, nc }
    }

    pub(crate) fn get() -> Blocking {
        static BLOCKING: OnceLock<Blocking> = OnceLock::new();
        *BLOCKING.get_or_init(|| Blocking::for_caches(HostCpu::get().caches))
    }
}

/// Which products run packed, from `ENGINE_CPU_GEMM` and the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// Every product large enough to tile (`ENGINE_CPU_GEMM=packed`, a CPU with AVX2).
    All,
    /// Products of `LARGE` multiply-adds or more: the default on AVX2 without AVX-512.
    Large,
    /// None: no AVX2, AVX-512 (the crate's AVX-512 kernels reached 95 % of OpenBLAS on a
    /// Zen 5), or `ENGINE_CPU_GEMM=crate`.
    Never,
}

/// Multiply-adds from which the default packs: 1024³. Under it the crate's kernels were as
/// fast or faster on the Zen 3 (see the module's comment), and no spec's product comes
/// near (the MLP's largest is 128 x 784 x 256), so the models keep their bits.
const LARGE: usize = 1 << 30;

fn choice() -> Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        let lever = std::env::var("ENGINE_CPU_GEMM").unwrap_or_default();
        choose(&lever, super::has_avx2(), super::has_avx512())
    })
}

/// The choice for a value of `ENGINE_CPU_GEMM` (empty when unset) on a CPU with or
/// without AVX2 (and FMA) and AVX-512.
fn choose(lever: &str, avx2: bool, avx512: bool) -> Choice {
    match lever.trim() {
        _ if !avx2 => Choice::Never,
        "packed" => Choice::All,
        "crate" => Choice::Never,
        _ if avx512 => Choice::Never,
        _ => Choice::Large,
    }
}

/// Whether this product runs packed (see [`Choice`]).
pub(crate) fn chosen_for(m: usize, n: usize, k: usize) -> bool {
    let tiles = m >= MR && n >= NR && k >= 8;
    match choice() {
        Choice::All => tiles,
        Choice::Large => tiles && m.saturating_mul(n).saturating_mul(k) >= LARGE,
        Choice::Never => false,
    }
}

/// The packed kernel's name, blocking and share of the products, for `engine plan` and
/// the log.
pub(crate) fn describe() -> Option<String> {
    let which = match choice() {
        Choice::All => "every product",
        Choice::Large => "1024³ multiply-adds and up (the gemm crate's kernels below)",
        Choice::Never => return None,
    };
    let b = Blocking::get();
    Some(format!("packed AVX2 GEMM for {which}, {MR}x{NR} register tile, blocks kc {} mc {} nc {}", b.kc, b.mc, b.nc))
}

/// The destination, shared by the threads that write disjoint row blocks of it.
#[derive(Clone, Copy)]
struct Dst(*mut f32);
// SAFETY: every thread writes its own rows only (see `product`).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

impl Dst {
    /// A method, not a field access, so that closures capture the `Sync` wrapper rather
    /// than its raw pointer.
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// `dst (m x n, row-major, row stride n) = [dst +] lhs (m x k) · rhs (k x n)`.
///
/// # Safety
/// The CPU has AVX2 and FMA ([`chosen_for`] says no otherwise); `dst` is valid for writes
/// of `m * n` elements (and reads, with `accumulate`: without it the destination is written
/// before it is read, so it may be uninitialized); `lhs` and `rhs` fit `m x k` and `k x n`;
/// m, n and k are non-zero.
#[allow(clippy::too_many_arguments, reason = "BLAS's own shape: sizes, operands, and whether to accumulate")]
pub(super) unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    accumulate: bool,
    lhs: Mat<'_, f32>,
    rhs: Mat<'_, f32>,
    threads: usize,
    blocking: Blocking,
) {
    let Blocking { kc, nc, .. } = blocking;
    // Enough row blocks for every thread; smaller blocks than L2 allows change no sum.
    let mc = blocking.mc.min(m.div_ceil(threads.max(1)).div_ceil(MR) * MR).max(MR);
    let dst = Dst(dst);
    // The left operand's transpose (k x m), packed by the same function as the right.
    let lhs_t = Mat { data: lhs.data, rs: lhs.cs, cs: lhs.rs };
    let starts: Vec<usize> = (0..m).step_by(mc).collect();
    let (mut packed_rhs, mut packed_lhs) = (Vec::new(), Vec::new());
    for j0 in (0..n).step_by(nc) {
        let nb = nc.min(n - j0);
        for p0 in (0..k).step_by(kc) {
            let kb = kc.min(k - p0);
            let b = pack::<NR>(&mut packed_rhs, rhs, p0, kb, j0, nb);
            let add = accumulate || p0 > 0;
            let block = |packed_lhs: &mut Vec<f32>, i0: usize| {
                let mb = mc.min(m - i0);
                let a = pack::<MR>(packed_lhs, lhs_t, p0, kb, i0, mb);
                // SAFETY: rows i0..i0+mb and columns j0..j0+nb lie inside the m x n
                // destination; no other block writes these rows; the CPU has AVX2 and FMA.
                unsafe { macro_block(a, b, mb, nb, kb, dst.at(i0 * n + j0), n, add) };
            };
            if threads > 1 && starts.len() > 1 {
                starts.par_iter().for_each_init(Vec::new, |buffer, &i0| block(buffer, i0));
            } else {
                starts.iter().for_each(|&i0| block(&mut packed_lhs, i0));
            }
        }
    }
}

/// Packs `mat[p0..p0+kb, c0..c0+cols]` in `W`-column panels, each `kb x W` row by row
/// (one step of the sum's `W` values together), columns past `cols` zero, into `out` from
/// its first cache-line boundary on; returns the packed panels. The right operand packs
/// as it is, in `NR`-column panels; the left one as its transpose, in `MR`-row panels.
fn pack<'a, const W: usize>(
    out: &'a mut Vec<f32>,
    mat: Mat<'_, f32>,
    p0: usize,
    kb: usize,
    c0: usize,
    cols: usize,
) -> &'a [f32] {
    // Packed panels start on a line: the allocator aligns a `Vec<f32>` to 16 bytes only,
    // and from there every other 8-float load of a right-operand panel straddled two
    // lines, a split load on every step of the sum. Grown, never cleared: every element
    // is written below, the padding columns included.
    let panels = super::buffer::line_aligned(out, cols.div_ceil(W) * kb * W);
    for (panel, chunk) in panels.chunks_exact_mut(kb * W).enumerate() {
        let first = c0 + panel * W;
        let width = W.min(c0 + cols - first);
        for (p, row) in chunk.chunks_exact_mut(W).enumerate() {
            let base = (p0 + p) * mat.rs + first * mat.cs;
            let (inside, padding) = row.split_at_mut(width);
            if mat.cs == 1 {
                inside.copy_from_slice(&mat.data[base..base + width]);
            } else {
                for (j, x) in inside.iter_mut().enumerate() {
                    *x = mat.data[base + j * mat.cs];
                }
            }
            padding.fill(0.0);
        }
    }
    panels
}

/// Every register tile of one packed block pair.
///
/// # Safety
/// `c` is valid for `mb` rows of `nb` elements at row stride `ldc` (readable too when
/// `add`); the CPU has AVX2 and FMA.
#[allow(clippy::too_many_arguments)]
unsafe fn macro_block(a: &[f32], b: &[f32], mb: usize, nb: usize, kb: usize, c: *mut f32, ldc: usize, add: bool) {
    for (jp, bpanel) in b.chunks_exact(kb * NR).enumerate() {
        let cols = NR.min(nb - jp * NR);
        for (ip, apanel) in a.chunks_exact(kb * MR).enumerate() {
            let rows = MR.min(mb - ip * MR);
            // SAFETY: the tile starts inside the block and `rows x cols` stays inside it;
            // the panels hold kb steps each (chunks_exact).
            unsafe { tile(kb, apanel.as_ptr(), bpanel.as_ptr(), c.add(ip * MR * ldc + jp * NR), ldc, rows, cols, add) };
        }
    }
}

/// One `MR x NR` tile: `c[..rows, ..cols] = [c +] a · b` over `kb` steps.
///
/// # Safety
/// `a` holds `kb * MR` and `b` `kb * NR` values; `c` is valid for `rows` rows of `cols`
/// elements at stride `ldc`; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(kb: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, rows: usize, cols: usize, add: bool) {
    use std::arch::x86_64::*;
    if add {
        // The tile is read at the end: start bringing its rows in while the sum runs.
        for i in 0..rows {
            let row = c.wrapping_add(i * ldc).cast::<i8>();
            // A prefetch is a hint that never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(row);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR * 4 - 1));
        }
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let (mut a, mut b) = (a, b);
    for _ in 0..kb {
        // SAFETY: the panels hold kb steps of MR and NR values.
        unsafe {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (i, row) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.add(i));
                row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                row[1] = _mm256_fmadd_ps(x, b1, row[1]);
            }
            a = a.add(MR);
            b = b.add(NR);
        }
    }
    if rows == MR && cols == NR {
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: a full tile: row i has NR elements at c + i * ldc.
            unsafe {
                let out = c.add(i * ldc);
                let (mut lo, mut hi) = (row[0], row[1]);
                if add {
                    lo = _mm256_add_ps(_mm256_loadu_ps(out), lo);
                    hi = _mm256_add_ps(_mm256_loadu_ps(out.add(8)), hi);
                }
                _mm256_storeu_ps(out, lo);
                _mm256_storeu_ps(out.add(8), hi);
            }
        }
        return;
    }
    // An edge tile: through a buffer, writing only the elements inside the output.
    let mut buffer = [0.0f32; MR * NR];
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the buffer holds MR rows of NR.
        unsafe {
            _mm256_storeu_ps(buffer.as_mut_ptr().add(i * NR), row[0]);
            _mm256_storeu_ps(buffer.as_mut_ptr().add(i * NR + 8), row[1]);
        }
    }
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: i < rows and j < cols, inside the caller's bounds.
            unsafe {
                let out = c.add(i * ldc + j);
                *out = if add { *out + buffer[i * NR + j] } else { buffer[i * NR + j] };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(m: usize, n: usize, k: usize, lhs: Mat<'_, f32>, rhs: Mat<'_, f32>) -> Vec<f64> {
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| lhs.data[i * lhs.rs + p * lhs.cs] as f64 * rhs.data[p * rhs.rs + j * rhs.cs] as f64)
                    .sum();
            }
        }
        out
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect()
    }

    /// Small blocks, so that every edge (rows past a tile, columns past a panel, a last
    /// short block of the sum, of the rows and of the columns) is met by small shapes.
    const SMALL: Blocking = Blocking { kc: 16, mc: 12, nc: 32 };

    /// Products of every layout (either operand transposed) and both modes equal an f64
    /// reference within f32 rounding, and write every element of a destination that held
    /// NaN when not accumulating.
    #[test]
    fn packed_products_equal_the_reference() {
        if !(crate::kernels::has_avx2()) {
            eprintln!("no AVX2 on this CPU: nothing to check");
            return;
        }
        for (m, n, k) in [(1, 1, 1), (6, 16, 16), (7, 17, 17), (13, 35, 40), (25, 50, 3), (12, 64, 33), (40, 33, 100)] {
            for blocking in [SMALL, Blocking::get()] {
                for (lt, rt) in [(false, false), (true, false), (false, true), (true, true)] {
                    let a = values(m * k, 1);
                    let b = values(k * n, 2);
                    let lhs = if lt { Mat::transposed(&a, m) } else { Mat::row_major(&a, k) };
                    let rhs = if rt { Mat::transposed(&b, k) } else { Mat::row_major(&b, n) };
                    let want = reference(m, n, k, lhs, rhs);
                    for accumulate in [false, true] {
                        let start = values(m * n, 3);
                        let mut dst = if accumulate { start.clone() } else { vec![f32::NAN; m * n] };
                        // SAFETY: AVX2 checked above; the buffers fit the shapes.
                        unsafe { product(m, n, k, dst.as_mut_ptr(), accumulate, lhs, rhs, 1, blocking) };
                        for (i, (&got, &w)) in dst.iter().zip(&want).enumerate() {
                            let w = if accumulate { w + start[i] as f64 } else { w };
                            let tol = 1e-5 * (k as f64).sqrt() * (1.0 + w.abs());
                            assert!(
                                (got as f64 - w).abs() <= tol,
                                "{m}x{n}x{k} lt {lt} rt {rt} accumulate {accumulate} {blocking:?}: [{i}] {got} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The kernel alone (no executor: no fresh output to fault in, no feeds) on one square
    /// product under several blockings, alternated, in GFLOP/s: `PROBE_N=3072
    /// PROBE_BLOCKS="256,252,8192;512,126,1024" cargo test --release -p engine-runtime --lib
    /// packed_blocking_probe -- --ignored --nocapture`, pinned as `gemm_rate` is.
    #[test]
    #[ignore = "a timing probe, run by hand"]
    fn packed_blocking_probe() {
        if !(crate::kernels::has_avx2()) {
            return;
        }
        let n: usize = std::env::var("PROBE_N").ok().and_then(|v| v.parse().ok()).unwrap_or(3072);
        let blocks: Vec<Blocking> = std::env::var("PROBE_BLOCKS")
            .map(|text| {
                text.split(';')
                    .map(|b| {
                        let v: Vec<usize> = b.split(',').map(|x| x.trim().parse().expect("kc,mc,nc")).collect();
                        Blocking { kc: v[0], mc: v[1], nc: v[2] }
                    })
                    .collect()
            })
            .unwrap_or_else(|_| vec![Blocking::get()]);
        let (a, b) = (values(n * n, 1), values(n * n, 2));
        let mut dst = vec![0.0f32; n * n];
        let flops = 2.0 * (n as f64).powi(3);
        for round in 0..3 {
            for blocking in &blocks {
                let mut best = f64::INFINITY;
                for _ in 0..3 {
                    let t = std::time::Instant::now();
                    // SAFETY: AVX2 checked above; the buffers fit the shapes.
                    unsafe {
                        product(
                            n,
                            n,
                            n,
                            dst.as_mut_ptr(),
                            false,
                            Mat::row_major(&a, n),
                            Mat::row_major(&b, n),
                            1,
                            *blocking,
                        )
                    };
                    best = best.min(t.elapsed().as_secs_f64());
                }
                println!("round {round} {n}³ {blocking:?}: {:.1} GFLOP/s", flops / best / 1e9);
            }
        }
    }

    /// Threads split rows only, so every element's sum runs in one order: the bits at two
    /// threads are those at one.
    #[test]
    fn the_thread_count_changes_no_bit() {
        if !(crate::kernels::has_avx2()) {
            return;
        }
        let (m, n, k) = (97, 70, 300);
        let (a, b) = (values(m * k, 4), values(k * n, 5));
        let run = |threads| {
            let mut dst = vec![0.0f32; m * n];
            // SAFETY: AVX2 checked above; the buffers fit the shapes.
            unsafe {
                product(m, n, k, dst.as_mut_ptr(), false, Mat::row_major(&a, k), Mat::row_major(&b, n), threads, SMALL)
            };
            dst
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            assert!(one.iter().zip(run(threads)).all(|(x, y)| x.to_bits() == y.to_bits()), "{threads} threads");
        }
    }

    /// The default packs on AVX2-only cores and leaves AVX-512 ones to the crate; the lever
    /// overrides either way, but never sends a product to AVX2 code on a CPU without it.
    #[test]
    fn the_kernel_follows_the_cpu_and_the_lever() {
        assert_eq!(choose("", true, false), Choice::Large);
        assert_eq!(choose("", true, true), Choice::Never);
        assert_eq!(choose("", false, false), Choice::Never);
        assert_eq!(choose(" packed ", true, true), Choice::All);
        assert_eq!(choose("packed", false, false), Choice::Never);
        assert_eq!(choose("crate", true, false), Choice::Never);
        assert_eq!(choose("something else", true, false), Choice::Large);
    }

    #[test]
    fn blocks_follow_the_caches() {
        // Zen 3: L1d 32 KiB, L2 512 KiB, L3 32 MiB.
        assert_eq!(Blocking::for_caches([32 << 10, 512 << 10, 32 << 20]), Blocking { kc: 256, mc: 252, nc: 8192 });
        // A core with a 48 KiB L1d and 2 MiB of L2 (Intel's since Ice Lake): deeper sums.
        let b = Blocking::for_caches([48 << 10, 2 << 20, 16 << 20]);
        assert_eq!(b, Blocking { kc: 384, mc: 678, nc: 2720 });
        // Nothing detected: a small machine's sizes, never a zero block.
        let b = Blocking::for_caches([0, 0, 0]);
        assert!(b.kc >= 64 && b.mc >= MR && b.nc >= NR, "{b:?}");
    }
}
