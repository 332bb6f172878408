//! Collectives between replicas that are threads of one process.

use super::{Collective, accumulate, finish, rendezvous::Rendezvous};
use crate::{Result, RuntimeError};
use engine_graph::ops::ReduceOp;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// TensorFlow's cross-device ops for in-process replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CrossDeviceOps {
    /// Every replica's tensor goes to replica 0, which reduces and sends the result back.
    ReductionToOneDevice,
    /// Reduce-scatter then all-gather around a ring: each replica reduces `1/n` of the
    /// tensor and moves `2 (n-1)/n` of it, whatever `n`.
    #[default]
    Ring,
}

struct Shared {
    algorithm: CrossDeviceOps,
    size: usize,
    meet: Rendezvous,
    /// Per rank, the buffer it contributed to the current operation, cut in `size`
    /// chunks (a chunk is written only by its owner during a ring step and read by its
    /// neighbour after the step's barrier). Held in f64: sums are then exact enough for
    /// f64 graphs and at least as accurate as f32 arithmetic for f32 ones.
    slots: Vec<Vec<Mutex<Vec<f64>>>>,
}

/// A group of in-process participants; `handles()` gives one per rank.
pub struct InProcessGroup {
    shared: Arc<Shared>,
}

impl InProcessGroup {
    pub fn new(size: usize, algorithm: CrossDeviceOps, timeout: Duration) -> Self {
        let slots = (0..size).map(|_| (0..size.max(1)).map(|_| Mutex::new(Vec::new())).collect()).collect();
        InProcessGroup { shared: Arc::new(Shared { algorithm, size, meet: Rendezvous::new(size, timeout), slots }) }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `[start, end)` of chunk `i` of `len` elements cut in `n`. The network group cuts
/// the same way, so that both add in the same order and agree to the bit.
pub(crate) fn chunk(len: usize, n: usize, i: usize) -> (usize, usize) {
    let base = len / n;
    let extra = len % n;
    let start = i * base + i.min(extra);
    (start, start + base + usize::from(i < extra))
}

impl Member {
    fn meet(&self, op: &str) -> Result<()> {
        let describe = |r: usize| self.describe(r);
        self.shared.meet.wait(self.rank, op, &describe)
    }

    fn publish(&self, data: &[f64]) {
        let n = self.shared.size;
        for (i, slot) in self.shared.slots[self.rank].iter().enumerate() {
            let (s, e) = chunk(data.len(), n, i);
            let mut v = lock(slot);
            v.clear();
            v.extend_from_slice(&data[s..e]);
        }
    }

    fn reduce(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        if self.shared.size == 1 {
            return Ok(());
        }
        match self.shared.algorithm {
            CrossDeviceOps::Ring => self.ring(data, op),
            CrossDeviceOps::ReductionToOneDevice => self.to_one(data, op),
        }
    }

    fn ring(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        let (n, r) = (self.shared.size, self.rank);
        self.publish(data);
        self.meet("all_reduce")?;
        // Reduce-scatter: after step s, rank r's chunk (r - s - 1) holds the sum of s + 2
        // contributions; after n - 1 steps rank r owns the full sum of chunk (r + 1) % n.
        for step in 0..n - 1 {
            let c = (r + n - step - 1) % n;
            let left = (r + n - 1) % n;
            let incoming = lock(&self.shared.slots[left][c]).clone();
            accumulate(&mut lock(&self.shared.slots[r][c]), &incoming);
            self.meet("all_reduce")?;
        }
        // All-gather: pass the finished chunks around.
        for step in 0..n - 1 {
            let c = (r + n - step) % n;
            let left = (r + n - 1) % n;
            let incoming = lock(&self.shared.slots[left][c]).clone();
            *lock(&self.shared.slots[r][c]) = incoming;
            self.meet("all_reduce")?;
        }
        for (i, slot) in self.shared.slots[r].iter().enumerate() {
            let (s, e) = chunk(data.len(), n, i);
            data[s..e].copy_from_slice(&lock(slot));
        }
        finish(data, op, n);
        // Nobody may publish the next operation before everyone has read this one.
        self.meet("all_reduce")
    }

    fn to_one(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        let n = self.shared.size;
        self.publish(data);
        self.meet("all_reduce")?;
        if self.rank == 0 {
            for i in 0..n {
                let mut total: Vec<f64> = Vec::new();
                for rank in 0..n {
                    let part = lock(&self.shared.slots[rank][i]);
                    if total.is_empty() { total = part.clone() } else { accumulate(&mut total, &part) }
                }
                finish(&mut total, op, n);
                *lock(&self.shared.slots[0][i]) = total;
            }
        }
        self.meet("all_reduce")?;
        for (i, slot) in self.shared.slots[0].iter().enumerate() {
            let (s, e) = chunk(data.len(), n, i);
            data[s..e].copy_from_slice(&lock(slot));
        }
        self.meet("all_reduce")
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
        if self.shared.size == 1 {
            return Ok(());
        }
        let mut wide: Vec<f64> = data.iter().map(|&x| x as f64).collect();
        self.reduce(&mut wide, op)?;
        data.iter_mut().zip(wide).for_each(|(d, w)| *d = w as f32);
        Ok(())
    }
    fn all_reduce_f64(&self, data: &mut [f64], op: ReduceOp) -> Result<()> {
        self.reduce(data, op)
    }
    fn broadcast(&self, data: &mut [f32], root: usize) -> Result<()> {
        if root >= self.shared.size {
            return Err(RuntimeError::Collective {
                op: "broadcast".into(),
                reason: format!("no rank {root}"),
                retryable: false,
            });
        }
        if self.rank == root {
            self.publish(&data.iter().map(|&x| x as f64).collect::<Vec<_>>());
        }
        self.meet("broadcast")?;
        for (i, slot) in self.shared.slots[root].iter().enumerate() {
            let (s, e) = chunk(data.len(), self.shared.size, i);
            let v = lock(slot);
            if v.len() != e - s {
                return Err(RuntimeError::Collective {
                    op: "broadcast".into(),
                    reason: "ranks disagree on the size".into(),
                    retryable: false,
                });
            }
            data[s..e].iter_mut().zip(v.iter()).for_each(|(d, x)| *d = *x as f32);
        }
        self.meet("broadcast")
    }
    fn all_gather(&self, data: &[f32]) -> Result<Vec<f32>> {
        let n = self.shared.size;
        {
            let mut v = lock(&self.shared.slots[self.rank][0]);
            v.clear();
            v.extend(data.iter().map(|&x| x as f64));
        }
        self.meet("all_gather")?;
        let mut out = Vec::with_capacity(data.len() * n);
        for rank in 0..n {
            out.extend(lock(&self.shared.slots[rank][0]).iter().map(|&x| x as f32));
        }
        self.meet("all_gather")?;
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
