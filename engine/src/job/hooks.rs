//! Hook sections (`train_spec.hooks`, `eval_spec.hooks`) as hooks.

use crate::spec::{HookSection, Spec, SpecError};
use engine_estimator::hooks::{HookConfig, SessionRunHook, hook_from_config};

pub fn hooks_of(spec: &Spec, sections: &[HookSection]) -> Result<Vec<Box<dyn SessionRunHook>>, SpecError> {
    sections
        .iter()
        .map(|s| {
            let config: HookConfig = spec.decode(&s.path)?;
            hook_from_config(&config).map_err(|why| spec.error(s.path.clone(), crate::spec::ErrorKind::Invalid(why)))
        })
        .collect()
}
