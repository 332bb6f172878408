//! Decoding a serialized `tf.train.Example` straight into a row, without a protobuf
//! library: the message is small and fixed, and decoding by hand lets every error say
//! which feature was wrong and how, and skips features the spec does not ask for.
//!
//! ```text
//! Example  { Features features = 1; }
//! Features { map<string, Feature> feature = 1; }      // entry: key = 1, value = 2
//! Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//! *List    { repeated <bytes | float | int64> value = 1; }   // numbers packed or not
//! ```

use crate::input::feature_spec::{FeatureDef, FeatureKind};
use engine_graph::HostData;

/// What went wrong, before the caller adds the file and record.
#[derive(Debug, PartialEq)]
pub(crate) enum DecodeError {
    Malformed(String),
    Feature { name: String, detail: String },
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Wire { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or_else(|| malformed("varint runs past the end"))?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed("varint longer than 10 bytes"))
    }

    fn key(&mut self) -> Result<(u64, u8), DecodeError> {
        let key = self.varint()?;
        Ok((key >> 3, (key & 7) as u8))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
            malformed(&format!(
                "a field of {n} bytes at byte {} runs past the end ({} bytes)",
                self.pos,
                self.buf.len()
            ))
        })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint()?;
        self.take(usize::try_from(n).map_err(|_| malformed("length overflows"))?)
    }

    fn skip(&mut self, wire: u8) -> Result<(), DecodeError> {
        match wire {
            VARINT => self.varint().map(|_| ()),
            FIXED64 => self.take(8).map(|_| ()),
            LEN => self.len_delimited().map(|_| ()),
            FIXED32 => self.take(4).map(|_| ()),
            other => Err(malformed(&format!("unsupported wire type {other}"))),
        }
    }
}

fn malformed(detail: &str) -> DecodeError {
    DecodeError::Malformed(detail.to_string())
}

/// One column to fill: its name and definition, in schema order.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub name: String,
    pub def: FeatureDef,
    pub size: usize,
}

/// Decodes `record` into one `HostData` per column.
pub(crate) fn decode(record: &[u8], columns: &[Column]) -> Result<Vec<HostData>, DecodeError> {
    let mut values: Vec<Option<HostData>> = vec![None; columns.len()];
    let mut example = Wire::new(record);
    while !example.done() {
        let (field, wire) = example.key()?;
        if field != 1 || wire != LEN {
            example.skip(wire)?;
            continue;
        }
        let mut features = Wire::new(example.len_delimited()?);
        while !features.done() {
            let (field, wire) = features.key()?;
            if field != 1 || wire != LEN {
                features.skip(wire)?;
                continue;
            }
            let mut entry = Wire::new(features.len_delimited()?);
            let (mut key, mut feature) = (None, &[][..]);
            while !entry.done() {
                match entry.key()? {
                    (1, LEN) => key = Some(entry.len_delimited()?),
                    (2, LEN) => feature = entry.len_delimited()?,
                    (_, wire) => entry.skip(wire)?,
                }
            }
            let key = key.ok_or_else(|| malformed("a feature map entry has no name"))?;
            if let Some(at) = columns.iter().position(|c| c.name.as_bytes() == key) {
                values[at] = Some(decode_feature(feature, &columns[at])?);
            }
        }
    }
    values
        .into_iter()
        .zip(columns)
        .map(|(value, column)| match (value, column.def.default_value) {
            (Some(v), _) => Ok(v),
            (None, Some(d)) => Ok(filled(column, d)),
            (None, None) => {
                Err(feature_error(column, "missing from the record (and no default_value is given)".into()))
            }
        })
        .collect()
}

fn feature_error(column: &Column, detail: String) -> DecodeError {
    DecodeError::Feature { name: column.name.clone(), detail }
}

fn filled(column: &Column, value: f64) -> HostData {
    match (column.def.kind, &column.def.vocabulary) {
        (FeatureKind::Int64, _) | (FeatureKind::Bytes, Some(_)) => HostData::I64(vec![value as i64; column.size]),
        _ => HostData::F32(vec![value as f32; column.size]),
    }
}

fn kind_name(field: u64) -> &'static str {
    match field {
        1 => "bytes_list",
        2 => "float_list",
        3 => "int64_list",
        _ => "an unknown list",
    }
}

