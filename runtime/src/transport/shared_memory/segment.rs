//! The mapped file the members of one host share: a header that proves it is the segment
//! this job's chief made, one control block per member, and the members' data slots.
//!
//! Layout, every offset a multiple of the page or of a cache line:
//!
//! ```text
//! 0                  header: magic, nonce, members, region bytes (u64 each)
//! 64, 128            the futex word bumped by every publication, the count of sleepers
//! 4096               control block of rank 0, 1, ... (CONTROL_STRIDE bytes apart, so
//!                    members spinning on each other's counters do not share a line)
//! data_offset        slot of rank 0: region 0 | region 1 | ... | region n-1
//!                    slot of rank 1: ...
//! ```
//!
//! Each member writes only its own control block and its own slot; which regions of
//! another member's slot it may read, and when, is the all-reduce's protocol
//! (`all_reduce.rs`), ordered by the release/acquire pairs on the `published` counters.

use super::futex;
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"ENGSHM01");
const HEADER_BYTES: usize = 4096;
/// Two cache lines: adjacent-line prefetching would otherwise couple neighbours.
const CONTROL_STRIDE: usize = 128;
const PAGE: usize = 4096;
const WAKE_OFFSET: usize = 64;
const SLEEPERS_OFFSET: usize = 128;

/// A member's progress and what it is running, read by the others.
#[repr(C)]
pub(super) struct Control {
    /// The last protocol phase this member completed (two per round); release-stored after
    /// its writes to its slot, acquire-loaded by the others before they read it.
    pub published: AtomicU64,
    /// The operation number, collective kind and tensor length of its current all-reduce,
    /// so that members calling different collectives fail by name instead of mixing data.
    pub operation: AtomicU64,
    pub kind: AtomicU64,
    pub tensor_len: AtomicU64,
}

pub(super) struct Segment {
    map: MmapMut,
    members: usize,
    region_bytes: usize,
}

fn data_offset(members: usize) -> usize {
    HEADER_BYTES + (members * CONTROL_STRIDE).div_ceil(PAGE) * PAGE
}

fn total_bytes(members: usize, region_bytes: usize) -> usize {
    data_offset(members) + members * members * region_bytes
}

