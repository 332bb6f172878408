//! Leases: how an evaluator keeps the chief from deleting the checkpoint it is reading.
//!
//! TensorFlow's chief garbage-collects old checkpoints with no idea that an evaluator started reading one
//! a moment ago, and the evaluator then dies on a missing file (TensorFlow #39033). Here a reader first
//! writes `leases/<checkpoint>.<holder>.json` with an expiry time; the collector skips any checkpoint
//! with an unexpired lease and deletes it on a later pass, once the lease is released or has expired.
//! Expiry, rather than a lease held forever, means a crashed evaluator cannot pin a checkpoint forever.

use super::error::{CheckpointError, Result};
use super::name::{LEASE_DIR, data_object_name, split_checkpoint_path};
use crate::model_dir::ModelDir;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a lease object holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LeaseRecord {
    pub checkpoint: String,
    pub holder: String,
    pub acquired_unix: f64,
    pub expires_unix: f64,
}

/// A lease as listed by `CheckpointManager::leases`.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseInfo {
    pub checkpoint: String,
    pub holder: String,
    pub expires: SystemTime,
    /// The lease object's name in the model dir.
    pub object: String,
}

impl LeaseInfo {
    pub fn is_expired_at(&self, now: SystemTime) -> bool {
        self.expires <= now
    }
}

/// A held lease. Released on drop (best effort) or by `release`; `renew` before `ttl` runs out when a
/// read takes longer.
#[derive(Debug)]
pub struct Lease {
    model_dir: ModelDir,
    object: String,
    record: LeaseRecord,
    ttl: Duration,
    released: bool,
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

pub(crate) fn from_unix(seconds: f64) -> SystemTime {
    if seconds.is_finite() && seconds > 0.0 { UNIX_EPOCH + Duration::from_secs_f64(seconds) } else { UNIX_EPOCH }
}

fn valid_holder(holder: &str) -> bool {
    !holder.is_empty()
        && holder.len() <= 128
        && holder.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl Lease {
    /// Writes the lease and then checks that the checkpoint still exists, so that a lease won in a race
    /// with the collector is reported rather than protecting nothing. `checkpoint` is `model.ckpt-<step>`.
    pub(crate) fn acquire(model_dir: &ModelDir, checkpoint: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        if !valid_holder(holder) {
            return Err(CheckpointError::InvalidHolder { holder: holder.to_string() });
        }
        let (_, checkpoint) = split_checkpoint_path(checkpoint)?;
        let object = format!("{LEASE_DIR}/{checkpoint}.{holder}.json");
        let now = unix_now();
        let record = LeaseRecord {
            checkpoint: checkpoint.clone(),
            holder: holder.to_string(),
            acquired_unix: now,
            expires_unix: now + ttl.as_secs_f64(),
        };
        let mut lease = Lease { model_dir: model_dir.clone(), object, record, ttl, released: false };
        lease.write()?;
        let data = data_object_name(&checkpoint);
        if !model_dir.exists(&data)? {
            // Dropping `lease` deletes the lease object again.
            return Err(CheckpointError::NotFound { url: model_dir.url_of(&data) });
        }
        Ok(lease)
    }

    fn write(&mut self) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.record)
            .map_err(|e| CheckpointError::Encode { url: self.model_dir.url_of(&self.object), reason: e.to_string() })?;
        self.model_dir.put(&self.object, json)?;
        Ok(())
    }

    pub fn checkpoint(&self) -> &str {
        &self.record.checkpoint
    }

    pub fn holder(&self) -> &str {
        &self.record.holder
    }

    pub fn expires(&self) -> SystemTime {
        from_unix(self.record.expires_unix)
    }

    /// Extends the lease by its ttl from now.
    pub fn renew(&mut self) -> Result<()> {
        self.record.expires_unix = unix_now() + self.ttl.as_secs_f64();
        self.write()
    }

    /// Deletes the lease object now, reporting failure (drop only tries).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.model_dir.delete(&self.object)?;
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            // An undeleted lease only delays garbage collection until it expires.
            let _ = self.model_dir.delete(&self.object);
        }
    }
}

/// The leases of a model dir.
pub(crate) struct LeaseListing {
    pub leases: Vec<LeaseInfo>,
    /// Lease objects that do not parse: (object name, reason).
    pub unreadable: Vec<(String, String)>,
}

/// Every lease in the model dir.
pub(crate) fn list_leases(model_dir: &ModelDir) -> Result<LeaseListing> {
    let mut leases = Vec::new();
    let mut unreadable = Vec::new();
    for info in model_dir.list(LEASE_DIR)? {
        if !info.name.ends_with(".json") {
            continue;
        }
        let Some(data) = model_dir.get_if_exists(&info.name)? else {
            continue; // released between the listing and the read
        };
        match serde_json::from_slice::<LeaseRecord>(&data.data) {
            Ok(record) => leases.push(LeaseInfo {
                checkpoint: record.checkpoint,
                holder: record.holder,
                expires: from_unix(record.expires_unix),
                object: info.name,
            }),
            Err(e) => unreadable.push((info.name, e.to_string())),
        }
    }
    Ok(LeaseListing { leases, unreadable })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_validated() {
        assert!(valid_holder("evaluator-0"));
        assert!(valid_holder("eval.task_1"));
        assert!(!valid_holder(""));
        assert!(!valid_holder("a/b"));
        assert!(!valid_holder("a b"));
    }

    #[test]
    fn lease_needs_the_checkpoint_and_cleans_up() -> anyhow::Result<()> {
        let dir = ModelDir::open("memory://lease-unit/run")?;
        let missing = Lease::acquire(&dir, "model.ckpt-1", "eval", Duration::from_secs(60));
        assert!(matches!(missing, Err(CheckpointError::NotFound { .. })));
        assert!(dir.list(LEASE_DIR)?.is_empty(), "a failed acquire must not leave its lease behind");

        dir.put("model.ckpt-1.safetensors", vec![1])?;
        let mut lease = Lease::acquire(&dir, "model.ckpt-1.safetensors", "eval", Duration::from_secs(60))?;
        assert_eq!(lease.checkpoint(), "model.ckpt-1");
        let first_expiry = lease.expires();
        std::thread::sleep(Duration::from_millis(5));
        lease.renew()?;
        assert!(lease.expires() > first_expiry);
        let listing = list_leases(&dir)?;
        assert_eq!(listing.leases.len(), 1);
        assert!(listing.unreadable.is_empty());
        assert_eq!(listing.leases[0].object, "leases/model.ckpt-1.eval.json");
        drop(lease);
        assert!(list_leases(&dir)?.leases.is_empty());
        Ok(())
    }
}
