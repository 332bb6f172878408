//! How the members of a group move all-reduce data: TensorFlow's
//! `CommunicationOptions(implementation=...)`, with shared memory in place of NCCL.

use serde::Deserialize;
use std::fmt;
use std::str::FromStr;

/// The data path of [`NetworkGroup`](super::NetworkGroup)'s all-reduce.
///
/// gRPC always carries the handshake, broadcast, all-gather and barrier, and is always
/// there as the fallback; only all-reduce, where the bytes are, changes path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum Communication {
    /// Shared memory when every member can map the same segment (they share a host and
    /// its `/dev/shm`), else the gRPC ring. Decided once, at connect, the same on every
    /// member.
    #[default]
    Auto,
    /// The gRPC ring (and direct exchange for small tensors), even on one host.
    Ring,
    /// Shared memory, or `connect` fails naming the members that could not map it.
    SharedMemory,
}

impl Communication {
    pub const NAMES: [&'static str; 3] = ["auto", "ring", "shared_memory"];

    pub fn name(self) -> &'static str {
        match self {
            Communication::Auto => "auto",
            Communication::Ring => "ring",
            Communication::SharedMemory => "shared_memory",
        }
    }
}

impl fmt::Display for Communication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Communication {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Communication::Auto),
            "ring" => Ok(Communication::Ring),
            "shared_memory" => Ok(Communication::SharedMemory),
            other => Err(format!("unknown communication '{other}'; expected one of {}", Self::NAMES.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_choices() {
        for name in Communication::NAMES {
            assert_eq!(name.parse::<Communication>().map(|c| c.name()), Ok(name));
        }
        let error = "nccl".parse::<Communication>().err().unwrap_or_default();
        assert!(error.contains("nccl") && error.contains("shared_memory"), "{error}");
    }
}