impl Segment {
    /// Creates the file (it must not exist) and maps it. Only the creator's user may open it.
    pub fn create(path: &Path, nonce: u64, members: usize, region_bytes: usize) -> Result<Segment, String> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        let bytes = total_bytes(members, region_bytes);
        file.set_len(bytes as u64).map_err(|e| format!("sizing {} to {bytes} bytes: {e}", path.display()))?;
        let mut segment = Segment { map: map(&file, path)?, members, region_bytes };
        for (i, value) in [MAGIC, nonce, members as u64, region_bytes as u64].into_iter().enumerate() {
            segment.map[i * 8..i * 8 + 8].copy_from_slice(&value.to_le_bytes());
        }
        Ok(segment)
    }

    /// Maps a segment another member created, checking that it is the one announced.
    pub fn open(path: &Path, nonce: u64, members: usize, region_bytes: usize) -> Result<Segment, String> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| {
            format!("opening {}: {e} (the tasks do not share this host's shared memory)", path.display())
        })?;
        let bytes = total_bytes(members, region_bytes);
        let len = file.metadata().map_err(|e| format!("reading {}: {e}", path.display()))?.len();
        if len != bytes as u64 {
            return Err(format!("{} has {len} bytes where {bytes} were due", path.display()));
        }
        let segment = Segment { map: map(&file, path)?, members, region_bytes };
        let header: Vec<u64> = (0..4).map(|i| segment.header(i)).collect();
        if header != [MAGIC, nonce, members as u64, region_bytes as u64] {
            return Err(format!("{} is not this job's segment (header {header:x?})", path.display()));
        }
        Ok(segment)
    }

    fn header(&self, index: usize) -> u64 {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&self.map[index * 8..index * 8 + 8]);
        u64::from_le_bytes(raw)
    }

    pub fn members(&self) -> usize {
        self.members
    }

    pub fn region_bytes(&self) -> usize {
        self.region_bytes
    }

    pub fn control(&self, rank: usize) -> &Control {
        assert!(rank < self.members, "rank {rank} of {}", self.members);
        let offset = HEADER_BYTES + rank * CONTROL_STRIDE;
        // SAFETY: the block lies inside the mapping (data_offset covers every rank's),
        // is 128-byte aligned (the mapping is page-aligned), and holds only atomics, which
        // every process accesses atomically.
        unsafe { &*(self.map.as_ptr().add(offset) as *const Control) }
    }

    /// The start of `region` of `rank`'s slot.
    fn region(&self, rank: usize, region: usize) -> *mut u8 {
        assert!(rank < self.members && region < self.members, "slot {rank} region {region} of {}", self.members);
        let offset = data_offset(self.members) + (rank * self.members + region) * self.region_bytes;
        // SAFETY: in bounds by the assertion and the mapping's size (`total_bytes`).
        unsafe { self.map.as_ptr().add(offset) as *mut u8 }
    }

    /// Copies `values` into `region` of `rank`'s slot, from element `offset` on.
    ///
    /// The protocol guarantees nobody reads that part of the region meanwhile.
    pub fn write<E: bytemuck::Pod>(&self, rank: usize, region: usize, offset: usize, values: &[E]) {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let start = offset * size_of::<E>();
        assert!(
            start + bytes.len() <= self.region_bytes,
            "{} bytes at {start} into a {}-byte region",
            bytes.len(),
            self.region_bytes
        );
        // SAFETY: the destination lies inside the region (asserted above) and does not
        // overlap `values`, which lives in this process's own memory.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.region(rank, region).add(start), bytes.len()) }
    }

    /// The first `len` elements of `region` of `rank`'s slot.
    ///
    /// The protocol guarantees nobody writes that region while the slice is alive.
    pub fn read<E: bytemuck::Pod>(&self, rank: usize, region: usize, len: usize) -> &[E] {
        assert!(len * size_of::<E>() <= self.region_bytes, "{len} elements from a {}-byte region", self.region_bytes);
        // SAFETY: in bounds (asserted), aligned (regions are multiples of a cache line from
        // a page-aligned start), and any bit pattern is a valid `E` (Pod).
        unsafe { std::slice::from_raw_parts(self.region(rank, region) as *const E, len) }
    }

    /// Publishes that this member finished `phase` of the protocol, after its writes, and
    /// wakes the members sleeping on the segment.
    ///
    /// With [`sleep_unless`](Self::sleep_unless) this is the Dekker pattern in SeqCst: the
    /// publisher bumps `wake` then reads `sleepers`, a sleeper bumps `sleepers` then has the
    /// kernel compare `wake`; one of them sees the other, so no wake-up is lost.
    pub fn publish(&self, rank: usize, phase: u64) {
        self.control(rank).published.store(phase, Ordering::Release);
        self.word(WAKE_OFFSET).fetch_add(1, Ordering::SeqCst);
        if self.word(SLEEPERS_OFFSET).load(Ordering::SeqCst) > 0 {
            futex::wake_all(self.word(WAKE_OFFSET));
        }
    }

    /// The publication counter, read before checking a condition that `sleep_unless` then
    /// sleeps on.
    pub fn publications(&self) -> u32 {
        self.word(WAKE_OFFSET).load(Ordering::SeqCst)
    }

    /// Sleeps until a publication after `seen` (or `timeout`).
    pub fn sleep_unless(&self, seen: u32, timeout: std::time::Duration) {
        let sleepers = self.word(SLEEPERS_OFFSET);
        sleepers.fetch_add(1, Ordering::SeqCst);
        futex::wait(self.word(WAKE_OFFSET), seen, timeout);
        sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: inside the header page, 64-byte aligned, only ever accessed atomically.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU32) }
    }
}

fn map(file: &File, path: &Path) -> Result<MmapMut, String> {
    // SAFETY: the file is this job's private segment (created exclusively with mode 0600,
    // or verified by its nonce); its size is fixed and every access goes through
    // `Segment`, whose protocol keeps members' writes and reads apart.
    unsafe { MmapMut::map_mut(file) }.map_err(|e| format!("mapping {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_segment_opens_elsewhere_and_shares_its_bytes() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("engine-segment-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let a = Segment::create(&dir, 7, 2, 4096)?;
        let b = Segment::open(&dir, 7, 2, 4096)?;
        let _ = std::fs::remove_file(&dir);
        a.write(0, 1, 0, &[1.5f32, 2.5]);
        a.publish(0, 3);
        assert_eq!(b.control(0).published.load(Ordering::Acquire), 3);
        assert_eq!(b.read::<f32>(0, 1, 2), &[1.5, 2.5]);
        Ok(())
    }

    #[test]
    fn a_segment_with_another_nonce_or_shape_is_refused() -> Result<(), String> {
        let path = std::env::temp_dir().join(format!("engine-segment-refuse-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let _a = Segment::create(&path, 7, 2, 4096)?;
        let wrong_nonce = Segment::open(&path, 8, 2, 4096).err().unwrap_or_default();
        let wrong_shape = Segment::open(&path, 7, 3, 4096).err().unwrap_or_default();
        let again = Segment::create(&path, 7, 2, 4096).err().unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        assert!(wrong_nonce.contains("not this job's segment"), "{wrong_nonce}");
        assert!(wrong_shape.contains("bytes where"), "{wrong_shape}");
        assert!(again.contains("creating"), "{again}");
        let missing = Segment::open(&path, 7, 2, 4096).err().unwrap_or_default();
        assert!(missing.contains("do not share"), "{missing}");
        Ok(())
    }
}
