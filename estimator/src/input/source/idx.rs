//! IDX files (MNIST, Fashion-MNIST), raw or gzipped.
//!
//! The format: two zero bytes, a type byte, a dimension count, the dimensions as big-endian
//! u32, then the values big-endian, row-major. Images `[n, h, w]` become feature `x` of shape
//! `[h, w, 1]` (NHWC with one channel, TensorFlow's layout); labels `[n]` become i64 scalars.
//! Files are small enough (47 MB for Fashion-MNIST's training images) to decode once, keeping
//! u8 pixels as u8 until an example is read.

use super::files::read_idx;
use super::{FileSpan, Source, file_spans};
use crate::input::error::{InputError, Result};
use crate::input::schema::{FeatureInfo, Row, Schema, mismatch};
use engine_graph::{DType, HostData};
use std::path::{Path, PathBuf};

#[derive(Debug)]
enum Values {
    U8(Vec<u8>),
    F32(Vec<f32>),
}

/// Class ids, kept as the file stores them where that is bytes: a shuffled batch reads
/// one per example from a random place, and 60 KB of them stay in cache where 480 KB of
/// i64 did not.
#[derive(Debug)]
enum Labels {
    U8(Vec<u8>),
    I64(Vec<i64>),
}

impl Labels {
    fn len(&self) -> usize {
        match self {
            Labels::U8(v) => v.len(),
            Labels::I64(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> Option<i64> {
        match self {
            Labels::U8(v) => v.get(i).map(|&b| i64::from(b)),
            Labels::I64(v) => v.get(i).copied(),
        }
    }
}

/// One parsed IDX file.
#[derive(Debug)]
struct IdxArray {
    dims: Vec<usize>,
    values: Values,
}

impl IdxArray {
    fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let bad = |detail: String| InputError::BadIdx { path: path.to_path_buf(), detail };
        let magic: [u8; 4] = match bytes.get(..4).map(<[u8; 4]>::try_from) {
            Some(Ok(m)) => m,
            _ => return Err(bad(format!("file is {} bytes, too short for an IDX header", bytes.len()))),
        };
        if magic[0] != 0 || magic[1] != 0 || magic[3] == 0 {
            return Err(InputError::BadIdxMagic { path: path.to_path_buf(), magic });
        }
        let elem_size =
            element_size(magic[2]).ok_or_else(|| bad(format!("unknown IDX element type {:#04x}", magic[2])))?;
        let ndims = magic[3] as usize;
        let header = 4 + 4 * ndims;
        let dims_bytes =
            bytes.get(4..header).ok_or_else(|| bad(format!("header truncated before {ndims} dimensions")))?;
        let dims: Vec<usize> =
            dims_bytes.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize).collect();
        let count = dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad("dimensions overflow".into()))?;
        let body = &bytes[header..];
        let expected = count.saturating_mul(elem_size);
        if body.len() != expected {
            return Err(bad(format!(
                "dimensions {dims:?} need {expected} bytes of data but the file has {} (truncated or corrupt)",
                body.len()
            )));
        }
        let values = match magic[2] {
            0x08 => Values::U8(body.to_vec()),
            0x09 => Values::F32(body.iter().map(|&b| b as i8 as f32).collect()),
            0x0B => Values::F32(body.chunks_exact(2).map(|c| i16::from_be_bytes([c[0], c[1]]) as f32).collect()),
            0x0C => {
                Values::F32(body.chunks_exact(4).map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]) as f32).collect())
            }
            0x0D => Values::F32(body.chunks_exact(4).map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect()),
            _ => Values::F32(
                body.chunks_exact(8)
                    .map(|c| f64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
                    .collect(),
            ),
        };
        Ok(IdxArray { dims, values })
    }
}

/// Bytes per value of IDX element type `code` (u8, i8, i16, i32, f32, f64), if it is one.
pub(super) fn element_size(code: u8) -> Option<usize> {
    match code {
        0x08 | 0x09 => Some(1),
        0x0B => Some(2),
        0x0C | 0x0D => Some(4),
        0x0E => Some(8),
        _ => None,
    }
}

#[derive(Debug)]
pub(crate) struct IdxSource {
    schema: Schema,
    images: IdxArray,
    example_size: usize,
    labels: Option<Labels>,
    labels_path: Option<PathBuf>,
    files: Vec<FileSpan>,
    description: String,
}

