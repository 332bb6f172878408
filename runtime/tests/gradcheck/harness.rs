use anyhow::{Result, anyhow};
use engine_graph::{Graph, GraphBuilder, HostTensor, Initializer, Outlet, Plan, autodiff::gradients};
use engine_runtime::{Device, DeviceKind, Executor, Precision, RunOptions, Value, VariableStore};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How an input is drawn.
#[derive(Clone, Copy)]
pub enum Domain {
    /// Uniform in [-1, 1].
    Any,
    /// Uniform in [0.5, 2] (logs, square roots, divisors).
    Positive,
    /// Uniform in [0, 1] (probabilities as labels).
    Unit,
}

pub struct Input {
    pub shape: Vec<usize>,
    pub domain: Domain,
}

pub fn input(shape: &[usize]) -> Input {
    Input { shape: shape.to_vec(), domain: Domain::Any }
}

pub fn positive(shape: &[usize]) -> Input {
    Input { shape: shape.to_vec(), domain: Domain::Positive }
}

pub fn unit(shape: &[usize]) -> Input {
    Input { shape: shape.to_vec(), domain: Domain::Unit }
}

fn draw(rng: &mut ChaCha8Rng, input: &Input) -> Vec<f64> {
    let n: usize = input.shape.iter().product();
    (0..n)
        .map(|_| {
            let u: f64 = rng.random();
            match input.domain {
                Domain::Any => 2.0 * u - 1.0,
                Domain::Positive => 0.5 + 1.5 * u,
                Domain::Unit => u,
            }
        })
        .collect()
}

/// Checks d loss / d input for every input, where `build` wires the op under test on the
/// inputs (variables named `x0`, `x1`, ...). Extra non-differentiable inputs (labels) are
/// constants inside `build`.
pub fn check(
    inputs: &[Input],
    build: impl Fn(&mut GraphBuilder<'_>, &[Outlet]) -> engine_graph::Result<Outlet>,
) -> Result<()> {
    check_with(inputs, 1e-6, 1e-4, build)
}

pub fn check_with(
    inputs: &[Input],
    h: f64,
    tolerance: f64,
    build: impl Fn(&mut GraphBuilder<'_>, &[Outlet]) -> engine_graph::Result<Outlet>,
) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut weights = None;
    let (mut g, xs, loss) = loss_graph(inputs, &build, &mut rng, &mut weights)?;
    let grads = gradients(&mut g, loss, &xs)?;
    g.roles.loss = Some(loss);
    let mut fetches = vec![loss];
    for (i, gr) in grads.iter().enumerate() {
        let gr = gr.ok_or_else(|| anyhow!("no gradient reached input {i}"))?;
        g.roles.fetches.insert(format!("grad{i}"), gr);
        fetches.push(gr);
    }
    let plan = Arc::new(Plan::new(g, vec![])?);
    // The finite differences run the loss alone, without the backward graph the executor
    // would otherwise compute for every perturbed element.
    let (mut lg, _, forward_loss) = loss_graph(inputs, &build, &mut rng, &mut weights)?;
    lg.roles.loss = Some(forward_loss);
    let forward = (Arc::new(Plan::new(lg, vec![])?), forward_loss);
    let values: Vec<Vec<f64>> = inputs.iter().map(|inp| draw(&mut rng, inp)).collect();
    for backend in backends()? {
        let checked = if backend.device.kind() == DeviceKind::Cpu {
            compare(&plan, &forward, &backend, inputs, &values, &fetches, h, tolerance)
        } else {
            same_as_cpu(&plan, &backend, inputs, &values, &fetches)
        };
        checked.map_err(|e| anyhow!("{}: {e}", backend.name))?;
    }
    Ok(())
}

/// The analytic gradients of `fetches` in f32 on `device` with the generic kernels.
fn analytic_f32(
    plan: &Arc<Plan>,
    device: &Device,
    native: bool,
    inputs: &[Input],
    values: &[Vec<f64>],
    fetches: &[Outlet],
) -> Result<Vec<Vec<f64>>> {
    let exec = Executor::new(plan.clone(), device.clone(), Precision::F32)?.with_native_kernels(native);
    evaluate(&exec, inputs, values, fetches)
}

/// One step of `exec` with the inputs `x0`, `x1`, ... set to `values`: every fetch as f64.
fn evaluate(exec: &Executor, inputs: &[Input], values: &[Vec<f64>], fetches: &[Outlet]) -> Result<Vec<Vec<f64>>> {
    let mut s = VariableStore::new();
    for (i, (inp, v)) in inputs.iter().zip(values).enumerate() {
        s.set(&format!("x{i}"), Value::from_f64(&inp.shape, v.clone(), exec.device().dispatch(), exec.precision()));
    }
    let out = exec.run(&mut s, &BTreeMap::new(), fetches, RunOptions::default())?;
    out.fetched.iter().map(|v| Ok(v.to_f64_vec()?)).collect()
}

/// A device's gradients against the native CPU kernels', both in f32 (which the finite
/// differences above check in f64). Devices are compared rather than differenced: Vulkan
/// has no f64 exp, log or trigonometry (GLSL.std.450 defines them for 16 and 32 bits), so
/// an f64 run there would test the driver, not the kernels.
fn same_as_cpu(
    plan: &Arc<Plan>,
    backend: &Backend,
    inputs: &[Input],
    values: &[Vec<f64>],
    fetches: &[Outlet],
) -> Result<()> {
    let want = analytic_f32(plan, &Device::cpu(), true, inputs, values, fetches)?;
    let got = analytic_f32(plan, &backend.device, false, inputs, values, fetches)?;
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let what = if i == 0 { "the loss".to_string() } else { format!("gradient {}", i - 1) };
        if w.len() != g.len() {
            return Err(anyhow!("{what} has {} elements, {} on the CPU", g.len(), w.len()));
        }
        let scale = w.iter().fold(1e-6f64, |m, x| m.max(x.abs()));
        for (j, (a, b)) in w.iter().zip(g).enumerate() {
            if (a - b).abs() > 1e-4 * scale {
                return Err(anyhow!(
                    "{what} element {j}: {b} on the device, {a} on the CPU (largest magnitude {scale:.3e})"
                ));
            }
        }
    }
    Ok(())
}

