//! Every node on one device (`default`, `one_device`).

use crate::{Graph, Result, passes::Pass};

pub struct Placement {
    pub device: String,
}

impl Pass for Placement {
    fn name(&self) -> &str {
        "placement"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let ids: Vec<_> = g.node_ids().collect();
        let changed = ids.iter().any(|&id| g.node(id).device.as_deref() != Some(self.device.as_str()));
        for id in ids {
            g.set_device(id, Some(self.device.clone()));
        }
        Ok(changed)
    }
}