fn decode_feature(feature: &[u8], column: &Column) -> Result<HostData, DecodeError> {
    let expected = match column.def.kind {
        FeatureKind::Bytes => 1,
        FeatureKind::Float => 2,
        FeatureKind::Int64 => 3,
    };
    let mut wire = Wire::new(feature);
    let mut list: &[u8] = &[];
    while !wire.done() {
        let (field, kind) = wire.key()?;
        if kind != LEN || !(1..=3).contains(&field) {
            wire.skip(kind)?;
            continue;
        }
        if field != expected {
            return Err(feature_error(
                column,
                format!("is a {} in the record but the spec reads a {}", kind_name(field), kind_name(expected)),
            ));
        }
        list = wire.len_delimited()?;
    }
    let data = match column.def.kind {
        FeatureKind::Float => HostData::F32(floats(list)?),
        FeatureKind::Int64 => HostData::I64(ints(list)?),
        FeatureKind::Bytes => {
            let values = byte_strings(list)?;
            match &column.def.vocabulary {
                Some(vocab) => HostData::I64(
                    values
                        .iter()
                        .map(|v| {
                            vocab.iter().position(|w| w.as_bytes() == *v).map(|i| i as i64).ok_or_else(|| {
                                feature_error(
                                    column,
                                    format!("`{}` is not in the vocabulary", String::from_utf8_lossy(v)),
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?,
                ),
                None => match values.as_slice() {
                    [one] => HostData::F32(one.iter().map(|&b| f32::from(b)).collect()),
                    _ => {
                        return Err(feature_error(
                            column,
                            format!("raw bytes need exactly one value in the bytes_list, found {}", values.len()),
                        ));
                    }
                },
            }
        }
    };
    if data.len() != column.size {
        return Err(feature_error(
            column,
            format!("has {} values but the spec's shape {:?} needs {}", data.len(), column.def.shape, column.size),
        ));
    }
    Ok(data)
}

fn floats(list: &[u8]) -> Result<Vec<f32>, DecodeError> {
    let mut out = Vec::new();
    let mut wire = Wire::new(list);
    while !wire.done() {
        match wire.key()? {
            (1, LEN) => {
                let packed = wire.len_delimited()?;
                if packed.len() % 4 != 0 {
                    return Err(malformed("packed floats are not a multiple of 4 bytes"));
                }
                out.extend(packed.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            }
            (1, FIXED32) => {
                let c = wire.take(4)?;
                out.push(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            }
            (_, kind) => wire.skip(kind)?,
        }
    }
    Ok(out)
}

fn ints(list: &[u8]) -> Result<Vec<i64>, DecodeError> {
    let mut out = Vec::new();
    let mut wire = Wire::new(list);
    while !wire.done() {
        match wire.key()? {
            (1, LEN) => {
                let mut packed = Wire::new(wire.len_delimited()?);
                while !packed.done() {
                    out.push(packed.varint()? as i64);
                }
            }
            (1, VARINT) => out.push(wire.varint()? as i64),
            (_, kind) => wire.skip(kind)?,
        }
    }
    Ok(out)
}

fn byte_strings(list: &[u8]) -> Result<Vec<&[u8]>, DecodeError> {
    let mut out = Vec::new();
    let mut wire = Wire::new(list);
    while !wire.done() {
        match wire.key()? {
            (1, LEN) => out.push(wire.len_delimited()?),
            (_, kind) => wire.skip(kind)?,
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Hand-rolled encoding of the same messages, for tests of the reader.
    pub fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn len_field(field: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(field << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    pub enum Value<'a> {
        Floats(&'a [f32]),
        Ints(&'a [i64]),
        Bytes(&'a [&'a [u8]]),
    }

    pub fn encode_example(features: &[(&str, Value)]) -> Vec<u8> {
        let mut map = Vec::new();
        for (name, value) in features {
            let mut list = Vec::new();
            let kind = match value {
                Value::Floats(v) => {
                    let packed: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    len_field(1, &packed, &mut list);
                    2
                }
                Value::Ints(v) => {
                    let mut packed = Vec::new();
                    v.iter().for_each(|&x| varint(x as u64, &mut packed));
                    len_field(1, &packed, &mut list);
                    3
                }
                Value::Bytes(v) => {
                    v.iter().for_each(|b| len_field(1, b, &mut list));
                    1
                }
            };
            let mut feature = Vec::new();
            len_field(kind, &list, &mut feature);
            let mut entry = Vec::new();
            len_field(1, name.as_bytes(), &mut entry);
            len_field(2, &feature, &mut entry);
            len_field(1, &entry, &mut map);
        }
        let mut example = Vec::new();
        len_field(1, &map, &mut example);
        example
    }

    fn column(name: &str, def: FeatureDef) -> Column {
        let size = def.shape.iter().product();
        Column { name: name.into(), def, size }
    }

    #[test]
    fn decodes_every_list_kind() {
        let record = encode_example(&[
            ("x", Value::Floats(&[1.0, -2.5])),
            ("n", Value::Ints(&[-3])),
            ("c", Value::Bytes(&[b"b"])),
            ("img", Value::Bytes(&[&[0, 255]])),
            ("ignored", Value::Ints(&[1, 2, 3])),
        ]);
        let columns = [
            column("x", FeatureDef::float(vec![2])),
            column("n", FeatureDef::int64(vec![])),
            column("c", FeatureDef::new(FeatureKind::Bytes, vec![]).with_vocabulary(["a", "b"])),
            column("img", FeatureDef::raw_bytes(vec![2, 1])),
            column("d", FeatureDef::float(vec![2]).with_default(0.5)),
        ];
        let values = decode(&record, &columns).unwrap();
        assert_eq!(
            values,
            [
                HostData::F32(vec![1.0, -2.5]),
                HostData::I64(vec![-3]),
                HostData::I64(vec![1]),
                HostData::F32(vec![0.0, 255.0]),
                HostData::F32(vec![0.5, 0.5]),
            ]
        );
    }

    #[test]
    fn wrong_kind_count_and_missing_are_errors() {
        let record = encode_example(&[("x", Value::Ints(&[1, 2]))]);
        let err = decode(&record, &[column("x", FeatureDef::float(vec![2]))]).unwrap_err();
        assert!(matches!(&err, DecodeError::Feature { detail, .. } if detail.contains("int64_list")), "{err:?}");
        let err = decode(&record, &[column("x", FeatureDef::int64(vec![3]))]).unwrap_err();
        assert!(matches!(&err, DecodeError::Feature { detail, .. } if detail.contains("needs 3")), "{err:?}");
        let err = decode(&record, &[column("y", FeatureDef::int64(vec![]))]).unwrap_err();
        assert!(matches!(&err, DecodeError::Feature { name, .. } if name == "y"), "{err:?}");
        let err = decode(&record[..record.len() - 1], &[column("x", FeatureDef::int64(vec![2]))]).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed(_)), "{err:?}");
    }
}
