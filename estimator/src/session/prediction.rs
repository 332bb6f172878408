//! Predictions, one example at a time, as an iterator over the dataset.

use crate::{
    EstimatorError, Result,
    input::DatasetIter,
    session::{Compiled, Replicas},
};
use engine_graph::{HostData, HostTensor, Outlet};
use engine_runtime::RunOptions;
use std::collections::{BTreeMap, VecDeque};

/// Yields `{prediction key: tensor}` per example, running a batch when the buffer empties.
pub struct Predictions {
    pub(crate) compiled: Compiled,
    pub(crate) replicas: Replicas,
    pub(crate) input: DatasetIter,
    pub(crate) keys: Vec<String>,
    pub(crate) buffer: VecDeque<BTreeMap<String, HostTensor>>,
}

impl Predictions {
    fn fill(&mut self) -> Result<bool> {
        // Asked to stop: the predictions written so far stay, the rest is not computed.
        if let Some(signal) = crate::preemption::requested() {
            return Err(EstimatorError::Preempted { signal: Some(signal), step: None });
        }
        let Some(batch) = self.input.next() else { return Ok(false) };
        let batch = batch?;
        let rows = batch.ids.len().min(batch.len);
        let outlets: Vec<Outlet> = self
            .keys
            .iter()
            .map(|k| {
                self.compiled
                    .predictions
                    .get(k)
                    .copied()
                    .ok_or_else(|| EstimatorError::Other(format!("no prediction named '{k}'")))
            })
            .collect::<Result<_>>()?;
        let out = self.replicas.run(vec![batch], &outlets, RunOptions::default())?;
        let tensors = out[0].fetched.iter().map(|v| v.to_host()).collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..rows {
            let mut example = BTreeMap::new();
            for (k, t) in self.keys.iter().zip(&tensors) {
                example.insert(k.clone(), row_of(t, row)?);
            }
            self.buffer.push_back(example);
        }
        Ok(true)
    }
}

impl Iterator for Predictions {
    type Item = Result<BTreeMap<String, HostTensor>>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.buffer.is_empty() {
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        self.buffer.pop_front().map(Ok)
    }
}

/// Row `i` of a batch-major tensor.
fn row_of(t: &HostTensor, i: usize) -> Result<HostTensor> {
    let rest: Vec<usize> = t.shape.iter().skip(1).copied().collect();
    let n: usize = rest.iter().product();
    let range = i * n..(i + 1) * n;
    let data = match &t.data {
        HostData::F32(v) => HostData::F32(v[range].to_vec()),
        HostData::I64(v) => HostData::I64(v[range].to_vec()),
        HostData::Bool(v) => HostData::Bool(v[range].to_vec()),
    };
    Ok(HostTensor::new(rest, data)?)
}
