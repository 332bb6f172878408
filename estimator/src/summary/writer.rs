//! `SummaryWriter`: one TensorBoard event file in a model dir (or a subdirectory such as `eval/`).
//!
//! On a local model dir events are appended to the file as they come and `flush` pushes them to the OS,
//! as TensorFlow's writer does. Object stores cannot append, so there the writer keeps the whole file in
//! memory and `flush` uploads it again in one PUT: TensorBoard always sees a complete, valid file, at
//! the cost of re-sending it. Event files stay small (a few records per `save_summary_steps`), so the
//! cost is the upload of a few megabytes at most per flush; flush as often as the summaries are needed.

use super::error::{Result, SummaryError};
use super::histogram::histogram_of;
use super::proto::{Event, Summary, SummaryValue};
use super::record::{append_record, read_records};
use crate::checkpoint::unix_now;
use crate::model_dir::{ModelDir, PutOutcome};
use engine_graph::HostTensor;
use prost::Message;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::PathBuf;

/// The first record of every event file; TensorBoard reads the version from it.
pub const FILE_VERSION: &str = "brain.Event:2";

enum Sink {
    Local { file: BufWriter<File>, path: PathBuf },
    Buffered { data: Vec<u8>, dirty: bool },
}

pub struct SummaryWriter {
    model_dir: ModelDir,
    /// The event file's name in the model dir, e.g. `eval/events.out.tfevents.1700000000.host`.
    name: String,
    sink: Sink,
}

impl std::fmt::Debug for SummaryWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryWriter").field("url", &self.url()).finish()
    }
}

/// The host name as TensorFlow puts it in event file names, reduced to characters safe in object names
/// (also what a model dir's writer lease records of its holder).
pub(crate) fn hostname() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let cleaned: String =
        raw.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')).collect();
    if cleaned.is_empty() { "localhost".to_string() } else { cleaned }
}

impl SummaryWriter {
    /// Creates a new event file `events.out.tfevents.<unix seconds>.<hostname>` in `subdir` of the model
    /// dir (`""` for training summaries; `"eval"` or `"eval_<name>"` for evaluations, as Estimator
    /// does). Two writers created in the same second get distinct files (a `.<pid>.<n>` suffix).
    pub fn new(model_dir: &ModelDir, subdir: &str) -> Result<SummaryWriter> {
        let subdir = subdir.trim_matches('/');
        let base = format!("events.out.tfevents.{}.{}", unix_now() as u64, hostname());
        let mut header = Vec::new();
        let first =
            Event { wall_time: unix_now(), step: 0, file_version: Some(FILE_VERSION.into()), ..Event::default() };
        append_record(&mut header, &first.encode_to_vec());

        for attempt in 0..1000u32 {
            let file_name =
                if attempt == 0 { base.clone() } else { format!("{base}.{}.{attempt}", std::process::id()) };
            let name = if subdir.is_empty() { file_name } else { format!("{subdir}/{file_name}") };
            if let Some(path) = model_dir.local_path(&name)? {
                if let Some(file) = create_local(&path, &header)? {
                    let sink = Sink::Local { file: BufWriter::new(file), path };
                    return Ok(SummaryWriter { model_dir: model_dir.clone(), name, sink });
                }
            } else if let PutOutcome::Written(_) = model_dir.put_if_absent(&name, header.clone())? {
                let sink = Sink::Buffered { data: header, dirty: false };
                return Ok(SummaryWriter { model_dir: model_dir.clone(), name, sink });
            }
        }
        Err(SummaryError::Io {
            op: "create",
            path: PathBuf::from(model_dir.url_of(&base)),
            source: std::io::Error::new(ErrorKind::AlreadyExists, "no free event file name"),
        })
    }

    /// The event file's name relative to the model dir.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The event file's full path or URL.
    pub fn url(&self) -> String {
        self.model_dir.url_of(&self.name)
    }

    /// Records a scalar (TensorBoard's Scalars dashboard). Stored as a 32-bit float, as TensorFlow does.
    pub fn scalar(&mut self, tag: &str, step: u64, value: f64) -> Result<()> {
        self.scalars(step, &[(tag, value)])
    }

