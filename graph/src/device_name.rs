//! Device names (`cpu`, `cpu:1`, `wgpu:0`, `cuda:0`), parsed once where they enter: a flag
//! (clap calls `FromStr`), a spec (serde), an environment variable. Everything past that
//! edge holds a `DeviceName`, so no device is compared as a string, and an unknown kind or
//! a bad index is refused before any work starts. It lives in the graph because a node's
//! placement names one; the runtime opens it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::{fmt, str::FromStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum DeviceKind {
    #[default]
    Cpu,
    Wgpu,
    Cuda,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 3] = [DeviceKind::Cpu, DeviceKind::Wgpu, DeviceKind::Cuda];

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Wgpu => "wgpu",
            DeviceKind::Cuda => "cuda",
        }
    }
}

/// A device by kind and index. CPU indices name logical devices (replicas that each own a
/// thread pool) on the one host CPU; GPU indices name adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DeviceName {
    pub kind: DeviceKind,
    pub index: usize,
}

impl DeviceName {
    /// The host CPU: every default device is this one.
    pub const CPU: DeviceName = DeviceName { kind: DeviceKind::Cpu, index: 0 };

    pub const fn new(kind: DeviceKind, index: usize) -> Self {
        DeviceName { kind, index }
    }

    pub const fn cpu(index: usize) -> Self {
        DeviceName { kind: DeviceKind::Cpu, index }
    }

    pub fn is_cpu(self) -> bool {
        self.kind == DeviceKind::Cpu
    }
}

/// Why a device name was refused, with the forms that are accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device `{name}` ({reason}), expected one of: cpu, wgpu[:N], cuda[:N]")]
pub struct BadDeviceName {
    pub name: String,
    pub reason: &'static str,
}

/// The largest index a name may carry: far past any machine's adapters, and small enough
/// that `cpu:N` replicas are never a way to ask for unbounded thread pools.
pub const MAX_DEVICE_INDEX: usize = 4095;

impl FromStr for DeviceName {
    type Err = BadDeviceName;

    fn from_str(s: &str) -> Result<Self, BadDeviceName> {
        let bad = |reason| BadDeviceName { name: s.to_string(), reason };
        let (kind, index) = match s.split_once(':') {
            Some((k, i)) => (k, Some(i)),
            None => (s, None),
        };
        let kind = DeviceKind::ALL.into_iter().find(|k| k.name() == kind).ok_or_else(|| bad("unknown kind"))?;
        let index = match index {
            None => 0,
            Some(i) => i.parse::<usize>().map_err(|_| bad("the index after ':' must be a number"))?,
        };
        if index > MAX_DEVICE_INDEX {
            return Err(bad("the index is past 4095"));
        }
        Ok(DeviceName { kind, index })
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.index)
    }
}

impl Serialize for DeviceName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceName {
    /// Written as a string in specs and JSON (`"cuda:0"`), as on the command line.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_print_and_refuse() {
        assert_eq!("cpu".parse(), Ok(DeviceName::CPU));
        assert_eq!("wgpu".parse(), Ok(DeviceName::new(DeviceKind::Wgpu, 0)));
        assert_eq!("cuda:1".parse::<DeviceName>().map(|d| d.to_string()), Ok("cuda:1".to_string()));
        assert_eq!("cpu:3".parse(), Ok(DeviceName::cpu(3)));
        let e = "tpu:0".parse::<DeviceName>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("`tpu:0`") && e.contains("expected one of: cpu, wgpu[:N], cuda[:N]"), "{e}");
        assert!("cpu:x".parse::<DeviceName>().is_err());
        assert!("cuda:99999999999".parse::<DeviceName>().is_err());
    }

    #[test]
    fn names_round_trip_through_serde() {
        let d: DeviceName = serde_json::from_str("\"wgpu:2\"").unwrap_or_default();
        assert_eq!(d, DeviceName::new(DeviceKind::Wgpu, 2));
        assert_eq!(serde_json::to_string(&d).ok().as_deref(), Some("\"wgpu:2\""));
        assert!(serde_json::from_str::<DeviceName>("\"gpu\"").is_err());
    }
}
