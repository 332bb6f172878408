//! Every node in one place: a device (`default`, `one_device`, `multi_worker`) or the
//! replica partition (`mirrored`).

use crate::{Graph, Placement, Result, passes::Pass};

pub struct PlaceAll {
    pub on: Placement,
}

impl Pass for PlaceAll {
    fn name(&self) -> &str {
        "placement"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let ids: Vec<_> = g.node_ids().collect();
        let changed = ids.iter().any(|&id| g.node(id).placement != Some(self.on));
        for id in ids {
            g.set_placement(id, Some(self.on));
        }
        Ok(changed)
    }
}
