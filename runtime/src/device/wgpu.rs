//! `wgpu:N`: the Nth graphics adapter, opened before the first kernel needs it.
//!
//! cubecl opens a wgpu device lazily on its first kernel and panics when no adapter
//! matches. Opening it here, when the flag is parsed, turns a missing driver or a wrong
//! index into an error that lists what this machine has, and never lets a run fall back
//! to another device silently.
//!
//! Adapters are numbered as cubecl's `Auto` selection sees them: on the first graphics
//! API with a GPU (Vulkan on Linux), GPUs before software rasterizers (lavapipe), in the
//! driver's order within each type. The device is pinned to that API, so the index names
//! the same adapter whichever API cubecl would have preferred.

use burn::backend::CubeDevice;
use burn::backend::WgpuDeviceKind;
use burn::backend::wgpu::{RuntimeOptions, WgpuBackend, WgpuDevice, graphics::AutoGraphicsApi, try_init_setup, wgpu};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// One adapter this machine offers.
#[derive(Clone, Debug)]
struct Adapter {
    name: String,
    kind: WgpuDeviceKind,
    api: wgpu::Backend,
    driver: String,
}

impl Adapter {
    fn describe(&self, index: usize) -> String {
        let what = match self.kind {
            WgpuDeviceKind::DiscreteGpu(_) => "discrete GPU",
            WgpuDeviceKind::IntegratedGpu(_) => "integrated GPU",
            WgpuDeviceKind::VirtualGpu(_) => "virtual GPU",
            WgpuDeviceKind::Cpu => "software rasterizer on the CPU",
            _ => "adapter",
        };
        let driver = if self.driver.is_empty() { String::new() } else { format!(", driver {}", self.driver) };
        format!("wgpu:{index} = {} ({what}, {:?}{driver})", self.name, self.api)
    }
}

/// A device with its adapter's name, or why it could not be opened.
type Opened = Result<(CubeDevice, String), String>;

/// Opens `wgpu:index` (once per process; later calls get the same device) and returns it
/// with the adapter's name.
pub(super) fn open(index: usize) -> Opened {
    static OPENED: OnceLock<Mutex<BTreeMap<usize, Opened>>> = OnceLock::new();
    let mut opened = OPENED.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    opened.entry(index).or_insert_with(|| open_uncached(index)).clone()
}

fn open_uncached(index: usize) -> Opened {
    let found = adapters();
    if found.is_empty() {
        return Err("no wgpu adapter found on Vulkan, Metal, DX12 or OpenGL: install the GPU's driver with \
                    Vulkan support (NVIDIA: the driver's Vulkan ICD and libvulkan1), or Mesa's lavapipe \
                    (`apt-get install mesa-vulkan-drivers libvulkan1`) for a software device"
            .into());
    }
    let Some(adapter) = found.get(index) else {
        return Err(format!("there is no wgpu:{index}; this machine has {}", list(found)));
    };
    usable(adapter, index)?;
    let device = WgpuDevice::new(adapter.kind.clone()).on(api(adapter.api));
    let options = RuntimeOptions::try_default().map_err(|e| e.to_string())?;
    try_init_setup::<AutoGraphicsApi>(&device, options)
        .map_err(|e| format!("cannot open {}: {e}", adapter.describe(index)))?;
    Ok((CubeDevice::Wgpu(device), adapter.name.clone()))
}

/// Refuses an adapter the engine's kernels cannot run on, saying what was found and what
/// to install. Through OpenGL (Mesa's GL driver, the only API on a machine without a
/// Vulkan driver), wgpu has no 64-bit shader integers, and cubecl's kernels fail to
/// compile at the first step with hundreds of lines of WGSL.
fn usable(adapter: &Adapter, index: usize) -> Result<(), String> {
    if adapter.api != wgpu::Backend::Gl {
        return Ok(());
    }
    Err(format!(
        "{} is reached through OpenGL only, which lacks the 64-bit shader integers (SHADER_INT64) the engine's \
         kernels need: install a Vulkan driver for it (NVIDIA: the driver's Vulkan ICD and libvulkan1; AMD and \
         Intel: `apt-get install mesa-vulkan-drivers libvulkan1`), or Mesa's lavapipe for a software device \
         (the same packages), or train on the CPU (`--device cpu`)",
        adapter.describe(index)
    ))
}

