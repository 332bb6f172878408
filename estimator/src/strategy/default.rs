//! `default` and `one_device`: one replica on one device; placement is the only pass.

use super::{Stage, Strategy};
use crate::input::InputContext;
use engine_graph::passes::{Pass, strategy::Placement};
use engine_runtime::Device;

pub struct DefaultStrategy {
    name: String,
    device: Device,
}

impl DefaultStrategy {
    pub fn new(name: &str, device: Device) -> Self {
        DefaultStrategy { name: name.to_string(), device }
    }
}

impl Strategy for DefaultStrategy {
    fn name(&self) -> &str {
        &self.name
    }
    fn local_devices(&self) -> Vec<Device> {
        vec![self.device.clone()]
    }
    fn input_context(&self) -> InputContext {
        InputContext { num_input_pipelines: 1, input_pipeline_id: 0, num_replicas_in_sync: 1 }
    }
    fn passes(&self, stage: Stage, _training: bool) -> Vec<Box<dyn Pass>> {
        match stage {
            Stage::AfterOptimizer => vec![Box::new(Placement { device: self.device.to_string() })],
            _ => Vec::new(),
        }
    }
}
