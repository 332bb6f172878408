//! The checkpoint data object: one safetensors file holding every variable, plus metadata.
//!
//! safetensors because Python (`safetensors.numpy.load_file`) and every ML stack read it, and because its
//! header is plain JSON rather than pickle. The format itself has no integrity check, so we add one: a
//! CRC32C over every tensor's name, dtype, shape and bytes and every other metadata entry, stored as the
//! `checksum` metadata entry. A flipped bit anywhere that the header parser does not already reject
//! changes the checksum.

use super::error::{CheckpointError, Result};
use engine_graph::{HostData, HostTensor};
use safetensors::tensor::{Dtype, SafeTensors, TensorView, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// What the caller attaches to a checkpoint besides its tensors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// The job fingerprint (spec + graph hash): a restore can refuse a checkpoint of another model.
    pub fingerprint: String,
    /// Opaque JSON from the input pipeline (its position), restored with the variables.
    pub input_state: String,
    /// Examples the whole job had read when the checkpoint was saved (every replica, skipped
    /// batches included), when known: a run whose input pipeline changed (another batch size,
    /// shuffle buffer or strategy) continues from there.
    pub examples_seen: Option<u64>,
}

/// A checkpoint read back: its tensors and everything recorded with them.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The name, `model.ckpt-<step>`.
    pub path: String,
    pub step: u64,
    /// Seconds since the Unix epoch when it was written.
    pub created_unix: f64,
    pub meta: CheckpointMeta,
    pub tensors: BTreeMap<String, HostTensor>,
}

pub(crate) const KEY_GLOBAL_STEP: &str = "global_step";
pub(crate) const KEY_FINGERPRINT: &str = "fingerprint";
pub(crate) const KEY_INPUT_STATE: &str = "input_state";
pub(crate) const KEY_CREATED: &str = "created_unix";
pub(crate) const KEY_EXAMPLES_SEEN: &str = "examples_seen";
pub(crate) const KEY_FORMAT: &str = "format";
pub(crate) const KEY_CHECKSUM: &str = "checksum";
const FORMAT_VERSION: &str = "engine-checkpoint-1";
const CHECKSUM_PREFIX: &str = "crc32c:";

/// A `HostTensor` seen as safetensors wants it: little-endian bytes.
struct TensorBytes<'a> {
    tensor: &'a HostTensor,
}

impl View for TensorBytes<'_> {
    fn dtype(&self) -> Dtype {
        match &self.tensor.data {
            HostData::F32(_) => Dtype::F32,
            HostData::I64(_) => Dtype::I64,
            HostData::Bool(_) => Dtype::BOOL,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.tensor.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(tensor_bytes(self.tensor))
    }

    fn data_len(&self) -> usize {
        let width = match &self.tensor.data {
            HostData::F32(_) => 4,
            HostData::I64(_) => 8,
            HostData::Bool(_) => 1,
        };
        self.tensor.len() * width
    }
}

fn tensor_bytes(tensor: &HostTensor) -> Vec<u8> {
    match &tensor.data {
        HostData::F32(values) => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        HostData::I64(values) => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        HostData::Bool(values) => values.iter().map(|&v| v as u8).collect(),
    }
}

