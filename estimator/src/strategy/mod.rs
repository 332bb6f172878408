//! Distribution strategies, chosen by name.
//!
//! A strategy is a list of graph passes (inserted between autodiff and the optimizer) plus
//! the devices its replicas run on and the collectives that connect them. The training
//! loop never branches on the strategy's kind: it compiles with the strategy's passes,
//! runs one executor per local replica, and feeds each replica its own batch.

mod default;

pub use default::DefaultStrategy;

use crate::{EstimatorError, Result, input::InputContext};
use engine_graph::passes::Pass;
use engine_runtime::Device;

pub trait Strategy: Send + Sync {
    fn name(&self) -> &str;
    /// Replicas in this process, one device each.
    fn local_devices(&self) -> Vec<Device>;
    /// Replicas across the whole job (the global batch is per-replica batch times this).
    fn num_replicas_in_sync(&self) -> usize {
        self.local_devices().len()
    }
    /// This process's input pipeline and its place among the job's pipelines.
    fn input_context(&self) -> InputContext;
    /// Passes for a graph of this mode. On training graphs they run after autodiff and
    /// before the optimizer, so they can rewrite gradients (all-reduce) and placement.
    fn passes(&self, training: bool) -> Vec<Box<dyn Pass>> {
        let _ = training;
        Vec::new()
    }
    /// Whether this process writes checkpoints and summaries.
    fn is_chief(&self) -> bool {
        true
    }
    /// Identifies the strategy and its cluster in the job fingerprint.
    fn describe(&self) -> String {
        format!("{}({})", self.name(), self.local_devices().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
    }
}

/// The strategy names the engine knows, in one place.
pub const STRATEGY_NAMES: [&str; 6] = ["default", "one_device", "mirrored", "central_storage", "multi_worker", "parameter_server"];

/// Resolves a strategy by name for `device`.
pub fn strategy_by_name(name: &str, device: &str) -> Result<Box<dyn Strategy>> {
    let device = Device::parse(device)?;
    match name {
        "default" | "one_device" => Ok(Box::new(DefaultStrategy::new(name, device))),
        other if STRATEGY_NAMES.contains(&other) => {
            Err(EstimatorError::Other(format!("strategy '{other}' is not available in this build yet")))
        }
        other => Err(EstimatorError::UnknownName { what: "strategy", name: other.to_string(), valid: STRATEGY_NAMES.to_vec() }),
    }
}
