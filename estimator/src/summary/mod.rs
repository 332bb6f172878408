//! TensorBoard summaries: event files of `Event` protobufs in TFRecord framing, readable by TensorBoard
//! (and `tf.compat.v1.train.summary_iterator`) without TensorFlow on the writing side.
//!
//! ```
//! use engine_estimator::model_dir::ModelDir;
//! use engine_estimator::summary::{SummaryWriter, event_files, read_event_file};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = ModelDir::open("memory://summary-doc/run")?;
//! let mut train = SummaryWriter::new(&dir, "")?;
//! train.scalar("loss", 100, 0.42)?;
//! train.histogram("dense/kernel", 100, &[0.1, -0.2, 0.3])?;
//! train.flush()?;
//! let mut eval = SummaryWriter::new(&dir, "eval")?;
//! eval.scalars(100, &[("accuracy", 0.9), ("loss", 0.4)])?;
//! eval.flush()?;
//! assert_eq!(event_files(&dir, "eval")?.len(), 1);
//! assert_eq!(read_event_file(&dir, train.name())?.len(), 3); // file_version + 2 summaries
//! # Ok(()) }
//! ```

mod error;
mod graph;
mod histogram;
mod hparams;
mod proto;
mod record;
mod writer;

pub use error::{Result, SummaryError};
pub use graph::{GraphDef, NodeDef, graph_def};
pub use histogram::{default_bucket_limits, histogram_of};
pub use hparams::{HParam, SESSION_START_INFO_TAG};
pub use proto::{Event, HistogramProto, Summary, SummaryValue};
pub use record::{append_record, masked_crc32c, read_records};
pub(crate) use writer::hostname;
pub use writer::{FILE_VERSION, SummaryWriter, event_files, read_event_file};