/// The checksum of tensors (in name order) and metadata (in key order, `checksum` excluded).
fn checksum<'a>(
    tensors: impl Iterator<Item = (&'a str, &'a str, &'a [usize], &'a [u8])>,
    metadata: &HashMap<String, String>,
) -> u32 {
    let mut crc = 0u32;
    for (name, dtype, shape, data) in tensors {
        crc = crc32c::crc32c_append(crc, name.as_bytes());
        crc = crc32c::crc32c_append(crc, &[0]);
        crc = crc32c::crc32c_append(crc, dtype.as_bytes());
        crc = crc32c::crc32c_append(crc, &[0]);
        crc = crc32c::crc32c_append(crc, &(shape.len() as u64).to_le_bytes());
        for &dim in shape {
            crc = crc32c::crc32c_append(crc, &(dim as u64).to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, &(data.len() as u64).to_le_bytes());
        crc = crc32c::crc32c_append(crc, data);
    }
    let mut keys: Vec<&String> = metadata.keys().filter(|k| k.as_str() != KEY_CHECKSUM).collect();
    keys.sort();
    for key in keys {
        crc = crc32c::crc32c_append(crc, key.as_bytes());
        crc = crc32c::crc32c_append(crc, &[0]);
        crc = crc32c::crc32c_append(crc, metadata[key].as_bytes());
        crc = crc32c::crc32c_append(crc, &[0]);
    }
    crc
}

fn dtype_name(dtype: Dtype) -> String {
    dtype.to_string()
}

/// Serialises a checkpoint. Tensor names must be non-empty (safetensors keys; `__metadata__` is reserved).
pub(crate) fn encode(
    step: u64,
    tensors: &BTreeMap<String, HostTensor>,
    meta: &CheckpointMeta,
    created_unix: f64,
) -> Result<Vec<u8>> {
    for (name, tensor) in tensors {
        if name.is_empty() || name == "__metadata__" {
            return Err(CheckpointError::InvalidTensor {
                name: name.clone(),
                reason: "the name is empty or reserved by safetensors".into(),
            });
        }
        let expected: usize = tensor.shape.iter().product();
        if expected != tensor.len() {
            return Err(CheckpointError::InvalidTensor {
                name: name.clone(),
                reason: format!("shape {:?} needs {expected} values, the tensor has {}", tensor.shape, tensor.len()),
            });
        }
    }
    let mut metadata = HashMap::new();
    metadata.insert(KEY_FORMAT.to_string(), FORMAT_VERSION.to_string());
    metadata.insert(KEY_GLOBAL_STEP.to_string(), step.to_string());
    metadata.insert(KEY_FINGERPRINT.to_string(), meta.fingerprint.clone());
    metadata.insert(KEY_INPUT_STATE.to_string(), meta.input_state.clone());
    metadata.insert(KEY_CREATED.to_string(), format!("{created_unix:.6}"));
    if let Some(n) = meta.examples_seen {
        metadata.insert(KEY_EXAMPLES_SEEN.to_string(), n.to_string());
    }

    let views: Vec<(&str, TensorBytes)> =
        tensors.iter().map(|(n, t)| (n.as_str(), TensorBytes { tensor: t })).collect();
    let bytes: Vec<Vec<u8>> = views.iter().map(|(_, v)| tensor_bytes(v.tensor)).collect();
    let dtypes: Vec<String> = views.iter().map(|(_, v)| dtype_name(v.dtype())).collect();
    let crc = checksum(
        views.iter().zip(&bytes).zip(&dtypes).map(|(((name, view), data), dtype)| {
            (*name, dtype.as_str(), view.tensor.shape.as_slice(), data.as_slice())
        }),
        &metadata,
    );
    metadata.insert(KEY_CHECKSUM.to_string(), format!("{CHECKSUM_PREFIX}{crc:08x}"));
    safetensors::serialize(views, Some(metadata)).map_err(|e| CheckpointError::InvalidTensor {
        name: "<all>".into(),
        reason: format!("safetensors serialisation failed: {e}"),
    })
}

/// Parses and verifies a checkpoint read from `url` (for messages); `path` is its name.
pub(crate) fn decode(bytes: &[u8], url: &str, path: &str) -> Result<Checkpoint> {
    let corrupt = |reason: String| CheckpointError::Corrupt { url: url.to_string(), reason };
    let parsed = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("not a valid safetensors file: {e}")))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(format!("bad header: {e}")))?;
    let metadata = header.metadata().clone().ok_or_else(|| corrupt("no __metadata__ in the header".into()))?;
    let field = |key: &str| metadata.get(key).cloned().ok_or_else(|| corrupt(format!("metadata has no `{key}`")));

    let stored = field(KEY_CHECKSUM)?;
    let mut views: Vec<(String, TensorView)> = parsed.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let dtypes: Vec<String> = views.iter().map(|(_, v)| dtype_name(v.dtype())).collect();
    let computed = checksum(
        views
            .iter()
            .zip(&dtypes)
            .map(|((name, view), dtype)| (name.as_str(), dtype.as_str(), view.shape(), view.data())),
        &metadata,
    );
    let expected = format!("{CHECKSUM_PREFIX}{computed:08x}");
    if stored != expected {
        return Err(corrupt(format!("checksum mismatch: the file records {stored}, its contents hash to {expected}")));
    }

    let step = field(KEY_GLOBAL_STEP)?
        .parse::<u64>()
        .map_err(|e| corrupt(format!("metadata `{KEY_GLOBAL_STEP}` is not a step: {e}")))?;
    let created_unix = field(KEY_CREATED)?
        .parse::<f64>()
        .map_err(|e| corrupt(format!("metadata `{KEY_CREATED}` is not a time: {e}")))?;
    let examples_seen = match metadata.get(KEY_EXAMPLES_SEEN) {
        Some(n) => {
            Some(n.parse::<u64>().map_err(|e| corrupt(format!("metadata `{KEY_EXAMPLES_SEEN}` is not a count: {e}")))?)
        }
        None => None,
    };
    let meta =
        CheckpointMeta { fingerprint: field(KEY_FINGERPRINT)?, input_state: field(KEY_INPUT_STATE)?, examples_seen };

    let mut tensors = BTreeMap::new();
    for (name, view) in views {
        let data =
            decode_data(view.dtype(), view.data()).map_err(|reason| corrupt(format!("tensor `{name}`: {reason}")))?;
        let tensor =
            HostTensor::new(view.shape().to_vec(), data).map_err(|e| corrupt(format!("tensor `{name}`: {e}")))?;
        tensors.insert(name, tensor);
    }
    Ok(Checkpoint { path: path.to_string(), step, created_unix, meta, tensors })
}

