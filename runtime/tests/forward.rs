//! Forward values of the kernels against naive reference implementations in TensorFlow's
//! semantics (NHWC, HWIO filters, SAME padding with the extra cell after, average pooling
//! over valid cells only). Gradient checks cannot catch a wrong forward kernel; these can.

use anyhow::{Result, anyhow};
use engine_graph::{
    DType, Graph, GraphBuilder, HostData, HostTensor, Outlet, Plan, Shape,
    ops::{Padding, Window},
};
use engine_runtime::{Device, Executor, Precision, RunOptions, VariableStore};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

fn random(shape: &[usize], seed: u64) -> HostTensor {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = shape.iter().product();
    HostTensor { shape: shape.to_vec(), data: HostData::F32((0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()) }
}

/// Runs `build` on placeholders fed with `inputs` with the native CPU kernels and with
/// burn's generic ones (what GPUs run), checks they agree, and returns the output.
fn eval(
    inputs: &[HostTensor],
    build: impl Fn(&mut GraphBuilder<'_>, &[Outlet]) -> engine_graph::Result<Outlet>,
) -> Result<HostTensor> {
    let native = eval_with(true, inputs, &build)?;
    let generic = eval_with(false, inputs, &build)?;
    if native.shape != generic.shape || native.dtype() != generic.dtype() {
        return Err(anyhow!(
            "native {:?} and generic {:?} kernels disagree on the output",
            native.shape,
            generic.shape
        ));
    }
    let (a, b) = (native.to_f64_vec(), generic.to_f64_vec());
    if let Some(i) = (0..a.len()).find(|&i| (a[i] - b[i]).abs() > 1e-4 * (1.0 + b[i].abs())) {
        return Err(anyhow!("native and generic kernels differ at element {i}: {} vs {}", a[i], b[i]));
    }
    Ok(native)
}

fn eval_with(
    native: bool,
    inputs: &[HostTensor],
    build: &impl Fn(&mut GraphBuilder<'_>, &[Outlet]) -> engine_graph::Result<Outlet>,
) -> Result<HostTensor> {
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let mut xs = Vec::new();
    let mut feeds = BTreeMap::new();
    for (i, t) in inputs.iter().enumerate() {
        let name = format!("in{i}");
        xs.push(b.placeholder(&name, t.dtype(), Shape::known(&t.shape))?);
        feeds.insert(name, t.clone());
    }
    let y = build(&mut b, &xs)?;
    g.roles.fetches.insert("y".into(), y);
    let exec =
        Executor::new(Arc::new(Plan::new(g, vec![])?), Device::cpu(), Precision::F32)?.with_native_kernels(native);
    let out = exec.run(&mut VariableStore::new(), &feeds, &[y], RunOptions::default())?;
    Ok(out.fetched[0].to_host()?)
}

fn close(a: &HostTensor, b: &[f32], shape: &[usize]) -> Result<()> {
    if a.shape != shape {
        return Err(anyhow!("shape {:?} != {:?}", a.shape, shape));
    }
    let got = a.as_f32().ok_or_else(|| anyhow!("not f32"))?;
    for (i, (x, y)) in got.iter().zip(b).enumerate() {
        if (x - y).abs() > 1e-4 * (1.0 + y.abs()) {
            return Err(anyhow!("element {i}: {x} != {y}"));
        }
    }
    Ok(())
}

/// TensorFlow's conv2d by definition.
fn naive_conv(x: &HostTensor, w: &HostTensor, stride: usize, padding: Padding) -> (Vec<f32>, Vec<usize>) {
    let (xd, wd) = (&x.shape, &w.shape);
    let (n, h, wi, c) = (xd[0], xd[1], xd[2], xd[3]);
    let (kh, kw, f) = (wd[0], wd[1], wd[3]);
    let win = Window { kernel: [kh, kw], strides: [stride, stride], padding };
    let ([oh, ow], p) = win.output([h, wi]).unwrap_or(([0, 0], [0; 4]));
    let (xs, ws) = (x.as_f32().unwrap_or_default(), w.as_f32().unwrap_or_default());
    let mut out = vec![0.0; n * oh * ow * f];
    for b in 0..n {
        for i in 0..oh {
            for j in 0..ow {
                for o in 0..f {
                    let mut acc = 0.0;
                    for di in 0..kh {
                        for dj in 0..kw {
                            let (r, s) = (
                                (i * stride + di) as isize - p[0] as isize,
                                (j * stride + dj) as isize - p[2] as isize,
                            );
                            if r < 0 || s < 0 || r >= h as isize || s >= wi as isize {
                                continue;
                            }
                            for ch in 0..c {
                                acc += xs[((b * h + r as usize) * wi + s as usize) * c + ch]
                                    * ws[((di * kw + dj) * c + ch) * f + o];
                            }
                        }
                    }
                    out[((b * oh + i) * ow + j) * f + o] = acc;
                }
            }
        }
    }
    (out, vec![n, oh, ow, f])
}

/// TensorFlow's pooling: max over, or mean of, the window's cells inside the input.
fn naive_pool(x: &HostTensor, k: usize, stride: usize, padding: Padding, max: bool) -> (Vec<f32>, Vec<usize>) {
    let (n, h, w, c) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let win = Window { kernel: [k, k], strides: [stride, stride], padding };
    let ([oh, ow], p) = win.output([h, w]).unwrap_or(([0, 0], [0; 4]));
    let xs = x.as_f32().unwrap_or_default();
    let mut out = vec![0.0; n * oh * ow * c];
    for b in 0..n {
        for i in 0..oh {
            for j in 0..ow {
                for ch in 0..c {
                    let (mut acc, mut count, mut best) = (0.0, 0, f32::NEG_INFINITY);
                    for di in 0..k {
                        for dj in 0..k {
                            let (r, s) = (
                                (i * stride + di) as isize - p[0] as isize,
                                (j * stride + dj) as isize - p[2] as isize,
                            );
                            if r < 0 || s < 0 || r >= h as isize || s >= w as isize {
                                continue;
                            }
                            let v = xs[((b * h + r as usize) * w + s as usize) * c + ch];
                            acc += v;
                            count += 1;
                            best = best.max(v);
                        }
                    }
                    out[((b * oh + i) * ow + j) * c + ch] = if max { best } else { acc / count as f32 };
                }
            }
        }
    }
    (out, vec![n, oh, ow, c])
}

#[test]
fn conv2d_matches_the_definition() -> Result<()> {
    for (xs, ws, stride, padding) in [
        ([2, 7, 7, 3], [3, 3, 3, 4], 1, Padding::Valid),
        ([1, 7, 6, 2], [3, 3, 2, 3], 2, Padding::Same),
        ([1, 5, 5, 1], [2, 2, 1, 2], 1, Padding::Same),
        ([2, 8, 8, 2], [4, 4, 2, 2], 3, Padding::Valid),
    ] {
        let (x, w) = (random(&xs, 1), random(&ws, 2));
        let y = eval(&[x.clone(), w.clone()], |b, i| b.conv2d(i[0], i[1], [stride, stride], padding))?;
        let (want, shape) = naive_conv(&x, &w, stride, padding);
        close(&y, &want, &shape)?;
    }
    Ok(())
}

#[test]
fn pooling_matches_tensorflow() -> Result<()> {
    for (xs, k, stride, padding) in [
        ([2, 6, 6, 3], 2, 2, Padding::Valid),
        ([1, 5, 5, 2], 2, 2, Padding::Same),
        ([1, 5, 7, 1], 3, 2, Padding::Same),
        ([1, 4, 4, 1], 3, 1, Padding::Same),
    ] {
        let x = random(&xs, 3);
        let win = Window { kernel: [k, k], strides: [stride, stride], padding };
        let y = eval(std::slice::from_ref(&x), |b, i| b.max_pool2d(i[0], win))?;
        let (want, shape) = naive_pool(&x, k, stride, padding, true);
        close(&y, &want, &shape)?;
        let y = eval(std::slice::from_ref(&x), |b, i| b.avg_pool2d(i[0], win))?;
        let (want, shape) = naive_pool(&x, k, stride, padding, false);
        close(&y, &want, &shape)?;
    }
    Ok(())
}

#[test]
fn cross_entropies_are_stable_for_large_logits() -> Result<()> {
    let logits = HostTensor::f32(vec![2, 3], vec![1000.0, 0.0, -1000.0, 1.0, 2.0, 3.0])?;
    let labels = HostTensor::i64(vec![2], vec![1, 2])?;
    let y = eval(&[logits.clone(), labels], |b, i| b.sparse_softmax_cross_entropy(i[0], i[1]))?;
    let lse2 = (1f32.exp() + 2f32.exp() + 3f32.exp()).ln();
    close(&y, &[1000.0, lse2 - 3.0], &[2])?;
    let hot = HostTensor::f32(vec![2, 3], vec![0.0, 1.0, 0.0, 0.0, 0.0, 1.0])?;
    let y = eval(&[logits.clone(), hot], |b, i| b.softmax_cross_entropy(i[0], i[1]))?;
    close(&y, &[1000.0, lse2 - 3.0], &[2])?;
    let z = HostTensor::f32(vec![2, 3], vec![1.0, 0.0, 0.0, 0.5, 0.5, 0.5])?;
    let y = eval(&[logits, z], |b, i| b.sigmoid_cross_entropy(i[0], i[1]))?;
    let sce = |x: f32, z: f32| x.max(0.0) - x * z + (1.0 + (-x.abs()).exp()).ln();
    close(
        &y,
        &[sce(1000.0, 1.0), sce(0.0, 0.0), sce(-1000.0, 0.0), sce(1.0, 0.5), sce(2.0, 0.5), sce(3.0, 0.5)],
        &[2, 3],
    )
}

#[test]
fn comparisons_casts_and_argmax() -> Result<()> {
    let x = HostTensor::f32(vec![2, 3], vec![0.1, 0.7, 0.2, 0.9, 0.05, 0.05])?;
    let labels = HostTensor::i64(vec![2], vec![1, 2])?;
    let y = eval(&[x.clone(), labels.clone()], |b, i| {
        let pred = b.argmax(i[0], -1)?;
        let hit = b.equal(pred, i[1])?;
        let f = b.cast(hit, DType::F32)?;
        b.reduce_mean(f, &[], false)
    })?;
    close(&y, &[0.5], &[])?;
    let y = eval(&[labels], |b, i| b.one_hot(i[0], 3))?;
    close(&y, &[0.0, 1.0, 0.0, 0.0, 0.0, 1.0], &[2, 3])?;
    let y = eval(&[x], |b, i| {
        let half = b.scalar(0.5)?;
        let big = b.greater(i[0], half)?;
        let small = b.less(i[0], half)?;
        let a = b.cast(big, DType::F32)?;
        let c = b.cast(small, DType::F32)?;
        b.sub(a, c)
    })?;
    close(&y, &[-1.0, 1.0, -1.0, 1.0, -1.0, -1.0], &[2, 3])
}

#[test]
fn integer_step_arithmetic() -> Result<()> {
    let step = HostTensor::scalar_i64(41);
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let s = b.placeholder("s", DType::I64, Shape::scalar())?;
    let one = b.constant(HostTensor::scalar_i64(1))?;
    let y = b.add(s, one)?;
    g.roles.fetches.insert("y".into(), y);
    let exec = Executor::new(Arc::new(Plan::new(g, vec![])?), Device::cpu(), Precision::F32)?;
    let feeds = BTreeMap::from([("s".to_string(), step)]);
    let out = exec.run(&mut VariableStore::new(), &feeds, &[y], RunOptions::default())?;
    assert_eq!(out.fetched[0].to_host()?, HostTensor::scalar_i64(42));
    Ok(())
}

/// Dropout's native kernel draws the generic kernel's mask (the same stream, bit for bit,
/// which `eval` checks), keeps about `1 - rate` of the units scaled by `1 / (1 - rate)`,
/// and lets a NaN through where its unit is dropped, as `x * 0` does.
#[test]
fn dropout_native_and_generic_masks_agree() -> Result<()> {
    let mut x = random(&[64, 50], 11);
    if let HostData::F32(v) = &mut x.data {
        v[7] = f32::NAN;
    }
    let y = eval(&[x.clone()], |b, xs| b.dropout(xs[0], 0.25, 5))?;
    let (xs, ys) = (x.as_f32().unwrap_or_default(), y.as_f32().unwrap_or_default());
    anyhow::ensure!(ys[7].is_nan(), "a NaN input must stay NaN, dropped or not");
    let kept = ys.iter().zip(xs).filter(|(y, x)| **y != 0.0 && (**y - **x / 0.75).abs() <= 1e-6).count();
    let fraction = kept as f64 / (xs.len() - 1) as f64;
    anyhow::ensure!((fraction - 0.75).abs() < 0.03, "kept {fraction} of the units, expected about 0.75");
    Ok(())
}

/// An embedding lookup picks rows; an id outside the table is an error naming the node
/// and the id (a wrapped or out-of-bounds read would be silent or a crash).
#[test]
fn gather_picks_rows_and_refuses_ids_outside_the_table() -> Result<()> {
    let table = random(&[4, 3], 5);
    let ids = HostTensor { shape: vec![2, 2], data: HostData::I64(vec![3, 0, 3, 1]) };
    let y = eval(&[table.clone(), ids], |b, x| b.gather(x[0], x[1]))?;
    assert_eq!(y.shape, vec![2, 2, 3]);
    let (t, got) = (table.to_f64_vec(), y.to_f64_vec());
    for (i, &row) in [3usize, 0, 3, 1].iter().enumerate() {
        assert_eq!(&got[3 * i..3 * i + 3], &t[3 * row..3 * row + 3]);
    }
    for native in [true, false] {
        let bad = HostTensor { shape: vec![2], data: HostData::I64(vec![1, 4]) };
        let err = eval_with(native, &[table.clone(), bad], &|b, x| b.gather(x[0], x[1]))
            .err()
            .ok_or_else(|| anyhow!("id 4 of a 4-row table was accepted"))?;
        let text = format!("{err:#}");
        assert!(text.contains("GatherV2") && text.contains("index 4 is outside the table's 4 rows"), "{text}");
    }
    Ok(())
}

/// Grouped convolution = the groups' plain convolutions side by side; dilated convolution
/// = a plain one with zeros between the taps (TensorFlow's definitions).
#[test]
fn grouped_and_dilated_convolutions_match_their_plain_equivalents() -> Result<()> {
    use engine_graph::ops::Conv2d;
    let (x, w) = (random(&[2, 5, 5, 4], 11), random(&[2, 2, 2, 6], 12));
    let grouped = Conv2d { strides: [1, 1], padding: Padding::Same, dilation: [1, 1], groups: 2 };
    let got = eval(&[x.clone(), w.clone()], |b, v| b.conv2d_general(v[0], v[1], grouped.clone()))?;
    let want = eval(&[x, w], |b, v| {
        let mut parts = Vec::new();
        for g in 0..2 {
            let xs = b.slice(v[0], &[0, 0, 0, 2 * g], &[None, None, None, Some(2)])?;
            let ws = b.slice(v[1], &[0, 0, 0, 3 * g], &[None, None, None, Some(3)])?;
            parts.push(b.conv2d(xs, ws, [1, 1], Padding::Same)?);
        }
        b.concat(&parts, 3)
    })?;
    let want_f32: Vec<f32> = want.to_f64_vec().iter().map(|&v| v as f32).collect();
    close(&got, &want_f32, &want.shape).map_err(|e| anyhow!("grouped: {e}"))?;

    let (x, w) = (random(&[1, 7, 6, 1], 13), random(&[2, 2, 1, 1], 14));
    let t = w.to_f64_vec();
    let mut spread = vec![0.0f32; 9];
    for (i, j) in [(0usize, 0usize), (0, 1), (1, 0), (1, 1)] {
        spread[6 * i + 2 * j] = t[2 * i + j] as f32;
    }
    let spread = HostTensor { shape: vec![3, 3, 1, 1], data: HostData::F32(spread) };
    let dilated = Conv2d { strides: [1, 1], padding: Padding::Same, dilation: [2, 2], groups: 1 };
    let got = eval(&[x.clone(), w], |b, v| b.conv2d_general(v[0], v[1], dilated.clone()))?;
    let want = eval(&[x, spread], |b, v| b.conv2d(v[0], v[1], [1, 1], Padding::Same))?;
    let want_f32: Vec<f32> = want.to_f64_vec().iter().map(|&v| v as f32).collect();
    close(&got, &want_f32, &want.shape).map_err(|e| anyhow!("dilated: {e}"))
}

/// Softmax and log-softmax over the last axis, and the sparse cross entropy, against the
/// definitions (native and generic kernels agree inside `eval`); large logits do not
/// overflow. A label outside the classes is an error that names it.
#[test]
fn softmax_and_sparse_cross_entropy_match_their_definitions() -> Result<()> {
    let mut logits = random(&[5, 7], 21);
    if let HostData::F32(v) = &mut logits.data {
        v[3] = 80.0; // exp(80) overflows f32 unless the row's maximum is taken out first
    }
    let x = logits.to_f64_vec();
    let lse: Vec<f64> = x.chunks(7).map(|r| r.iter().map(|v| v.exp()).sum::<f64>().ln()).collect();
    let soft = eval(&[logits.clone()], |b, v| b.softmax(v[0], -1))?.to_f64_vec();
    let log = eval(&[logits.clone()], |b, v| b.log_softmax(v[0], -1))?.to_f64_vec();
    for (i, v) in x.iter().enumerate() {
        let want = v - lse[i / 7];
        anyhow::ensure!((log[i] - want).abs() < 1e-5 && (soft[i] - want.exp()).abs() < 1e-6, "element {i}");
    }
    let labels = HostTensor { shape: vec![5], data: HostData::I64(vec![0, 6, 3, 2, 5]) };
    let loss = eval(&[logits.clone(), labels], |b, v| b.sparse_softmax_cross_entropy(v[0], v[1]))?;
    anyhow::ensure!(loss.shape == vec![5], "{:?}", loss.shape);
    for (r, (&l, got)) in [0usize, 6, 3, 2, 5].iter().zip(loss.to_f64_vec()).enumerate() {
        anyhow::ensure!((got - (lse[r] - x[r * 7 + l])).abs() < 1e-5, "row {r}: {got}");
    }
    let bad = HostTensor { shape: vec![5], data: HostData::I64(vec![0, 7, 3, 2, 5]) };
    let err = eval_with(true, &[logits, bad], &|b, v| b.sparse_softmax_cross_entropy(v[0], v[1]))
        .err()
        .ok_or_else(|| anyhow!("label 7 of 7 classes was accepted"))?;
    let text = format!("{err:#}");
    anyhow::ensure!(text.contains("label 7") && text.contains("outside the 7 classes"), "{text}");
    Ok(())
}

/// Synchronized batch normalization takes its moments about the moving mean: over values a
/// thousand from zero spread by hundredths, once the moving mean has come near them, the
/// normalized output has unit variance per feature. Taken about zero, `E[x²] - E[x]²` in
/// f32 had no digit of the variance left (an `x²` of a million rounds by 0.06, the
/// variance is 3e-5).
#[test]
fn synchronized_batch_statistics_keep_their_digits_far_from_zero() -> Result<()> {
    let (n, c) = (256usize, 4usize);
    let x: Vec<f32> =
        (0..n * c).map(|i| 1000.0 + (((i * 7919) % 101) as f32 / 101.0 - 0.5) * 0.02 * (1 + i % c) as f32).collect();
    let mut g = Graph::new();
    let mut b = GraphBuilder::new(&mut g);
    let input = b.placeholder("x", DType::F32, Shape::batched(&[c]))?;
    let bn = engine_graph::layers::BatchNormalization { synchronized: true, epsilon: 1e-12, ..Default::default() };
    let y = bn.apply(&mut b, input, true)?;
    g.roles.fetches.insert("y".into(), y);
    let plan = Arc::new(Plan::new(g, vec![])?);
    let moving_mean = plan
        .graph
        .nodes()
        .map(|(_, node)| node.name.clone())
        .find(|name| name.ends_with("moving_mean"))
        .ok_or_else(|| anyhow!("no moving mean"))?;
    let exec = Executor::new(plan.clone(), Device::cpu(), Precision::F32)?;
    let mut vars = VariableStore::new();
    exec.initialize(&mut vars, 1)?;
    let near = HostTensor { shape: vec![c], data: HostData::F32(vec![1000.0; c]) };
    vars.import(&plan.graph, &BTreeMap::from([(moving_mean, near)]), Device::cpu().dispatch(), Precision::F32)?;
    let feeds = BTreeMap::from([("x".to_string(), HostTensor { shape: vec![n, c], data: HostData::F32(x) })]);
    let out = exec.run(&mut vars, &feeds, &[y], RunOptions::default())?.fetched[0].to_host()?.to_f64_vec();
    for j in 0..c {
        let column: Vec<f64> = out.iter().skip(j).step_by(c).copied().collect();
        let mean = column.iter().sum::<f64>() / n as f64;
        let var = column.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        anyhow::ensure!(mean.abs() < 2e-2 && (var - 1.0).abs() < 1e-3, "feature {j}: mean {mean}, variance {var}");
    }
    Ok(())
}
