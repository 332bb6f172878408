//! `ModelDir`: one blocking handle on a directory of objects, whatever store holds it.
//!
//! Everything above this layer (checkpoints, leases, summaries) names objects by a relative name such as
//! `model.ckpt-200.safetensors` or `eval/events.out.tfevents...`, and never learns which backend it
//! talks to. The only backend-specific behaviour that leaks is deliberate: `local_path` lets a summary
//! writer append to a local file instead of re-uploading it.

use super::blocking::block_on;
use super::error::{ModelDirError, Result};
use super::local_write::{LocalPutMode, write_atomic};
use super::location::Location;
use super::memory::shared_memory_store;
use super::s3::{S3Options, build_s3_store};
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::{
    GetOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The version of an object as the store reports it, for conditional updates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectVersion {
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

/// One object in a listing; `name` is relative to the model dir (`eval/events.out...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub name: String,
    pub size: u64,
    pub last_modified: SystemTime,
    pub version: ObjectVersion,
}

/// An object's content with the version it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub data: Vec<u8>,
    pub version: ObjectVersion,
}

/// The result of a conditional put: written, or refused because the condition did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    Written(ObjectVersion),
    /// `put_if_absent` found an object; `put_if_match` found another version (or none).
    Conflict,
}

#[derive(Debug, Clone)]
enum Backend {
    /// Writes bypass the store to get fsync (see `local_write`); reads and listings go through it.
    Local {
        fs: Arc<LocalFileSystem>,
        root: PathBuf,
    },
    Remote,
}

/// A model directory addressed by a local path, `file://`, `memory://name/prefix` or `s3://bucket/prefix`.
///
/// The API is blocking because the training loop is; requests run on a small shared tokio runtime.
/// Cloning is cheap and clones share the connection pool.
#[derive(Debug, Clone)]
pub struct ModelDir {
    location: String,
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    backend: Backend,
}

impl std::fmt::Display for ModelDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.location)
    }
}

impl ModelDir {
    /// Opens `location`; S3 settings come from the `AWS_*` environment. A local directory is created if
    /// missing, as TensorFlow creates `model_dir` on first use.
    pub fn open(location: &str) -> Result<ModelDir> {
        Self::open_with(location, None)
    }

    /// Like `open`, with S3 settings from a spec taking precedence over the environment.
    pub fn open_with(location: &str, s3: Option<&S3Options>) -> Result<ModelDir> {
        match Location::parse(location)? {
            Location::Local(path) => Self::open_local(location, &path),
            Location::Memory { name, prefix } => {
                let store: Arc<dyn ObjectStore> = shared_memory_store(&name);
                let display = join_url(&format!("memory://{name}"), &prefix);
                Self::from_object_store(&display, store, &prefix)
            }
            Location::S3 { bucket, prefix } => {
                let store: Arc<dyn ObjectStore> = Arc::new(build_s3_store(location, &bucket, s3)?);
                let display = join_url(&format!("s3://{bucket}"), &prefix);
                Self::from_object_store(&display, store, &prefix)
            }
        }
    }

    fn open_local(location: &str, path: &Path) -> Result<ModelDir> {
        std::fs::create_dir_all(path).map_err(|source| ModelDirError::LocalIo {
            op: "create model dir",
            path: path.to_path_buf(),
            source,
        })?;
        let root = std::fs::canonicalize(path).map_err(|source| ModelDirError::LocalIo {
            op: "resolve model dir",
            path: path.to_path_buf(),
            source,
        })?;
        let fs = LocalFileSystem::new_with_prefix(&root).map_err(|source| ModelDirError::Store {
            op: "open",
            url: location.to_string(),
            source,
        })?;
        let fs = Arc::new(fs);
        Ok(ModelDir {
            location: root.to_string_lossy().into_owned(),
            store: fs.clone(),
            prefix: StorePath::default(),
            backend: Backend::Local { fs, root },
        })
    }

    /// Wraps any object store; `label` is what errors and `url_of` show. Used to put a caching,
    /// throttling or fault-injecting layer between the model dir and its store.
    pub fn from_object_store(label: &str, store: Arc<dyn ObjectStore>, prefix: &str) -> Result<ModelDir> {
        let prefix = StorePath::parse(prefix)
            .map_err(|e| ModelDirError::InvalidLocation { location: label.to_string(), reason: e.to_string() })?;
        Ok(ModelDir { location: label.to_string(), store, prefix, backend: Backend::Remote })
    }

    /// The store and the prefix of this model dir inside it (for wrapping, see `from_object_store`).
    pub fn object_store(&self) -> (Arc<dyn ObjectStore>, String) {
        (self.store.clone(), self.prefix.to_string())
    }

    /// The normalised location: an absolute path for local dirs, a URL otherwise.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The full URL or path of `name`, for messages.
    pub fn url_of(&self, name: &str) -> String {
        join_url(&self.location, name)
    }

    pub fn is_local(&self) -> bool {
        matches!(self.backend, Backend::Local { .. })
    }

