//! A save interrupted at every possible point never leaves an unloadable latest checkpoint or an invalid
//! state file. A fault-injecting `ObjectStore` fails the Nth request of a save, for every N:
//! - `Once`: that request fails and the process goes on (a network error);
//! - `Crash`: that request and every later one fail (the process died there);
//! - `LostAck`: that request is applied but reported as failed, and the process dies (a write that
//!   landed although its response never arrived).
//!
//! After each, a fresh manager on the untouched store must load the latest checkpoint, which must be the
//! previous one or the new one, and a later save must bring the directory back to exactly
//! `keep_checkpoint_max` checkpoints.

use anyhow::{Context, Result, ensure};
use async_trait::async_trait;
use engine_estimator::checkpoint::{CheckpointManager, CheckpointMeta};
use engine_estimator::model_dir::ModelDir;
use engine_graph::HostTensor;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Once,
    Crash,
    LostAck,
}

#[derive(Debug)]
struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    fail_at: usize,
    fault: Fault,
    requests: AtomicUsize,
}

enum Verdict {
    Proceed,
    Fail,
    ApplyThenFail,
}

impl FaultyStore {
    fn new(inner: Arc<dyn ObjectStore>, fail_at: usize, fault: Fault) -> Self {
        FaultyStore { inner, fail_at, fault, requests: AtomicUsize::new(0) }
    }

    fn verdict(&self) -> Verdict {
        let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        match self.fault {
            _ if n < self.fail_at => Verdict::Proceed,
            Fault::Once if n == self.fail_at => Verdict::Fail,
            Fault::Once => Verdict::Proceed,
            Fault::Crash => Verdict::Fail,
            Fault::LostAck if n == self.fail_at => Verdict::ApplyThenFail,
            Fault::LostAck => Verdict::Fail,
        }
    }