    /// Records several scalars of one step in one event.
    pub fn scalars(&mut self, step: u64, values: &[(&str, f64)]) -> Result<()> {
        let mut summary = Summary::default();
        for (tag, value) in values {
            check_tag(tag)?;
            summary.value.push(SummaryValue {
                tag: tag.to_string(),
                simple_value: Some(*value as f32),
                ..SummaryValue::default()
            });
        }
        self.write_summary(step, summary)
    }

    /// Records Markdown text (TensorBoard's Text dashboard: `tf.summary.text`'s plugin
    /// metadata and a scalar string tensor).
    pub fn text(&mut self, tag: &str, step: u64, markdown: &str) -> Result<()> {
        check_tag(tag)?;
        let value = SummaryValue {
            tag: tag.to_string(),
            metadata: Some(super::proto::SummaryMetadata {
                plugin_data: Some(super::proto::PluginData { plugin_name: "text".into(), content: Vec::new() }),
            }),
            tensor: Some(super::proto::TensorProto {
                dtype: 7,
                tensor_shape: Some(super::graph::TensorShapeProto::default()),
                string_val: vec![markdown.as_bytes().to_vec()],
                ..Default::default()
            }),
            ..SummaryValue::default()
        };
        self.write_summary(step, Summary { value: vec![value] })
    }

    /// Records a histogram of `values` with TensorFlow's default buckets. Non-finite values are an error,
    /// as in TensorFlow, naming the tag and the step.
    pub fn histogram(&mut self, tag: &str, step: u64, values: &[f64]) -> Result<()> {
        check_tag(tag)?;
        let non_finite = values.iter().filter(|v| !v.is_finite()).count();
        if non_finite > 0 {
            return Err(SummaryError::NonFinite { tag: tag.to_string(), step, count: non_finite });
        }
        let value = SummaryValue { tag: tag.to_string(), histo: Some(histogram_of(values)), ..SummaryValue::default() };
        self.write_summary(step, Summary { value: vec![value] })
    }

    /// The histogram of every element of a tensor (a variable, typically).
    pub fn histogram_of_tensor(&mut self, tag: &str, step: u64, tensor: &HostTensor) -> Result<()> {
        self.histogram(tag, step, &tensor.to_f64_vec())
    }

    fn write_summary(&mut self, step: u64, summary: Summary) -> Result<()> {
        let step = i64::try_from(step).unwrap_or(i64::MAX);
        let event = Event { wall_time: unix_now(), step, summary: Some(summary), ..Event::default() };
        self.write_record(&event.encode_to_vec())
    }

    /// Records a run's hyperparameters for TensorBoard's HParams dashboard, which lists
    /// runs by them next to their final metrics.
    pub fn hparams(&mut self, hparams: &BTreeMap<String, super::HParam>) -> Result<()> {
        let value = super::hparams::session_start(hparams, unix_now());
        self.write_summary(0, Summary { value: vec![value] })
    }

    /// Records the graph a run executes (TensorBoard's Graphs tab), as TensorFlow's
    /// `FileWriter.add_graph` does when a training session starts.
    pub fn graph(&mut self, step: u64, graph: &engine_graph::Graph) -> Result<()> {
        let def = super::graph::graph_def(graph).encode_to_vec();
        let step = i64::try_from(step).unwrap_or(i64::MAX);
        let event = Event { wall_time: unix_now(), step, graph_def: Some(def), ..Event::default() };
        self.write_record(&event.encode_to_vec())
    }

    fn write_record(&mut self, data: &[u8]) -> Result<()> {
        let mut framed = Vec::with_capacity(data.len() + 16);
        append_record(&mut framed, data);
        match &mut self.sink {
            Sink::Local { file, path } => {
                file.write_all(&framed).map_err(|source| SummaryError::Io { op: "write", path: path.clone(), source })
            }
            Sink::Buffered { data, dirty } => {
                data.extend_from_slice(&framed);
                *dirty = true;
                Ok(())
            }
        }
    }

    /// Makes everything written so far visible to TensorBoard.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.sink {
            Sink::Local { file, path } => {
                file.flush().map_err(|source| SummaryError::Io { op: "flush", path: path.clone(), source })
            }
            Sink::Buffered { data, dirty } => {
                if *dirty {
                    self.model_dir.put(&self.name, data.clone())?;
                    *dirty = false;
                }
                Ok(())
            }
        }
    }
}

