//! `default` and `one_device`: one replica on one device; placement is the only pass.

use super::{Stage, Strategy, StrategyKind};
use crate::input::InputContext;
use engine_graph::{
    Placement,
    passes::{Pass, strategy::PlaceAll},
};
use engine_runtime::Device;

pub struct DefaultStrategy {
    /// `Default` or `OneDevice`: the same strategy under TensorFlow's two names.
    kind: StrategyKind,
    device: Device,
}

impl DefaultStrategy {
    pub fn new(kind: StrategyKind, device: Device) -> Self {
        DefaultStrategy { kind, device }
    }
}

impl Strategy for DefaultStrategy {
    fn kind(&self) -> StrategyKind {
        self.kind
    }
    fn local_devices(&self) -> Vec<Device> {
        vec![self.device.clone()]
    }
    fn input_context(&self) -> InputContext {
        InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: 1 }
    }
    fn passes(&self, stage: Stage, _training: bool) -> Vec<Box<dyn Pass>> {
        match stage {
            Stage::AfterOptimizer => vec![Box::new(PlaceAll { on: Placement::Device(self.device.name()) })],
            _ => Vec::new(),
        }
    }
}
