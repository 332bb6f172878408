//! The distribution strategies by kind: the one place a strategy's name is known. The
//! spec (`train_distribute`, by serde), the command line (`--strategy`, by clap through
//! `FromStr`), the estimator and the launcher all hold a `StrategyKind`; `build` turns one
//! into the strategy itself.

use super::{
    CentralStorageStrategy, DefaultStrategy, MirroredStrategy, MultiWorkerStrategy, ParameterServerStrategy, Strategy,
    StrategyOptions,
};
use crate::Result;
use serde::{
    Deserialize, Deserializer,
    de::{self, EnumAccess, VariantAccess, Visitor},
};
use std::{fmt, str::FromStr};

/// A distribution strategy, as TensorFlow names them (snake case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StrategyKind {
    /// No distribution: one device, no placement (TensorFlow's default strategy).
    #[default]
    Default,
    OneDevice,
    Mirrored,
    CentralStorage,
    MultiWorker,
    ParameterServer,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 6] = [
        StrategyKind::Default,
        StrategyKind::OneDevice,
        StrategyKind::Mirrored,
        StrategyKind::CentralStorage,
        StrategyKind::MultiWorker,
        StrategyKind::ParameterServer,
    ];

    pub const NAMES: &'static [&'static str] = &{
        let mut names = [""; 6];
        let mut i = 0;
        while i < names.len() {
            names[i] = StrategyKind::ALL[i].name();
            i += 1;
        }
        names
    };

    pub const fn name(self) -> &'static str {
        match self {
            StrategyKind::Default => "default",
            StrategyKind::OneDevice => "one_device",
            StrategyKind::Mirrored => "mirrored",
            StrategyKind::CentralStorage => "central_storage",
            StrategyKind::MultiWorker => "multi_worker",
            StrategyKind::ParameterServer => "parameter_server",
        }
    }

    /// Whether the strategy's replicas are processes of a cluster (which then comes from
    /// flags, `TF_CONFIG`, torchrun or Slurm), not devices of this process.
    pub fn spans_processes(self) -> bool {
        matches!(self, StrategyKind::MultiWorker | StrategyKind::ParameterServer)
    }

    /// The strategy evaluation runs under when training runs under this one: a cluster
    /// evaluates on its evaluator task (or on the chief after training), one process alone,
    /// so `multi_worker` evaluates under `default`.
    pub fn for_evaluation(self) -> StrategyKind {
        match self {
            StrategyKind::MultiWorker => StrategyKind::Default,
            other => other,
        }
    }

    /// The strategy of this kind, built from `options`.
    pub fn build(self, options: &StrategyOptions) -> Result<Box<dyn Strategy>> {
        Ok(match self {
            StrategyKind::Default | StrategyKind::OneDevice => {
                Box::new(DefaultStrategy::new(self, super::announced(options.open_device()?)))
            }
            StrategyKind::Mirrored => Box::new(MirroredStrategy::new(options)?),
            StrategyKind::CentralStorage => Box::new(CentralStorageStrategy::new(options)?),
            StrategyKind::MultiWorker => Box::new(MultiWorkerStrategy::new(options)?),
            StrategyKind::ParameterServer => Box::new(ParameterServerStrategy::new(options)?),
        })
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown strategy name, with the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy `{name}`, expected one of: {}", StrategyKind::NAMES.join(", "))]
pub struct UnknownStrategy {
    pub name: String,
}

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> std::result::Result<Self, UnknownStrategy> {
        StrategyKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| UnknownStrategy { name: s.to_string() })
    }
}

impl<'de> Deserialize<'de> for StrategyKind {
    /// Written as a string (`"mirrored"`) or a bare name (`mirrored`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_enum("Strategy", StrategyKind::NAMES, StrategyVisitor)
    }
}

struct StrategyVisitor;

impl<'de> Visitor<'de> for StrategyVisitor {
    type Value = StrategyKind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a strategy name (one of: {})", StrategyKind::NAMES.join(", "))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<StrategyKind, E> {
        v.parse().map_err(|_| E::unknown_variant(v, StrategyKind::NAMES))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> std::result::Result<StrategyKind, A::Error> {
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
        for s in StrategyKind::ALL {
            assert_eq!(s.name().parse::<StrategyKind>(), Ok(s));
        }
        assert_eq!(StrategyKind::NAMES.len(), StrategyKind::ALL.len());
        let e = "mirorred".parse::<StrategyKind>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("`mirorred`") && e.contains("multi_worker, parameter_server"), "{e}");
    }
}
