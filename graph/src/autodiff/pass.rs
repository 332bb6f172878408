//! The autodiff pass: gradients of the loss for every trainable variable.

use super::gradients;
use crate::{Graph, GraphError, Outlet, Result, passes::Pass};

/// Fills `roles.gradients` with `(variable, d loss / d variable)` for every trainable
/// variable the loss depends on, in variable creation order.
#[derive(Debug, Default)]
pub struct Autodiff;

impl Pass for Autodiff {
    fn name(&self) -> &str {
        "autodiff"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let loss = g.roles.loss.ok_or_else(|| GraphError::invalid("training graph", "it has no loss"))?;
        let vars = g.trainable_variables();
        let xs: Vec<Outlet> = vars.iter().map(|&v| Outlet::from(v)).collect();
        let grads = gradients(g, loss, &xs)?;
        g.roles.gradients = vars.into_iter().zip(grads).filter_map(|(v, gr)| gr.map(|gr| (v, gr))).collect();
        Ok(true)
    }
}
