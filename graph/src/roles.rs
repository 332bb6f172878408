//! What the outputs of a graph mean to the layers above it.
//!
//! A graph is more than nodes: the estimator needs to know which placeholders to feed,
//! which value is the loss, which variable each gradient belongs to. Passes read and
//! rewrite these roles (autodiff fills `gradients`, a strategy wraps them in collectives),
//! so they live beside the nodes and are kept valid by every rewrite.

use crate::{NodeId, Outlet};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct Roles {
    /// Placeholders by feed name (`"x"`, `"labels"`, or a functional model's input names).
    pub inputs: BTreeMap<String, Outlet>,
    /// The scalar training or evaluation loss.
    pub loss: Option<Outlet>,
    /// Named prediction outputs (`"logits"`, `"probabilities"`, `"classes"`).
    pub predictions: BTreeMap<String, Outlet>,
    /// `(variable, gradient)` in a fixed order: the order collectives see them in.
    pub gradients: Vec<(NodeId, Outlet)>,
    /// Fetching this runs every update of a training step.
    pub train_op: Option<Outlet>,
    /// `(variable, new value)` for state a training step replaces besides what the
    /// optimizer does: batch normalization's moving statistics (TensorFlow's `UPDATE_OPS`).
    /// The optimizer pass assigns them in the train op; data-parallel strategies average
    /// them over the replicas first, so every copy of the variable stays equal.
    pub updates: Vec<(NodeId, Outlet)>,
    /// Batch statistics a layer wants over the global batch rather than the replica's
    /// (`BatchNormalization(synchronized: true)`): strategies with replicas in sync replace
    /// each by its mean over the replicas; alone, the local batch is the global one.
    pub cross_replica_means: Vec<Outlet>,
    /// Further named values a step may fetch (metric inputs, learning rate, hook tensors).
    pub fetches: BTreeMap<String, Outlet>,
}

impl Roles {
    /// Every outlet a role points at: the roots that dead-code elimination keeps.
    pub fn outlets(&self) -> Vec<Outlet> {
        let mut v: Vec<Outlet> = Vec::new();
        v.extend(self.inputs.values().copied());
        v.extend(self.loss);
        v.extend(self.predictions.values().copied());
        v.extend(self.gradients.iter().map(|(_, g)| *g));
        v.extend(self.train_op);
        v.extend(self.updates.iter().map(|(_, u)| *u));
        v.extend(self.cross_replica_means.iter().copied());
        v.extend(self.fetches.values().copied());
        v
    }

    /// Rewrites every reference to `old` into `new` (after a node is replaced).
    pub fn replace(&mut self, old: Outlet, new: Outlet) {
        let swap = |o: &mut Outlet| {
            if *o == old {
                *o = new;
            }
        };
        self.inputs.values_mut().for_each(swap);
        self.loss.iter_mut().for_each(swap);
        self.predictions.values_mut().for_each(swap);
        self.gradients.iter_mut().for_each(|(_, g)| swap(g));
        self.train_op.iter_mut().for_each(swap);
        self.updates.iter_mut().for_each(|(_, u)| swap(u));
        self.cross_replica_means.iter_mut().for_each(swap);
        self.fetches.values_mut().for_each(swap);
    }
}
