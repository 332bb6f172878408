//! Hook sections (`train_spec.hooks`, `eval_spec.hooks`) as hooks.

use crate::spec::{HookSection, Spec, SpecError};
use engine_estimator::hooks::{HookConfig, SessionRunHook, hook_from_config};
use engine_graph::optimizer::{LearningRate, OptimizerConfig};

pub fn hooks_of(spec: &Spec, sections: &[HookSection]) -> Result<Vec<Box<dyn SessionRunHook>>, SpecError> {
    sections
        .iter()
        .map(|s| {
            let config: HookConfig = spec.decode(&s.path)?;
            hook_from_config(&config).map_err(|why| spec.error(s.path.clone(), crate::spec::ErrorKind::Invalid(why)))
        })
        .collect()
}

/// The optimizer the job trains with: the spec's, its rate made reducible (times the
/// variable `learning_rate_scale`) when a training hook is `ReduceLROnPlateau`, which
/// assigns that variable. A hook section that does not decode leaves the rate as it is:
/// `hooks_of` reports it.
pub fn optimizer_config(spec: &Spec) -> OptimizerConfig {
    let mut config = spec.job.optimizer.to_config();
    let min_lr = spec.job.train_spec.hooks.iter().find_map(|s| match spec.decode::<HookConfig>(&s.path) {
        Ok(HookConfig::ReduceLROnPlateau { min_lr, .. }) => Some(min_lr),
        _ => None,
    });
    if let Some(min_lr) = min_lr {
        config.learning_rate = LearningRate::ReducedOnPlateau { then: Box::new(config.learning_rate), min_lr };
    }
    config
}
