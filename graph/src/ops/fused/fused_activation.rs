//! The activation a fused op applies to its biased result: the part of the layers'
//! [`Activation`](crate::layers::Activation) that kernel epilogues implement (the CPU's
//! vectorized ones included). A type of its own so a fused op cannot carry an activation
//! no kernel applies; fusion passes convert with `TryFrom`, and only ReLU is ever fused.

use crate::layers::Activation;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum FusedActivation {
    #[default]
    Linear,
    Relu,
}

impl From<FusedActivation> for Activation {
    fn from(a: FusedActivation) -> Self {
        match a {
            FusedActivation::Linear => Activation::Linear,
            FusedActivation::Relu => Activation::Relu,
        }
    }
}

impl TryFrom<Activation> for FusedActivation {
    /// The activation itself: no epilogue applies it.
    type Error = Activation;

    fn try_from(a: Activation) -> Result<Self, Activation> {
        match a {
            Activation::Linear => Ok(FusedActivation::Linear),
            Activation::Relu => Ok(FusedActivation::Relu),
            other => Err(other),
        }
    }
}
