//! Kernels: each graph op mapped to burn primitives.
//!
//! Kernels receive their inputs by value (moved when it was the last use) and return their
//! outputs; the executor checks every output against the node's fact. Float kernels work in
//! whatever precision the inputs carry (f32 for training, f64 for gradient checks).

mod activation;
mod attention;
pub(crate) mod autocast;
mod collective;
pub use collective::FAULT_IN_ALL_REDUCE_ENV;
pub(crate) use collective::all_reduce;
#[cfg(target_arch = "x86_64")]
pub use cpu::has_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use cpu::has_avx512;
pub(crate) use cpu::large_f32_kernel;
pub(crate) use dropout::step_seed as dropout_seed;
pub(crate) use row_sparse::all_gather_rows;
mod conv;
mod conv_form;
pub(crate) use conv_form::report as report_conv_forms;
mod conv_gemm;
mod conv_implicit;
mod cpu;
mod dropout;
#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
mod elementwise_kernel;
mod gather;
mod logic;
mod loss;
mod math;
mod normalization;
#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
mod patch_kernel;
mod pool;
mod reduce;
mod row_sparse;
mod shape;
mod staged_reduce;
mod transfer;

use crate::{
    Precision, Result, RuntimeError, Value,
    shapes::resolve,
    value::{B, T},
};
use burn::backend::ops::{ActivationOps, FloatTensorOps};
use burn::backend::{DispatchDevice, TensorMetadata};
use burn::tensor::Shape as BurnShape;
use engine_graph::{Node, Op, ops::FusedActivation};

pub(crate) struct KernelCtx<'a> {
    pub node: &'a Node,
    pub device: &'a DispatchDevice,
    pub precision: Precision,
    pub batch: Option<usize>,
    pub step: i64,
    pub replica: u64,
    /// Use the native CPU kernels where they apply.
    pub native: bool,
    /// The group collective ops join (replicas of a strategy).
    pub collective: Option<&'a dyn crate::Collective>,
    /// The device's largest buffer in bytes (`None`: no limit), which a kernel's own
    /// temporaries must fit as well as the graph's tensors.
    pub max_buffer: Option<u64>,
    /// The constants kernels make from host values, made once per executor.
    pub memo: &'a Memo,
    /// A dropout's seed for the step as a one-element device tensor, in a recorded step
    /// (whose replays write each step's seed there); `None`: the seed is a kernel argument.
    pub seed: Option<&'a T>,
    /// Whether this step is being recorded for replays (`executor/replay.rs`): a value
    /// that changes from step to step must then come from the device, never be baked into
    /// a kernel's arguments.
    pub recording: bool,
    /// Where the executor asks the kernel whether some of its outputs are finite
    /// throughout, because a `CheckNumerics` reads them: a kernel that sees every value as it
    /// stores it (the CPU's fused elementwise pass) answers, and the check then reads
    /// nothing, where reading the value again went back to memory (an optimizer's update
    /// is as large as its variable). `None`: nobody asks.
    pub verdict: Option<&'a Verdict>,
}

/// A kernel's answer to "is every value of these outputs finite?", asked about the
/// outputs a `CheckNumerics` reads (bit `j` of `asked` for output `j`): no until a kernel
/// that can tell for free says yes (a "no" and no answer both leave the check to count).
/// Atomic because a context is shared with the kernel's worker threads.
pub(crate) struct Verdict {
    asked: u64,
    finite: std::sync::atomic::AtomicU64,
}

impl Verdict {
    pub(crate) fn asking(outputs: u64) -> Self {
        Verdict { asked: outputs, finite: std::sync::atomic::AtomicU64::new(0) }
    }

    /// The outputs asked about, as a mask.
    pub(crate) fn asked(&self) -> u64 {
        self.asked
    }

