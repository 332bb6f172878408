//! Where a node runs, as the placement passes decide it: one real device, or a partition
//! a strategy splits the graph into (the replicas' share, the host's, a parameter-server
//! training task's, ps task k's) whose device the session picks. A type, so the session
//! and the passes agree on partitions without comparing strings.

use crate::DeviceName;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::{fmt, str::FromStr};

/// In the order of their names, so listings sort as they did when placements were strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// The whole graph on one device (`default`, `one_device`, `multi_worker`).
    Device(DeviceName),
    /// `central_storage`: variables and their updates, once, on the host CPU.
    Host,
    /// `parameter_server`: what ps task k holds and computes.
    Ps(usize),
    /// `central_storage` and `mirrored`: the part every replica runs, once per replica.
    Replica,
    /// `parameter_server`: what a training task computes.
    Worker,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Device(d) => fmt::Display::fmt(d, f),
            Placement::Replica => f.write_str("replica"),
            Placement::Host => f.write_str("host"),
            Placement::Worker => f.write_str("worker"),
            Placement::Ps(k) => write!(f, "ps:{k}"),
        }
    }
}

/// As the name it prints: the graph fingerprint (which checkpoints record and tasks compare)
/// hashes ops by `Debug`, and stays what it was when placements were strings.
impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

/// A placement that is neither a device nor a partition label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement `{0}`: expected a device (cpu:0, wgpu:0, cuda:0), replica, host, worker or ps:K")]
pub struct BadPlacement(pub String);

impl FromStr for Placement {
    type Err = BadPlacement;

    fn from_str(s: &str) -> Result<Self, BadPlacement> {
        let bad = || BadPlacement(s.to_string());
        Ok(match s {
            "replica" => Placement::Replica,
            "host" => Placement::Host,
            "worker" => Placement::Worker,
            _ => match s.strip_prefix("ps:") {
                Some(k) => Placement::Ps(k.parse().map_err(|_| bad())?),
                None => Placement::Device(s.parse().map_err(|_| bad())?),
            },
        })
    }
}

impl Serialize for Placement {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Placement {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceKind;

    #[test]
    fn placements_print_and_parse_as_before() {
        let all = [
            Placement::Device(DeviceName::new(DeviceKind::Wgpu, 1)),
            Placement::Replica,
            Placement::Host,
            Placement::Worker,
            Placement::Ps(3),
        ];
        for p in all {
            assert_eq!(p.to_string().parse::<Placement>(), Ok(p));
        }
        assert_eq!(format!("{:?}", Placement::Ps(3)), "\"ps:3\"");
        assert!("ps:x".parse::<Placement>().is_err());
        assert!("gpu".parse::<Placement>().is_err());
    }
}