    fn injected() -> object_store::Error {
        object_store::Error::Generic { store: "faulty", source: "injected fault".into() }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match self.verdict() {
            Verdict::Proceed => self.inner.put_opts(location, payload, opts).await,
            Verdict::Fail => Err(Self::injected()),
            Verdict::ApplyThenFail => {
                let _ = self.inner.put_opts(location, payload, opts).await;
                Err(Self::injected())
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        match self.verdict() {
            Verdict::Proceed => self.inner.put_multipart_opts(location, opts).await,
            _ => Err(Self::injected()),
        }
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        match self.verdict() {
            Verdict::Proceed => self.inner.get_opts(location, options).await,
            _ => Err(Self::injected()),
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        match self.verdict() {
            Verdict::Proceed => self.inner.delete_stream(locations),
            Verdict::Fail => futures::stream::once(async { Err(Self::injected()) }).boxed(),
            Verdict::ApplyThenFail => {
                let inner = self.inner.clone();
                futures::stream::once(async move {
                    let _ = inner.delete_stream(locations).collect::<Vec<_>>().await;
                    Err(Self::injected())
                })
                .boxed()
            }
        }
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.verdict() {
            Verdict::Proceed => self.inner.list(prefix),
            _ => futures::stream::once(async { Err(Self::injected()) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        match self.verdict() {
            Verdict::Proceed => self.inner.list_with_delimiter(prefix).await,
            _ => Err(Self::injected()),
        }
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        match self.verdict() {
            Verdict::Proceed => self.inner.copy_opts(from, to, options).await,
            _ => Err(Self::injected()),
        }
    }
}

const KEEP: usize = 2;

fn variables(step: u64) -> Result<BTreeMap<String, HostTensor>> {
    let mut vars = BTreeMap::new();
    vars.insert("w".into(), HostTensor::f32(vec![3], vec![step as f32, 1.0, 2.0])?);
    vars.insert("w/Momentum".into(), HostTensor::f32(vec![3], vec![0.5; 3])?);
    vars.insert("global_step".into(), HostTensor::scalar_i64(step as i64));
    Ok(vars)
}

fn meta() -> CheckpointMeta {
    CheckpointMeta { fingerprint: "fp".into(), input_state: "{}".into(), examples_seen: None }
}

/// A store holding checkpoints 1, 2, 3 (2 and 3 kept), plus a clean manager on it.
fn prepared() -> Result<(Arc<InMemory>, CheckpointManager)> {
    let base = Arc::new(InMemory::new());
    let clean =
        CheckpointManager::new(ModelDir::from_object_store("memory://base/run", base.clone(), "run")?, KEEP, None);
    for step in 1..=3 {
        clean.save(step, &variables(step)?, &meta())?;
    }
    Ok((base, clean))
}

fn faulty_manager(base: &Arc<InMemory>, fail_at: usize, fault: Fault) -> Result<(Arc<FaultyStore>, CheckpointManager)> {
    let faulty = Arc::new(FaultyStore::new(base.clone(), fail_at, fault));
    let dir = ModelDir::from_object_store("faulty://base/run", faulty.clone(), "run")?;
    Ok((faulty, CheckpointManager::new(dir, KEEP, None)))
}

/// The invariant: the state file parses and names a loadable checkpoint, the previous or the new one,
/// and the run resumes from the newest that loads: the state file's, or a newer one whose data was
/// written before the save was cut short (the state file is a hint, not the truth).
fn check_loadable(clean: &CheckpointManager, saved: bool, context: &str) -> Result<()> {
    let state = clean.state().with_context(|| format!("{context}: state file invalid"))?.context("no state")?;
    let restored = clean.restore_latest_valid()?.with_context(|| format!("{context}: nothing to restore"))?;
    ensure!(restored.skipped.is_empty(), "{context}: latest unloadable: {:?}", restored.skipped);
    let step = restored.checkpoint.step;
    ensure!(step == 3 || step == 4, "{context}: restored step {step}");
    ensure!(!saved || step == 4, "{context}: save reported success but the latest is {step}");
    ensure!(restored.checkpoint.tensors == variables(step)?, "{context}: wrong tensors");
    let named = state.model_checkpoint_path.strip_prefix("model.ckpt-").and_then(|s| s.parse::<u64>().ok());
    ensure!(matches!(named, Some(3 | 4)) && named <= Some(step), "{context}: restored {step}, {state:?}");
    Ok(())
}

/// After any failure, a clean save converges to exactly KEEP checkpoints, all listed.
fn check_converges(clean: &CheckpointManager, context: &str) -> Result<()> {
    clean.save(5, &variables(5)?, &meta())?;
    let dir = clean.model_dir();
    let data: Vec<String> = dir.list("")?.into_iter().map(|i| i.name).filter(|n| n.ends_with(".safetensors")).collect();
    let listed: Vec<String> = clean.list()?.iter().map(|c| format!("{}.safetensors", c.path)).collect();
    ensure!(data == listed && data.len() == KEEP, "{context}: data objects {data:?}, listed {listed:?}");
    Ok(())
}

#[test]
fn a_save_interrupted_anywhere_leaves_a_loadable_latest() -> Result<()> {
    // How many requests does an undisturbed save make?
    let (base, _) = prepared()?;
    let (counter, manager) = faulty_manager(&base, usize::MAX, Fault::Once)?;
    manager.save(4, &variables(4)?, &meta())?;
    let total = counter.requests.load(Ordering::SeqCst);
    assert!(total >= 5, "a save should take several requests, took {total}");

    let mut failed_saves = 0;
    for fault in [Fault::Once, Fault::Crash, Fault::LostAck] {
        for fail_at in 1..=total {
            let context = format!("{fault:?} at request {fail_at} of {total}");
            let (base, clean) = prepared()?;
            let (_, manager) = faulty_manager(&base, fail_at, fault)?;
            let saved = manager.save(4, &variables(4)?, &meta());
            if saved.is_err() {
                failed_saves += 1;
            }
            check_loadable(&clean, saved.is_ok(), &context)?;
            check_converges(&clean, &context)?;
        }
    }
    assert!(failed_saves > total, "the injected faults should make many saves fail, made {failed_saves}");
    Ok(())
}

#[test]
fn a_failed_save_reports_the_object_it_failed_on() -> Result<()> {
    let (base, _) = prepared()?;
    let (_, manager) = faulty_manager(&base, 1, Fault::Crash)?;
    let message = manager.save(4, &variables(4)?, &meta()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("faulty://base/run/model.ckpt-4.safetensors") && message.contains("injected"),
        "{message}"
    );
    Ok(())
}
