//! The shared-memory path of all-reduce, for members that share a host.
//!
//! Over loopback the gRPC ring spends its time copying: into protobuf messages, through
//! HTTP/2 and the kernel's socket buffers, and out again, several copies per byte on the
//! same two cores that train. Members on one host can instead map one segment (a file in
//! `/dev/shm`) and exchange each byte with two copies (`all_reduce.rs`).
//!
//! Whether they can is found out, not guessed from addresses (two containers may share an
//! address and not their `/dev/shm`; one host may have several addresses): at connect, the
//! first member creates a segment under a random name and broadcasts the name over gRPC;
//! every member tries to map it and verify its header, and an all-gather of the outcomes
//! decides, the same on everyone. The creator then unlinks the file, so a crashed job
//! leaves nothing behind in `/dev/shm`; the mappings live on until the processes end.
//! gRPC stays up for everything else and for noticing failed peers.

mod all_reduce;
mod futex;
mod segment;
mod wait;

pub(super) use all_reduce::all_reduce;

use super::communication::Communication;
use super::error::ConnectError;
use crate::{Collective, Result};
use segment::Segment;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

/// One member's mapping of the group's segment.
pub(super) struct SharedMemory {
    segment: Segment,
    /// Rounds completed: the same count on every member, as they run the same operations.
    rounds: AtomicU64,
}

/// Bytes of one region (a member's share of a round). Big enough that the two waits per
/// round cost little against the copies; small enough that a round's slots stay in cache.
/// Measured with 2 processes at 16 MiB (bench_ring): 256 KiB regions 2.2 GB/s, 1 MiB
/// 5.1 GB/s, 4 MiB 4.4 GB/s.
fn region_bytes(members: usize) -> usize {
    if members <= 4 { 1 << 20 } else { 256 << 10 }
}

/// Where segments go: `/dev/shm` (memory, never disk) where there is one.
fn directory() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() { shm } else { std::env::temp_dir() }
}

/// The segment's file: the nonce makes it this job's, and unguessable to other users.
fn segment_path(nonce: u64) -> PathBuf {
    directory().join(format!("engine-collective-{nonce:016x}"))
}

/// How many f32 values carry the creator's answer: a flag and the nonce in 16-bit pieces
/// (each exact in an f32).
const ANNOUNCEMENT: usize = 5;

/// The outcome of [`establish`]: the mapping, or why all-reduce stays on gRPC.
pub(super) enum Established {
    Mapped(SharedMemory),
    NotUsed(String),
}

/// Decides, together with the other members (through `group`'s gRPC collectives), whether
/// the group's all-reduce goes through shared memory.
pub(super) fn establish(group: &dyn Collective, wanted: Communication) -> Result<Established> {
    let (n, me) = (group.size(), group.rank());
    if wanted == Communication::Ring {
        return Ok(Established::NotUsed("communication is 'ring'".into()));
    }
    if n < 2 {
        return Ok(Established::NotUsed("the group has one member".into()));
    }
    let region = region_bytes(n);
    let mut announcement = [0f32; ANNOUNCEMENT];
    let mut created = None;
    let mut local: std::result::Result<Option<Segment>, String> = Ok(None);
    if me == 0 {
        let nonce: u64 = rand::random();
        let path = segment_path(nonce);
        match Segment::create(&path, nonce, n, region) {
            Ok(segment) => {
                announcement[0] = 1.0;
                for i in 0..4 {
                    announcement[1 + i] = ((nonce >> (16 * i)) & 0xffff) as f32;
                }
                created = Some(path);
                local = Ok(Some(segment));
            }
            Err(reason) => local = Err(reason),
        }
    }
    let result = decide(group, wanted, &mut announcement, region, local);
    if let Some(path) = created {
        // Everyone who could map it has; the mappings outlive the name.
        let _ = std::fs::remove_file(path);
    }
    result
}

fn decide(
    group: &dyn Collective,
    wanted: Communication,
    announcement: &mut [f32; ANNOUNCEMENT],
    region: usize,
    mut local: std::result::Result<Option<Segment>, String>,
) -> Result<Established> {
    let (n, me) = (group.size(), group.rank());
    group.broadcast(announcement, 0)?;
    if me != 0 {
        local = if announcement[0] == 1.0 {
            let nonce = (0..4).fold(0u64, |acc, i| acc | ((announcement[1 + i] as u64) << (16 * i)));
            let path = segment_path(nonce);
            Segment::open(&path, nonce, n, region).map(Some)
        } else {
            Err(format!("{} could not create the segment", group.describe(0)))
        };
    }
    let mapped = group.all_gather(&[if matches!(local, Ok(Some(_))) { 1.0 } else { 0.0 }])?;
    let failed: Vec<String> = (0..n).filter(|&k| mapped.get(k) != Some(&1.0)).map(|k| group.describe(k)).collect();
    if failed.is_empty()
        && let Ok(Some(segment)) = local
    {
        return Ok(Established::Mapped(SharedMemory { segment, rounds: AtomicU64::new(0) }));
    }
    let mut reason = format!("{} could not map the shared-memory segment", failed.join(", "));
    if let Err(why) = &local {
        reason.push_str(&format!(" ({}: {why})", group.describe(me)));
    }
    if wanted == Communication::SharedMemory {
        return Err(ConnectError::SharedMemory { task: group.describe(me), reason }.into());
    }
    Ok(Established::NotUsed(reason))
}
