//! Network all-reduce between separate processes on 127.0.0.1: median latency and bus
//! bandwidth (`2 (n-1) / n * bytes / time`, the figure NCCL and gloo benchmarks report) for
//! 4 KiB to 64 MiB of f32.
//!
//! `cargo run --release --example bench_ring [PROCESSES] [COMMUNICATION]` (default 2 and
//! `ring`; `shared_memory` or `auto` for the shared-memory path) starts that many copies of
//! itself, one per cluster task, each holding one `NetworkGroup`, and prints a Markdown
//! table. A copy learns its place from `BENCH_RING_CLUSTER` (the workers' addresses),
//! `BENCH_RING_RANK` and `BENCH_RING_COMMUNICATION`.

use anyhow::{Context, bail};
use engine::graph::ops::ReduceOp;
use engine::runtime::Collective;
use engine::runtime::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType};
use engine::runtime::transport::{Communication, NetworkConfig, NetworkGroup};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLUSTER_VAR: &str = "BENCH_RING_CLUSTER";
const RANK_VAR: &str = "BENCH_RING_RANK";
const COMMUNICATION_VAR: &str = "BENCH_RING_COMMUNICATION";
const SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];

fn main() -> anyhow::Result<()> {
    match (std::env::var(CLUSTER_VAR), std::env::var(RANK_VAR), std::env::var(COMMUNICATION_VAR)) {
        (Ok(cluster), Ok(rank), Ok(communication)) => {
            member(&cluster, rank.parse()?, communication.parse().map_err(anyhow::Error::msg)?)
        }
        _ => {
            let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2);
            let communication: Communication =
                std::env::args().nth(2).unwrap_or("ring".into()).parse().map_err(anyhow::Error::msg)?;
            launcher(n, communication)
        }
    }
}

fn iterations(bytes: usize) -> usize {
    ((512 << 20) / bytes).clamp(10, 1000)
}

/// Starts `n` members, gathers their timings, prints the table.
fn launcher(n: usize, communication: Communication) -> anyhow::Result<()> {
    if n < 2 {
        bail!("a ring needs at least 2 processes");
    }
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    let addresses: Vec<String> =
        listeners.iter().map(|l| l.local_addr().map(|a| a.to_string())).collect::<Result<_, _>>()?;
    drop(listeners);
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for rank in 0..n {
        let child = Command::new(&exe)
            .env(CLUSTER_VAR, addresses.join(","))
            .env(RANK_VAR, rank.to_string())
            .env(COMMUNICATION_VAR, communication.name())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting member {rank}"))?;
        children.push(child);
    }
    // One reader per member: a member blocked on a full pipe would stall the whole ring.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|child| {
            let stdout = child.stdout.take().context("child stdout")?;
            Ok(std::thread::spawn(move || -> anyhow::Result<Vec<Vec<Duration>>> {
                let mut times = vec![Vec::new(); SIZES.len()];
                for line in BufReader::new(stdout).lines() {
                    let line = line?;
                    match line.split_whitespace().collect::<Vec<_>>()[..] {
                        ["TIME", size, nanos] => {
                            times[size.parse::<usize>()?].push(Duration::from_nanos(nanos.parse()?))
                        }
                        ["PATH", ..] => eprintln!("{line}"),
                        _ => {}
                    }
                }
                Ok(times)
            }))
        })
        .collect::<anyhow::Result<_>>()?;
    // times[size][rank][iteration]
    let mut times: Vec<Vec<Vec<Duration>>> = vec![Vec::new(); SIZES.len()];
    for (rank, (reader, child)) in readers.into_iter().zip(&mut children).enumerate() {
        let per_size = reader.join().map_err(|_| anyhow::anyhow!("reader of member {rank} panicked"))??;
        for (s, t) in per_size.into_iter().enumerate() {
            times[s].push(t);
        }
        let status = child.wait()?;
        if !status.success() {
            // The others fail too (their group aborts); the member's own stderr says why.
            bail!("member {rank} exited with {status}");
        }
    }
    println!("| processes | size | algorithm | median latency | bus bandwidth |");
    println!("|---|---|---|---|---|");
    for (s, &bytes) in SIZES.iter().enumerate() {
        let count = times[s].iter().map(Vec::len).min().unwrap_or(0);
        if count == 0 {
            bail!("no timings for {bytes} bytes");
        }
        // A collective is as slow as its slowest participant.
        let mut per_op: Vec<Duration> =
            (0..count).map(|i| times[s].iter().map(|t| t[i]).max().unwrap_or_default()).collect();
        per_op.sort();
        let t = per_op[per_op.len() / 2];
        let bus = 2.0 * (n as f64 - 1.0) / n as f64 * bytes as f64 / t.as_secs_f64() / 1e9;
        let size = if bytes >= 1 << 20 { format!("{} MiB", bytes >> 20) } else { format!("{} KiB", bytes >> 10) };
        let algorithm = match communication {
            Communication::Ring if bytes < 64 << 10 => "direct",
            Communication::Ring => "ring",
            _ => "shared memory",
        };
        let latency = if t < Duration::from_millis(10) {
            format!("{:.0} µs", t.as_secs_f64() * 1e6)
        } else {
            format!("{:.1} ms", t.as_secs_f64() * 1e3)
        };
        println!("| {n} | {size} | {algorithm} | {latency} | {bus:.2} GB/s |");
    }
    Ok(())
}

/// One member: joins the group and times all-reduces, one `TIME size nanos` line each.
fn member(cluster: &str, rank: usize, communication: Communication) -> anyhow::Result<()> {
    let spec = ClusterSpec { worker: cluster.split(',').map(str::to_string).collect(), ..ClusterSpec::default() };
    let cluster = Cluster::new(spec, TaskId::new(TaskType::Worker, rank), ClusterSource::Flags, None)?;
    let group = NetworkGroup::connect(NetworkConfig {
        cluster,
        fingerprint: "bench_ring".into(),
        token: Some("bench".into()),
        collective_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(30),
        tls: None,
        communication,
    })?;
    if rank == 0 {
        println!(
            "PATH {} ({})",
            group.communication(),
            group.ring_reason().unwrap_or("every member mapped the segment")
        );
    }
    for (s, &bytes) in SIZES.iter().enumerate() {
        let mut data = vec![1.0f32; bytes / 4];
        for i in 0..iterations(bytes) + 3 {
            group.barrier()?;
            let start = Instant::now();
            group.all_reduce(&mut data, ReduceOp::Mean)?;
            let elapsed = start.elapsed();
            if i >= 3 {
                println!("TIME {s} {}", elapsed.as_nanos());
            }
        }
    }
    group.barrier()?;
    Ok(())
}
