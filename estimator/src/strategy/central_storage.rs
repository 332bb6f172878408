//! `central_storage`: variables and updates on the host, replicas compute gradients on
//! their batches and read variables through transfers; the host applies one update.

use super::{Stage, Strategy, StrategyOptions, mirrored::all_reduce_passes, threads_for};
use crate::{Result, input::InputContext};
use engine_graph::passes::{Pass, strategy::CentralStorage};
use engine_runtime::{Collective, CrossDeviceOps, Device, InProcessGroup};
use std::sync::Arc;
use std::time::Duration;

pub struct CentralStorageStrategy {
    devices: Vec<Device>,
    cross_device_ops: CrossDeviceOps,
    bucket_bytes: usize,
    timeout: Duration,
}

impl CentralStorageStrategy {
    pub fn new(options: &StrategyOptions) -> Result<Self> {
        Ok(CentralStorageStrategy {
            devices: options.replica_devices()?,
            cross_device_ops: options.cross_device_ops,
            bucket_bytes: options.all_reduce_bucket_bytes,
            timeout: options.collective_timeout,
        })
    }
}

impl Strategy for CentralStorageStrategy {
    fn kind(&self) -> super::StrategyKind {
        super::StrategyKind::CentralStorage
    }
    fn local_devices(&self) -> Vec<Device> {
        self.devices.clone()
    }
    fn input_context(&self) -> InputContext {
        InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: self.devices.len() }
    }
    fn passes(&self, stage: Stage, training: bool) -> Vec<Box<dyn Pass>> {
        match stage {
            // Gradients are reduced across replicas exactly as mirrored does; only where
            // the result goes differs.
            Stage::BeforeGradients | Stage::Gradients => {
                all_reduce_passes(stage, training, self.devices.len(), self.bucket_bytes)
            }
            Stage::AfterOptimizer => vec![Box::new(CentralStorage)],
        }
    }
    fn partitions(&self, _training: bool) -> super::Partitions {
        super::Partitions::HostAndReplicas
    }
    fn collectives(&self, local: usize, _fingerprint: &str) -> Result<Option<Vec<Arc<dyn Collective>>>> {
        Ok(Some(InProcessGroup::new(local, self.cross_device_ops, self.timeout).handles()))
    }
    fn threads_per_replica(&self) -> Option<usize> {
        Some(threads_for(self.devices.len()))
    }
}
