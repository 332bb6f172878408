//! Collectives between replicas that are threads of one process.
//!
//! Replicas share an address space, so nothing is copied into staging buffers: each member
//! posts where its tensor is, and the others read it in place. In an all-reduce member `c`
//! sums chunk `c` of every member's tensor and writes the sum back into all of them (the
//! reduce-scatter and the all-gather of a ring in one pass over memory): two meetings and
//! no allocation. Sums are taken in f64, one L1-sized block at a time, in the
//! order the network and shared-memory transports use, so every transport gives the same
//! bits (a replica's variables must not drift from another's by an ulp).

use super::{Collective, Summand, rendezvous::Rendezvous};
use crate::{Result, RuntimeError};
use engine_graph::ops::ReduceOp;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// TensorFlow's cross-device ops for in-process replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CrossDeviceOps {
    /// Replica 0 sums every chunk and writes the result to the others: one member does all
    /// the work, as when everything goes through one device.
    ReductionToOneDevice,
    /// Each replica sums `1/n` of the tensor and writes it to the others, whatever `n`.
    #[default]
    Ring,
}

/// Elements summed at a time: the f64 accumulator stays in L1 (and on the stack).
const BLOCK: usize = 1024;

/// Where a member's tensor is for the operation under way. Written before a meeting and
/// read after it; the rendezvous's mutex orders the two, so relaxed atomics suffice.
#[derive(Default)]
struct Post {
    address: AtomicUsize,
    len: AtomicUsize,
    element_bytes: AtomicUsize,
}

struct Shared {
    algorithm: CrossDeviceOps,
    size: usize,
    meet: Rendezvous,
    posts: Vec<Post>,
}

/// A group of in-process participants; `handles()` gives one per rank.
pub struct InProcessGroup {
    shared: Arc<Shared>,
}

impl InProcessGroup {
    pub fn new(size: usize, algorithm: CrossDeviceOps, timeout: Duration) -> Self {
        let posts = (0..size).map(|_| Post::default()).collect();
        InProcessGroup { shared: Arc::new(Shared { algorithm, size, meet: Rendezvous::new(size, timeout), posts }) }
    }

    pub fn handles(&self) -> Vec<Arc<dyn Collective>> {
        (0..self.shared.size)
            .map(|rank| Arc::new(Member { rank, shared: self.shared.clone() }) as Arc<dyn Collective>)
            .collect()
    }
}

struct Member {
    rank: usize,
    shared: Arc<Shared>,
}

/// The `[start, end)` of chunk `i` of `len` elements cut in `n`. The network group cuts
/// the same way, so that both add in the same order and agree to the bit.
pub(crate) fn chunk(len: usize, n: usize, i: usize) -> (usize, usize) {
    let base = len / n;
    let extra = len % n;
    let start = i * base + i.min(extra);
    (start, start + base + usize::from(i < extra))
}

fn chunk_range(len: usize, n: usize, i: usize) -> Range<usize> {
    let (start, end) = chunk(len, n, i);
    start..end
}

fn mismatch(op: &str, reason: &str) -> RuntimeError {
    RuntimeError::Collective { op: op.into(), reason: reason.into(), retryable: false }
}

impl Member {
    fn meet(&self, op: &str) -> Result<()> {
        let describe = |r: usize| self.describe(r);
        self.shared.meet.wait(self.rank, op, &describe)
    }

    /// The meetings after [`Member::post`]: see [`Rendezvous::pass`].
    fn pass(&self) {
        self.shared.meet.pass(self.rank)
    }

    /// Tells the others where this member's tensor is, then waits for theirs. The one
    /// meeting of an operation that can fail (a missing member, an abort): until it
    /// succeeds nobody reads anybody's tensor.
    fn post<T>(&self, op: &str, base: *mut T, len: usize) -> Result<()> {
        let post = &self.shared.posts[self.rank];
        post.address.store(base as usize, Ordering::Relaxed);
        post.len.store(len, Ordering::Relaxed);
        post.element_bytes.store(std::mem::size_of::<T>(), Ordering::Relaxed);
        self.meet(op)
    }

