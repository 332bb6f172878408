//! CSV files with a header row: numeric columns become f32 scalars, categorical columns
//! (given a vocabulary) become i64 indices into it, and one column may be the label.
//!
//! A file (or every file a pattern names, which must share one header) is parsed entirely
//! when opened, into one vector per column: tabular data sets are small, and parsing up
//! front reports every malformed line before training starts instead of hours into it.
//! The label is i64 when it is categorical or every value is an integer (a class id), f32
//! otherwise (a regression target), as `tf.data.experimental.make_csv_dataset` infers.

use super::files::expand;
use super::{FileSpan, Source, file_spans};
use crate::input::SAMPLE_WEIGHT;
use crate::input::error::{InputError, Result};
use crate::input::schema::{FeatureInfo, Row, Schema};
use engine_graph::{DType, HostData};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How to read a CSV source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsvOptions {
    /// A file, or a pattern naming several files with the same header.
    pub path: String,
    /// The label column, if any.
    #[serde(default)]
    pub label: Option<String>,
    /// The feature columns, in this order; all columns but the label (and the weight) when
    /// absent.
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// A column of per-example weights for the loss (Keras' `sample_weight`), read as the
    /// feature `sample_weight`: non-negative numbers.
    #[serde(default)]
    pub weight: Option<String>,
    /// Vocabularies of categorical columns: a value becomes its index in the list.
    #[serde(default)]
    pub categorical: BTreeMap<String, Vec<String>>,
    #[serde(default = "default_delimiter")]
    pub delimiter: char,
}

fn default_delimiter() -> char {
    ','
}

impl CsvOptions {
    pub fn new(path: impl Into<String>) -> Self {
        CsvOptions {
            path: path.into(),
            label: None,
            columns: None,
            weight: None,
            categorical: BTreeMap::new(),
            delimiter: default_delimiter(),
        }
    }

    pub fn label(mut self, column: impl Into<String>) -> Self {
        self.label = Some(column.into());
        self
    }

    pub fn columns<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    pub fn categorical<S: Into<String>>(
        mut self,
        column: impl Into<String>,
        vocabulary: impl IntoIterator<Item = S>,
    ) -> Self {
        self.categorical.insert(column.into(), vocabulary.into_iter().map(Into::into).collect());
        self
    }
}

/// Most distinct labels a vocabulary may be inferred with: a column with more is an id or
/// a free-text field, not classes.
pub const MAX_INFERRED_CLASSES: usize = 10_000;

impl CsvOptions {
    /// The label column's vocabulary when it holds strings and none was given: its distinct
    /// values, sorted (what Keras' `StringLookup` adapts to, without the OOV entry). `None`
    /// when no label is read, a vocabulary is given, or every label is a number.
    pub fn infer_label_vocabulary(&self) -> Result<Option<Vec<String>>> {
        let Some(label) = &self.label else { return Ok(None) };
        if self.categorical.contains_key(label) {
            return Ok(None);
        }
        let mut values = std::collections::BTreeSet::new();
        let mut numeric = true;
        for path in expand(&self.path)? {
            let text = std::fs::read_to_string(&path).map_err(|e| InputError::io(&path, e))?;
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let records = parse_records(&path, text, self.delimiter)?;
            let Some((head, body)) = records.split_first() else { continue };
            let at = head.fields.iter().position(|f| f.trim() == label).ok_or_else(|| InputError::MissingColumn {
                path: path.clone(),
                column: label.clone(),
                available: head.fields.iter().map(|f| f.trim()).collect::<Vec<_>>().join(", "),
            })?;
            for record in body {
                let Some(value) = record.fields.get(at).map(|v| v.trim()) else { continue };
                numeric &= value.parse::<f64>().is_ok();
                values.insert(value.to_string());
                if values.len() > MAX_INFERRED_CLASSES {
                    return Err(InputError::Csv {
                        path: path.clone(),
                        line: record.line,
                        detail: format!(
                            "the label column `{label}` has more than {MAX_INFERRED_CLASSES} distinct values: give its \
                             vocabulary in `categorical` if they really are classes"
                        ),
                    });
                }
            }
        }
        Ok((!numeric && !values.is_empty()).then(|| values.into_iter().collect()))
    }
}

/// One record's fields and the line it starts on (1-based).
struct Record {
    line: usize,
    fields: Vec<String>,
}

