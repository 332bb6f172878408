//! Devices by name: `cpu`, `cpu:0`, `wgpu:0`, `cuda:0`.
//!
//! The executor runs on `burn`'s `Dispatch` backend, whose device value picks the concrete
//! backend at run time, so one build can train on the CPU or on a GPU by flag. GPU
//! backends are compiled in only with the cargo features `wgpu` and `cuda`.

use crate::{Precision, Result, RuntimeError};
use burn::backend::{DispatchDevice, FlexDevice};
use std::fmt;

#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
pub(crate) mod cube;
#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
pub(crate) mod guarded;
/// Without a GPU backend no value lives in a cubecl buffer (and no step is replayed). Under
/// burn's `fusion` a device tensor is a handle into fusion's queue, not a buffer, so these
/// refuse too: a step is not recorded (fusion batches the launches itself).
#[cfg(not(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion"))))]
pub(crate) mod cube {
    use crate::value::T;

    pub(crate) fn same_buffer(_: &T, _: &T) -> bool {
        false
    }

    pub(crate) fn write(_: &T, _: burn::tensor::TensorData) -> bool {
        false
    }

    pub(crate) fn copy(_: &crate::Value, _: &crate::Value) -> bool {
        false
    }
}
#[cfg(not(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion"))))]
pub(crate) mod guarded {
    pub(crate) fn guardable(_: &crate::Value, _: &crate::Value, _: &crate::value::T) -> bool {
        false
    }

    pub(crate) fn copy_if_finite(_: &crate::Value, _: &crate::Value, _: &crate::value::T) -> bool {
        false
    }
}
mod reads;

#[cfg(test)]
mod test_devices;
pub use engine_graph::{BadDeviceName, DeviceKind, DeviceName, MAX_DEVICE_INDEX};
pub(crate) use reads::count_read;
pub use reads::device_reads;
#[cfg(test)]
pub(crate) use test_devices::test_devices;

/// An opened device the executor can run on.
#[derive(Clone)]
pub struct Device {
    name: DeviceName,
    inner: DispatchDevice,
    /// What the backend calls the hardware (the adapter's name), for logs and plans.
    hardware: Option<String>,
    /// The largest buffer the device allocates, where it has a limit below its memory
    /// (wgpu's storage-buffer binding size): a tensor past it fails inside cubecl with an
    /// IO error, so the executor names the node and the limit before the step instead.
    max_buffer: Option<u64>,
}

impl Device {
    pub fn cpu() -> Self {
        Device { name: DeviceName::CPU, inner: DispatchDevice::Flex(FlexDevice), hardware: None, max_buffer: None }
    }

    /// Opens the device `name` stands for: a GPU's adapter and runtime are created here, so
    /// a missing driver or a build without the backend is an error naming the device.
    pub fn open(name: DeviceName) -> Result<Self> {
        let err = |reason: String| RuntimeError::Device { spec: name.to_string(), reason };
        match name.kind {
            DeviceKind::Cpu => Ok(Device { name, ..Device::cpu() }),
            DeviceKind::Wgpu => wgpu_device(name.index).map_err(err),
            DeviceKind::Cuda => cuda_device(name.index).map_err(err),
        }
    }

    pub fn name(&self) -> DeviceName {
        self.name
    }

    pub fn kind(&self) -> DeviceKind {
        self.name.kind
    }

    pub fn index(&self) -> usize {
        self.name.index
    }

    pub fn dispatch(&self) -> &DispatchDevice {
        &self.inner
    }

    /// The hardware's own name where the backend reports one (`NVIDIA H100 80GB HBM3`).
    pub fn hardware(&self) -> Option<&str> {
        self.hardware.as_deref()
    }

    /// Whether this device's matmul and convolution kernels are chosen by measuring
    /// cubecl's candidates on first use of each shape (the `autotune` feature): what makes a
    /// first step take minutes on `cuda`.
    pub fn tunes_kernels(&self) -> bool {
        cfg!(feature = "autotune") && self.is_queued()
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

    /// Refuses a precision the device cannot compute in, when a step is built rather than
    /// at its first product. `Bf16Mixed` needs bfloat16 arithmetic: every CPU has it
    /// (flex converts through f32), `cuda` from Ampere on, `wgpu` only where the Vulkan
    /// driver offers `VK_KHR_shader_bfloat16` (WGSL has no bfloat16).
    pub fn check_precision(&self, precision: Precision) -> Result<()> {
        use burn::backend::Backend;
        let Some(dtype) = precision.contraction_dtype() else { return Ok(()) };
        if burn::backend::Dispatch::supports_dtype(&self.inner, dtype.into()) {
            if !self.is_queued() {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| {
                    log::warn!(
                        "run_config.precision {precision:?} on the CPU: no CPU kernel of ours multiplies \
                         bfloat16, so products and convolutions convert through f32 (several times \
                         slower than F32); it is here to check a GPU run's numerics"
                    )
                });
            }
            return Ok(());
        }
        Err(RuntimeError::Device {
            spec: self.name.to_string(),
            reason: format!(
                "run_config.precision {precision:?} multiplies in bfloat16, which {} cannot \
                 compute in; use F32 on this device",
                self.hardware().unwrap_or("this device")
            ),
        })
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
    Ok(Device {
        name: DeviceName::new(DeviceKind::Wgpu, index),
        inner: DispatchDevice::Cube(dev),
        hardware: Some(name),
        max_buffer,
    })
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
    Ok(Device {
        name: DeviceName::new(DeviceKind::Cuda, index),
        inner: DispatchDevice::Cube(dev),
        hardware: Some(name),
        max_buffer,
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(_: usize) -> std::result::Result<Device, String> {
    Err("this build has no cuda backend (rebuild with `--features cuda`)".into())
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.name, f)
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

    fn open(name: &str) -> Result<Device> {
        Device::open(name.parse::<DeviceName>()?)
    }

    #[test]
    fn opens_cpu_devices_by_name() {
        assert_eq!(open("cpu").map(|d| d.to_string()).ok(), Some("cpu:0".into()));
        assert_eq!(open("cpu:1").map(|d| d.index()).ok(), Some(1));
    }

    #[cfg(not(feature = "wgpu"))]
    #[test]
    fn a_build_without_wgpu_says_how_to_get_it() {
        let e = open("wgpu:0").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("rebuild with `--features wgpu`"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_cuda_says_how_to_get_it() {
        let e = open("cuda:0").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("rebuild with `--features cuda`"), "{e}");
    }

    /// With the feature, on a machine without the NVIDIA driver (CI's), `cuda:0` is an
    /// error that says what is missing, not cubecl's panic at the first kernel.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_without_a_driver_says_what_is_missing() {
        let loaded = std::path::Path::new("/proc/driver/nvidia").exists();
        match open("cuda:0") {
            Ok(d) => assert!(loaded, "cuda:0 opened as {d} with no NVIDIA driver loaded"),
            Err(e) => {
                let e = e.to_string();
                assert!(loaded || e.contains("libcuda.so cannot be loaded"), "{e}");
            }
        }
    }
}