    /// Member `rank`'s tensor, after [`Member::post`], checked to hold `T`s (f32 against
    /// f64 is refused by every member alike, as everyone sees the same posts).
    fn posted<T>(&self, op: &str, rank: usize) -> Result<(*mut T, usize)> {
        let post = &self.shared.posts[rank];
        if post.element_bytes.load(Ordering::Relaxed) != std::mem::size_of::<T>() {
            return Err(mismatch(op, "replicas disagree on the element type (f32 against f64)"));
        }
        Ok((post.address.load(Ordering::Relaxed) as *mut T, post.len.load(Ordering::Relaxed)))
    }

    /// Every member's tensor, checked to have `len` elements. Every member reaches the same
    /// verdict from the same posts; on a mismatch they all still meet once before failing,
    /// so that nobody posts its next operation over posts another is still checking.
    fn same_len<T>(&self, op: &str, len: usize) -> Result<()> {
        let verdict = (0..self.shared.size).try_for_each(|rank| {
            if self.posted::<T>(op, rank)?.1 != len {
                return Err(mismatch(op, "ranks disagree on the size"));
            }
            Ok(())
        });
        if verdict.is_err() {
            self.pass();
        }
        verdict
    }

    /// Sums chunk `c` over every member, in the ring's order for that chunk
    /// (`x[c-1] + (… + (x[c+1] + x[c]))`), and writes the sum into chunk `c` of every
    /// member's tensor, block by block while the block is in cache: no separate all-gather
    /// pass re-reads it.
    ///
    /// # Safety
    /// Every member has posted a tensor of `len` elements that stays valid until the next
    /// meeting, and nobody else reads or writes chunk `c` of any of them in this phase.
    unsafe fn sum_chunk<T: Summand>(&self, c: usize, len: usize, scale: f64) {
        let n = self.shared.size;
        let base = |k: usize| self.shared.posts[k].address.load(Ordering::Relaxed) as *mut T;
        let mut acc = [0f64; BLOCK];
        let range = chunk_range(len, n, c);
        let mut start = range.start;
        while start < range.end {
            let count = BLOCK.min(range.end - start);
            let acc = &mut acc[..count];
            for step in 0..n {
                // SAFETY: the caller's contract: this block is this member's alone now.
                let values = unsafe { std::slice::from_raw_parts(base((c + step) % n).add(start), count) };
                if step == 0 {
                    acc.iter_mut().zip(values).for_each(|(a, v)| *a = v.widen());
                } else {
                    acc.iter_mut().zip(values).for_each(|(a, v)| *a += v.widen());
                }
            }
            if scale != 1.0 {
                acc.iter_mut().for_each(|a| *a /= scale);
            }
            for k in 0..n {
                // SAFETY: as above; the slices of `values` are no longer in use.
                let target = unsafe { std::slice::from_raw_parts_mut(base(k).add(start), count) };
                target.iter_mut().zip(acc.iter()).for_each(|(o, a)| *o = T::narrow(*a));
            }
            start += count;
        }
    }

    /// Copies `range` of member `from`'s tensor into the same place of `out`.
    ///
    /// # Safety
    /// Both tensors are posted and valid; nobody writes `range` of `from`'s tensor or
    /// touches `range` of `out` during this phase.
    unsafe fn copy_range<T>(&self, from: usize, range: Range<usize>, out: *mut T) {
        let source = self.shared.posts[from].address.load(Ordering::Relaxed) as *const T;
        // SAFETY: the caller's contract; the two ranges are in different tensors.
        unsafe { std::ptr::copy_nonoverlapping(source.add(range.start), out.add(range.start), range.len()) }
    }

    fn reduce<T: Summand>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let n = self.shared.size;
        if n == 1 {
            return Ok(());
        }
        let (len, me) = (data.len(), self.rank);
        // From here on this member reaches its own tensor only through `base`, as the
        // others do, until the last meeting.
        let base = data.as_mut_ptr();
        self.post("all_reduce", base, len)?;
        self.same_len::<T>("all_reduce", len)?;
        let scale = if op == ReduceOp::Mean { n as f64 } else { 1.0 };
        let owned: Range<usize> = match self.shared.algorithm {
            CrossDeviceOps::Ring => me..me + 1,
            CrossDeviceOps::ReductionToOneDevice if me == 0 => 0..n,
            CrossDeviceOps::ReductionToOneDevice => 0..0,
        };
        for c in owned {
            // SAFETY: every chunk has exactly one owner, who alone reads and writes it in
            // every tensor until the meeting below.
            unsafe { self.sum_chunk::<T>(c, len, scale) };
        }
        // Nobody may change its tensor before everyone has read it.
        self.pass();
        Ok(())
    }
}

