//! A model function that replays an exported graph, so that a loaded export goes through
//! the same compiler (placement, fusion, precision) as the model that was trained.

use crate::{EstimatorError, EstimatorSpec, Features, Mode, ModelFn, Params, Result};
use engine_graph::{GraphBuilder, GraphDef, Op, Outlet};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct SavedGraph {
    pub def: GraphDef,
}

impl ModelFn for SavedGraph {
    fn build(
        &self,
        features: &Features,
        _labels: Option<Outlet>,
        mode: Mode,
        _params: &Params,
        b: &mut GraphBuilder<'_>,
    ) -> Result<EstimatorSpec> {
        if mode != Mode::Predict {
            return Err(EstimatorError::Spec { mode, reason: "an exported graph only predicts".into() });
        }
        let feed_of: BTreeMap<&str, &str> =
            self.def.inputs.iter().map(|(feed, o)| (o.node.as_str(), feed.as_str())).collect();
        let mut ids: BTreeMap<&str, Outlet> = BTreeMap::new();
        for n in &self.def.nodes {
            if let Op::Placeholder(_) = n.op {
                let feed = feed_of.get(n.name.as_str()).copied().unwrap_or(n.name.as_str());
                let p = features.get(feed).ok_or_else(|| {
                    EstimatorError::Other(format!(
                        "the exported graph reads the feature '{feed}', which the input lacks"
                    ))
                })?;
                ids.insert(n.name.as_str(), *p);
                continue;
            }
            let inputs = n
                .inputs
                .iter()
                .map(|o| {
                    ids.get(o.node.as_str()).map(|x| Outlet::new(x.node, o.output)).ok_or_else(|| {
                        EstimatorError::Other(format!("the exported node '{}' reads the unknown '{}'", n.name, o.node))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let id = b.node_named(&n.name, n.op.clone(), &inputs)?;
            ids.insert(n.name.as_str(), Outlet::from(id));
        }
        let mut spec = EstimatorSpec::new(Mode::Predict);
        for (key, o) in &self.def.predictions {
            let at = ids.get(o.node.as_str()).ok_or_else(|| {
                EstimatorError::Other(format!("the prediction '{key}' names the unknown node '{}'", o.node))
            })?;
            spec.predictions.insert(key.clone(), Outlet::new(at.node, o.output));
        }
        Ok(spec)
    }
}
