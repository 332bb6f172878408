//! Executes compiled plans on a burn backend.
//!
//! An [`Executor`] prepares a [`engine_graph::Plan`] for a [`Device`] once (slot
//! assignment, constant upload, move-or-clone decisions from liveness) and then runs it
//! step after step against a [`VariableStore`]. The CPU backend is burn's `flex`; `wgpu`
//! and `cuda` come with the cargo features of the same names.
//!
//! [`cluster`] says which processes a multi-worker run has and which one this is, from
//! `--cluster`/`--task`, `TF_CONFIG`, torchrun's environment or a Slurm job step.

pub mod cluster;
mod collective;
mod device;
mod error;
mod exchange;
mod executor;
mod heap;
mod host_cpu;
mod kernels;
mod readback;
mod shapes;
mod step_threads;
mod switch;
mod threads;
pub mod transport;
mod value;
mod variables;

pub use collective::{Collective, CrossDeviceOps, InProcessGroup};
pub use device::{BadDeviceName, Device, DeviceKind, DeviceName, MAX_DEVICE_INDEX, device_reads};
pub use error::{Result, RuntimeError};
pub use exchange::Exchange;
pub use executor::{
    CollectiveTiming, DeviceTime, Executor, Finished, Launched, NonFinite, OpTiming, RunOptions, StepOutput,
    launched_steps,
};
pub use heap::retain_freed_memory;
pub use host_cpu::{HostCpu, Isa, allowed_cpus};
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
pub use kernels::{FAULT_IN_ALL_REDUCE_ENV, has_avx2};
pub use step_threads::StepThreads;
pub use switch::switched_off;
pub use threads::{ComputeThreads, use_compute_threads};
pub use value::{Precision, Value};
pub use variables::{VariableStore, whole_variables};
