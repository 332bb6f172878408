//! Counts the reads from a device back to the host.
//!
//! A read is where the host waits for the device to drain its queue, so on a GPU it is
//! what breaks a step into pieces the launch queue can no longer overlap. The executor
//! reads a steady-state training step back once, at its end (the numerics flag and the
//! small fetched values in one transfer); this counter is how a test and the
//! StepCounterHook's `device reads: N/step` show that it stays so. Reads of CPU (flex)
//! tensors are not counted: on the CPU there is no queue to drain.
//!
//! The count is process-wide: the replicas of one step run on several threads, and their
//! reads all belong to the step.

use burn::backend::{DispatchDevice, DispatchTensor, TensorMetadata};
use std::sync::atomic::{AtomicU64, Ordering};

static DEVICE_READS: AtomicU64 = AtomicU64::new(0);

/// How many times this process has read a device tensor back to the host so far.
pub fn device_reads() -> u64 {
    DEVICE_READS.load(Ordering::Relaxed)
}

/// Counts one read of `t`, if it lives on a device other than the CPU.
pub(crate) fn count_read(t: &DispatchTensor) {
    if !matches!(t.device(), DispatchDevice::Flex(_)) {
        DEVICE_READS.fetch_add(1, Ordering::Relaxed);
        if std::env::var_os("ENGINE_TRACE_READS").is_some() {
            eprintln!("DEVICE READ\n{}", std::backtrace::Backtrace::force_capture());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Precision, Value};
    use engine_graph::HostTensor;

    #[test]
    fn cpu_reads_are_not_counted() -> crate::Result<()> {
        let v = Value::from_host(&HostTensor::scalar_f32(1.5), Device::cpu().dispatch(), Precision::F32);
        let before = device_reads();
        v.to_host()?;
        // Other tests of this binary may read devices concurrently only when a device is
        // listed; the CPU read itself adds nothing.
        if std::env::var_os("ENGINE_TEST_DEVICES").is_none() {
            assert_eq!(device_reads(), before);
        }
        Ok(())
    }
}
