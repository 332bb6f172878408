//! The f32 rate of the engine's matrix product on large square matrices, through the
//! executor as a `MatMul` node runs (the `gemm` crate, blocked for this CPU's caches),
//! to set beside `bench/gemm_peak.py`'s OpenBLAS figure on the same core (issue 41: large
//! GEMMs at 80 % of it or more). Pin it as the peak is pinned:
//!
//!     RAYON_NUM_THREADS=1 taskset -c 0 cargo run --release -p engine-runtime --example gemm_rate -- 2048
//!
//! Prints one JSON line per size: the best of the repetitions, in GFLOP/s.

use engine_graph::{DType, Graph, GraphBuilder, HostTensor, Plan, Shape};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![512, 1024, 2048] } else { sizes };
    println!(
        "{{\"cpu\": {:?}, \"threads\": {:?}}}",
        engine_runtime::HostCpu::get().to_string(),
        engine_runtime::use_compute_threads().to_string()
    );
    for n in sizes {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let a = b.placeholder("a", DType::F32, Shape::known(&[n, n]))?;
        let c = b.placeholder("b", DType::F32, Shape::known(&[n, n]))?;
        let p = b.matmul(a, c)?;
        g.roles.fetches.insert("p".into(), p);
        let plan = Arc::new(Plan::new(g, vec![])?);
        let exec = Executor::new(plan, Device::cpu(), Precision::F32)?;
        let fill = |seed: usize| (0..n * n).map(|i| ((i * 7919 + seed) % 97) as f32 / 97.0 - 0.5).collect::<Vec<_>>();
        let feeds = BTreeMap::from([
            ("a".to_string(), HostTensor::f32(vec![n, n], fill(1))?),
            ("b".to_string(), HostTensor::f32(vec![n, n], fill(2))?),
        ]);
        let mut vars = VariableStore::new();
        let reps = (4_000_000_000 / (2 * n * n * n)).clamp(3, 50);
        let mut best = f64::INFINITY;
        for _ in 0..reps + 1 {
            let t = Instant::now();
            exec.run(&mut vars, &feeds, &[p], RunOptions::default())?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let gflops = 2.0 * (n as f64).powi(3) / best / 1e9;
        println!("{{\"n\": {n}, \"reps\": {reps}, \"best_ms\": {:.3}, \"gflops\": {gflops:.1}}}", best * 1e3);
    }
    Ok(())
}