fn decode_data(dtype: Dtype, bytes: &[u8]) -> std::result::Result<HostData, String> {
    match dtype {
        Dtype::F32 => {
            Ok(HostData::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()))
        }
        Dtype::I64 => Ok(HostData::I64(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        )),
        Dtype::BOOL => bytes
            .iter()
            .map(|&b| match b {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(format!("byte {other} is not a boolean")),
            })
            .collect::<std::result::Result<Vec<bool>, String>>()
            .map(HostData::Bool),
        other => Err(format!("dtype {other} is not one the engine uses (F32, I64, BOOL)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> anyhow::Result<BTreeMap<String, HostTensor>> {
        let mut tensors = BTreeMap::new();
        tensors.insert("dense/kernel".to_string(), HostTensor::f32(vec![2, 3], vec![0.5, -1.0, 2.0, 3.25, 0.0, -7.5])?);
        tensors.insert("dense/kernel/Adam".to_string(), HostTensor::f32(vec![2, 3], vec![0.1; 6])?);
        tensors.insert("global_step".to_string(), HostTensor::scalar_i64(42));
        tensors.insert("mask".to_string(), HostTensor::new(vec![3], HostData::Bool(vec![true, false, true]))?);
        Ok(tensors)
    }

    #[test]
    fn round_trips_tensors_and_metadata() -> anyhow::Result<()> {
        let tensors = sample()?;
        let meta = CheckpointMeta {
            fingerprint: "fp-1".into(),
            input_state: r#"{"offset":7}"#.into(),
            examples_seen: Some(2688),
        };
        let bytes = encode(42, &tensors, &meta, 1_700_000_000.25)?;
        let back = decode(&bytes, "mem://x/model.ckpt-42.safetensors", "model.ckpt-42")?;
        assert_eq!(back.tensors, tensors);
        assert_eq!(back.meta, meta);
        assert_eq!(back.step, 42);
        assert_eq!(back.created_unix, 1_700_000_000.25);
        Ok(())
    }

    #[test]
    fn every_flipped_byte_is_caught() -> anyhow::Result<()> {
        let bytes = encode(1, &sample()?, &CheckpointMeta::default(), 1.0)?;
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x20;
            let result = decode(&damaged, "file.safetensors", "model.ckpt-1");
            // A flip may leave the file decodable only if it hit header whitespace padding.
            if let Ok(checkpoint) = &result {
                assert_eq!(checkpoint.tensors, sample()?, "byte {index} changed the contents undetected");
                continue;
            }
            let message = result.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains("file.safetensors"), "byte {index}: {message}");
        }
        Ok(())
    }

    #[test]
    fn rejects_bad_tensor_names() {
        let mut tensors = BTreeMap::new();
        tensors.insert(String::new(), HostTensor::scalar_f32(1.0));
        assert!(matches!(
            encode(0, &tensors, &CheckpointMeta::default(), 0.0),
            Err(CheckpointError::InvalidTensor { .. })
        ));
    }
}