/// Splits CSV text into records, honouring double quotes (which may hold delimiters,
/// newlines and doubled quotes). Blank lines are skipped.
fn parse_records(path: &Path, text: &str, delimiter: char) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    let mut fields = Vec::new();
    let mut field = String::new();
    let (mut line, mut record_line) = (1, 1);
    let mut in_quotes = false;
    let mut chars = text.chars().peekable();
    let mut flush_record = |fields: &mut Vec<String>, field: &mut String, record_line: usize| {
        fields.push(std::mem::take(field));
        let record = std::mem::take(fields);
        if !(record.len() == 1 && record[0].trim().is_empty()) {
            records.push(Record { line: record_line, fields: record });
        }
    };
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => in_quotes = true,
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                flush_record(&mut fields, &mut field, record_line);
                line += 1;
                record_line = line;
            }
            c if c == delimiter => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    if in_quotes {
        return Err(InputError::Csv {
            path: path.to_path_buf(),
            line: record_line,
            detail: "a quoted field is not closed before the end of the file".into(),
        });
    }
    if !field.is_empty() || !fields.is_empty() {
        flush_record(&mut fields, &mut field, record_line);
    }
    Ok(records)
}

#[derive(Debug)]
pub(crate) struct CsvSource {
    schema: Schema,
    /// One vector per schema column, one value per example.
    columns: Vec<HostData>,
    files: Vec<FileSpan>,
    /// The line each example starts on in its file (1-based), for `locate`.
    lines: Vec<usize>,
    description: String,
}

/// Which header positions feed which feature, and where the label is.
struct ColumnPlan {
    selected: Vec<(usize, String)>,
    label_at: Option<usize>,
}

/// How one selected column is converted.
enum Column<'a> {
    Numeric,
    Categorical(&'a [String]),
}

impl CsvSource {
    pub fn open(options: &CsvOptions) -> Result<Self> {
        let paths = expand(&options.path)?;
        let mut header: Option<(PathBuf, Vec<String>)> = None;
        let mut counts = Vec::new();
        let mut feature_values: Vec<Vec<f64>> = Vec::new();
        let mut label_raw: Vec<(PathBuf, usize, String)> = Vec::new();
        let mut plan: Option<ColumnPlan> = None;
        let mut lines = Vec::new();

        for path in &paths {
            let bytes = std::fs::read(path).map_err(|e| InputError::io(path, e))?;
            let text = String::from_utf8(bytes).map_err(|e| {
                let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count();
                InputError::Csv { path: path.clone(), line, detail: "not valid UTF-8".into() }
            })?;
            // Spreadsheet programs start UTF-8 files with a byte-order mark; it is not part
            // of the first column's name.
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let records = parse_records(path, text, options.delimiter)?;
            let Some((head, body)) = records.split_first() else {
                return Err(InputError::Csv {
                    path: path.clone(),
                    line: 1,
                    detail: "empty file: no header row".into(),
                });
            };
            let names: Vec<String> = head.fields.iter().map(|f| f.trim().to_string()).collect();
            match &header {
                None => header = Some((path.clone(), names.clone())),
                Some((first, h)) if *h != names => {
                    return Err(InputError::Csv {
                        path: path.clone(),
                        line: head.line,
                        detail: format!("header {names:?} differs from {h:?} in {}", first.display()),
                    });
                }
                Some(_) => {}
            }
            if plan.is_none() {
                plan = Some(Self::plan(path, &names, options)?);
                feature_values = vec![Vec::new(); plan.as_ref().map_or(0, |p| p.selected.len())];
            }
            let Some(ColumnPlan { selected, label_at }) = &plan else { continue };
            for record in body {
                if record.fields.len() != names.len() {
                    return Err(InputError::Csv {
                        path: path.clone(),
                        line: record.line,
                        detail: format!("{} fields, but the header has {}", record.fields.len(), names.len()),
                    });
                }
                for ((at, name), out) in selected.iter().zip(feature_values.iter_mut()) {
                    let raw = record.fields[*at].trim();
                    let kind = match options.categorical.get(name) {
                        Some(vocab) => Column::Categorical(vocab),
                        None => Column::Numeric,
                    };
                    let value = convert(path, record.line, name, raw, &kind)?;
                    if name == SAMPLE_WEIGHT && !(value.is_finite() && value >= 0.0) {
                        return Err(InputError::Csv {
                            path: path.clone(),
                            line: record.line,
                            detail: format!(
                                "the weight column `{}` holds {raw}: an example's weight must be a finite number >= 0",
                                options.weight.as_deref().unwrap_or(SAMPLE_WEIGHT)
                            ),
                        });
                    }
                    out.push(value);
                }
                if let Some(at) = label_at {
                    label_raw.push((path.clone(), record.line, record.fields[*at].trim().to_string()));
                }
                lines.push(record.line);
            }
            counts.push((body.len()) as u64);
        }
        let Some(ColumnPlan { selected, .. }) = plan else {
            return Err(InputError::NoFiles { pattern: options.path.clone() });
        };

        let mut infos = Vec::new();
        let mut columns = Vec::new();
        for ((_, name), values) in selected.iter().zip(feature_values) {
            if options.categorical.contains_key(name) {
                infos.push(FeatureInfo::new(name.clone(), DType::I64, vec![]));
                columns.push(HostData::I64(values.into_iter().map(|v| v as i64).collect()));
            } else {
                infos.push(FeatureInfo::new(name.clone(), DType::F32, vec![]));
                columns.push(HostData::F32(values.into_iter().map(|v| v as f32).collect()));
            }
        }
        let label = match &options.label {
            None => None,
            Some(name) => {
                let (info, data) = convert_label(name, &label_raw, options.categorical.get(name))?;
                columns.push(data);
                Some(info)
            }
        };
        let schema = Schema::new(infos, label)?;
        let description = format!("csv({}, files={}, n={})", options.path, paths.len(), counts.iter().sum::<u64>());
        Ok(CsvSource { schema, columns, files: file_spans(&paths, &counts), lines, description })
    }

