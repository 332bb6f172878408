//! In-process all-reduce between replica threads: latency and bus bandwidth
//! (`2 (n-1) / n * bytes / time`, the figure NCCL and gloo benchmarks report) for 1 KiB to
//! 64 MiB, for both cross-device algorithms.
//!
//! `cargo run --release --example bench_allreduce [REPLICAS]` prints a Markdown table.

use engine::graph::ops::ReduceOp;
use engine::runtime::{CrossDeviceOps, InProcessGroup};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let sizes = [1usize << 10, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];
    println!("| algorithm | size | median latency | bus bandwidth |");
    println!("|---|---|---|---|");
    for algorithm in [CrossDeviceOps::Ring, CrossDeviceOps::ReductionToOneDevice] {
        for &bytes in &sizes {
            let len = bytes / 4;
            let iterations = ((256 << 20) / bytes).clamp(10, 300);
            let group = InProcessGroup::new(n, algorithm, Duration::from_secs(60));
            let handles = group.handles();
            let times: Vec<Vec<Duration>> = std::thread::scope(|s| {
                let joins: Vec<_> = handles
                    .iter()
                    .map(|h| {
                        s.spawn(move || -> anyhow::Result<Vec<Duration>> {
                            let mut data = vec![1.0f32; len];
                            let mut times = Vec::with_capacity(iterations);
                            for i in 0..iterations + 3 {
                                h.barrier()?;
                                let t = Instant::now();
                                h.all_reduce(&mut data, ReduceOp::Sum)?;
                                if i >= 3 {
                                    times.push(t.elapsed());
                                }
                            }
                            Ok(times)
                        })
                    })
                    .collect();
                joins
                    .into_iter()
                    .map(|j| j.join().map_err(|_| anyhow::anyhow!("panic"))?)
                    .collect::<anyhow::Result<Vec<_>>>()
            })?;
            // A collective is as slow as its slowest participant.
            let per_op: Vec<Duration> =
                (0..iterations).map(|i| times.iter().map(|t| t[i]).max().unwrap_or_default()).collect();
            let t = median(per_op);
            let bus = 2.0 * (n as f64 - 1.0) / n as f64 * bytes as f64 / t.as_secs_f64() / 1e9;
            let size = if bytes >= 1 << 20 { format!("{} MiB", bytes >> 20) } else { format!("{} KiB", bytes >> 10) };
            println!("| {algorithm:?} | {size} | {:.1} µs | {bus:.2} GB/s |", t.as_secs_f64() * 1e6);
        }
    }
    Ok(())
}
