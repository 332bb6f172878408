//! Input sections (`train_input`, `eval_input`) and hook sections.
//!
//! The input pipeline belongs to the estimator crate (`engine_estimator::input::InputSpec`),
//! which the engine does not depend on yet. Until it does, a section is kept as a
//! [`RawSection`]: its kind is checked here, and the estimator decodes the subtree with
//! [`crate::spec::Spec::decode`] (same located errors). Swapping [`InputSection`] for the
//! real type is one line here, plus [`input_batch_size`].

use super::{
    Spec,
    de::{RawSection, SectionKinds},
    syntax::Value,
};

pub struct InputKinds;

impl SectionKinds for InputKinds {
    const TAG: &'static str = "$engine::RawSection:input source";
    const KINDS: &'static [&'static str] = &["Idx", "Csv", "ImageFolder", "TfRecord"];
}

/// Hooks (`train_spec.hooks`) are the estimator's: its registry names them.
pub struct HookKinds;

impl SectionKinds for HookKinds {
    const TAG: &'static str = "$engine::RawSection:hook";
    const KINDS: &'static [&'static str] = &engine_estimator::hooks::HOOK_NAMES;
}

pub type InputSection = RawSection<InputKinds>;
pub type HookSection = RawSection<HookKinds>;

/// The per-replica batch size an input section asks for, if it says.
pub fn input_batch_size(spec: &Spec, input: &InputSection) -> Option<usize> {
    let node = spec.node(&input.path)?;
    match &node.field("batch_size")?.value.value {
        Value::Int(n) => usize::try_from(*n).ok(),
        _ => None,
    }
}
