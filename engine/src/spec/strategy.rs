//! The registry of distribution strategy names: the one place `--strategy NAME` and the
//! spec's `train_distribute` / `eval_distribute` are resolved.

use serde::{
    Deserialize, Deserializer,
    de::{self, EnumAccess, VariantAccess, Visitor},
};
use std::{fmt, str::FromStr};

/// A distribution strategy, as TensorFlow names them (snake case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// No distribution: one device, no placement (TensorFlow's default strategy).
    #[default]
    Default,
    OneDevice,
    Mirrored,
    CentralStorage,
    MultiWorker,
    ParameterServer,
}

impl Strategy {
    pub const ALL: [Strategy; 6] = [
        Strategy::Default,
        Strategy::OneDevice,
        Strategy::Mirrored,
        Strategy::CentralStorage,
        Strategy::MultiWorker,
        Strategy::ParameterServer,
    ];

    pub const NAMES: &'static [&'static str] =
        &["default", "one_device", "mirrored", "central_storage", "multi_worker", "parameter_server"];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Default => "default",
            Strategy::OneDevice => "one_device",
            Strategy::Mirrored => "mirrored",
            Strategy::CentralStorage => "central_storage",
            Strategy::MultiWorker => "multi_worker",
            Strategy::ParameterServer => "parameter_server",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown strategy name, with the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy `{name}`, expected one of: {}", Strategy::NAMES.join(", "))]
pub struct UnknownStrategy {
    pub name: String,
}

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        Strategy::ALL.into_iter().find(|st| st.name() == s).ok_or_else(|| UnknownStrategy { name: s.to_string() })
    }
}

impl<'de> Deserialize<'de> for Strategy {
    /// Written as a string (`"mirrored"`) or a bare name (`mirrored`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum("Strategy", Strategy::NAMES, StrategyVisitor)
    }
}

struct StrategyVisitor;

impl<'de> Visitor<'de> for StrategyVisitor {
    type Value = Strategy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a strategy name (one of: {})", Strategy::NAMES.join(", "))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Strategy, E> {
        v.parse().map_err(|_| E::unknown_variant(v, Strategy::NAMES))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Strategy, A::Error> {
        let (name, variant): (String, _) = data.variant()?;
        let strategy = self.visit_str(&name)?;
        variant.unit_variant()?;
        Ok(strategy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves_and_unknown_names_list_the_valid_ones() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
        }
        assert_eq!(Strategy::NAMES.len(), Strategy::ALL.len());
        let e = "mirorred".parse::<Strategy>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("`mirorred`") && e.contains("multi_worker, parameter_server"), "{e}");
    }
}
