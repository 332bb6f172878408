//! Warm start: initialize some variables from another model's checkpoint.

use crate::{EstimatorError, Result};
use engine_graph::HostTensor;
use regex::Regex;
use std::collections::BTreeMap;

/// TensorFlow's `WarmStartSettings`: variables whose names match `vars_regex` are loaded
/// from `checkpoint` (a file, or a model dir whose latest checkpoint is used) when the
/// model dir has no checkpoint of its own; everything else is initialized as usual.
#[derive(Debug, Clone)]
pub struct WarmStartSettings {
    pub checkpoint: String,
    pub vars_regex: String,
}

impl WarmStartSettings {
    pub fn new(checkpoint: &str, vars_regex: &str) -> Self {
        WarmStartSettings { checkpoint: checkpoint.into(), vars_regex: vars_regex.into() }
    }

    /// The checkpoint values to load: matching trainable variables only (optimizer slots
    /// and the global step start fresh, as in TensorFlow).
    pub fn select(&self, values: &BTreeMap<String, HostTensor>) -> Result<BTreeMap<String, HostTensor>> {
        let re = Regex::new(&format!("^(?:{})$", self.vars_regex))
            .map_err(|e| EstimatorError::Config(format!("warm start vars_regex '{}': {e}", self.vars_regex)))?;
        Ok(values
            .iter()
            .filter(|(k, _)| re.is_match(k) && k.as_str() != "global_step" && !is_slot(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

fn is_slot(name: &str) -> bool {
    ["/Momentum", "/Adam", "/Adam_1", "/RMSProp", "/RMSProp_1", "/RMSProp_2", "/Adagrad"]
        .iter()
        .any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_matching_variables_without_slots() -> Result<()> {
        let v = |x: f32| HostTensor::scalar_f32(x);
        let values = BTreeMap::from([
            ("conv2d/kernel".to_string(), v(1.0)),
            ("conv2d/kernel/Adam".to_string(), v(2.0)),
            ("dense/kernel".to_string(), v(3.0)),
            ("global_step".to_string(), HostTensor::scalar_i64(7)),
        ]);
        let picked = WarmStartSettings::new("ckpt", "conv2d/.*").select(&values)?;
        assert_eq!(picked.keys().collect::<Vec<_>>(), vec!["conv2d/kernel"]);
        assert_eq!(WarmStartSettings::new("ckpt", ".*").select(&values)?.len(), 2);
        assert!(WarmStartSettings::new("ckpt", "(").select(&values).is_err());
        Ok(())
    }
}