fn list(found: &[Adapter]) -> String {
    found.iter().enumerate().map(|(i, a)| a.describe(i)).collect::<Vec<_>>().join("; ")
}

/// The adapters `wgpu:N` numbers, probed once per process (the Vulkan loader does not
/// like instances created on several threads at once).
fn adapters() -> &'static [Adapter] {
    static FOUND: OnceLock<Vec<Adapter>> = OnceLock::new();
    FOUND.get_or_init(probe_all)
}

fn probe_all() -> Vec<Adapter> {
    let mut software_only = None;
    for api in [wgpu::Backend::Vulkan, wgpu::Backend::Metal, wgpu::Backend::Dx12, wgpu::Backend::Gl] {
        let infos = probe(api);
        if infos.iter().any(|i| i.device_type != wgpu::DeviceType::Cpu) {
            return number(api, infos);
        }
        if software_only.is_none() && !infos.is_empty() {
            software_only = Some((api, infos));
        }
    }
    software_only.map(|(api, infos)| number(api, infos)).unwrap_or_default()
}

fn probe(api: wgpu::Backend) -> Vec<wgpu::AdapterInfo> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: api.into(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    block_on(instance.enumerate_adapters(api.into())).iter().map(wgpu::Adapter::get_info).collect()
}

/// Gives each adapter cubecl's selector for it (the Nth of its type, in driver order),
/// then orders GPUs before software ones.
fn number(api: wgpu::Backend, infos: Vec<wgpu::AdapterInfo>) -> Vec<Adapter> {
    let mut next = [0usize; 5];
    let mut out: Vec<(usize, Adapter)> = infos
        .into_iter()
        .map(|info| {
            let (rank, make): (usize, fn(usize) -> WgpuDeviceKind) = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => (0, WgpuDeviceKind::DiscreteGpu),
                wgpu::DeviceType::IntegratedGpu => (1, WgpuDeviceKind::IntegratedGpu),
                wgpu::DeviceType::VirtualGpu => (2, WgpuDeviceKind::VirtualGpu),
                wgpu::DeviceType::Other => (3, WgpuDeviceKind::Other),
                wgpu::DeviceType::Cpu => (4, |_| WgpuDeviceKind::Cpu),
            };
            let kind = make(next[rank]);
            next[rank] += 1;
            (rank, Adapter { name: info.name, kind, api, driver: info.driver_info })
        })
        .collect();
    out.sort_by_key(|(rank, _)| *rank);
    out.into_iter().map(|(_, a)| a).collect()
}

fn api(b: wgpu::Backend) -> WgpuBackend {
    match b {
        wgpu::Backend::Vulkan => WgpuBackend::Vulkan,
        wgpu::Backend::Metal => WgpuBackend::Metal,
        wgpu::Backend::Dx12 => WgpuBackend::Dx12,
        wgpu::Backend::Gl => WgpuBackend::Gl,
        _ => WgpuBackend::Auto,
    }
}

/// Native wgpu answers enumeration at once; this only unwraps the ready future.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opengl_only_adapter_is_refused_with_what_to_install() {
        let gl = Adapter {
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            kind: WgpuDeviceKind::Cpu,
            api: wgpu::Backend::Gl,
            driver: String::new(),
        };
        let err = usable(&gl, 0).err().unwrap_or_default();
        assert!(err.starts_with("wgpu:0 = llvmpipe") && err.contains("Gl") && err.contains("SHADER_INT64"), "{err}");
        assert!(err.contains("mesa-vulkan-drivers libvulkan1") && err.lines().count() == 1, "{err}");
        let vulkan = Adapter { api: wgpu::Backend::Vulkan, ..gl };
        assert!(usable(&vulkan, 0).is_ok());
    }
}
