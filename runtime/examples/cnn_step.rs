use engine_graph::ops::{Padding, Window};
use engine_graph::optimizer::*;
use engine_graph::passes::*;
use engine_graph::*;
use engine_runtime::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Counts heap allocations and their bytes, to report what one steady-state step
/// allocates (the figure a static memory plan would bring to zero).
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; the counters are side effects only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[28, 28, 1]))?;
    let y = b.placeholder("labels", DType::I64, Shape::batched(&[]))?;
    let k = b.variable("conv2d/kernel", &[3, 3, 1, 32], Initializer::GlorotUniform, true)?;
    let kb = b.variable("conv2d/bias", &[32], Initializer::Zeros, true)?;
    let c = b.conv2d(x, k, [1, 1], Padding::Valid)?;
    let c = b.add(c, kb)?;
    let c = b.relu(c)?;
    let p = b.max_pool2d(c, Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Valid })?;
    let f = b.flatten(p)?;
    let w1 = b.variable("dense/kernel", &[5408, 64], Initializer::GlorotUniform, true)?;
    let b1 = b.variable("dense/bias", &[64], Initializer::Zeros, true)?;
    let h = b.matmul(f, w1)?;
    let h = b.add(h, b1)?;
    let h = b.relu(h)?;
    let w2 = b.variable("dense_1/kernel", &[64, 10], Initializer::GlorotUniform, true)?;
    let b2 = b.variable("dense_1/bias", &[10], Initializer::Zeros, true)?;
    let o = b.matmul(h, w2)?;
    let o = b.add(o, b2)?;
    let l = b.sparse_softmax_cross_entropy(o, y)?;
    let loss = b.reduce_mean(l, &[], false)?;
    g.roles.loss = Some(loss);
    g.roles.inputs.insert("x".into(), x);
    g.roles.inputs.insert("labels".into(), y);
    let mut pm = PassManager::new()
        .with(engine_graph::autodiff::Autodiff)
        .with(ApplyOptimizer {
            config: OptimizerConfig {
                optimizer: Optimizer::Sgd { momentum: 0.0, nesterov: false },
                learning_rate: LearningRate::Constant(0.05),
                clip_global_norm: None,
            },
        })
        .with(CheckNumericsPass);
    for p in optimization_passes() {
        pm.push(p);
    }
    pm.run(&mut g)?;
    let plan = Arc::new(Plan::new(g, pm.log().to_vec())?);
    if std::env::var("DESCRIBE").is_ok() {
        println!("{}", plan.describe(64));
    }
    let exec = Executor::new(plan.clone(), Device::cpu(), Precision::F32)?;
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 42)?;
    let feeds = BTreeMap::from([
        (
            "x".to_string(),
            HostTensor::f32(vec![64, 28, 28, 1], (0..64 * 784).map(|i| ((i * 7) % 255) as f32 / 255.0).collect())?,
        ),
        ("labels".to_string(), HostTensor::i64(vec![64], (0..64).map(|i| i % 10).collect())?),
    ]);
    let roles = &plan.graph.roles;
    let fetch =
        [anyhow::Context::context(roles.loss, "no loss")?, anyhow::Context::context(roles.train_op, "no train op")?];
    let mut first = None;
    let steps = 100;
    let mut t = Instant::now();
    let mut agg: BTreeMap<String, f64> = BTreeMap::new();
    let by_node = std::env::var("BY_NODE").is_ok();
    let mut counted = (0, 0);
    for s in 0..steps {
        let profile = (20..40).contains(&s);
        if s == 50 {
            counted = (ALLOCATIONS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
        }
        let out = exec.run(&mut vars, &feeds, &fetch, RunOptions { step: s, replica: 0, profile })?;
        for tm in &out.timings {
            let key = if by_node { format!("{} {}", tm.op, tm.node) } else { tm.op.to_string() };
            *agg.entry(key).or_default() += tm.duration.as_secs_f64() * 1000.0 / 20.0;
        }
        if s == 0 {
            first = Some(t0.elapsed());
            println!("loss0 {:?}", out.fetched[0].to_host()?.scalar_value());
        }
        if s == 9 {
            t = Instant::now();
        }
    }
    let (allocations, bytes) =
        (ALLOCATIONS.load(Ordering::Relaxed) - counted.0, BYTES.load(Ordering::Relaxed) - counted.1);
    let dt = t.elapsed().as_secs_f64() / (steps - 10) as f64;
    println!(
        "steady state (steps 50..{steps}): {:.0} allocations, {:.2} MB allocated per step",
        allocations as f64 / (steps - 50) as f64,
        bytes as f64 / (steps - 50) as f64 / 1e6
    );
    println!("first step at {:?}; {:.2} ms/step; {:.0} examples/s", first.unwrap_or_default(), dt * 1000.0, 64.0 / dt);
    let mut v: Vec<_> = agg.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (op, ms) in v.iter().take(12) {
        println!("  {op:<60} {ms:.3} ms");
    }
    Ok(())
}
