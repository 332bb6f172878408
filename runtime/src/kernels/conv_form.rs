//! Which kernels run a convolution pass, chosen on a device by measuring them.
//!
//! Why: a pass can run as burn's direct kernel (one thread per output value), as a patch
//! matrix times the filter (`conv_gemm`), or, where the device has matrix instructions
//! (CMMA), as cubek's implicit GEMM, which reads its input in place. Which is fastest
//! depends on the device and the shape: on an H200 the GEMM form ran the VGG spec twice as
//! fast as direct kernels and the residual model 19 % slower, while on lavapipe a direct
//! filter gradient beat its GEMM threefold. A rule fitted on one device misleads on the
//! next, so, as TensorFlow's cuDNN autotuning and XLA's autotuner do, the first time a
//! process meets a pass of one shape on a device it runs every form that applies, keeps
//! those that agree with the direct kernel (a form that is wrong on some device is never
//! chosen, only named), times them and keeps the fastest for that shape. The form's own
//! run is the pass's result, so nothing is computed twice for nothing.
//!
//! Only eager steps measure: a step being recorded for replays must not wait on the device.
//! It runs the forms the eager steps before it measured for its shapes (the rule for a
//! shape they never met). flex (the CPU) keeps the rule: its native kernels run most
//! passes, and the rest are small.
//!
//! `ENGINE_CONV_KERNELS` sets it for the process: `measure` (the default; `auto` says the
//! same), `rules` (the fixed rule of [`Levers::rule`], the same choice in every process,
//! as tests that compare two processes bit for bit need), or `gemm`, `direct`, `implicit`
//! (that form wherever it applies, the rule elsewhere: a benchmark's lever).
//! `ENGINE_CONV_GEMM_DEPTH=N` moves the rule's depth bound.

use super::KernelCtx;
use crate::{Result, Value, value::B};
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Backend, DispatchDevice, TensorMetadata};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::value::T;

/// A direct kernel runs one thread per output value: with fewer outputs than this (about
/// the threads an H100 keeps resident, 132 SMs × 2048) it leaves most of a GPU idle,
/// however long each thread's sum.
pub(super) const DIRECT_MIN_OUTPUTS: usize = 1 << 18;

/// From this many products per output value a GEMM wins even where a direct kernel has
/// threads enough: each direct thread runs its sum serially from memory, a GEMM shares
/// loads across a tile. Measured on an H200 (BENCHMARKS.md): with every pass a GEMM, the
/// VGG spec (sums of 576 and 1,152) ran twice as fast, while the residual model (sums of
/// 9 and 144) ran 19 % slower and the tutorial CNN at 512 (9, 288 and 576) 7 % slower;
/// from 256 on, that CNN ran 24 % faster than with direct kernels wherever threads were
/// enough (from 512 on, 12 %).
pub(super) const GEMM_MIN_DEPTH: usize = 256;

/// The kernels a convolution pass runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Form {
    /// burn's direct kernels, through NHWC↔NCHW views: every pass, every convolution.
    Direct,
    /// A patch matrix times the filter (`conv_gemm`): ungrouped, undilated passes whose
    /// patches fit the device.
    Gemm,
    /// cubek's implicit GEMM: on cubecl devices with matrix instructions, for the
    /// shapes it takes.
    Implicit,
}

impl Form {
    const ALL: [Form; 3] = [Form::Gemm, Form::Implicit, Form::Direct];

    fn index(self) -> usize {
        match self {
            Form::Direct => 0,
            Form::Gemm => 1,
            Form::Implicit => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Form::Direct => "direct",
            Form::Gemm => "gemm",
            Form::Implicit => "implicit",
        }
    }
}

/// How a process chooses a pass's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Measure,
    Rules,
    Forced(Form),
}

/// The levers, read once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Levers {
    choice: Choice,
    min_depth: usize,
}

impl Levers {
    fn get() -> Levers {
        static LEVERS: OnceLock<Levers> = OnceLock::new();
        *LEVERS.get_or_init(|| {
            Levers::read(
                std::env::var("ENGINE_CONV_KERNELS").ok().as_deref(),
                std::env::var("ENGINE_CONV_GEMM_DEPTH").ok().as_deref(),
            )
        })
    }

    /// From the variables' values; a malformed one is warned about and the default kept.
    fn read(kernels: Option<&str>, depth: Option<&str>) -> Levers {
        let choice = match kernels {
            None | Some("measure" | "auto") => Choice::Measure,
            Some("rules") => Choice::Rules,
            Some(v) => match Form::ALL.into_iter().find(|f| f.name() == v) {
                Some(form) => Choice::Forced(form),
                None => {
                    log::warn!(
                        "ENGINE_CONV_KERNELS={v} is not measure, rules, gemm, direct or implicit; using measure"
                    );
                    Choice::Measure
                }
            },
        };
        let min_depth = match depth {
            None => GEMM_MIN_DEPTH,
            Some(v) => v.parse().unwrap_or_else(|_| {
                log::warn!("ENGINE_CONV_GEMM_DEPTH={v} is not a count; using {GEMM_MIN_DEPTH}");
                GEMM_MIN_DEPTH
            }),
        };
        Levers { choice, min_depth }
    }

