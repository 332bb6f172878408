//! What a step reads back from a device at its end, in one transfer.
//!
//! On a GPU every read drains the launch queue, so a step that read each numerics check,
//! then the loss, then a metric would stall the device as many times. Instead the step's
//! `CheckNumerics` probes (one element each, finite when their value is) are summed on the
//! device into one flag, and the flag travels with every small fetched value (a loss, a
//! metric's sums) in a single read. Only when the flag is not finite are the probes read
//! again, to name the values that were not finite: the failure path (or probes whose sum
//! overflowed) may cost a second read, the steady state never does.

use crate::{
    Precision, Result, Value,
    value::{B, T},
};
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::backend::{DispatchDevice, FlexDevice, TensorMetadata};
use burn::tensor::Shape as BurnShape;
use engine_graph::{HostData, HostTensor};

/// A fetched value with at most this many elements comes back with the flag; a larger one
/// (a prediction batch) is left on the device for its reader.
const SMALL_FETCH: usize = 4096;

/// Integers travel as two floats, `x / 2^24` and the rest: each below 2^24 in magnitude
/// for any |x| < 2^48 (devices store 32-bit integers), so f32 carries both exactly.
const SPLIT: i64 = 1 << 24;

/// The step's end as the host sees it.
pub(crate) struct StepEnd {
    /// Each probe's value, in order, when the flag was not finite; `None` when every
    /// checked value was finite.
    pub probes: Option<Vec<f64>>,
    /// The fetched values; on a queued device the small ones (floats and integers) are
    /// now host (CPU) values, so reading them again costs no device read.
    pub fetched: Vec<Value>,
}

/// Reads the numerics flag of `probes` and the small values of `fetched` in one transfer.
/// `queued` says whether `fetched` lives on a device worth reading in bulk (not the CPU).
pub(crate) fn read_back(probes: Vec<T>, fetched: Vec<Value>, queued: bool, precision: Precision) -> Result<StepEnd> {
    prepare(probes, fetched, queued, precision).read()
}

/// A step's end gathered on the device, not yet read: the flag and the small fetches in
/// one tensor. A replayed step gathers it once, inside the captured graph, and reads the
/// same buffers after every replay.
pub(crate) struct Prepared {
    /// The probes side by side, kept to name the culprits when the flag is not finite.
    stacked: Option<T>,
    /// The flag (when there are probes), then each small fetch flattened.
    all: Option<T>,
    /// Which fetches travel in `all`.
    small: Vec<usize>,
    fetched: Vec<Value>,
    precision: Precision,
}

/// Gathers the flag of `probes` and the small values of `fetched` into one device tensor
/// (device ops only; nothing is read).
pub(crate) fn prepare(probes: Vec<T>, fetched: Vec<Value>, queued: bool, precision: Precision) -> Prepared {
    let small: Vec<usize> = if queued {
        fetched
            .iter()
            .enumerate()
            .filter(|(_, v)| matches!(v, Value::Float(_) | Value::Int(_)) && elements(v) <= SMALL_FETCH)
            .map(|(i, _)| i)
            .collect()
    } else {
        Vec::new()
    };
    if probes.is_empty() && small.is_empty() {
        return Prepared { stacked: None, all: None, small, fetched, precision };
    }
    let stacked = (!probes.is_empty()).then(|| B::float_cat(probes, 0));
    let mut parts: Vec<T> = Vec::with_capacity(1 + small.len());
    if let Some(s) = &stacked {
        parts.push(B::float_reshape(B::float_sum(s.clone()), BurnShape::new([1])));
    }
    for &i in &small {
        let flat = BurnShape::new([elements(&fetched[i])]);
        match &fetched[i] {
            Value::Float(t) => parts.push(B::float_reshape(t.clone(), flat)),
            Value::Int(t) => {
                let t = B::int_reshape(t.clone(), flat);
                let high = B::int_div_scalar(t.clone(), SPLIT.into());
                let low = B::int_sub(t, B::int_mul_scalar(high.clone(), SPLIT.into()));
                parts.push(B::int_into_float(high, precision.dtype()));
                parts.push(B::int_into_float(low, precision.dtype()));
            }
            _ => {}
        }
    }
    let all = if parts.len() == 1 { parts.pop() } else { Some(B::float_cat(parts, 0)) };
    Prepared { stacked, all, small, fetched, precision }
}

impl Prepared {
    /// The step's numerics flag where the device computes it (the gathered tensor's first
    /// element, finite when every probe was); `None` for a step without probes.
    pub(crate) fn flag(&self) -> Option<&T> {
        self.stacked.as_ref().and(self.all.as_ref())
    }

    /// Whether every fetched value comes back to the host: a replayed step's large fetch
    /// would stay in a buffer the next replay overwrites.
    pub(crate) fn reads_every_fetch(&self) -> bool {
        self.fetched.iter().enumerate().all(|(i, v)| matches!(v, Value::Unit) || self.small.contains(&i))
    }

