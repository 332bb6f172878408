//! TFRecord files of `tf.train.Example`s.
//!
//! A record is `u64 length (LE) | u32 masked CRC32C of the length | data | u32 masked CRC32C
//! of the data`. Opening a file walks the length headers once (checking their CRCs and that
//! the file is long enough) to index every record's offset, so records can then be read in
//! any order with one positioned read each; the data CRC is checked on every read.

use super::example_proto::{Column, DecodeError, decode};
use super::files::expand;
use super::{FileSpan, Source, file_spans};
use crate::input::error::{InputError, Result};
use crate::input::feature_spec::{FeatureKind, FeatureSpec};
use crate::input::schema::{FeatureInfo, Row, Schema};
use engine_graph::DType;
use std::fs::File;
use std::io::{BufReader, Read};
#[cfg(not(unix))]
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

const HEADER: u64 = 12;
const FOOTER: u64 = 4;

/// TensorFlow's CRC mask: rotating and offsetting the CRC keeps a CRC of data that itself
/// contains CRCs from being trivially zero.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[derive(Debug)]
struct RecordFile {
    path: PathBuf,
    file: File,
    /// (offset of the record's header, data length) per record.
    records: Vec<(u64, u64)>,
}

impl RecordFile {
    fn open(path: &Path) -> Result<Self> {
        let io = |e| InputError::io(path, e);
        let file = File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        let mut reader = BufReader::with_capacity(1 << 16, file.try_clone().map_err(io)?);
        let mut records = Vec::new();
        let mut offset = 0u64;
        while offset < size {
            let record = records.len();
            let truncated =
                |detail: String| InputError::TruncatedRecord { path: path.to_path_buf(), record, offset, detail };
            if size - offset < HEADER {
                return Err(truncated(format!("{} bytes left, a record header needs {HEADER}", size - offset)));
            }
            let mut header = [0u8; HEADER as usize];
            reader.read_exact(&mut header).map_err(io)?;
            let length_bytes: [u8; 8] = header[..8].try_into().unwrap_or_default();
            let stored = u32::from_le_bytes(header[8..].try_into().unwrap_or_default());
            let computed = masked_crc(&length_bytes);
            if stored != computed {
                return Err(InputError::BadCrc {
                    path: path.to_path_buf(),
                    record,
                    offset,
                    part: "length",
                    stored,
                    computed,
                });
            }
            let length = u64::from_le_bytes(length_bytes);
            let needed = length.saturating_add(FOOTER);
            if size - offset - HEADER < needed {
                return Err(truncated(format!(
                    "the header announces {length} data bytes, only {} bytes follow",
                    size - offset - HEADER
                )));
            }
            records.push((offset, length));
            reader.seek_relative(needed as i64).map_err(io)?;
            offset += HEADER + needed;
        }
        Ok(RecordFile { path: path.to_path_buf(), file, records })
    }

