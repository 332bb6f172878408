//! The activation a fused op applies to its biased result.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    #[default]
    Linear,
    Relu,
}
