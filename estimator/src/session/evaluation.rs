//! One pass of evaluation: every example of the dataset exactly once (or `steps` batches),
//! with metric states accumulated on the host.

use crate::{
    EstimatorError, Result,
    hooks::RunValues,
    input::{Batch, NonFiniteFinder},
    metrics::MetricState,
    preemption,
    session::{Compiled, Replicas},
};
use engine_graph::{HostTensor, Outlet};
use engine_runtime::RunOptions;
use std::collections::BTreeMap;
use std::time::Instant;

/// What evaluation hooks see of each batch group: the tensors they ask for before it runs
/// and its values after, and whether to stop there (TensorFlow's evaluation hooks).
pub(crate) trait EvalObserver {
    /// Extra tensor names to fetch for the next group.
    fn before_batch(&mut self) -> Result<Vec<String>>;
    /// Returns true to stop evaluating after this group.
    fn after_batch(&mut self, values: &RunValues) -> Result<bool>;
}

#[derive(Debug, Clone, Default)]
pub(crate) struct EvalOutcome {
    /// Example-weighted mean of the loss.
    pub loss: f64,
    pub metrics: BTreeMap<String, f64>,
    /// Confusion matrices, by metric name (not scalars, so not among `metrics`).
    pub matrices: BTreeMap<String, Vec<Vec<u64>>>,
    /// Raw states, so workers can merge them before computing results.
    pub states: BTreeMap<String, MetricState>,
    pub loss_sum: f64,
    pub examples: u64,
    pub batches: u64,
}