impl Collective for Member {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn all_reduce(&self, data: &mut [f32], op: ReduceOp) -> Result<()> {
        self.reduce(data, op)
    }
    fn all_reduce_f64(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        self.reduce(data, op)
    }
    fn broadcast(&self, data: &mut [f32], root: usize) -> Result<()> {
        if root >= self.shared.size {
            return Err(mismatch("broadcast", &format!("no rank {root}")));
        }
        let len = data.len();
        let base = data.as_mut_ptr();
        self.post("broadcast", base, len)?;
        self.same_len::<f32>("broadcast", len)?;
        if self.rank != root {
            // SAFETY: the root's tensor is only read in this phase, and this one is ours.
            unsafe { self.copy_range(root, 0..len, base) };
        }
        self.pass();
        Ok(())
    }
    fn all_gather(&self, data: &[f32]) -> Result<Vec<f32>> {
        let n = self.shared.size;
        // Posted for reading only: nobody writes through it.
        self.post("all_gather", data.as_ptr().cast_mut(), data.len())?;
        let parts: Result<Vec<_>> = (0..n).map(|rank| self.posted::<f32>("all_gather", rank)).collect();
        // As in `same_len`: everyone meets before failing.
        let parts = parts.inspect_err(|_| self.pass())?;
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.1).sum());
        for (address, len) in parts {
            // SAFETY: every tensor is valid and unchanged until the meeting below.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(address.cast_const(), len) });
        }
        self.pass();
        Ok(out)
    }
    fn barrier(&self) -> Result<()> {
        self.meet("barrier")
    }
    fn abort(&self, reason: &str, retryable: bool) {
        self.shared.meet.abort(&format!("{}: {reason}", self.describe(self.rank)), retryable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn run_all(n: usize, algorithm: CrossDeviceOps, len: usize) -> Vec<Vec<f32>> {
        let group = InProcessGroup::new(n, algorithm, Duration::from_secs(10));
        let handles = group.handles();
        thread::scope(|s| {
            let joins: Vec<_> = handles
                .iter()
                .map(|h| {
                    s.spawn(move || {
                        let mut data: Vec<f32> = (0..len).map(|i| (i + h.rank() * 1000) as f32).collect();
                        h.all_reduce(&mut data, ReduceOp::Sum).map(|_| data)
                    })
                })
                .collect();
            joins.into_iter().map(|j| j.join().ok().and_then(|r| r.ok()).unwrap_or_default()).collect()
        })
    }

    #[test]
    fn both_algorithms_sum_exactly_for_awkward_sizes() {
        for algorithm in [CrossDeviceOps::Ring, CrossDeviceOps::ReductionToOneDevice] {
            for n in [1, 2, 3, 4] {
                for len in [0, 1, 5, 17, 1000] {
                    let out = run_all(n, algorithm, len);
                    let want: Vec<f32> = (0..len).map(|i| (0..n).map(|r| (i + r * 1000) as f32).sum()).collect();
                    for o in &out {
                        assert_eq!(o, &want, "{algorithm:?} n={n} len={len}");
                    }
                }
            }
        }
    }

    /// Every member, whatever the algorithm, gets the sum in the ring's order for the
    /// element's chunk: the bits the network and shared-memory transports produce.
    #[test]
    fn sums_in_the_ring_order_for_each_chunk() {
        let (n, len) = (3, 7);
        // In f64, 1e16 + 1 rounds the 1 away: the order of the three terms shows.
        let value = |rank: usize, i: usize| -> f64 {
            match (rank + i) % 3 {
                0 => 1.0e16,
                1 => 1.0 + i as f64,
                _ => -1.0e16,
            }
        };
        for algorithm in [CrossDeviceOps::Ring, CrossDeviceOps::ReductionToOneDevice] {
            for op in [ReduceOp::Sum, ReduceOp::Mean] {
                let group = InProcessGroup::new(n, algorithm, Duration::from_secs(10));
                let handles = group.handles();
                let out: Vec<Vec<f64>> = thread::scope(|s| {
                    let joins: Vec<_> = handles
                        .iter()
                        .map(|h| {
                            s.spawn(move || {
                                let mut data: Vec<f64> = (0..len).map(|i| value(h.rank(), i)).collect();
                                h.all_reduce_f64(&mut data, op).map(|_| data)
                            })
                        })
                        .collect();
                    joins.into_iter().map(|j| j.join().ok().and_then(|r| r.ok()).unwrap_or_default()).collect()
                });
                let want: Vec<f64> = (0..len)
                    .map(|i| {
                        let c = (0..n).find(|&c| (chunk(len, n, c).0..chunk(len, n, c).1).contains(&i)).unwrap_or(0);
                        let mut sum = value(c, i);
                        for step in 1..n {
                            sum += value((c + step) % n, i);
                        }
                        if op == ReduceOp::Mean { sum / n as f64 } else { sum }
                    })
                    .collect();
                let naive: Vec<f64> = (0..len).map(|i| (0..n).map(|r| value(r, i)).sum()).collect();
                assert_ne!(want, naive, "the test's values must make the order visible");
                for o in &out {
                    assert_eq!(
                        o.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "{algorithm:?} {op:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn replicas_disagreeing_on_size_or_element_type_all_fail_and_the_group_goes_on() {
        let group = InProcessGroup::new(2, CrossDeviceOps::Ring, Duration::from_secs(10));
        let h = group.handles();
        let (a, b) = thread::scope(|s| {
            let a = s.spawn(|| {
                let first = h[0].all_reduce(&mut [1.0; 3], ReduceOp::Sum);
                let second = h[0].all_reduce(&mut [1.0; 2], ReduceOp::Sum);
                let mut data = [1.0f32; 2];
                let third = h[0].all_reduce(&mut data, ReduceOp::Sum).map(|_| data);
                (first, second, third)
            });
            let b = s.spawn(|| {
                let first = h[1].all_reduce(&mut [1.0; 4], ReduceOp::Sum);
                let second = h[1].all_reduce_f64(&mut [1.0; 2], ReduceOp::Sum);
                let third = h[1].all_reduce(&mut [2.0f32; 2], ReduceOp::Sum);
                (first, second, third)
            });
            (a.join().ok(), b.join().ok())
        });
        let (a, b) = (a.expect("rank 0 ran"), b.expect("rank 1 ran"));
        for e in [format!("{:?}", a.0), format!("{:?}", b.0)] {
            assert!(e.contains("disagree on the size"), "{e}");
        }
        for e in [format!("{:?}", a.1), format!("{:?}", b.1)] {
            assert!(e.contains("element type"), "{e}");
        }
        assert_eq!(a.2.ok(), Some([3.0, 3.0]));
        assert!(b.2.is_ok());
    }

    #[test]
    fn a_missing_replica_is_named_after_the_timeout() {
        let group = InProcessGroup::new(3, CrossDeviceOps::Ring, Duration::from_millis(200));
        let h = group.handles();
        let err = thread::scope(|s| {
            let a = s.spawn(|| h[0].barrier());
            let b = s.spawn(|| h[1].barrier());
            (a.join().ok(), b.join().ok())
        });
        let msg = format!("{:?}", err.0);
        assert!(msg.contains("replica 2 did not arrive"), "{msg}");
    }

    #[test]
    fn broadcast_gather_and_abort() {
        let group = InProcessGroup::new(2, CrossDeviceOps::Ring, Duration::from_secs(10));
        let h = group.handles();
        let (a, b) = thread::scope(|s| {
            let a = s.spawn(|| {
                let mut d = vec![1.0, 2.0, 3.0];
                h[0].broadcast(&mut d, 0).map(|_| (d, h[0].all_gather(&[7.0])))
            });
            let b = s.spawn(|| {
                let mut d = vec![0.0; 3];
                h[1].broadcast(&mut d, 0).map(|_| (d, h[1].all_gather(&[8.0])))
            });
            (a.join().ok().and_then(|r| r.ok()), b.join().ok().and_then(|r| r.ok()))
        });
        let (d, g) = b.unzip();
        assert_eq!(d, Some(vec![1.0, 2.0, 3.0]));
        assert_eq!(g.and_then(|g| g.ok()), Some(vec![7.0, 8.0]));
        assert!(a.is_some());
        h[0].abort("boom", false);
        let err = format!("{:?}", h[1].barrier());
        assert!(err.contains("aborted") && err.contains("boom"), "{err}");
    }
}