impl Drop for SummaryWriter {
    fn drop(&mut self) {
        // Best effort: an unflushed tail only loses the last summaries; call `flush` to see errors.
        let _ = self.flush();
    }
}

fn check_tag(tag: &str) -> Result<()> {
    if tag.trim().is_empty() {
        return Err(SummaryError::InvalidTag { tag: tag.to_string() });
    }
    Ok(())
}

/// Creates the local event file with its header record; `None` if the name is taken.
fn create_local(path: &std::path::Path, header: &[u8]) -> Result<Option<File>> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| SummaryError::Io {
            op: "create directory for",
            path: path.to_path_buf(),
            source,
        })?;
    }
    let mut file = match OpenOptions::new().append(true).create_new(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(None),
        Err(source) => return Err(SummaryError::Io { op: "create", path: path.to_path_buf(), source }),
    };
    file.write_all(header).and_then(|()| file.flush()).map_err(|source| SummaryError::Io {
        op: "write",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Some(file))
}

/// Reads every event of an event file in a model dir, verifying the framing (for tests and tools).
pub fn read_event_file(model_dir: &ModelDir, name: &str) -> Result<Vec<Event>> {
    let url = model_dir.url_of(name);
    let bytes = model_dir.get(name)?;
    read_records(&bytes, &url)?
        .into_iter()
        .enumerate()
        .map(|(record, data)| {
            Event::decode(data).map_err(|e| SummaryError::Record {
                url: url.clone(),
                record,
                offset: 0,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The event files in `subdir` of the model dir (not its subdirectories), oldest name first.
pub fn event_files(model_dir: &ModelDir, subdir: &str) -> Result<Vec<String>> {
    let subdir = subdir.trim_matches('/');
    let prefix = if subdir.is_empty() { String::new() } else { format!("{subdir}/") };
    Ok(model_dir
        .list(subdir)?
        .into_iter()
        .map(|info| info.name)
        .filter(|name| {
            name.strip_prefix(&prefix)
                .is_some_and(|rest| !rest.contains('/') && rest.starts_with("events.out.tfevents."))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(dir: &ModelDir) -> anyhow::Result<()> {
        let mut writer = SummaryWriter::new(dir, "eval")?;
        let mut second = SummaryWriter::new(dir, "eval")?;
        assert_ne!(writer.name(), second.name(), "writers created together must not share a file");
        writer.scalar("loss", 10, 0.5)?;
        writer.scalars(20, &[("loss", 0.25), ("accuracy", 0.75)])?;
        writer.histogram("weights", 20, &[1.0, 2.0, 2.0])?;
        assert!(matches!(writer.histogram("w", 30, &[f64::NAN]), Err(SummaryError::NonFinite { step: 30, .. })));
        assert!(matches!(writer.scalar("", 1, 1.0), Err(SummaryError::InvalidTag { .. })));
        writer.flush()?;
        second.flush()?;

        let events = read_event_file(dir, writer.name())?;
        assert_eq!(events[0].file_version.as_deref(), Some(FILE_VERSION));
        let steps: Vec<i64> = events[1..].iter().map(|e| e.step).collect();
        assert_eq!(steps, vec![10, 20, 20]);
        let tags: Vec<&str> = events[2].summary.iter().flat_map(|s| s.value.iter().map(|v| v.tag.as_str())).collect();
        assert_eq!(tags, vec!["loss", "accuracy"]);
        assert_eq!(events[3].summary.as_ref().and_then(|s| s.value[0].histo.as_ref()).map(|h| h.num), Some(3.0));
        assert_eq!(event_files(dir, "eval")?.len(), 2);
        assert!(event_files(dir, "")?.is_empty());
        Ok(())
    }

    #[test]
    fn local_writer() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        exercise(&ModelDir::open(&tmp.path().to_string_lossy())?)
    }

    #[test]
    fn object_store_writer_uploads_on_flush() -> anyhow::Result<()> {
        let dir = ModelDir::open("memory://summary-unit/run")?;
        exercise(&dir)?;
        let mut writer = SummaryWriter::new(&dir, "")?;
        let header_only = dir.get(writer.name())?.len();
        writer.scalar("loss", 1, 1.0)?;
        assert_eq!(dir.get(writer.name())?.len(), header_only, "nothing is uploaded before flush");
        writer.flush()?;
        assert!(dir.get(writer.name())?.len() > header_only);
        Ok(())
    }
}
