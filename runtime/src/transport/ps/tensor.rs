//! Tensors on the ps wire: host tensors as little-endian bytes, checked on arrival (a
//! peer's message is never trusted to be consistent).

use super::proto::Tensor;
use bytes::Bytes;
use engine_graph::{HostData, HostTensor, NodeId, Outlet};

/// Elements a tensor may declare: bounds what a malformed shape could make this task
/// allocate (the message size already bounds the data).
const MAX_ELEMENTS: u64 = 1 << 31;

pub(super) fn encode(name: &str, outlet: Option<Outlet>, t: &HostTensor) -> Tensor {
    let (dtype, data) = match &t.data {
        HostData::F32(v) => (0, v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()),
        HostData::I64(v) => (1, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        HostData::Bool(v) => (2, v.iter().map(|&b| b as u8).collect()),
    };
    Tensor {
        name: name.to_string(),
        node: outlet.map(|o| o.node.index() as u64).unwrap_or(0),
        output: outlet.map(|o| o.output as u32).unwrap_or(0),
        dtype,
        shape: t.shape.iter().map(|&d| d as u64).collect(),
        data: Bytes::from(data),
    }
}

pub(super) fn decode(t: &Tensor) -> Result<HostTensor, String> {
    let what =
        if t.name.is_empty() { format!("the value for node {} output {}", t.node, t.output) } else { t.name.clone() };
    let mut elements: u64 = 1;
    for &d in &t.shape {
        elements = elements
            .checked_mul(d)
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| format!("{what}: shape {:?} is too large", t.shape))?;
    }
    let width = match t.dtype {
        0 => 4,
        1 => 8,
        2 => 1,
        other => return Err(format!("{what}: unknown dtype {other}")),
    };
    if t.data.len() as u64 != elements * width {
        return Err(format!("{what}: {} bytes for shape {:?}", t.data.len(), t.shape));
    }
    let data = match t.dtype {
        0 => HostData::F32(t.data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        1 => HostData::I64(
            t.data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        _ => HostData::Bool(t.data.iter().map(|&b| b != 0).collect()),
    };
    HostTensor::new(t.shape.iter().map(|&d| d as usize).collect(), data).map_err(|e| format!("{what}: {e}"))
}

/// The outlet a pushed value names.
pub(super) fn outlet(t: &Tensor) -> Result<Outlet, String> {
    let node = u32::try_from(t.node).map_err(|_| format!("node index {} is out of range", t.node))?;
    Ok(Outlet::new(NodeId::from(node), t.output as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_survive_the_wire_and_lies_are_refused() {
        for t in [
            HostTensor::f32(vec![2, 2], vec![1.0, -2.5, f32::MAX, 0.0]).unwrap_or_else(|_| HostTensor::scalar_f32(0.0)),
            HostTensor::scalar_i64(-7),
            HostTensor::new(vec![3], HostData::Bool(vec![true, false, true]))
                .unwrap_or_else(|_| HostTensor::scalar_f32(0.0)),
        ] {
            assert_eq!(decode(&encode("w", None, &t)), Ok(t));
        }
        let mut bad = encode("w", None, &HostTensor::scalar_f32(1.0));
        bad.shape = vec![2];
        assert!(decode(&bad).is_err_and(|e| e.contains("4 bytes for shape [2]")));
        bad.shape = vec![u64::MAX, 2];
        assert!(decode(&bad).is_err_and(|e| e.contains("too large")));
        bad.dtype = 9;
        assert!(decode(&bad).is_err());
    }
}
