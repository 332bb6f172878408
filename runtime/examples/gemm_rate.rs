//! The f32 rate of the engine's matrix product on large square matrices, through the
//! executor as a `MatMul` node runs (the kernel `engine plan`'s `cpu:` line names),
//! to set beside `bench/gemm_peak.py`'s OpenBLAS figure on the same core (issue 41: large
//! GEMMs at 80 % of it or more). Pin it as the peak is pinned:
//!
//!     RAYON_NUM_THREADS=1 taskset -c 0 cargo run --release -p engine-runtime --example gemm_rate -- 2048
//!
//! A size is `N` (square) or `MxNxK` (`[M x K] · [K x N]`, the shapes of a model's dense
//! layers). `ENGINE_CPU_GEMM=packed` runs every product on the engine's packed AVX2 kernel,
//! `ENGINE_CPU_GEMM=crate` every one on the `gemm` crate's, for side-by-side runs of one
//! binary.
//!
//! Prints one JSON line per size: the best of the repetitions, in GFLOP/s.

use engine_graph::{DType, Graph, GraphBuilder, HostTensor, Plan, Shape};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let sizes: Vec<[usize; 3]> = std::env::args().skip(1).filter_map(|a| parse_size(&a)).collect();
    let sizes = if sizes.is_empty() { [512, 1024, 2048].map(|n| [n, n, n]).to_vec() } else { sizes };
    println!(
        "{{\"cpu\": {:?}, \"threads\": {:?}}}",
        engine_runtime::HostCpu::get().to_string(),
        engine_runtime::use_compute_threads().to_string()
    );
    for [m, n, k] in sizes {
        let mut g = Graph::new();
        let mut b = GraphBuilder::new(&mut g);
        let a = b.placeholder("a", DType::F32, Shape::known(&[m, k]))?;
        let c = b.placeholder("b", DType::F32, Shape::known(&[k, n]))?;
        let p = b.matmul(a, c)?;
        g.roles.fetches.insert("p".into(), p);
        let plan = Arc::new(Plan::new(g, vec![])?);
        let exec = Executor::new(plan, Device::cpu(), Precision::F32)?;
        let fill = |len: usize, seed: usize| (0..len).map(|i| ((i * 7919 + seed) % 97) as f32 / 97.0 - 0.5).collect();
        let feeds = BTreeMap::from([
            ("a".to_string(), HostTensor::f32(vec![m, k], fill(m * k, 1))?),
            ("b".to_string(), HostTensor::f32(vec![k, n], fill(k * n, 2))?),
        ]);
        let mut vars = VariableStore::new();
        let flops = 2.0 * (m * n * k) as f64;
        let reps = (4e9 / flops).clamp(3.0, 200.0) as usize;
        let mut best = f64::INFINITY;
        for _ in 0..reps + 1 {
            let t = Instant::now();
            exec.run(&mut vars, &feeds, &[p], RunOptions::default())?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let gflops = flops / best / 1e9;
        let size = if m == n && n == k { n.to_string() } else { format!("\"{m}x{n}x{k}\"") };
        println!("{{\"n\": {size}, \"reps\": {reps}, \"best_ms\": {:.3}, \"gflops\": {gflops:.1}}}", best * 1e3);
    }
    Ok(())
}

/// `512` or `128x256x784`.
fn parse_size(text: &str) -> Option<[usize; 3]> {
    let parts: Vec<usize> = text.split('x').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match parts[..] {
        [n] => Some([n, n, n]),
        [m, n, k] => Some([m, n, k]),
        _ => None,
    }
}