    fn plan(path: &Path, names: &[String], options: &CsvOptions) -> Result<ColumnPlan> {
        // Columns are addressed by name: a header that names one twice is the file's fault,
        // so it is reported there (line 1), not as a nameless schema error later.
        for (i, name) in names.iter().enumerate() {
            if let Some(j) = names[..i].iter().position(|n| n == name) {
                return Err(InputError::Csv {
                    path: path.to_path_buf(),
                    line: 1,
                    detail: format!(
                        "the header names column `{name}` twice (columns {} and {}); every column needs its own name",
                        j + 1,
                        i + 1
                    ),
                });
            }
        }
        let find = |column: &str| {
            names.iter().position(|n| n == column).ok_or_else(|| InputError::MissingColumn {
                path: path.to_path_buf(),
                column: column.to_string(),
                available: names.join(", "),
            })
        };
        let label_at = options.label.as_deref().map(find).transpose()?;
        let weight_at = options.weight.as_deref().map(find).transpose()?;
        let mut selected = match &options.columns {
            Some(columns) => columns.iter().map(|c| Ok((find(c)?, c.clone()))).collect::<Result<Vec<_>>>()?,
            None => names
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != label_at && Some(*i) != weight_at)
                .map(|(i, n)| (i, n.clone()))
                .collect(),
        };
        if let Some(at) = weight_at {
            selected.retain(|(i, _)| *i != at);
            selected.push((at, SAMPLE_WEIGHT.to_string()));
        }
        for column in options.categorical.keys() {
            find(column)?;
        }
        Ok(ColumnPlan { selected, label_at })
    }
}

fn convert(path: &Path, line: usize, name: &str, raw: &str, kind: &Column) -> Result<f64> {
    let err = |detail: String| InputError::Csv { path: path.to_path_buf(), line, detail };
    match kind {
        Column::Categorical(vocab) => vocab
            .iter()
            .position(|v| v == raw)
            .map(|i| i as f64)
            .ok_or_else(|| err(format!("column `{name}`: `{raw}` is not in its vocabulary {vocab:?}"))),
        Column::Numeric => raw.parse::<f64>().map_err(|_| {
            err(format!("column `{name}`: `{raw}` is not a number (categorical columns need a vocabulary)"))
        }),
    }
}

fn convert_label(
    name: &str,
    raw: &[(PathBuf, usize, String)],
    vocab: Option<&Vec<String>>,
) -> Result<(FeatureInfo, HostData)> {
    if let Some(vocab) = vocab {
        let kind = Column::Categorical(vocab);
        let ids =
            raw.iter().map(|(p, l, v)| convert(p, *l, name, v, &kind).map(|x| x as i64)).collect::<Result<_>>()?;
        return Ok((FeatureInfo::new(name, DType::I64, vec![]), HostData::I64(ids)));
    }
    if let Ok(ids) = raw.iter().map(|(_, _, v)| v.parse::<i64>()).collect::<std::result::Result<Vec<_>, _>>() {
        return Ok((FeatureInfo::new(name, DType::I64, vec![]), HostData::I64(ids)));
    }
    let values = raw
        .iter()
        .map(|(p, l, v)| convert(p, *l, name, v, &Column::Numeric).map(|x| x as f32))
        .collect::<Result<_>>()?;
    Ok((FeatureInfo::new(name, DType::F32, vec![]), HostData::F32(values)))
}

