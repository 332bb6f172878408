//! `default` and `one_device`: one replica on one device; placement is the only pass.

use super::Strategy;
use crate::input::InputContext;
use engine_graph::{Graph, Result, passes::Pass};
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
    fn passes(&self, _training: bool) -> Vec<Box<dyn Pass>> {
        vec![Box::new(Placement { device: self.device.to_string() })]
    }
}

/// Places every node on one device.
pub struct Placement {
    pub device: String,
}

impl Pass for Placement {
    fn name(&self) -> &str {
        "placement"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let ids: Vec<_> = g.node_ids().collect();
        for id in ids {
            g.set_device(id, Some(self.device.clone()));
        }
        Ok(true)
    }
}