    /// Record `record`'s data, CRC-checked.
    fn read(&self, record: usize) -> Result<Vec<u8>> {
        let &(offset, length) = self
            .records
            .get(record)
            .ok_or_else(|| InputError::invalid(format!("{}: no record {record}", self.path.display())))?;
        let mut buf = vec![0u8; (length + FOOTER) as usize];
        read_at(&self.file, &mut buf, offset + HEADER).map_err(|e| InputError::io(&self.path, e))?;
        let crc_bytes = buf.split_off(length as usize);
        let stored = u32::from_le_bytes(crc_bytes.as_slice().try_into().unwrap_or_default());
        let computed = masked_crc(&buf);
        if stored != computed {
            return Err(InputError::BadCrc { path: self.path.clone(), record, offset, part: "data", stored, computed });
        }
        Ok(buf)
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut file = file.try_clone()?;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

#[derive(Debug)]
pub(crate) struct TfRecordSource {
    schema: Schema,
    columns: Vec<Column>,
    files: Vec<RecordFile>,
    spans: Vec<FileSpan>,
    description: String,
}

impl TfRecordSource {
    pub fn open(pattern: &str, spec: &FeatureSpec) -> Result<Self> {
        let mut columns: Vec<Column> = Vec::new();
        let mut label_column = None;
        for (name, def) in &spec.features {
            if def.vocabulary.is_some() && def.kind != FeatureKind::Bytes {
                return Err(InputError::invalid(format!("feature `{name}`: a vocabulary needs kind Bytes")));
            }
            let column = Column { name: name.clone(), def: def.clone(), size: def.shape.iter().product() };
            if spec.label.as_deref() == Some(name.as_str()) {
                label_column = Some(column);
            } else {
                columns.push(column);
            }
        }
        if let Some(label) = &spec.label
            && label_column.is_none()
        {
            return Err(InputError::invalid(format!("the label `{label}` is not one of the spec's features")));
        }
        columns.extend(label_column);
        let info = |c: &Column| {
            let dtype = match (c.def.kind, &c.def.vocabulary) {
                (FeatureKind::Float, _) | (FeatureKind::Bytes, None) => DType::F32,
                _ => DType::I64,
            };
            FeatureInfo::new(c.name.clone(), dtype, c.def.shape.clone())
        };
        let n_features = columns.len() - usize::from(spec.label.is_some());
        let schema = Schema::new(columns[..n_features].iter().map(info).collect(), columns.get(n_features).map(info))?;

        let paths = expand(pattern)?;
        let files = paths.iter().map(|p| RecordFile::open(p)).collect::<Result<Vec<_>>>()?;
        let counts: Vec<u64> = files.iter().map(|f| f.records.len() as u64).collect();
        let description =
            format!("tfrecord({pattern}, files={}, n={}, {:?})", files.len(), counts.iter().sum::<u64>(), spec);
        Ok(TfRecordSource { schema, columns, spans: file_spans(&paths, &counts), files, description })
    }
}

impl Source for TfRecordSource {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn len(&self) -> u64 {
        self.spans.iter().map(|s| s.count).sum()
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn files(&self) -> &[FileSpan] {
        &self.spans
    }

    fn read(&self, index: u64) -> Result<Row> {
        let k = self.spans.partition_point(|s| s.start + s.count <= index);
        let (Some(span), Some(file)) = (self.spans.get(k), self.files.get(k)) else {
            return Err(InputError::invalid(format!("TFRecord example {index} out of range")));
        };
        let record = (index - span.start) as usize;
        let data = file.read(record)?;
        let values = decode(&data, &self.columns).map_err(|e| match e {
            DecodeError::Malformed(detail) => InputError::BadExample { path: file.path.clone(), record, detail },
            DecodeError::Feature { name, detail } => {
                InputError::BadFeature { path: file.path.clone(), record, feature: name, detail }
            }
        })?;
        Ok(Row { values })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::example_proto::tests::{Value, encode_example};
    use super::*;
    use crate::input::feature_spec::FeatureDef;
    use engine_graph::HostData;

    pub fn frame(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let length = (data.len() as u64).to_le_bytes();
        out.extend_from_slice(&length);
        out.extend_from_slice(&masked_crc(&length).to_le_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(&masked_crc(data).to_le_bytes());
        out
    }

    fn records(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| frame(&encode_example(&[("v", Value::Floats(&[i as f32])), ("y", Value::Ints(&[i as i64]))])))
            .collect()
    }

    fn spec() -> FeatureSpec {
        FeatureSpec::new().feature("v", FeatureDef::float(vec![])).feature("y", FeatureDef::int64(vec![])).label("y")
    }

    #[test]
    fn masked_crc_matches_tensorflow() {
        // crc32c("123456789") = 0xe3069283, TensorFlow's masking of it:
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8));
    }

    #[test]
    fn files_concatenate_in_sorted_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.tfrecord"), records(2)).unwrap();
        std::fs::write(dir.path().join("a.tfrecord"), records(3)).unwrap();
        let src = TfRecordSource::open(&format!("{}/*.tfrecord", dir.path().display()), &spec()).unwrap();
        assert_eq!(src.len(), 5);
        assert_eq!(src.read(4).unwrap().values, [HostData::F32(vec![1.0]), HostData::I64(vec![1])]);
        assert_eq!(src.files().len(), 2);
    }

    #[test]
    fn truncation_and_bad_crcs_name_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tfrecord");
        let good = records(3);
        std::fs::write(&path, &good[..good.len() - 3]).unwrap();
        let err = TfRecordSource::open(path.to_str().unwrap(), &spec()).unwrap_err();
        assert!(matches!(err, InputError::TruncatedRecord { record: 2, .. }), "{err}");

        let mut bad = good.clone();
        bad[8] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let err = TfRecordSource::open(path.to_str().unwrap(), &spec()).unwrap_err();
        assert!(matches!(err, InputError::BadCrc { record: 0, part: "length", .. }), "{err}");

        let mut bad = good.clone();
        let len = bad.len();
        bad[len - 6] ^= 1; // inside the last record's data
        std::fs::write(&path, &bad).unwrap();
        let src = TfRecordSource::open(path.to_str().unwrap(), &spec()).unwrap();
        assert!(src.read(1).is_ok());
        let err = src.read(2).unwrap_err();
        assert!(matches!(err, InputError::BadCrc { record: 2, part: "data", .. }), "{err}");
        assert!(err.to_string().contains("t.tfrecord: record 2"), "{err}");
    }
}
