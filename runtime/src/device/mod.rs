//! Devices by name: `cpu`, `cpu:0`, `wgpu:0`, `cuda:0`.
//!
//! The executor runs on `burn`'s `Dispatch` backend, whose device value picks the concrete
//! backend at run time, so one build can train on the CPU or on a GPU by flag. GPU
//! backends are compiled in only with the cargo features `wgpu` and `cuda`.

use crate::{Result, RuntimeError};
use burn::backend::{DispatchDevice, FlexDevice};
use std::fmt;

mod reads;
pub(crate) use reads::count_read;
pub use reads::device_reads;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Wgpu,
    Cuda,
}

/// A named device the executor can run on.
#[derive(Clone)]
pub struct Device {
    pub kind: DeviceKind,
    pub index: usize,
    inner: DispatchDevice,
    /// What the backend calls the hardware (the adapter's name), for logs and plans.
    name: Option<String>,
    /// The largest buffer the device allocates, where it has a limit below its memory
    /// (wgpu's storage-buffer binding size): a tensor past it fails inside cubecl with an
    /// IO error, so the executor names the node and the limit before the step instead.
    max_buffer: Option<u64>,
}

impl Device {
    pub fn cpu() -> Self {
        Device {
            kind: DeviceKind::Cpu,
            index: 0,
            inner: DispatchDevice::Flex(FlexDevice),
            name: None,
            max_buffer: None,
        }
    }

    /// Parses `cpu`, `cpu:N`, `wgpu[:N]`, `cuda[:N]`. CPU indices name logical devices
    /// (replicas that each own a thread pool) on the one host CPU.
    pub fn parse(spec: &str) -> Result<Self> {
        let err = |reason: &str| RuntimeError::Device { spec: spec.to_string(), reason: reason.to_string() };
        let (name, index) = match spec.split_once(':') {
            Some((n, i)) => (n, i.parse::<usize>().map_err(|_| err("the index after ':' must be a number"))?),
            None => (spec, 0),
        };
        match name {
            "cpu" => Ok(Device { index, ..Device::cpu() }),
            "wgpu" => wgpu_device(index).map_err(|reason| err(&reason)),
            "cuda" => cuda_device(index).map_err(|reason| err(&reason)),
            _ => Err(err("unknown device kind; valid kinds: cpu, wgpu, cuda")),
        }
    }

    pub fn dispatch(&self) -> &DispatchDevice {
        &self.inner
    }

    /// The hardware's own name where the backend reports one (`NVIDIA H100 80GB HBM3`).
    pub fn hardware(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The largest tensor, in bytes, that the device holds in one buffer, where it has
    /// such a limit.
    pub fn max_buffer_bytes(&self) -> Option<u64> {
        self.max_buffer
    }

    /// Whether the device runs work through a queue the host must read back from (a GPU,
    /// or lavapipe): the CPU computes in place, and nothing of it is read back.
    pub fn is_queued(&self) -> bool {
        !matches!(self.inner, DispatchDevice::Flex(_))
    }
}

/// What a cubecl device allocates at most in one go (its page size), read from the
/// runtime the device was opened on.
#[cfg(feature = "wgpu")]
fn max_buffer(dev: &burn::backend::CubeDevice) -> u64 {
    dev.client().properties().memory.max_page_size
}

#[cfg(feature = "wgpu")]
mod wgpu;

#[cfg(feature = "wgpu")]
fn wgpu_device(index: usize) -> std::result::Result<Device, String> {
    let (dev, name) = wgpu::open(index)?;
    let max_buffer = Some(max_buffer(&dev));
    Ok(Device { kind: DeviceKind::Wgpu, index, inner: DispatchDevice::Cube(dev), name: Some(name), max_buffer })
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device(_: usize) -> std::result::Result<Device, String> {
    Err("this build has no wgpu backend (rebuild with `--features wgpu`)".into())
}

#[cfg(feature = "cuda")]
mod cuda;

#[cfg(feature = "cuda")]
fn cuda_device(index: usize) -> std::result::Result<Device, String> {
    let (dev, name) = cuda::open(index)?;
    let max_buffer = Some(cuda::initialize(&dev, index)?);
    Ok(Device { kind: DeviceKind::Cuda, index, inner: DispatchDevice::Cube(dev), name: Some(name), max_buffer })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(_: usize) -> std::result::Result<Device, String> {
    Err("this build has no cuda backend (rebuild with `--features cuda`)".into())
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Wgpu => "wgpu",
            DeviceKind::Cuda => "cuda",
        };
        write!(f, "{kind}:{}", self.index)
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_refuses_unknown_ones() {
        assert_eq!(Device::parse("cpu").map(|d| d.to_string()).ok(), Some("cpu:0".into()));
        assert_eq!(Device::parse("cpu:1").map(|d| d.index).ok(), Some(1));
        let e = Device::parse("tpu:0").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("valid kinds: cpu, wgpu, cuda"), "{e}");
        assert!(Device::parse("cpu:x").is_err());
    }

    #[cfg(not(feature = "wgpu"))]
    #[test]
    fn a_build_without_wgpu_says_how_to_get_it() {
        let e = Device::parse("wgpu:0").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("rebuild with `--features wgpu`"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_cuda_says_how_to_get_it() {
        let e = Device::parse("cuda:0").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("rebuild with `--features cuda`"), "{e}");
    }

    /// With the feature, on a machine without the NVIDIA driver (CI's), `cuda:0` is an
    /// error that says what is missing, not cubecl's panic at the first kernel.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_without_a_driver_says_what_is_missing() {
        let loaded = std::path::Path::new("/proc/driver/nvidia").exists();
        match Device::parse("cuda:0") {
            Ok(d) => assert!(loaded, "cuda:0 opened as {d} with no NVIDIA driver loaded"),
            Err(e) => {
                let e = e.to_string();
                assert!(loaded || e.contains("libcuda.so cannot be loaded"), "{e}");
            }
        }
    }
}