impl IdxSource {
    pub fn open(images_path: &Path, labels_path: Option<&Path>) -> Result<Self> {
        // An input file may take at most what the input pipeline may (half the memory).
        let max_bytes = crate::Resources::of_this_machine().max_batches_bytes();
        let images = IdxArray::parse(images_path, &read_idx(images_path, max_bytes)?)?;
        let n = *images.dims.first().unwrap_or(&0);
        let mut shape: Vec<usize> = images.dims[1..].to_vec();
        if shape.len() == 2 {
            shape.push(1);
        }
        let example_size = shape.iter().product();
        let labels = match labels_path {
            None => None,
            Some(path) => {
                let array = IdxArray::parse(path, &read_idx(path, max_bytes)?)?;
                if array.dims.len() != 1 {
                    return Err(InputError::BadIdx {
                        path: path.to_path_buf(),
                        detail: format!("labels must be one-dimensional, found dimensions {:?}", array.dims),
                    });
                }
                let labels = match array.values {
                    Values::U8(v) => Labels::U8(v),
                    Values::F32(v) => Labels::I64(v.into_iter().map(|x| x as i64).collect()),
                };
                if labels.len() != n {
                    return Err(InputError::LabelCountMismatch {
                        images_path: images_path.to_path_buf(),
                        images: n,
                        labels_path: path.to_path_buf(),
                        labels: labels.len(),
                    });
                }
                Some(labels)
            }
        };
        let schema = Schema::new(
            vec![FeatureInfo::new("x", DType::F32, shape)],
            labels.as_ref().map(|_| FeatureInfo::new("label", DType::I64, vec![])),
        )?;
        let description = format!(
            "idx({}, {}, n={n})",
            images_path.display(),
            labels_path.map(|p| p.display().to_string()).unwrap_or_default()
        );
        let files = file_spans(&[PathBuf::from(images_path)], &[n as u64]);
        let labels_path = labels_path.map(Path::to_path_buf);
        Ok(IdxSource { schema, images, example_size, labels, labels_path, files, description })
    }
}

impl IdxSource {
    /// Where example `i`'s values sit in the images array.
    fn example_range(&self, i: usize) -> std::ops::Range<usize> {
        i * self.example_size..(i + 1) * self.example_size
    }
}

impl Source for IdxSource {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn len(&self) -> u64 {
        self.files[0].count
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn files(&self) -> &[FileSpan] {
        &self.files
    }

    /// Both files: an error about a label is about the labels file.
    fn locate(&self, index: u64) -> String {
        match &self.labels_path {
            Some(labels) => {
                format!("example {} of {} (its label in {})", index + 1, self.files[0].path.display(), labels.display())
            }
            None => format!("example {} of {}", index + 1, self.files[0].path.display()),
        }
    }

    fn read(&self, index: u64) -> Result<Row> {
        super::row_from_read_into(self, index)
    }

    fn read_into(&self, index: u64, columns: &mut [HostData]) -> Result<()> {
        let i = index as usize;
        let out_of_range = || InputError::invalid(format!("IDX example {index} out of range"));
        let label = match &self.labels {
            Some(labels) => Some(labels.get(i).ok_or_else(out_of_range)?),
            None => None,
        };
        let mut infos = self.schema.columns();
        let (Some(x_info), [x, rest @ ..]) = (infos.next(), columns) else {
            return Err(InputError::invalid(format!("example {index}: a batch with no columns")));
        };
        match (x, &self.images.values) {
            (HostData::F32(x), Values::U8(v)) => {
                crate::input::wide::extend_from_u8(x, v.get(self.example_range(i)).ok_or_else(out_of_range)?)
            }
            (HostData::F32(x), Values::F32(v)) => {
                x.extend_from_slice(v.get(self.example_range(i)).ok_or_else(out_of_range)?)
            }
            (x, _) => return Err(mismatch(index, x_info, self.example_size, x.dtype())),
        }
        match (label, rest, infos.next()) {
            (None, [], None) => Ok(()),
            (Some(label), [HostData::I64(y)], Some(_)) => {
                y.push(label);
                Ok(())
            }
            (_, rest, _) => Err(InputError::invalid(format!(
                "example {index} has {} columns, expected {}",
                self.schema.num_columns(),
                rest.len() + 1
            ))),
        }
    }

