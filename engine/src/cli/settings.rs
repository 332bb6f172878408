//! The one chain from flags to the estimator's settings: the spec's `run_config` (with
//! `--set` and the dedicated flags that are overrides, like `--max-steps`) becomes the
//! estimator's `RunConfig`; the flags that are not spec fields (`--strategy`, `--device`,
//! `--devices`, the cluster) then replace what they name in it. Every command that compiles
//! or trains goes through here, so `engine plan` compiles what `engine run` trains.

use super::SpecArgs;
use crate::spec::Spec;
use clap::Args;
use engine_estimator::RunConfig;
use engine_runtime::DeviceName;

/// Where a command computes (by default the CPU).
#[derive(Debug, Clone, Default, Args)]
pub struct DeviceArgs {
    /// `cpu`, `wgpu[:N]` or `cuda[:N]`.
    #[arg(long, value_name = "DEVICE", default_value_t = DeviceName::CPU)]
    pub device: DeviceName,
    /// Replica devices for `mirrored` and `central_storage`, e.g. `cpu:0,cpu:1` (default:
    /// one CPU replica per core).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub devices: Vec<DeviceName>,
}

impl SpecArgs {
    /// The estimator's settings for `spec`, with this command's `--strategy` and devices.
    /// `--strategy` sets both strategies, as the spec's `train_distribute` alone would.
    pub fn run_config(&self, spec: &Spec, devices: &DeviceArgs) -> RunConfig {
        let mut config = spec.job.run_config.to_estimator();
        if let Some(kind) = self.strategy {
            config.train_distribute = kind;
            config.eval_distribute = Some(kind);
        }
        config.strategy.device = devices.device;
        if !devices.devices.is_empty() {
            config.strategy.devices = Some(devices.devices.clone());
        }
        config
    }
}