    /// The fixed rule, fitted on an H200: the GEMM where the pass has fewer than
    /// [`DIRECT_MIN_OUTPUTS`] output values or sums at least the depth bound's products
    /// into each, the direct kernel elsewhere.
    pub(super) fn rule(self, outputs: usize, depth: usize) -> Form {
        if outputs < DIRECT_MIN_OUTPUTS || depth >= self.min_depth { Form::Gemm } else { Form::Direct }
    }
}

/// One convolution pass as its chooser sees it.
pub(super) struct Pass {
    /// What tells its shapes apart: the pass, its operands' shapes and the convolution's
    /// attributes.
    pub key: String,
    /// The forms that apply, beside the direct kernel (which always does).
    pub gemm: bool,
    pub implicit: bool,
    /// The pass's output values and products per output value, for the rule.
    pub outputs: usize,
    pub depth: usize,
}

/// The forms measured so far: (device, pass key) → form.
fn chosen() -> &'static Mutex<HashMap<(String, String), Form>> {
    static CHOSEN: OnceLock<Mutex<HashMap<(String, String), Form>>> = OnceLock::new();
    CHOSEN.get_or_init(Default::default)
}

/// Runs `pass` in the form its levers choose: `run(form)` runs one form, `None` where it
/// turned out not to apply (cubek refuses a shape or a device).
pub(super) fn run(pass: &Pass, ctx: &KernelCtx<'_>, run: &mut dyn FnMut(Form) -> Result<Option<T>>) -> Result<T> {
    run_with(pass, ctx, Levers::get(), run)
}

fn run_with(
    pass: &Pass,
    ctx: &KernelCtx<'_>,
    levers: Levers,
    run: &mut dyn FnMut(Form) -> Result<Option<T>>,
) -> Result<T> {
    let rule = if pass.gemm { levers.rule(pass.outputs, pass.depth) } else { Form::Direct };
    let applies = |f: Form| match f {
        Form::Direct => true,
        Form::Gemm => pass.gemm,
        Form::Implicit => pass.implicit,
    };
    let device = ctx.device;
    match levers.choice {
        Choice::Forced(form) if applies(form) => {
            if let Some(y) = run(form)? {
                return Ok(y);
            }
        }
        Choice::Measure => {
            let key = (format!("{device:?}"), pass.key.clone());
            let known = chosen().lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
            if let Some(form) = known
                && let Some(y) = run(form)?
            {
                return Ok(y);
            }
            if measurable(ctx) {
                let forms: Vec<Form> = Form::ALL.into_iter().filter(|f| applies(*f)).collect();
                let (form, y) = measure(pass, ctx, &forms, run)?;
                if let Some(form) = form {
                    chosen().lock().unwrap_or_else(|e| e.into_inner()).insert(key, form);
                }
                return Ok(y);
            }
        }
        _ => {}
    }
    match run(rule)? {
        Some(y) => Ok(y),
        None => run(Form::Direct)?.ok_or_else(|| ctx.err("no kernel ran the convolution")),
    }
}

/// Where measuring is possible: a cubecl device, in a step not being recorded.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn measurable(ctx: &KernelCtx<'_>) -> bool {
    matches!(ctx.device, DispatchDevice::Cube(_)) && !ctx.recording
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn measurable(_: &KernelCtx<'_>) -> bool {
    false
}

/// Each form's first run (its kernels compiled), those that disagree with the direct
/// kernel dropped, the rest timed; the fastest form and its first run's result. No form
/// where the direct kernel's result is not finite (a step the numerics checks will stop
/// says nothing about the forms): its result then, and the next pass measures again.
fn measure(
    pass: &Pass,
    ctx: &KernelCtx<'_>,
    forms: &[Form],
    run: &mut dyn FnMut(Form) -> Result<Option<T>>,
) -> Result<(Option<Form>, T)> {
    let start = Instant::now();
    let out = measure_forms(pass, ctx, forms, run);
    let mut m = measured().lock().unwrap_or_else(|e| e.into_inner());
    m.took += start.elapsed();
    if let Ok((Some(form), _)) = &out {
        m.kept[form.index()] += 1;
    }
    out
}

