//! `Precision::Bf16Mixed`: a contraction (matrix product, convolution and both of its
//! gradients, attention's products) takes bfloat16 operands and gives a result rounded to
//! bfloat16, while the values between contractions stay f32. A bfloat16 value is an f32
//! whose low 16 bits are zero, so the rounding is seen exactly in the outputs; the
//! operands' rounding is seen against a product computed from rounded operands.
//!
//! Each check runs with the native CPU kernels (which decline contractions under mixed
//! precision), with burn's generic kernels on flex (what GPUs run), and on each device of
//! `ENGINE_TEST_DEVICES`, where a device without bfloat16 arithmetic (lavapipe: WGSL has
//! none) must refuse the precision by name instead.

use anyhow::{Result, anyhow};
use engine_graph::{
    Graph, GraphBuilder, HostTensor, Initializer, Outlet, Plan,
    autodiff::gradients,
    ops::{FusedAttention, Padding},
};
use engine_runtime::{Device, DeviceName, Executor, Precision, RunOptions, Value, VariableStore};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `x` rounded to the nearest bfloat16 (ties to even), as an f32.
fn bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    f32::from_bits((bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff_0000)
}

fn is_bf16(x: f32) -> bool {
    x.to_bits() & 0xffff == 0
}

fn values(shape: &[usize], seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..shape.iter().product()).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
}

/// Where a run happens.
struct Target {
    name: String,
    device: Device,
    native: bool,
}

fn targets() -> Result<Vec<Target>> {
    let mut out = vec![
        Target { name: "native CPU kernels".into(), device: Device::cpu(), native: true },
        Target { name: "generic kernels on flex".into(), device: Device::cpu(), native: false },
    ];
    for name in std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default().split(',').filter(|s| !s.trim().is_empty()) {
        let device = Device::open(name.trim().parse::<DeviceName>()?)?;
        out.push(Target { name: name.trim().to_string(), device, native: false });
    }
    Ok(out)
}

/// `build` over variables holding `inputs`, its output `y` and the gradients of
/// `sum(y · r)` for a fixed random `r`, all as f32 values; `None` where the device refused
/// the precision (the refusal itself is checked here).
fn run(
    target: &Target,
    precision: Precision,
    inputs: &[(Vec<usize>, Vec<f32>)],
    build: &dyn Fn(&mut GraphBuilder<'_>, &[Outlet]) -> engine_graph::Result<Outlet>,
) -> Result<Option<Vec<Vec<f32>>>> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let mut xs = Vec::new();
    for (i, (shape, _)) in inputs.iter().enumerate() {
        xs.push(b.variable(&format!("x{i}"), shape, Initializer::Zeros, true)?);
    }
    let y = build(&mut b, &xs)?;
    let shape = b.fact(y)?.shape.as_known().ok_or_else(|| anyhow!("the output's shape is unknown"))?;
    let r = b.constant(HostTensor::f32(shape.clone(), values(&shape, 99))?)?;
    let weighted = b.mul(y, r)?;
    let loss = b.reduce_sum(weighted, &[], false)?;
    let grads = gradients(&mut g, loss, &xs)?;
    g.roles.loss = Some(loss);
    let mut fetches = vec![y];
    for (i, gr) in grads.into_iter().enumerate() {
        let gr = gr.ok_or_else(|| anyhow!("no gradient reached input {i}"))?;
        g.roles.fetches.insert(format!("grad{i}"), gr);
        fetches.push(gr);
    }
    g.roles.fetches.insert("y".into(), y);
    let plan = Arc::new(Plan::new(g, vec![])?);
    let exec = match Executor::new(plan, target.device.clone(), precision) {
        Ok(exec) => exec.with_native_kernels(target.native),
        Err(e) if target.device.is_queued() => {
            let (message, device) = (e.to_string(), target.device.name().to_string());
            if !message.contains("bfloat16") || !message.contains(&device) {
                return Err(anyhow!("{}: the refusal does not name bfloat16 and {device}: {message}", target.name));
            }
            return Ok(None);
        }
        Err(e) => return Err(anyhow!("{}: the CPU refused {precision:?}: {e}", target.name)),
    };
    let mut store = VariableStore::new();
    for (i, (shape, v)) in inputs.iter().enumerate() {
        let host = HostTensor::f32(shape.clone(), v.clone())?;
        store.set(&format!("x{i}"), Value::from_host(&host, target.device.dispatch(), precision));
    }
    let out = exec.run(&mut store, &BTreeMap::new(), &fetches, RunOptions::default())?;
    let mut fetched = Vec::new();
    for v in &out.fetched {
        // f32 to f64 and back is exact.
        fetched.push(v.to_host()?.to_f64_vec().into_iter().map(|x| x as f32).collect());
    }
    Ok(Some(fetched))
}

/// Every value of every output is a bfloat16, and within bfloat16's rounding of `reference`
/// (the same graph in f32): `slack` steps of 2⁻⁸ of the output's largest magnitude.
fn rounded_like(what: &str, got: &[Vec<f32>], reference: &[Vec<f32>], slack: f32) -> Result<()> {
    for (i, (g, r)) in got.iter().zip(reference).enumerate() {
        let name = if i == 0 { "the output".to_string() } else { format!("gradient {}", i - 1) };
        if let Some(j) = g.iter().position(|&x| !is_bf16(x)) {
            return Err(anyhow!("{what}: {name}'s element {j} ({}) is not a bfloat16", g[j]));
        }
        let scale = r.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
        for (j, (a, b)) in g.iter().zip(r).enumerate() {
            if (a - b).abs() > slack * scale / 256.0 {
                return Err(anyhow!("{what}: {name}'s element {j} is {a}, {b} in f32 (largest magnitude {scale})"));
            }
        }
    }
    Ok(())
}