    /// The outputs a kernel found finite throughout, as a mask.
    pub(crate) fn tell(&self, finite: u64) {
        self.finite.store(finite & self.asked, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a kernel said output `j` is finite throughout.
    pub(crate) fn finite(&self, j: usize) -> bool {
        j < 64 && self.finite.load(std::sync::atomic::Ordering::Relaxed) & (1 << j) != 0
    }
}

/// Device constants that kernels make from host values (an index range, an element
/// count), uploaded once per executor and reused: a step then uploads only its feeds, and
/// a recorded step (`executor/replay.rs`), inside whose window nothing may be written,
/// none at all. Kernels never compute in place on them: the memo holds a reference, so
/// the backend sees them shared.
#[derive(Default)]
pub(crate) struct Memo(std::sync::Mutex<std::collections::HashMap<MemoKey, T>>);

#[derive(PartialEq, Eq, Hash)]
enum MemoKey {
    /// `0..n` in 64-bit integers.
    Range(usize),
    /// A float scalar, by its bits.
    Scalar(u64),
}

impl Memo {
    fn get(&self, key: MemoKey, make: impl FnOnce() -> T) -> T {
        let mut memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        memo.entry(key).or_insert_with(make).clone()
    }
}

impl KernelCtx<'_> {
    pub fn err(&self, reason: impl Into<String>) -> RuntimeError {
        RuntimeError::Kernel { node: self.node.name.clone(), op: self.node.op.name(), reason: reason.into() }
    }

    /// The concrete shape of output `i`.
    /// The shape output `i` must have. A scalar is `[1]` on cubecl devices, as the inputs
    /// are (see [`run`]): a kernel that allocates its output in this shape (a comparison's
    /// mask, an expansion) would otherwise ask cubecl for a rank-0 buffer, which panics.
    pub fn out_shape(&self, i: usize) -> Result<Vec<usize>> {
        let dims = resolve(&self.node.outputs[i].shape, self.batch)
            .ok_or_else(|| self.err("the output shape depends on the batch size, but nothing fed one"))?;
        Ok(if dims.is_empty() && !matches!(self.device, DispatchDevice::Flex(_)) { vec![1] } else { dims })
    }

    pub fn float(&self, v: Value) -> Result<T> {
        match v {
            Value::Float(t) => Ok(t),
            other => Err(self.err(format!("expected a float input, got {:?}", other.dtype()))),
        }
    }

    pub fn floats<const N: usize>(&self, inputs: Vec<Value>) -> Result<[T; N]> {
        let v = inputs.into_iter().map(|x| self.float(x)).collect::<Result<Vec<T>>>()?;
        v.try_into().map_err(|_| self.err(format!("expected {N} inputs")))
    }

    /// How this device stores booleans: cubecl's shaders have no native bool buffers
    /// (they store u8 or u32), flex does.
    pub fn bool_dtype(&self) -> burn::tensor::BoolStore {
        burn::backend::get_device_settings::<B>(self.device).bool_dtype
    }

    /// The integer type of argmax positions: i64 on flex (the native kernels read them as
    /// such), the device's own elsewhere. cubecl's pooling kernels write i32 positions
    /// whatever dtype is asked for, so asking for i64 there reads them back as garbage.
    pub fn index_dtype(&self) -> burn::tensor::IntDType {
        if matches!(self.device, DispatchDevice::Flex(_)) {
            burn::tensor::IntDType::I64
        } else {
            burn::backend::get_device_settings::<B>(self.device).int_dtype
        }
    }

    /// A float scalar in the working precision.
    pub fn scalar(&self, v: f64) -> T {
        self.memo.get(MemoKey::Scalar(v.to_bits()), || {
            crate::value::float_from_f64(&[], vec![v], self.device, self.precision)
        })
    }

    /// `0..n` as 64-bit integers on the device.
    pub fn range(&self, n: usize) -> T {
        self.memo.get(MemoKey::Range(n), || {
            <B as burn::backend::ops::IntTensorOps<B>>::int_arange(
                0..n as i64,
                self.device,
                burn::tensor::IntDType::I64,
            )
        })
    }
}

pub(crate) fn run(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    if !matches!(ctx.device, DispatchDevice::Flex(_)) {
        // cubecl 0.11 cannot allocate a rank-0 buffer (its stride computation underflows
        // and panics), so a kernel there sees scalars as one-element vectors: burn's
        // broadcasting treats both alike, and the executor reshapes what comes out to the
        // node's shape.
        let inputs = inputs.into_iter().map(|v| if v.shape().is_empty() { v.reshaped(&[1]) } else { v }).collect();
        return generic(op, inputs, ctx);
    }
    if !ctx.native {
        return generic(op, inputs, ctx);
    }
    let inputs = match cpu::try_run(op, inputs, ctx) {
        Ok(done) => return done,
        Err(inputs) => inputs,
    };
    generic(op, inputs, ctx)
}

/// The backend-generic kernels (every device; the CPU falls back to them for the cases the
/// native kernels do not cover).
pub(crate) fn generic(op: &Op, inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Vec<Value>> {
    use Op::*;
    let one = |t: T| Ok(vec![Value::Float(t)]);
    match op {
        MatMul(m) => one(math::matmul(m, inputs, ctx)?),
        Add(_) | Sub(_) | Mul(_) | Div(_) | Maximum(_) | Minimum(_) => Ok(vec![math::binary(op, inputs, ctx)?]),
        AddN(_) => one(math::add_n(inputs, ctx)?),
        Neg(_) | Exp(_) | Log(_) | Sqrt(_) | Square(_) | Cos(_) | Sin(_) | Erf(_) => one(math::unary(op, inputs, ctx)?),
        Relu(_) | ReluGrad(_) | Sigmoid(_) | Tanh(_) | Softmax(_) | LogSoftmax(_) => {
            one(activation::run(op, inputs, ctx)?)
        }
        ReduceSum(_) | ReduceMean(_) | ReduceMax(_) => Ok(vec![reduce::run(op, inputs, ctx)?]),
        Size(s) => one(reduce::size(s, inputs, ctx)?),
        Reshape(_) => Ok(vec![first(inputs, ctx)?.reshaped(&ctx.out_shape(0)?)]),
        Transpose(t) => Ok(vec![shape::transpose(t, first(inputs, ctx)?)]),
        Concat(c) => Ok(vec![shape::concat(c, inputs, ctx)?]),
        Slice(s) => Ok(vec![shape::slice(s, first(inputs, ctx)?, ctx)?]),
        Pad(p) => one(shape::pad(p, inputs, ctx)?),
        BroadcastTo(_) => Ok(vec![shape::broadcast_to(first(inputs, ctx)?, ctx)?]),
        Gather(_) => Ok(vec![gather::gather(inputs, ctx)?]),
        ScatterAddRows(s) => Ok(vec![gather::scatter_add_rows(s.rows, inputs, ctx)?]),
        RowsTouched(r) => Ok(vec![row_sparse::rows_touched(r.rows, inputs, ctx)?]),
        Conv2d(c) => one(conv::forward(c, inputs, ctx)?),
        Conv2dBackpropInput(c) => one(conv::backprop_input(c, inputs, ctx)?),
        FusedConv2dBackpropInput(f) => {
            // The input gradient, then its mask (and sum) as one elementwise program: a
            // generated kernel on devices, the fused loop elsewhere.
            let mut rest = inputs;
            let head: Vec<Value> = rest.drain(..2.min(rest.len())).collect();
            let dx = conv::backprop_input(&f.input_grad, head, ctx)?;
            rest.insert(0, Value::Float(dx));
            math::fused_elementwise(&f.epilogue(), rest, ctx)
        }
        Conv2dBackpropFilter(c) => filter_grad_with_bias(c, inputs, ctx),
        FusedMaxPoolConv2dBackpropFilter(f) => {
            let mut it = inputs.into_iter();
            let x = it.next().ok_or_else(|| ctx.err("missing input"))?;
            let gy = pool::max_backward_with_argmax(&f.unpool(), it.collect(), ctx)?;
            filter_grad_with_bias(&f.filter_grad(), vec![x, Value::Float(gy)], ctx)
        }
        MaxPoolGradWithArgmax(m) => one(pool::max_backward_with_argmax(m, inputs, ctx)?),
        FusedConv2dMaxPool(f) => {
            let mut inputs = inputs;
            let skip = if f.residual { Some(pop_float(&mut inputs, ctx)?) } else { None };
            let (head, bias) = split_bias(inputs, ctx)?;
            let y = conv::forward(&f.conv().conv(), head, ctx)?;
            let y = epilogue(y, bias, skip, f.activation);
            pool::max_forward(&engine_graph::ops::MaxPool2d { window: f.pool }, vec![Value::Float(y)], ctx)
        }
        FusedConv2d(f) if f.residual => {
            let mut inputs = inputs;
            let skip = pop_float(&mut inputs, ctx)?;
            let (head, bias) = split_bias(inputs, ctx)?;
            let y = conv::forward(&f.conv(), head, ctx)?;
            one(epilogue(y, bias, Some(skip), f.activation))
        }
        FusedConv2d(f) => {
            let (head, bias) = split_bias(inputs, ctx)?;
            let y = conv::forward(&f.conv(), head, ctx)?;
            one(epilogue(y, bias, None, f.activation))
        }
        FusedMatMul(f) => {
            let (head, bias) = split_bias(inputs, ctx)?;
            let y = math::matmul(&f.matmul(), head, ctx)?;
            one(epilogue(y, bias, None, f.activation))
        }
        FusedElementwise(f) => math::fused_elementwise(f, inputs, ctx),
        MaxPool2d(p) => pool::max_forward(p, inputs, ctx),
        MaxPool2dGrad(p) => {
            let x = match (p.relu_mask, inputs.first()) {
                (true, Some(Value::Float(x))) => Some(x.clone()),
                _ => None,
            };
            let g = pool::max_backward(p, inputs, ctx)?;
            one(match x {
                Some(x) => B::relu_backward(x, g),
                None => g,
            })
        }
        AvgPool2d(p) => one(pool::avg_forward(&p.window, inputs, ctx)?),
        AvgPool2dGrad(p) => one(pool::avg_backward(p, inputs, ctx)?),
        Dropout(d) => dropout::run(d, inputs, ctx),
        FusedNormalization(n) => normalization::forward(n, inputs, ctx),
        FusedNormalizationGrad(n) => normalization::backward(n, inputs, ctx),
        FusedAttention(a) => attention::forward(a, inputs, ctx),
        FusedAttentionGrad(a) => attention::backward(a, inputs, ctx),
        SparseSoftmaxCrossEntropy(_) | SoftmaxCrossEntropy(_) | SigmoidCrossEntropy(_) => {
            one(loss::run(op, inputs, ctx)?)
        }
        ArgMax(a) => Ok(vec![logic::argmax(a, inputs, ctx)?]),
        Equal(_) | Less(_) | Greater(_) => Ok(vec![logic::compare(op, inputs, ctx)?]),
        Cast(c) => Ok(vec![logic::cast(c, first(inputs, ctx)?, ctx)?]),
        OneHot(o) => one(logic::one_hot(o, inputs, ctx)?),
        Select(_) => one(logic::select(inputs, ctx)?),
        Group(_) => Ok(vec![Value::Unit]),
        AllReduce(a) => collective::all_reduce(a, inputs, ctx),
        AllGatherRows(a) => row_sparse::all_gather_rows(a, inputs, ctx),
        Transfer(_) => transfer::run(inputs, ctx),
        Placeholder(_) | Variable(_) | Constant(_) | Assign(_) | CheckNumerics(_) => {
            Err(ctx.err("executed by the executor itself, not by a kernel"))
        }
    }
}

/// What a `CheckNumerics` learns at once about a float value.
///
/// A device tensor makes `Probe` large, but the value lives only from the check to the
/// executor's list of probes, which holds the tensor anyway: boxing it would add an
/// allocation per check and save nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Finiteness {
    /// NaN and infinity counts (`(0, 0)`: every element finite). Native CPU buffers are
    /// counted in place.
    Counted(usize, usize),
    /// On other devices, a one-element tensor that is finite when every element is. The
    /// executor reads all of a step's probes in one transfer at its end, so checking costs
    /// a device no synchronization per check; it counts exactly (`count_non_finite`) only a
    /// value whose probe is not finite.
    Probe(T),
}

pub(crate) fn finiteness(v: &Value, ctx: &KernelCtx<'_>) -> Finiteness {
    let Value::Float(t) = v else { return Finiteness::Counted(0, 0) };
    if ctx.native
        && let Some((nan, inf)) = cpu::non_finite(v, ctx)
    {
        return Finiteness::Counted(nan, inf);
    }
    // The value's plain sum: one reduction, where testing each element for NaN and for
    // infinity took four full-size passes and the sum (on an H200 the checks were 31 % of
    // the tutorial CNN's device time). A sum is NaN or infinite wherever an element is
    // (NaN and infinity absorb every addition), so a finite sum clears the value; a sum of
    // finite values that overflows is only a false alarm, which the exact count settles.
    // Nothing here may cancel a NaN algebraically: `sum(t - t)` came out 0 over a NaN with
    // burn's `fusion` (a fused kernel's compiler may fold `x - x`), a lone sum cannot.
    let probe = B::float_sum(t.clone());
    Finiteness::Probe(B::float_reshape(probe, BurnShape::new([1])))
}

/// NaN and infinity counts of a value, read back to the host.
pub(crate) fn count_non_finite(v: &Value) -> Result<(usize, usize)> {
    let values = v.to_f64_vec()?;
    Ok((values.iter().filter(|x| x.is_nan()).count(), values.iter().filter(|x| x.is_infinite()).count()))
}

/// `Conv2DBackpropFilter`, and with `with_bias` the bias gradient (the output gradient
/// summed over batch and space) as a second output.
fn filter_grad_with_bias(
    c: &engine_graph::ops::Conv2dBackpropFilter,
    inputs: Vec<Value>,
    ctx: &KernelCtx<'_>,
) -> Result<Vec<Value>> {
    let bias = match (c.with_bias, inputs.get(1)) {
        (true, Some(Value::Float(gy))) => Some(sum_leading(gy.clone(), 3)),
        _ => None,
    };
    let mut out = vec![Value::Float(conv::backprop_filter(c, inputs, ctx)?)];
    out.extend(bias.map(Value::Float));
    Ok(out)
}

fn first(inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<Value> {
    inputs.into_iter().next().ok_or_else(|| ctx.err("missing input"))
}

/// Prepends unit axes so `t` has `rank` axes (burn broadcasts size-1 axes of equal rank).
pub(crate) fn align_float(t: T, rank: usize) -> T {
    let dims = t.shape().to_vec();
    if dims.len() >= rank {
        return t;
    }
    let mut aligned = vec![1; rank - dims.len()];
    aligned.extend(dims);
    B::float_reshape(t, BurnShape::from(aligned))
}

pub(crate) fn align(v: Value, rank: usize) -> Value {
    let dims = v.shape();
    if dims.len() >= rank || matches!(v, Value::Unit) {
        return v;
    }
    let mut aligned = vec![1; rank - dims.len()];
    aligned.extend(dims);
    v.reshaped(&aligned)
}

/// `t` broadcast to exactly `dims` (for primitives that do not broadcast by themselves).
pub(crate) fn expand_float(t: T, dims: &[usize]) -> T {
    let t = align_float(t, dims.len());
    if t.shape().as_slice() == dims { t } else { B::float_expand(t, BurnShape::from(dims.to_vec())) }
}

pub(crate) fn dims(t: &T) -> Vec<usize> {
    t.shape().to_vec()
}

/// `(first two inputs, the third)`: a fused op's operands and its bias.
fn split_bias(mut inputs: Vec<Value>, ctx: &KernelCtx<'_>) -> Result<(Vec<Value>, T)> {
    match inputs.pop() {
        Some(Value::Float(b)) if inputs.len() == 2 => Ok((inputs, b)),
        _ => Err(ctx.err("expected two operands and a float bias")),
    }
}

/// The last input, a float (a residual op's addend).
fn pop_float(inputs: &mut Vec<Value>, ctx: &KernelCtx<'_>) -> Result<T> {
    match inputs.pop() {
        Some(Value::Float(s)) => Ok(s),
        _ => Err(ctx.err("expected a float addend")),
    }
}

/// One instruction of an elementwise program, as the kernels built from them write it.
fn ins(
    op: engine_graph::ops::ElementOp,
    a: engine_graph::ops::Operand,
    b: engine_graph::ops::Operand,
) -> engine_graph::ops::Instr {
    engine_graph::ops::Instr { op, args: [a, b] }
}

/// `code` over `inputs` (each of `out_shape`, a single element, a row of its last axis
/// or one value per row) as one generated kernel on a cubecl device, unless `ENGINE_ELEMENTWISE=ops`;
/// `None` elsewhere, and the caller runs burn's ops.
#[allow(unused_variables)]
fn generated(code: impl FnOnce() -> Vec<engine_graph::ops::Instr>, inputs: &[&T], out_shape: &[usize]) -> Option<T> {
    #[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
    if elementwise_kernel::chosen() {
        return elementwise_kernel::program(code(), inputs, out_shape);
    }
    None
}

/// `activation(y + bias + skip)` with the bias broadcast over the last axis: one
/// generated kernel on a cubecl device (unless `ENGINE_ELEMENTWISE=ops`), where burn's ops
/// pass over the output two or three times.
fn epilogue(y: T, bias: T, skip: Option<T>, act: FusedActivation) -> T {
    #[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
    if elementwise_kernel::chosen()
        && let Some(t) = elementwise_kernel::epilogue(&y, &bias, skip.as_ref(), matches!(act, FusedActivation::Relu))
    {
        return t;
    }
    let rank = y.shape().num_dims();
    let z = B::float_add(y, align_float(bias, rank));
    match skip {
        Some(s) => activation(B::float_add(z, s), act),
        None => activation(z, act),
    }
}

fn activation(z: T, act: engine_graph::ops::FusedActivation) -> T {
    match act {
        engine_graph::ops::FusedActivation::Linear => z,
        engine_graph::ops::FusedActivation::Relu => B::relu(z),
    }
}

/// Sums over the first `axes` axes (a bias gradient from an NHWC gradient).
fn sum_leading(mut t: T, axes: usize) -> T {
    let c = t.shape().to_vec().last().copied().unwrap_or(1);
    for a in 0..axes {
        t = staged_reduce::sum_dim(t, a);
    }
    B::float_reshape(t, BurnShape::from(vec![c]))
}