/// Runs the eval plan over `batches` (replica by replica, each on its own batch).
pub(crate) fn evaluate_dataset(
    compiled: &Compiled,
    replicas: &mut Replicas,
    batches: impl Iterator<Item = Result<Batch>>,
    steps: Option<u64>,
    observer: &mut dyn EvalObserver,
    finder: Option<&NonFiniteFinder>,
) -> Result<EvalOutcome> {
    let loss = compiled.loss.ok_or_else(|| EstimatorError::Other("evaluation graph has no loss".into()))?;
    let mut base: Vec<Outlet> = vec![loss];
    for (_, _, outs) in &compiled.metrics {
        base.extend(outs);
    }
    let mut out = EvalOutcome::default();
    let mut states: Vec<MetricState> = vec![MetricState::default(); compiled.metrics.len()];
    let mut batches = batches.peekable();
    let progress = crate::hooks::EvalProgress::start(steps);
    while batches.peek().is_some() {
        if steps.is_some_and(|s| out.batches >= s) {
            break;
        }
        // The checkpoint under evaluation is saved already: nothing to lose by stopping.
        if let Some(signal) = preemption::requested() {
            return Err(EstimatorError::Preempted { signal: Some(signal), step: None });
        }
        let extra = observer.before_batch()?;
        let mut fetches = base.clone();
        for name in &extra {
            let o = compiled.fetch(name).ok_or_else(|| EstimatorError::Hook {
                hook: "before_run".into(),
                reason: format!(
                    "no tensor named '{name}' in the evaluation graph (hooks must list node names in required_tensors)"
                ),
            })?;
            fetches.push(o);
        }
        let waited = Instant::now();
        let mut group = Vec::with_capacity(replicas.len());
        while group.len() < replicas.len() {
            match batches.next() {
                Some(b) => group.push(b?),
                None => break,
            }
        }
        let input_wait = waited.elapsed();
        let started = Instant::now();
        let sizes: Vec<usize> = group.iter().map(real_examples).collect();
        let ids: Vec<Vec<u64>> = group.iter().map(|b| b.ids.clone()).collect();
        // Checked before the model sees it, as training's data is through its gradients: a
        // NaN feature can vanish inside the model (ReLU maps it to 0 on some kernels) and
        // leave metrics that look like any others.
        for (batch, ids) in group.iter().zip(&ids) {
            if let Some(name) = non_finite_column(batch) {
                return Err(non_finite(out.batches + 1, format!("`{name}` holds a NaN or an infinity"), ids, finder)?);
            }
        }
        let n = group.len();
        let results = if n == replicas.len() {
            replicas.run(group, &fetches, RunOptions::default())?
        } else {
            // A last group smaller than the replica count: run the rest on replica 0 one
            // by one, so every example is still evaluated exactly once.
            let mut r = Vec::new();
            for b in group {
                r.extend(replicas.run(vec![b], &fetches, RunOptions::default())?);
            }
            r
        };
        let step_time = started.elapsed();
        let (mut group_loss, mut group_examples) = (0.0, 0usize);
        for ((res, &size), ids) in results.iter().zip(&sizes).zip(&ids) {
            let l = res.fetched[0].to_host()?.scalar_value().unwrap_or(f64::NAN);
            if !l.is_finite() && size > 0 {
                return Err(non_finite(out.batches + 1, format!("the loss is {l}"), ids, finder)?);
            }
            group_loss += l * size as f64;
            group_examples += size;
            out.loss_sum += l * size as f64;
            out.examples += size as u64;
            let mut at = 1;
            for (state, (_, _, outs)) in states.iter_mut().zip(&compiled.metrics) {
                let incs = res.fetched[at..at + outs.len()]
                    .iter()
                    .map(|v| v.to_host())
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                if let Some(bad) = incs.iter().flat_map(|t| t.to_f64_vec()).find(|x| !x.is_finite()) {
                    let value = format!("a metric's sums hold {bad}");
                    return Err(non_finite(out.batches + 1, value, ids, finder)?);
                }
                state.add(&incs);
                at += outs.len();
            }
        }
        out.batches += 1;
        progress.batches_done(out.batches);
        let mut values = RunValues { step_time, input_wait, ..RunValues::default() };
        let mean = if group_examples > 0 { group_loss / group_examples as f64 } else { f64::NAN };
        values.results.insert("loss".into(), HostTensor::scalar_f32(mean as f32));
        if let Some(first) = results.first() {
            for (name, value) in extra.iter().zip(&first.fetched[base.len()..]) {
                if name != "loss" {
                    values.results.insert(name.clone(), value.to_host()?);
                }
            }
            values.collectives = first.collectives.clone();
        }
        if observer.after_batch(&values)? {
            log::info!("Evaluation stopped by a hook after {} batches", out.batches);
            break;
        }
    }
    if out.examples == 0 {
        return Err(EstimatorError::EmptyEvaluation {
            reason: match steps {
                Some(0) => "eval_spec.steps is 0".into(),
                _ => "the evaluation input has no examples (check its files, and its skip, take and filters)".into(),
            },
        });
    }
    out.loss = out.loss_sum / out.examples as f64;
    for ((name, metric, _), state) in compiled.metrics.iter().zip(states) {
        match metric.matrix(&state) {
            Some(m) => {
                out.matrices.insert(name.clone(), m);
            }
            None => {
                out.metrics.insert(name.clone(), metric.result(&state));
            }
        }
        out.states.insert(name.clone(), state);
    }
    Ok(out)
}

fn real_examples(b: &Batch) -> usize {
    b.ids.len().min(b.len).max(if b.ids.is_empty() { b.len } else { 0 })
}

/// The error for a batch whose loss or metrics are not finite, naming the example that
/// holds a NaN or an infinity when the input has one (the data's fault), else the model.
fn non_finite(batch: u64, value: String, ids: &[u64], finder: Option<&NonFiniteFinder>) -> Result<EstimatorError> {
    let found = match finder {
        Some(f) => f.find(ids)?,
        None => None,
    };
    let cause = match found {
        Some(found) => format!("the evaluation input is to blame: {found}"),
        None => "the evaluation batch holds no NaN or infinity, so the model computes one (its weights, or values \
                 far outside the range it was trained on)"
            .to_string(),
    };
    Ok(EstimatorError::EvalNonFinite { batch, value, cause })
}

/// The first float column of `batch` (a feature, or the label) with a value that is not
/// finite.
fn non_finite_column(batch: &Batch) -> Option<&str> {
    let label = batch.labels.iter().map(|t| ("label", t));
    batch
        .features
        .iter()
        .map(|(name, t)| (name.as_str(), t))
        .chain(label)
        .find(|(_, t)| t.as_f32().is_some_and(|v| v.iter().any(|x| !x.is_finite())))
        .map(|(name, _)| name)
}