impl Source for CsvSource {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn len(&self) -> u64 {
        self.files.iter().map(|f| f.count).sum()
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn files(&self) -> &[FileSpan] {
        &self.files
    }

    fn read(&self, index: u64) -> Result<Row> {
        let i = index as usize;
        let out = || InputError::invalid(format!("CSV example {index} out of range"));
        let values = self
            .columns
            .iter()
            .map(|column| {
                Ok(match column {
                    HostData::F32(v) => HostData::F32(vec![*v.get(i).ok_or_else(out)?]),
                    HostData::I64(v) => HostData::I64(vec![*v.get(i).ok_or_else(out)?]),
                    HostData::Bool(v) => HostData::Bool(vec![*v.get(i).ok_or_else(out)?]),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Row { values })
    }

    fn locate(&self, index: u64) -> String {
        let file = self.files.iter().find(|f| (f.start..f.start + f.count).contains(&index));
        match (file, self.lines.get(index as usize)) {
            (Some(f), Some(line)) => format!("{}:{line}", f.path.display()),
            _ => format!("example {} of {}", index + 1, self.description),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    #[test]
    fn numeric_categorical_and_label_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "a.csv", "a,color,b,y\n1.5,red,2,0\n\n\"3\",\"blue\",4,2\r\n");
        let options = CsvOptions::new(path).label("y").categorical("color", ["red", "blue"]);
        let src = CsvSource::open(&options).unwrap();
        assert_eq!(src.len(), 2);
        let names: Vec<_> = src.schema().columns().map(|c| (c.name.as_str(), c.dtype)).collect();
        assert_eq!(names, [("a", DType::F32), ("color", DType::I64), ("b", DType::F32), ("y", DType::I64)]);
        let row = src.read(1).unwrap();
        assert_eq!(
            row.values,
            [HostData::F32(vec![3.0]), HostData::I64(vec![1]), HostData::F32(vec![4.0]), HostData::I64(vec![2])]
        );
    }

    #[test]
    fn selected_columns_and_float_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "a.csv", "a,b,y\n1,2,0.5\n3,4,1\n");
        let src = CsvSource::open(&CsvOptions::new(path).label("y").columns(["b"])).unwrap();
        assert_eq!(src.read(0).unwrap().values, [HostData::F32(vec![2.0]), HostData::F32(vec![0.5])]);
    }

    #[test]
    fn quoted_fields_hold_delimiters_and_newlines() {
        let records = parse_records(Path::new("t"), "a,b\n\"x,\"\"y\"\"\nz\",2\n3,4", ',').unwrap();
        assert_eq!(records[1].fields, ["x,\"y\"\nz", "2"]);
        assert_eq!(records[2].line, 4);
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_header_and_examples_are_located_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "bom.csv", "\u{feff}a,y\n1,0\n\n2,1\n");
        let src = CsvSource::open(&CsvOptions::new(&path).label("y")).unwrap();
        assert_eq!(src.schema().features[0].name, "a");
        assert_eq!(src.locate(1), format!("{path}:4"));
    }

    #[test]
    fn a_header_naming_a_column_twice_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "twice.csv", "a,b,a,y\n1,2,3,0\n");
        let err = CsvSource::open(&CsvOptions::new(&path).label("y")).unwrap_err().to_string();
        assert!(err.contains("twice.csv:1:") && err.contains("column `a` twice (columns 1 and 3)"), "{err}");
    }

    #[test]
    fn malformed_csv_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "bad.csv", "a,y\n1,0\n2\n");
        let err = CsvSource::open(&CsvOptions::new(&path).label("y")).unwrap_err().to_string();
        assert!(err.contains("bad.csv:3:"), "{err}");
        let path = write(dir.path(), "nan.csv", "a,y\n1,0\nabc,1\n");
        let err = CsvSource::open(&CsvOptions::new(&path).label("y")).unwrap_err().to_string();
        assert!(err.contains("nan.csv:3:") && err.contains("`abc`"), "{err}");
        let err = CsvSource::open(&CsvOptions::new(&path).label("species")).unwrap_err();
        assert!(matches!(&err, InputError::MissingColumn { column, .. } if column == "species"), "{err}");
        assert!(err.to_string().contains("nan.csv"), "{err}");
    }
}