fn measure_forms(
    pass: &Pass,
    ctx: &KernelCtx<'_>,
    forms: &[Form],
    run: &mut dyn FnMut(Form) -> Result<Option<T>>,
) -> Result<(Option<Form>, T)> {
    let mut results = Vec::new();
    for &form in forms {
        if let Some(y) = run(form)? {
            results.push((form, y));
        }
    }
    let Some(reference) = results.iter().find(|(f, _)| *f == Form::Direct).map(|(_, y)| y.clone()) else {
        return Err(ctx.err("the direct convolution did not run"));
    };
    let size = largest(&reference)?;
    if !size.is_finite() {
        return Ok((None, reference));
    }
    let mut agreed = Vec::new();
    for (form, y) in results {
        let gap = if form == Form::Direct { 0.0 } else { largest(&B::float_sub(y.clone(), reference.clone()))? };
        let gap = gap / size.max(f64::MIN_POSITIVE);
        if gap <= tolerance(&reference) {
            agreed.push((form, y));
        } else {
            log::warn!(
                "{}: the {} convolution differs from the direct kernel by {gap:.2e} of its largest value on this \
                 device; it is not used",
                ctx.node.name,
                form.name()
            );
        }
    }
    if agreed.len() == 1 {
        let (form, y) = agreed.remove(0);
        return Ok((Some(form), y));
    }
    let mut times = Vec::with_capacity(agreed.len());
    for (form, _) in &agreed {
        times.push(timed(ctx.device, || run(*form).map(|_| ()))?);
    }
    let best = (0..agreed.len()).min_by_key(|&i| times[i]).unwrap_or(0);
    let said: Vec<String> = agreed.iter().zip(&times).map(|((f, _), t)| format!("{} {t:.1?}", f.name())).collect();
    log::debug!("{} ({}): {} → {}", ctx.node.name, pass.key, said.join(", "), agreed[best].0.name());
    let (form, y) = agreed.swap_remove(best);
    Ok((Some(form), y))
}

/// What the passes measured since the last [`report`]: the forms kept, and the time the
/// measuring took (every form's first run and its timing runs).
#[derive(Debug, Default, Clone, PartialEq)]
struct Measured {
    /// Passes that kept each form, by [`Form::index`].
    kept: [usize; 3],
    took: Duration,
}

fn measured() -> &'static Mutex<Measured> {
    static MEASURED: OnceLock<Mutex<Measured>> = OnceLock::new();
    MEASURED.get_or_init(Default::default)
}

impl Measured {
    /// The log line: what a first step spent its extra time on.
    fn line(&self, device: &str) -> Option<String> {
        let passes: usize = self.kept.iter().sum();
        if passes == 0 && self.took.is_zero() {
            return None;
        }
        let kept: Vec<String> = [Form::Direct, Form::Gemm, Form::Implicit]
            .into_iter()
            .filter(|f| self.kept[f.index()] > 0)
            .map(|f| format!("{} {}", f.name(), self.kept[f.index()]))
            .collect();
        Some(format!(
            "{device}: {passes} convolution pass{} measured in this step, {:.2} s of it; each keeps its fastest \
             form ({}; ENGINE_LOG=debug lists them, ENGINE_CONV_KERNELS=rules measures none)",
            if passes == 1 { "" } else { "es" },
            self.took.as_secs_f64(),
            kept.join(", ")
        ))
    }
}

/// Logs, once, what the convolution passes measured since the last report (nothing when
/// none did): called after each eager step, so a first step that took longer says why.
pub(crate) fn report(device: &str) {
    let m = std::mem::take(&mut *measured().lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(line) = m.line(device) {
        log::info!("{line}");
    }
}

/// The fastest of a few runs of `f`, each waited for on the device: as many as fit in
/// about [`MEASURE_FOR`], at least one and at most [`MOST_RUNS`].
fn timed(device: &DispatchDevice, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let _ = B::sync(device);
    let (start, mut best) = (Instant::now(), Duration::MAX);
    for _ in 0..MOST_RUNS {
        let t = Instant::now();
        f()?;
        let _ = B::sync(device);
        best = best.min(t.elapsed());
        if start.elapsed() >= MEASURE_FOR {
            break;
        }
    }
    Ok(best)
}

/// A form's timing runs stop after this long (a GPU pass takes well under it, so its
/// figure is the best of several; a lavapipe pass takes longer, and runs once).
const MEASURE_FOR: Duration = Duration::from_millis(3);
const MOST_RUNS: usize = 5;

/// `max |t|`, read back; infinite where `t` holds a value that is not finite. The sum of
/// `|t|` is read with it since a device's max may pass over a NaN, where a sum cannot
/// (the numerics probes' reason too).
fn largest(t: &T) -> Result<f64> {
    let abs = B::float_abs(t.clone());
    let (max, sum) = (B::float_max(abs.clone()), B::float_sum(abs));
    let both = B::float_cat(vec![B::float_reshape(max, [1].into()), B::float_reshape(sum, [1].into())], 0);
    let v = Value::Float(both).to_f64_vec()?;
    let (max, sum) = (v.first().copied().unwrap_or(f64::NAN), v.get(1).copied().unwrap_or(f64::NAN));
    Ok(if max.is_finite() && sum.is_finite() { max } else { f64::INFINITY })
}

/// How far a form may stray from the direct kernel's result, relative to its largest
/// value: sums in another order, and on tensor cores f32 products rounded to TF32 (10
/// mantissa bits) or bfloat16's own; a wrong index or layout strays by the whole value.
fn tolerance(reference: &T) -> f64 {
    match reference.dtype() {
        burn::tensor::DType::F64 => 1e-9,
        _ => 2e-2,
    }
}

#[cfg(test)]
mod tests;
