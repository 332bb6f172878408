//! Waiting for the other members' counters.
//!
//! Members on one host finish a phase microseconds apart when they run in step, so a
//! waiter first spins briefly; after that it sleeps on the segment's futex word until some
//! member publishes (no CPU taken from the training threads, which on a small machine share
//! the cores with it). It wakes at least every millisecond to ask the gRPC side whether the
//! group is still whole: a killed peer never advances its counter, but its broken
//! connection says so at once.

use super::super::operation::Op;
use super::segment::Segment;
use crate::Result;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const SPINS: u32 = 100;
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// Returns once every member has published `phase`, or fails naming those that have not.
pub(super) fn wait_for_phase(op: &Op, segment: &Segment, phase: u64) -> Result<()> {
    let behind = |k: usize| segment.control(k).published.load(Ordering::Acquire) < phase;
    let members = segment.members();
    for _ in 0..SPINS {
        if !(0..members).any(behind) {
            return Ok(());
        }
        std::hint::spin_loop();
    }
    let mut next_check = Instant::now() + CHECK_EVERY;
    loop {
        let seen = segment.publications();
        if !(0..members).any(behind) {
            return Ok(());
        }
        let now = Instant::now();
        if now >= next_check {
            op.check_peers()?;
            if now >= op.deadline {
                let late: Vec<String> = (0..members).filter(|&k| behind(k)).map(|k| op.members.describe(k)).collect();
                return Err(op.error(
                    format!(
                        "{} did not arrive within {:?} (operation {} on {}, shared memory)",
                        late.join(", "),
                        op.timeout,
                        op.operation,
                        op.members.describe(op.rank())
                    ),
                    true,
                ));
            }
            next_check = now + CHECK_EVERY;
        }
        segment.sleep_unless(seen, next_check.saturating_duration_since(now));
    }
}