    /// The local directory, for local model dirs.
    pub fn local_root(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Local { root, .. } => Some(root),
            Backend::Remote => None,
        }
    }

    /// The file that holds `name`, for local model dirs (`None` for object stores).
    pub fn local_path(&self, name: &str) -> Result<Option<PathBuf>> {
        let path = self.object_path(name)?;
        match &self.backend {
            Backend::Local { fs, .. } => {
                fs.path_to_filesystem(&path).map(Some).map_err(|source| self.store_error("resolve", name, source))
            }
            Backend::Remote => Ok(None),
        }
    }

    /// Writes the whole object atomically, replacing any previous one.
    pub fn put(&self, name: &str, data: Vec<u8>) -> Result<ObjectVersion> {
        match self.put_with_mode(name, data, PutMode::Overwrite)? {
            PutOutcome::Written(version) => Ok(version),
            // Overwrite has no condition to fail; a store that reports one anyway is broken.
            PutOutcome::Conflict => Err(self.store_error(
                "put",
                name,
                object_store::Error::Generic {
                    store: "model_dir",
                    source: "unconditional put reported a conflict".into(),
                },
            )),
        }
    }

    /// Writes the object only if none exists under `name`.
    pub fn put_if_absent(&self, name: &str, data: Vec<u8>) -> Result<PutOutcome> {
        self.put_with_mode(name, data, PutMode::Create)
    }

    /// Replaces the object only if it is still at `expected` (compare-and-swap). On the local
    /// filesystem the check and the rename are two steps: safe against crashes, not against two writers
    /// racing in the same instant, which the chief-only writing of checkpoints rules out.
    pub fn put_if_match(&self, name: &str, data: Vec<u8>, expected: &ObjectVersion) -> Result<PutOutcome> {
        let version = UpdateVersion { e_tag: expected.e_tag.clone(), version: expected.version.clone() };
        self.put_with_mode(name, data, PutMode::Update(version))
    }

    fn put_with_mode(&self, name: &str, data: Vec<u8>, mode: PutMode) -> Result<PutOutcome> {
        let path = self.object_path(name)?;
        if let Backend::Local { fs, .. } = &self.backend {
            let file = fs.path_to_filesystem(&path).map_err(|source| self.store_error("resolve", name, source))?;
            let local_mode = match &mode {
                PutMode::Overwrite => LocalPutMode::Overwrite,
                PutMode::Create => LocalPutMode::CreateNew,
                PutMode::Update(expected) => {
                    let current = self.head(name)?.map(|info| info.version.e_tag);
                    if current.is_none() || current != Some(expected.e_tag.clone()) {
                        return Ok(PutOutcome::Conflict);
                    }
                    LocalPutMode::Overwrite
                }
            };
            if !write_atomic(&file, &data, local_mode)? {
                return Ok(PutOutcome::Conflict);
            }
            let info = self.head(name)?.ok_or_else(|| ModelDirError::NotFound { url: self.url_of(name) })?;
            return Ok(PutOutcome::Written(info.version));
        }
        let store = self.store.clone();
        let options = PutOptions { mode, ..Default::default() };
        let result = block_on(async move { store.put_opts(&path, PutPayload::from(data), options).await })?;
        match result {
            Ok(done) => Ok(PutOutcome::Written(ObjectVersion { e_tag: done.e_tag, version: done.version })),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotModified { .. },
            ) => Ok(PutOutcome::Conflict),
            Err(source) => Err(self.store_error("put", name, source)),
        }
    }

    /// Reads the object, failing with `NotFound` if it does not exist.
    pub fn get(&self, name: &str) -> Result<Vec<u8>> {
        match self.get_if_exists(name)? {
            Some(object) => Ok(object.data),
            None => Err(ModelDirError::NotFound { url: self.url_of(name) }),
        }
    }

    /// Reads the object and its version, or `None` if it does not exist.
    pub fn get_if_exists(&self, name: &str) -> Result<Option<Object>> {
        let path = self.object_path(name)?;
        let store = self.store.clone();
        let result = block_on(async move {
            let got = store.get_opts(&path, GetOptions::default()).await?;
            let version = ObjectVersion { e_tag: got.meta.e_tag.clone(), version: got.meta.version.clone() };
            let data = got.bytes().await?;
            Ok::<_, object_store::Error>(Object { data: data.to_vec(), version })
        })?;
        match result {
            Ok(object) => Ok(Some(object)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(self.store_error("get", name, source)),
        }
    }

    /// The object's size, time and version, or `None` if it does not exist.
    pub fn head(&self, name: &str) -> Result<Option<ObjectInfo>> {
        let path = self.object_path(name)?;
        let store = self.store.clone();
        let result = block_on(async move { store.head(&path).await })?;
        match result {
            Ok(meta) => Ok(Some(self.info_from(meta, name))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(self.store_error("head", name, source)),
        }
    }

    pub fn exists(&self, name: &str) -> Result<bool> {
        Ok(self.head(name)?.is_some())
    }

    /// Every object under `dir` (recursively; `""` for the whole model dir), sorted by name.
    pub fn list(&self, dir: &str) -> Result<Vec<ObjectInfo>> {
        let full = if dir.trim_matches('/').is_empty() { self.prefix.clone() } else { self.object_path(dir)? };
        let store = self.store.clone();
        let listed = {
            let full = full.clone();
            block_on(async move {
                let prefix = if full.parts_count() == 0 { None } else { Some(&full) };
                store.list(prefix).try_collect::<Vec<ObjectMeta>>().await
            })?
        };
        let metas = match listed {
            Ok(metas) => metas,
            // A local directory that was never created holds nothing.
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(source) => return Err(self.store_error("list", dir, source)),
        };
        let mut infos: Vec<ObjectInfo> = metas
            .into_iter()
            .filter_map(|meta| {
                let relative = meta.location.prefix_match(&self.prefix)?.map(|part| part.as_ref().to_string());
                let name = relative.collect::<Vec<_>>().join("/");
                Some(self.info_from(meta, &name))
            })
            .collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(infos)
    }

    /// Deletes the object; deleting what is not there succeeds, as on S3.
    pub fn delete(&self, name: &str) -> Result<()> {
        let path = self.object_path(name)?;
        let store = self.store.clone();
        match block_on(async move { store.delete(&path).await })? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(self.store_error("delete", name, source)),
        }
    }

    /// Uploads a local file as object `name` (atomically, like `put`).
    pub fn upload_file(&self, local: &Path, name: &str) -> Result<ObjectVersion> {
        let data = std::fs::read(local).map_err(|source| ModelDirError::LocalIo {
            op: "read",
            path: local.to_path_buf(),
            source,
        })?;
        self.put(name, data)
    }

    /// Downloads object `name` to a local file, atomically replacing it.
    pub fn download_file(&self, name: &str, local: &Path) -> Result<()> {
        let data = self.get(name)?;
        write_atomic(local, &data, LocalPutMode::Overwrite).map(|_| ())
    }

    /// Removes `<name>#<digits>` staging files left in a local model dir by writers that crashed
    /// between staging and publishing: those older than `min_age`, and at once those whose
    /// writer process is gone. Returns the files removed; a no-op for object stores, whose
    /// puts leave no debris.
    pub fn remove_stale_staging_files(&self, dir: &str, min_age: Duration) -> Result<Vec<PathBuf>> {
        let now = SystemTime::now();
        let mut removed = Vec::new();
        for entry in self.staging_entries(dir)? {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let age = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok())
                .unwrap_or_default();
            let debris = age >= min_age || super::local_write::writer_is_gone(&file_name);
            if debris && std::fs::remove_file(entry.path()).is_ok() {
                removed.push(entry.path());
            }
        }
        Ok(removed)
    }

    /// The names of the staging files in `dir` of a local model dir (saves in progress or
    /// interrupted); none for object stores.
    pub fn staging_files(&self, dir: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> =
            self.staging_entries(dir)?.iter().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        Ok(names)
    }

    fn staging_entries(&self, dir: &str) -> Result<Vec<std::fs::DirEntry>> {
        let Some(root) = self.local_root() else { return Ok(Vec::new()) };
        let dir_path = if dir.is_empty() { root.to_path_buf() } else { root.join(dir) };
        let entries = match std::fs::read_dir(&dir_path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(ModelDirError::LocalIo { op: "list", path: dir_path, source }),
        };
        Ok(entries
            .flatten()
            .filter(|e| super::local_write::is_staging_file(&e.file_name().to_string_lossy()))
            .collect())
    }

    fn object_path(&self, name: &str) -> Result<StorePath> {
        let invalid = |reason: String| ModelDirError::InvalidName {
            location: self.location.clone(),
            name: name.to_string(),
            reason,
        };
        if name.trim_matches('/').is_empty() {
            return Err(invalid("the name is empty".to_string()));
        }
        let relative = StorePath::parse(name).map_err(|e| invalid(e.to_string()))?;
        Ok(self.prefix.parts().chain(relative.parts()).collect())
    }

    fn info_from(&self, meta: ObjectMeta, name: &str) -> ObjectInfo {
        // Full precision: the garbage collector orders objects written within the same millisecond.
        let seconds = meta.last_modified.timestamp();
        let last_modified = if seconds >= 0 {
            SystemTime::UNIX_EPOCH + Duration::new(seconds as u64, meta.last_modified.timestamp_subsec_nanos())
        } else {
            SystemTime::UNIX_EPOCH
        };
        ObjectInfo {
            name: name.to_string(),
            size: meta.size,
            last_modified,
            version: ObjectVersion { e_tag: meta.e_tag, version: meta.version },
        }
    }

    fn store_error(&self, op: &'static str, name: &str, source: object_store::Error) -> ModelDirError {
        ModelDirError::Store { op, url: self.url_of(name), source }
    }
}

fn join_url(base: &str, name: &str) -> String {
    let name = name.trim_matches('/');
    if name.is_empty() { base.to_string() } else { format!("{}/{}", base.trim_end_matches('/'), name) }
}
