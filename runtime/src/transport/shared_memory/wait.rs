//! Waiting for the other members' counters.
//!
//! Members on one host finish a phase microseconds apart when they run in step, so a
//! waiter first spins; a member that is busy elsewhere (still computing its backward pass)
//! should not have a waiter burning the core it needs, so the waiter then yields, and
//! after a while sleeps in short naps. Every millisecond it also asks the gRPC side
//! whether the group is still whole: a killed peer never advances its counter, but its
//! broken connection says so at once.

use super::super::operation::Op;
use super::segment::Segment;
use crate::Result;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const SPINS: u32 = 200;
const YIELD_FOR: Duration = Duration::from_micros(500);
const NAP: Duration = Duration::from_micros(20);
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// Returns once every member has published `phase`, or fails naming those that have not.
pub(super) fn wait_for_phase(op: &Op, segment: &Segment, phase: u64) -> Result<()> {
    let behind = |k: usize| segment.control(k).published.load(Ordering::Acquire) < phase;
    let members = segment.members();
    let mut spins = 0;
    let started = Instant::now();
    let mut next_check = started + CHECK_EVERY;
    while (0..members).any(behind) {
        if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        let now = Instant::now();
        if now - started < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
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
    }
    Ok(())
}