    fn prefetch(&self, index: u64) {
        let i = index as usize;
        let range = self.example_range(i);
        match &self.images.values {
            Values::U8(v) => super::cache_hint::prefetch(v.get(range).unwrap_or(&[])),
            Values::F32(v) => super::cache_hint::prefetch(v.get(range).unwrap_or(&[])),
        }
        match &self.labels {
            Some(Labels::U8(l)) => super::cache_hint::prefetch(l.get(i..=i).unwrap_or(&[])),
            Some(Labels::I64(l)) => super::cache_hint::prefetch(l.get(i..=i).unwrap_or(&[])),
            None => {}
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IDX file of u8 values.
    pub fn idx_bytes(dims: &[u32], values: &[u8]) -> Vec<u8> {
        let mut out = vec![0, 0, 0x08, dims.len() as u8];
        for d in dims {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out.extend_from_slice(values);
        out
    }

    #[test]
    fn images_and_labels_decode() {
        let dir = tempfile::tempdir().unwrap();
        let (images, labels) = (dir.path().join("i"), dir.path().join("l"));
        std::fs::write(&images, idx_bytes(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 255])).unwrap();
        std::fs::write(&labels, idx_bytes(&[2], &[3, 9])).unwrap();
        let src = IdxSource::open(&images, Some(&labels)).unwrap();
        assert_eq!(src.len(), 2);
        assert_eq!(src.schema().features[0].shape, vec![2, 2, 1]);
        // A prefetch is only a hint: past the end it does nothing.
        src.prefetch(1);
        src.prefetch(7);
        let row = src.read(1).unwrap();
        assert_eq!(row.values[0], HostData::F32(vec![4.0, 5.0, 6.0, 255.0]));
        assert_eq!(row.values[1], HostData::I64(vec![9]));
    }

    /// Decoding straight into a batch's columns appends each example's pixels and label
    /// (u8 labels included) after what is there, and an index past the end or a column of
    /// the wrong type is an error, not a panic.
    #[test]
    fn read_into_appends_what_read_returns() {
        let dir = tempfile::tempdir().unwrap();
        let (images, labels) = (dir.path().join("i"), dir.path().join("l"));
        std::fs::write(&images, idx_bytes(&[3, 1, 2], &[0, 1, 2, 3, 254, 255])).unwrap();
        std::fs::write(&labels, idx_bytes(&[3], &[3, 9, 200])).unwrap();
        let src = IdxSource::open(&images, Some(&labels)).unwrap();
        let mut columns = vec![HostData::F32(vec![]), HostData::I64(vec![])];
        for i in [2, 0, 2] {
            src.read_into(i, &mut columns).unwrap();
        }
        assert_eq!(columns[0], HostData::F32(vec![254.0, 255.0, 0.0, 1.0, 254.0, 255.0]));
        assert_eq!(columns[1], HostData::I64(vec![200, 3, 200]));
        assert_eq!(src.read(0).unwrap().values, vec![HostData::F32(vec![0.0, 1.0]), HostData::I64(vec![3])]);
        assert!(src.read_into(3, &mut columns).is_err());
        assert!(src.read_into(0, &mut [HostData::I64(vec![])]).is_err());
    }

    #[test]
    fn malformed_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (images, labels) = (dir.path().join("i"), dir.path().join("l"));
        std::fs::write(&images, b"\x12\x34\x08\x03rest").unwrap();
        let err = IdxSource::open(&images, None).unwrap_err();
        assert!(matches!(err, InputError::BadIdxMagic { .. }) && err.to_string().contains("i:"), "{err}");

        std::fs::write(&images, &idx_bytes(&[2, 2, 2], &[0; 8])[..15]).unwrap();
        let err = IdxSource::open(&images, None).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");

        std::fs::write(&images, idx_bytes(&[2, 1, 1], &[0, 0])).unwrap();
        std::fs::write(&labels, idx_bytes(&[3], &[0, 1, 2])).unwrap();
        let err = IdxSource::open(&images, Some(&labels)).unwrap_err();
        assert!(matches!(err, InputError::LabelCountMismatch { images: 2, labels: 3, .. }), "{err}");
    }
}