/// The product of rounded operands, accumulated in f32 and rounded once: exactly what a
/// bfloat16 tensor-core product gives, up to the order of the f32 sums.
#[test]
fn products_take_bfloat16_operands_and_round_their_result() -> Result<()> {
    let (m, k, n) = (6, 40, 5);
    let (a, b) = (values(&[m, k], 1), values(&[k, n], 2));
    let inputs = [(vec![m, k], a.clone()), (vec![k, n], b.clone())];
    let product = |bld: &mut GraphBuilder<'_>, x: &[Outlet]| bld.matmul(x[0], x[1]);
    let want: Vec<f32> =
        (0..m * n).map(|ij| bf16((0..k).map(|l| bf16(a[ij / n * k + l]) * bf16(b[l * n + ij % n])).sum())).collect();
    for target in targets()? {
        let f32_run = run(&target, Precision::F32, &inputs, &product)?.ok_or_else(|| anyhow!("f32 refused"))?;
        if f32_run[0].iter().all(|&x| is_bf16(x)) {
            return Err(anyhow!("{}: the f32 product came out in bfloat16 too", target.name));
        }
        let Some(mixed) = run(&target, Precision::Bf16Mixed, &inputs, &product)? else { continue };
        for (j, (got, want)) in mixed[0].iter().zip(&want).enumerate() {
            // One bfloat16 step either way: the sums' order may tip a rounding.
            if !is_bf16(*got) || (got - want).abs() > want.abs() / 128.0 + 1e-6 {
                return Err(anyhow!("{}: element {j} is {got}, {want} from rounded operands", target.name));
            }
        }
        rounded_like(&target.name, &mixed, &f32_run, 4.0)?;
    }
    Ok(())
}

#[test]
fn convolutions_and_their_gradients_round_at_their_outputs() -> Result<()> {
    let (x, w) = (vec![2, 7, 6, 3], vec![3, 3, 3, 4]);
    let inputs = [(x.clone(), values(&x, 3)), (w.clone(), values(&w, 4))];
    for stride in [1, 2] {
        let conv = |b: &mut GraphBuilder<'_>, v: &[Outlet]| b.conv2d(v[0], v[1], [stride, stride], Padding::Same);
        for target in targets()? {
            let f32_run = run(&target, Precision::F32, &inputs, &conv)?.ok_or_else(|| anyhow!("f32 refused"))?;
            let Some(mixed) = run(&target, Precision::Bf16Mixed, &inputs, &conv)? else { continue };
            rounded_like(&format!("{}, stride {stride}", target.name), &mixed, &f32_run, 8.0)?;
        }
    }
    Ok(())
}

/// Attention's softmax runs between its products in f32; its four products round. A scale
/// of 1/2 keeps the query's gradient (a product times the scale) a bfloat16.
#[test]
fn attention_rounds_its_products_only() -> Result<()> {
    let (n, t, heads, d) = (2, 5, 2, 4);
    let op = FusedAttention { heads, scale: 0.5, dropout: None };
    let shape = vec![n, t, heads * d];
    let inputs =
        [(shape.clone(), values(&shape, 5)), (shape.clone(), values(&shape, 6)), (shape.clone(), values(&shape, 7))];
    let attend =
        |b: &mut GraphBuilder<'_>, x: &[Outlet]| Ok(Outlet::new(b.fused_attention(op.clone(), x[0], x[1], x[2])?, 0));
    for target in targets()? {
        let f32_run = run(&target, Precision::F32, &inputs, &attend)?.ok_or_else(|| anyhow!("f32 refused"))?;
        let Some(mixed) = run(&target, Precision::Bf16Mixed, &inputs, &attend)? else { continue };
        rounded_like(&target.name, &mixed, &f32_run, 8.0)?;
    }
    Ok(())
}

/// What a contraction feeds stays f32: a bias added after a product is not rounded.
#[test]
fn values_between_contractions_stay_f32() -> Result<()> {
    let inputs = [(vec![4, 8], values(&[4, 8], 8)), (vec![8, 3], values(&[8, 3], 9)), (vec![3], values(&[3], 10))];
    let affine = |b: &mut GraphBuilder<'_>, x: &[Outlet]| {
        let p = b.matmul(x[0], x[1])?;
        b.add(p, x[2])
    };
    for target in targets()? {
        let Some(mixed) = run(&target, Precision::Bf16Mixed, &inputs, &affine)? else { continue };
        if mixed[0].iter().all(|&x| is_bf16(x)) {
            return Err(anyhow!("{}: the bias's sum was rounded to bfloat16 too", target.name));
        }
        // The bias's gradient is the output's gradient summed over rows, in f32.
        if mixed[3].iter().all(|&x| is_bf16(x)) {
            return Err(anyhow!("{}: the bias's gradient was rounded to bfloat16", target.name));
        }
    }
    Ok(())
}
