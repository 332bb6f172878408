//! The tutorial CNN's gradients derived by the graph compiler and run by the engine's
//! kernels, against burn's own Autodiff backend on the same weights and batch.

use anyhow::{Result, anyhow};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};
use burn::tensor::{Device as BurnDevice, Int, Tensor, TensorData, activation, module};
use engine_graph::{
    DType, Graph, GraphBuilder, HostTensor, Initializer, Plan, Shape,
    autodiff::Autodiff,
    ops::{Padding, Window},
    passes::{PassManager, optimization_passes},
};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use std::collections::BTreeMap;
use std::sync::Arc;

const N: usize = 8;

/// The CNN as the engine builds it (NHWC, HWIO).
fn engine_graph() -> Result<Graph> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let x = b.placeholder("x", DType::F32, Shape::batched(&[28, 28, 1]))?;
    let y = b.placeholder("labels", DType::I64, Shape::batched(&[]))?;
    let k = b.variable("conv2d/kernel", &[3, 3, 1, 32], Initializer::GlorotUniform, true)?;
    let kb = b.variable("conv2d/bias", &[32], Initializer::RandomNormal { mean: 0.0, stddev: 0.1 }, true)?;
    let c = b.conv2d(x, k, [1, 1], Padding::Valid)?;
    let c = b.add(c, kb)?;
    let c = b.relu(c)?;
    let p = b.max_pool2d(c, Window { kernel: [2, 2], strides: [2, 2], padding: Padding::Valid })?;
    let f = b.flatten(p)?;
    let w1 = b.variable("dense/kernel", &[5408, 64], Initializer::GlorotUniform, true)?;
    let b1 = b.variable("dense/bias", &[64], Initializer::RandomNormal { mean: 0.0, stddev: 0.1 }, true)?;
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
    Ok(g)
}

fn floats(t: &HostTensor) -> Result<Vec<f32>> {
    t.as_f32().map(<[f32]>::to_vec).ok_or_else(|| anyhow!("not f32"))
}

fn burn_tensor<const D: usize>(data: Vec<f32>, shape: [usize; D], device: &BurnDevice) -> Tensor<D> {
    Tensor::<D>::from_data(TensorData::new(data, shape), device)
}

fn to_vec<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.into_data().try_to_vec::<f32>().map_err(|e| anyhow!("{e:?}"))
}

#[test]
fn cnn_gradients_match_burn_autodiff() -> Result<()> {
    // The engine: autodiff as a graph pass, optimizations (fusions included), native kernels.
    let mut g = engine_graph()?;
    let mut passes = PassManager::new().with(Autodiff);
    for p in optimization_passes() {
        passes.push(p);
    }
    passes.run(&mut g)?;
    let plan = Arc::new(Plan::new(g, passes.log().to_vec())?);
    let exec = Executor::new(plan.clone(), Device::cpu(), Precision::F32)?;
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 1234)?;
    let x: Vec<f32> = (0..N * 784).map(|i| ((i * 37) % 255) as f32 / 255.0).collect();
    let labels: Vec<i64> = (0..N as i64).map(|i| (i * 3) % 10).collect();
    let feeds = BTreeMap::from([
        ("x".to_string(), HostTensor::f32(vec![N, 28, 28, 1], x.clone())?),
        ("labels".to_string(), HostTensor::i64(vec![N], labels.clone())?),
    ]);
    let mut fetches = vec![plan.graph.roles.loss.ok_or_else(|| anyhow!("no loss"))?];
    let names: Vec<String> = plan.graph.roles.gradients.iter().map(|(v, _)| plan.graph.node(*v).name.clone()).collect();
    fetches.extend(plan.graph.roles.gradients.iter().map(|(_, g)| *g));
    let out = exec.run(&mut vars, &feeds, &fetches, RunOptions::default())?;
    let ours: BTreeMap<String, HostTensor> = names
        .iter()
        .cloned()
        .zip(out.fetched[1..].iter().map(|v| v.to_host()).collect::<Result<Vec<_>, _>>()?)
        .collect();
    let our_loss = out.fetched[0].to_host()?.scalar_value().unwrap_or(f64::NAN);

    // burn: the same network on the same weights, NCHW, differentiated by its Autodiff backend.
    let device = BurnDevice::flex().autodiff();
    let w = vars.export()?;
    let param = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let t = w.get(name).ok_or_else(|| anyhow!("no {name}"))?;
        if t.shape != shape {
            return Err(anyhow!("{name} {:?}", t.shape));
        }
        floats(t)
    };
    let k = burn_tensor(param("conv2d/kernel", &[3, 3, 1, 32])?, [3, 3, 1, 32], &device)
        .permute([3, 2, 0, 1])
        .require_grad();
    let kb = burn_tensor(param("conv2d/bias", &[32])?, [32], &device).require_grad();
    let w1 = burn_tensor(param("dense/kernel", &[5408, 64])?, [5408, 64], &device).require_grad();
    let b1 = burn_tensor(param("dense/bias", &[64])?, [64], &device).require_grad();
    let w2 = burn_tensor(param("dense_1/kernel", &[64, 10])?, [64, 10], &device).require_grad();
    let b2 = burn_tensor(param("dense_1/bias", &[10])?, [10], &device).require_grad();
    let xb = burn_tensor(x, [N, 28, 28, 1], &device).permute([0, 3, 1, 2]);
    let c = module::conv2d(xb, k.clone(), Some(kb.clone()), ConvOptions::new([1, 1], [0, 0], [1, 1], 1));
    let c = activation::relu(c);
    let p = module::max_pool2d(c, MaxPoolOptions::new([2, 2]).with_stride([2, 2]));
    // Flatten in TensorFlow's NHWC order, as the engine does.
    let f = p.permute([0, 2, 3, 1]).reshape([N, 5408]);
    let h = activation::relu(f.matmul(w1.clone()) + b1.clone().unsqueeze::<2>());
    let o = h.matmul(w2.clone()) + b2.clone().unsqueeze::<2>();
    let lsm = activation::log_softmax(o, 1);
    let idx = Tensor::<2, Int>::from_data(TensorData::new(labels, [N, 1]), &device);
    let loss = lsm.gather(1, idx).mean().neg();
    let burn_loss = to_vec(loss.clone())?[0] as f64;
    let grads = loss.backward();
    let grad = |t: &Tensor<1>| -> Result<Vec<f32>> { to_vec(t.grad(&grads).ok_or_else(|| anyhow!("no grad"))?) };
    let reference: BTreeMap<&str, Vec<f32>> = BTreeMap::from([
        ("conv2d/kernel", to_vec(k.grad(&grads).ok_or_else(|| anyhow!("no grad"))?.permute([2, 3, 1, 0]))?),
        ("conv2d/bias", grad(&kb)?),
        ("dense/kernel", to_vec(w1.grad(&grads).ok_or_else(|| anyhow!("no grad"))?)?),
        ("dense/bias", grad(&b1)?),
        ("dense_1/kernel", to_vec(w2.grad(&grads).ok_or_else(|| anyhow!("no grad"))?)?),
        ("dense_1/bias", grad(&b2)?),
    ]);

    assert!((our_loss - burn_loss).abs() < 1e-5, "loss {our_loss} vs {burn_loss}");
    assert_eq!(ours.len(), 6);
    for (name, want) in &reference {
        let got = floats(&ours[*name])?;
        assert_eq!(got.len(), want.len(), "{name}");
        let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-4, "{name}: max abs diff {worst}");
    }
    Ok(())
}
