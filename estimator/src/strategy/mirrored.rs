//! `mirrored`: one program replicated on every local device (SPMD), gradients
//! all-reduced in buckets before every replica applies the same update to its copy.

use super::{Stage, Strategy, StrategyOptions, threads_for};
use crate::{Result, input::InputContext};
use engine_graph::{
    ops::ReduceOp,
    passes::{
        Pass,
        strategy::{
            AllReduceFusion, AllReduceGradients, AllReduceLoss, AllReduceUpdates, PlaceAll, ScaleLoss,
            SyncBatchStatistics,
        },
    },
};
use engine_runtime::{Collective, CrossDeviceOps, Device, InProcessGroup};
use std::sync::Arc;
use std::time::Duration;

pub struct MirroredStrategy {
    devices: Vec<Device>,
    cross_device_ops: CrossDeviceOps,
    bucket_bytes: usize,
    timeout: Duration,
}

impl MirroredStrategy {
    pub fn new(options: &StrategyOptions) -> Result<Self> {
        Ok(MirroredStrategy {
            devices: options.replica_devices()?,
            cross_device_ops: options.cross_device_ops,
            bucket_bytes: options.all_reduce_bucket_bytes,
            timeout: options.collective_timeout,
        })
    }
}

/// The passes every all-reducing strategy shares (mirrored here, multi-worker across
/// processes): scale the loss by the replica count, synchronize the batch statistics that
/// ask for it, all-reduce (sum) every gradient and the loss (so that the loss every
/// replica fetches is the global batch's), average the moving statistics, pack the
/// all-reduces into buckets.
pub(crate) fn all_reduce_passes(
    stage: Stage,
    training: bool,
    replicas: usize,
    bucket_bytes: usize,
) -> Vec<Box<dyn Pass>> {
    match (stage, training) {
        (Stage::BeforeGradients, true) => vec![Box::new(ScaleLoss { replicas }), Box::new(SyncBatchStatistics)],
        (Stage::Gradients, true) => vec![
            Box::new(AllReduceGradients { reduce: ReduceOp::Sum }),
            Box::new(AllReduceUpdates { replicas }),
            Box::new(AllReduceLoss { reduce: ReduceOp::Sum }),
            Box::new(AllReduceFusion { bucket_bytes, first_bucket_bytes: bucket_bytes.min(1 << 20) }),
        ],
        (Stage::AfterOptimizer, _) => vec![Box::new(PlaceAll { on: engine_graph::Placement::Replica })],
        _ => Vec::new(),
    }
}

impl Strategy for MirroredStrategy {
    fn kind(&self) -> super::StrategyKind {
        super::StrategyKind::Mirrored
    }
    fn local_devices(&self) -> Vec<Device> {
        self.devices.clone()
    }
    fn input_context(&self) -> InputContext {
        InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: self.devices.len() }
    }
    fn passes(&self, stage: Stage, training: bool) -> Vec<Box<dyn Pass>> {
        all_reduce_passes(stage, training, self.devices.len(), self.bucket_bytes)
    }
    fn collectives(&self, local: usize, _fingerprint: &str) -> Result<Option<Vec<Arc<dyn Collective>>>> {
        Ok(Some(InProcessGroup::new(local, self.cross_device_ops, self.timeout).handles()))
    }
    fn threads_per_replica(&self) -> Option<usize> {
        Some(threads_for(self.devices.len()))
    }
    fn describe(&self) -> String {
        format!(
            "mirrored({:?}; {})",
            self.cross_device_ops,
            self.devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
        )
    }
}
