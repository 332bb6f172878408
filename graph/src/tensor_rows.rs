//! Row slices of host tensors: how a partitioned variable's shards are cut from the whole
//! variable and put back together (checkpoints hold the whole).

use crate::{GraphError, HostData, HostTensor, Result};

impl HostTensor {
    /// Rows `start..start + count` (along the first axis).
    pub fn rows(&self, start: usize, count: usize) -> Result<HostTensor> {
        let rows = self.shape.first().copied().unwrap_or(0);
        if start + count > rows {
            return Err(GraphError::invalid("row slice", format!("rows {start}..{} of {rows}", start + count)));
        }
        let width: usize = self.shape[1..].iter().product();
        let range = start * width..(start + count) * width;
        let data = match &self.data {
            HostData::F32(v) => HostData::F32(v[range].to_vec()),
            HostData::I64(v) => HostData::I64(v[range].to_vec()),
            HostData::Bool(v) => HostData::Bool(v[range].to_vec()),
        };
        let mut shape = self.shape.clone();
        shape[0] = count;
        HostTensor::new(shape, data)
    }

    /// Stacks tensors along the first axis; the others must agree, as must the dtypes.
    pub fn concat_rows(parts: &[&HostTensor]) -> Result<HostTensor> {
        let first = parts.first().ok_or_else(|| GraphError::invalid("row concat", "no parts"))?;
        let mut rows = 0;
        let mut data = match &first.data {
            HostData::F32(_) => HostData::F32(Vec::new()),
            HostData::I64(_) => HostData::I64(Vec::new()),
            HostData::Bool(_) => HostData::Bool(Vec::new()),
        };
        for p in parts {
            if p.shape.is_empty() || p.shape[1..] != first.shape[1..] {
                return Err(GraphError::invalid("row concat", format!("{:?} and {:?}", first.shape, p.shape)));
            }
            rows += p.shape[0];
            match (&mut data, &p.data) {
                (HostData::F32(d), HostData::F32(v)) => d.extend_from_slice(v),
                (HostData::I64(d), HostData::I64(v)) => d.extend_from_slice(v),
                (HostData::Bool(d), HostData::Bool(v)) => d.extend_from_slice(v),
                _ => return Err(GraphError::invalid("row concat", "parts of different dtypes")),
            }
        }
        let mut shape = first.shape.clone();
        shape[0] = rows;
        HostTensor::new(shape, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cut_and_put_back_give_the_whole() -> Result<()> {
        let whole = HostTensor::f32(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
        let (a, b) = (whole.rows(0, 2)?, whole.rows(2, 1)?);
        assert_eq!(b, HostTensor::f32(vec![1, 2], vec![5.0, 6.0])?);
        assert_eq!(HostTensor::concat_rows(&[&a, &b])?, whole);
        assert!(whole.rows(2, 2).is_err());
        assert!(HostTensor::concat_rows(&[&a, &HostTensor::scalar_f32(1.0)]).is_err());
        Ok(())
    }
}
