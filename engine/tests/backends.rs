//! One test body per backend: the gradients of a training step of the shipped CNN and
//! residual specs, computed by the native CPU kernels (the reference), by burn's generic
//! kernels on flex (what a GPU runs, checked in every CI run), and by the generic kernels on
//! each device named in `ENGINE_TEST_DEVICES` (`wgpu:0`, or `wgpu:0,cuda:0`; a build with
//! the backend's feature, see the README), must agree within 1e-4 relative.
//!
//! Same variables (initialized on the CPU, copied to each device), same batch, same
//! dropout masks (drawn from the seed and step on every backend).

use anyhow::{Context, Result, anyhow, ensure};
use engine_cli::lower::training_plan;
use engine_cli::spec::{Spec, Strategy};
use engine_graph::{HostTensor, Outlet, Plan};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

const CNN: &str = include_str!("../../specs/fashion_mnist_cnn.ron");
const RESIDUAL: &str = include_str!("../../specs/fashion_mnist_residual.ron");
const BATCH: usize = 8;

struct Backend {
    name: String,
    device: Device,
    native: bool,
}

fn backends() -> Result<Vec<Backend>> {
    let mut out = vec![Backend { name: "generic kernels on flex".into(), device: Device::cpu(), native: false }];
    let listed = std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default();
    for name in listed.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let device = Device::parse(name).with_context(|| format!("ENGINE_TEST_DEVICES names `{name}`"))?;
        out.push(Backend { name: format!("generic kernels on {device}"), device, native: false });
    }
    Ok(out)
}

/// A fixed batch for every input the plan has: images in [0, 1] from a simple generator,
/// labels cycling over the classes.
fn feeds(plan: &Plan) -> Result<BTreeMap<String, HostTensor>> {
    let mut state = 12345u64;
    let pixels: Vec<f32> = (0..BATCH * 28 * 28)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    let labels: Vec<i64> = (0..BATCH as i64).map(|i| (i * 7) % 10).collect();
    let mut out = BTreeMap::new();
    for name in plan.graph.roles.inputs.keys() {
        let value = match name.as_str() {
            "labels" => HostTensor::i64(vec![BATCH], labels.clone())?,
            _ => HostTensor::f32(vec![BATCH, 28, 28, 1], pixels.clone())?,
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
}

/// The loss and every gradient of one step at step 3 (dropout draws a non-trivial mask).
fn gradients(
    plan: &Arc<Plan>,
    backend: &Backend,
    init: &BTreeMap<String, HostTensor>,
    feeds: &BTreeMap<String, HostTensor>,
) -> Result<Vec<HostTensor>> {
    let exec = Executor::new(plan.clone(), backend.device.clone(), Precision::F32)?.with_native_kernels(backend.native);
    let mut store = VariableStore::new();
    store.import(&plan.graph, init, backend.device.dispatch(), Precision::F32)?;
    let roles = &plan.graph.roles;
    let mut fetches: Vec<Outlet> = roles.loss.into_iter().collect();
    fetches.extend(roles.gradients.iter().map(|(_, g)| *g));
    let out = exec.run(&mut store, feeds, &fetches, RunOptions { step: 3, ..RunOptions::default() })?;
    ensure!(out.non_finite.is_empty(), "a check found non-finite values: {:?}", out.non_finite);
    out.fetched.iter().map(|v| Ok(v.to_host()?)).collect()
}

fn same_gradients(text: &str, file: &str) -> Result<()> {
    let spec = Spec::parse(text, file, &[])?;
    let plan = Arc::new(training_plan(&spec, Strategy::Default)?);
    ensure!(!plan.graph.roles.gradients.is_empty(), "{file}: the plan has no gradients");
    let feeds = feeds(&plan)?;
    let cpu = Device::cpu();
    let mut init = VariableStore::new();
    Executor::new(plan.clone(), cpu.clone(), Precision::F32)?.initialize(&mut init, 42)?;
    let init = init.export()?;
    let reference = Backend { name: "native CPU kernels".into(), device: cpu, native: true };
    let expected = gradients(&plan, &reference, &init, &feeds)?;
    let names: Vec<String> = std::iter::once("loss".to_string())
        .chain(plan.graph.roles.gradients.iter().map(|(v, _)| format!("d/d {}", plan.graph.node(*v).name)))
        .collect();
    let mut failures = Vec::new();
    for backend in backends()? {
        let got = gradients(&plan, &backend, &init, &feeds).with_context(|| format!("{file} on {}", backend.name))?;
        for ((name, want), got) in names.iter().zip(&expected).zip(&got) {
            ensure!(
                want.shape == got.shape,
                "{file} {name}: shape {:?} on {}, {:?} on the CPU",
                got.shape,
                backend.name,
                want.shape
            );
            let (want, got) = (want.to_f64_vec(), got.to_f64_vec());
            let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
            ensure!(scale > 0.0, "{file} {name}: all zero on the CPU, so the comparison would prove nothing");
            if worst > 1e-4 * scale {
                failures.push(format!(
                    "{name} on {}: differs from the CPU by {worst:.3e} (largest magnitude {scale:.3e})",
                    backend.name
                ));
            }
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(anyhow!("{file}:\n  {}", failures.join("\n  "))) }
}

#[test]
fn cnn_gradients_agree_on_every_backend() -> Result<()> {
    same_gradients(CNN, "specs/fashion_mnist_cnn.ron")
}

#[test]
fn residual_gradients_agree_on_every_backend() -> Result<()> {
    same_gradients(RESIDUAL, "specs/fashion_mnist_residual.ron")
}

/// `--device wgpu:N` past the last adapter names the ones this machine has (or, with none,
/// what to install); it never falls back to the CPU.
#[cfg(feature = "wgpu")]
#[test]
fn a_missing_wgpu_adapter_is_named_with_the_ones_found() -> Result<()> {
    let err = match Device::parse("wgpu:4000") {
        Ok(d) => return Err(anyhow!("wgpu:4000 opened as {d}")),
        Err(e) => e.to_string(),
    };
    ensure!(
        err.contains("there is no wgpu:4000; this machine has wgpu:0 = ") || err.contains("no wgpu adapter found"),
        "{err}"
    );
    Ok(())
}