/// Where a check runs: the native CPU kernels, burn's generic kernels on flex (what every
/// GPU runs, checked here without one), and each device named in `ENGINE_TEST_DEVICES`
/// (`wgpu:0`, comma-separated), whose generic kernels are compared there with the CPU's.
pub struct Backend {
    name: String,
    device: Device,
    native: bool,
}

pub fn backends() -> Result<Vec<Backend>> {
    let mut out = vec![
        Backend { name: "native CPU kernels".into(), device: Device::cpu(), native: true },
        Backend { name: "generic kernels on flex".into(), device: Device::cpu(), native: false },
    ];
    for name in std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        let device = Device::open(name.trim().parse()?)?;
        out.push(Backend { name: format!("generic kernels on {device}"), device, native: false });
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn compare(
    plan: &Arc<Plan>,
    forward: &(Arc<Plan>, Outlet),
    backend: &Backend,
    inputs: &[Input],
    values: &[Vec<f64>],
    fetches: &[Outlet],
    h: f64,
    tolerance: f64,
) -> Result<()> {
    let executor = |plan: &Arc<Plan>| -> Result<Executor> {
        Ok(Executor::new(plan.clone(), backend.device.clone(), Precision::F64)?.with_native_kernels(backend.native))
    };
    let analytic = evaluate(&executor(plan)?, inputs, values, fetches)?;
    let loss_exec = executor(&forward.0)?;
    let run = |vals: &[Vec<f64>]| evaluate(&loss_exec, inputs, vals, &[forward.1]);
    for (i, inp) in inputs.iter().enumerate() {
        let got = &analytic[i + 1];
        if got.len() != values[i].len() {
            return Err(anyhow!("gradient {i} has {} elements, input has {}", got.len(), values[i].len()));
        }
        for j in 0..values[i].len() {
            let mut plus = values.to_vec();
            plus[i][j] += h;
            let mut minus = values.to_vec();
            minus[i][j] -= h;
            let numeric = (run(&plus)?[0][0] - run(&minus)?[0][0]) / (2.0 * h);
            let err = (got[j] - numeric).abs() / (1e-3 + got[j].abs().max(numeric.abs()));
            if err > tolerance {
                return Err(anyhow!(
                    "input {i} {:?} element {j}: analytic {} vs numeric {numeric} (relative error {err:.2e})",
                    inp.shape,
                    got[j]
                ));
            }
        }
    }
    Ok(())
}

/// `loss = Σ build(x) · r` over variables `x0`, `x1`, ... with fixed random weights `r`,
/// drawn on the first call and reused after, so that two calls build the same function.
fn loss_graph(
    inputs: &[Input],
    build: &impl Fn(&mut GraphBuilder<'_>, &[Outlet]) -> engine_graph::Result<Outlet>,
    rng: &mut ChaCha8Rng,
    weights: &mut Option<Vec<f32>>,
) -> Result<(Graph, Vec<Outlet>, Outlet)> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let mut xs = Vec::new();
    for (i, inp) in inputs.iter().enumerate() {
        xs.push(b.variable(&format!("x{i}"), &inp.shape, Initializer::Zeros, true)?);
    }
    let y = build(&mut b, &xs)?;
    let y_fact = b.fact(y)?.clone();
    let y_shape = y_fact.shape.as_known().ok_or_else(|| anyhow!("the output must have a known shape"))?;
    let n: usize = y_shape.iter().product();
    let r = weights.get_or_insert_with(|| (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()).clone();
    let r = b.constant(HostTensor::f32(y_shape.clone(), r)?)?;
    let weighted = b.mul(y, r)?;
    let loss = b.reduce_sum(weighted, &[], false)?;
    Ok((g, xs, loss))
}

/// An i64 constant (labels) for ops that take one.
pub fn labels(b: &mut GraphBuilder<'_>, values: &[i64]) -> engine_graph::Result<Outlet> {
    b.constant(HostTensor::i64(vec![values.len()], values.to_vec())?)
}
