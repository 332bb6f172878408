//! What a gradient rule sees of its node.

use crate::{Fact, GraphBuilder, GraphError, NodeId, Outlet, Result};

/// The view a gradient rule gets: its node's inputs and outputs, the gradients arriving at
/// its outputs, which input gradients are wanted, and a builder scoped under
/// `gradients/<node>_grad` to wire the backward nodes with.
pub struct GradCtx<'a, 'g> {
    pub b: &'a mut GraphBuilder<'g>,
    node: NodeId,
    inputs: Vec<Outlet>,
    out_grads: Vec<Option<Outlet>>,
    needs: Vec<bool>,
    grads: Vec<Option<Outlet>>,
}

impl<'a, 'g> GradCtx<'a, 'g> {
    pub(crate) fn new(
        b: &'a mut GraphBuilder<'g>,
        node: NodeId,
        inputs: Vec<Outlet>,
        out_grads: Vec<Option<Outlet>>,
        needs: Vec<bool>,
    ) -> Self {
        let grads = vec![None; inputs.len()];
        GradCtx { b, node, inputs, out_grads, needs, grads }
    }

    pub fn input(&self, i: usize) -> Outlet {
        self.inputs[i]
    }

    pub fn output(&self, i: usize) -> Outlet {
        Outlet::new(self.node, i)
    }

    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    pub fn input_fact(&self, i: usize) -> Result<Fact> {
        self.b.fact(self.inputs[i]).cloned()
    }

    /// Whether the gradient of input `i` is wanted.
    pub fn needs(&self, i: usize) -> bool {
        self.needs[i]
    }

    /// The gradient arriving at output `i`; an error if none arrives (callers use it for
    /// the outputs that carry the value).
    pub fn out_grad(&self, i: usize) -> Result<Outlet> {
        self.out_grads.get(i).copied().flatten().ok_or_else(|| {
            GraphError::Inconsistent(format!(
                "no gradient reached output {i} of '{}'",
                self.b.graph().node(self.node).name
            ))
        })
    }

    pub fn out_grad_opt(&self, i: usize) -> Option<Outlet> {
        self.out_grads.get(i).copied().flatten()
    }

    /// Records the gradient of input `i` (ignored when not needed).
    pub fn set(&mut self, i: usize, g: Outlet) {
        if self.needs[i] {
            self.grads[i] = Some(g);
        }
    }

    pub fn no_gradient(&self) -> GraphError {
        let node = self.b.graph().node(self.node);
        GraphError::NoGradient { node: node.name.clone(), op: node.op.name() }
    }

    /// Every needed input must have received a gradient.
    pub(crate) fn finish(self) -> Result<Vec<Option<Outlet>>> {
        for (i, need) in self.needs.iter().enumerate() {
            if *need && self.grads[i].is_none() {
                let node = self.b.graph().node(self.node);
                return Err(GraphError::Inconsistent(format!(
                    "gradient rule of {} ('{}') produced no gradient for input {i}",
                    node.op.name(),
                    node.name
                )));
            }
        }
        Ok(self.grads)
    }
}
