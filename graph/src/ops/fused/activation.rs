//! The activation a fused op applies to its biased result.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Activation {
    #[default]
    Linear,
    Relu,
}