    /// Reads the gathered tensor back in one transfer (the probes again only when the
    /// flag is not finite).
    pub(crate) fn read(&self) -> Result<StepEnd> {
        let Some(all) = &self.all else { return Ok(StepEnd { probes: None, fetched: self.fetched.clone() }) };
        let (flagged, fetched) = self.decode(all)?;
        let probes = match (flagged, &self.stacked) {
            (true, Some(s)) => Some(Value::Float(s.clone()).to_f64_vec()?),
            _ => None,
        };
        Ok(StepEnd { probes, fetched })
    }

    /// A tensor shaped as the gathered one, for a copy of it that outlives the next step:
    /// a pipelined step's end is read after the next step was queued, which overwrites the
    /// gathered tensor. `None` when nothing is gathered.
    pub(crate) fn mailbox(&self) -> Option<T> {
        let all = self.all.as_ref()?;
        Some(B::float_zeros(all.shape(), &all.device(), all.dtype().into()))
    }

    /// The gathered tensor this step's end is computed into.
    pub(crate) fn gathered(&self) -> Option<&T> {
        self.all.as_ref()
    }

    /// Reads `copy` (a copy of the gathered tensor) in one transfer: whether the flag was
    /// not finite, and the fetched values. The probes are not read: they may hold another
    /// step's values by now.
    pub(crate) fn read_copy(&self, copy: Option<&T>) -> Result<(bool, Vec<Value>)> {
        match copy {
            Some(all) => self.decode(all),
            None => Ok((false, self.fetched.clone())),
        }
    }

    /// Reads `all` back and splits it into the flag and the small fetches.
    fn decode(&self, all: &T) -> Result<(bool, Vec<Value>)> {
        let mut fetched = self.fetched.clone();
        let host = Value::Float(all.clone()).to_f64_vec()?;
        let mut at = 0;
        let flagged = match &self.stacked {
            Some(_) => {
                at = 1;
                host.first().is_some_and(|f| !f.is_finite())
            }
            None => false,
        };
        let cpu = DispatchDevice::Flex(FlexDevice);
        for &i in &self.small {
            let shape = fetched[i].shape();
            let n = elements(&fetched[i]);
            let part = |at: usize| host.get(at..at + n).map(<[f64]>::to_vec).unwrap_or_default();
            fetched[i] = match &fetched[i] {
                Value::Int(_) => {
                    let (high, low) = (part(at), part(at + n));
                    at += 2 * n;
                    let ints: Vec<i64> = high.iter().zip(&low).map(|(h, l)| *h as i64 * SPLIT + *l as i64).collect();
                    Value::from_host(&HostTensor::new(shape, HostData::I64(ints))?, &cpu, self.precision)
                }
                _ => {
                    let values = part(at);
                    at += n;
                    Value::from_f64(&shape, values, &cpu, self.precision)
                }
            };
        }
        Ok((flagged, fetched))
    }
}

fn elements(v: &Value) -> usize {
    match v {
        Value::Float(t) | Value::Int(t) => t.shape().num_elements(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn value(t: HostTensor) -> Value {
        Value::from_host(&t, Device::cpu().dispatch(), Precision::F32)
    }

    #[test]
    fn small_fetches_and_the_flag_come_back_exactly_in_one_transfer() -> crate::Result<()> {
        let loss = value(HostTensor::scalar_f32(2.5));
        let ints = value(HostTensor::new(vec![3], HostData::I64(vec![5, -7, 123_456_789_012]))?);
        let big = value(HostTensor::f32(vec![SMALL_FETCH + 1], vec![1.0; SMALL_FETCH + 1])?);
        let probe = |x: f32| -> crate::Result<T> {
            match value(HostTensor::f32(vec![1], vec![x])?) {
                Value::Float(t) => Ok(t),
                _ => Err(crate::RuntimeError::Read("not a float".into())),
            }
        };
        let end = read_back(vec![probe(0.5)?, probe(-3.0)?], vec![loss, ints, big, Value::Unit], true, Precision::F32)?;
        assert!(end.probes.is_none(), "every probe was finite");
        assert_eq!(end.fetched[0].to_host()?, HostTensor::scalar_f32(2.5));
        assert_eq!(end.fetched[1].to_host()?.as_i64(), Some(&[5, -7, 123_456_789_012][..]));
        assert_eq!(end.fetched[2].shape(), vec![SMALL_FETCH + 1]);
        assert!(matches!(end.fetched[3], Value::Unit));
        // A probe that is not finite: every probe comes back, to name the culprits.
        let end = read_back(vec![probe(1.0)?, probe(f32::NAN)?], Vec::new(), true, Precision::F32)?;
        let probes = end.probes.unwrap_or_default();
        assert_eq!(probes.len(), 2);
        assert!(probes[0] == 1.0 && probes[1].is_nan(), "{probes:?}");
        // Finite probes whose sum overflows come back too; each is then found finite.
        let end = read_back(vec![probe(f32::MAX)?, probe(f32::MAX)?], Vec::new(), true, Precision::F32)?;
        assert_eq!(end.probes.unwrap_or_default(), vec![f32::MAX as f64; 2]);
        Ok(())
    }
}
