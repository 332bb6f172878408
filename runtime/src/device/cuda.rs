//! `cuda:N`: the Nth CUDA device, checked when the flag is parsed.
//!
//! cubecl opens a CUDA device on its first kernel and panics when the driver or NVRTC
//! cannot be loaded, or when the index is past the last device. Asking the driver here
//! turns each of those into an error that says what is missing or lists the devices, and
//! never lets a run fall back to another device. Both libraries are loaded at run time
//! (cudarc's dynamic loading), so a `--features cuda` binary starts on any machine.

use burn::backend::{CubeDevice, CudaDevice};
use cudarc::driver::result;

/// Opens `cuda:index` and returns it with the device's name.
pub(super) fn open(index: usize) -> Result<(CubeDevice, String), String> {
    // SAFETY: only tries to load the library by its usual names; no symbol is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("the NVIDIA driver's libcuda.so cannot be loaded: install the NVIDIA driver \
                    (a `--features cuda` build needs no CUDA at build time, but the driver and \
                    NVRTC at run time)"
            .into());
    }
    result::init().map_err(|e| match e.0 {
        cudarc::driver::sys::CUresult::CUDA_ERROR_STUB_LIBRARY => stub_library(&loaded_libcuda()),
        _ => format!("the CUDA driver did not initialize: {e}"),
    })?;
    let count = result::device::get_count().map_err(|e| format!("the CUDA driver cannot count its devices: {e}"))?;
    let names: Vec<String> = (0..count)
        .map(|i| result::device::get(i).and_then(result::device::get_name).unwrap_or_else(|e| format!("unnamed ({e})")))
        .collect();
    let Some(name) = names.get(index) else {
        let found = if names.is_empty() {
            "no CUDA device".to_string()
        } else {
            names.iter().enumerate().map(|(i, n)| format!("cuda:{i} = {n}")).collect::<Vec<_>>().join("; ")
        };
        return Err(format!("there is no cuda:{index}; this machine has {found}"));
    };
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("NVRTC (libnvrtc.so) cannot be loaded: cuda:N compiles its kernels with NVRTC when \
                    they first run; install the CUDA toolkit's cuda-nvrtc package, or put the lib \
                    directory of the nvidia-cuda-nvrtc wheel on LD_LIBRARY_PATH"
            .into());
    }
    Ok((CubeDevice::Cuda(CudaDevice::new(index)), name.clone()))
}

/// The error for the CUDA toolkit's stub `libcuda.so` (`targets/.../lib/stubs`), which
/// links programs on machines without a driver and answers every call with
/// `CUDA_ERROR_STUB_LIBRARY`: it was found before the driver's, usually because the stubs
/// folder is on `LD_LIBRARY_PATH`.
fn stub_library(loaded: &str) -> String {
    format!(
        "the libcuda.so that was loaded ({loaded}) is the CUDA toolkit's stub, not the NVIDIA driver's \
         (CUDA_ERROR_STUB_LIBRARY): take the toolkit's `stubs` folder off LD_LIBRARY_PATH so that the driver's \
         libcuda.so is found (`ldconfig -p | grep libcuda` lists the driver's)"
    )
}

/// Where this process loaded `libcuda.so` from, as `/proc/self/maps` says.
fn loaded_libcuda() -> String {
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|p| p.contains("libcuda.so"))
                .map(String::from)
        })
        .unwrap_or_else(|| "its path unknown".into())
}

/// Starts cubecl's CUDA runtime on the device now, rather than at the first kernel, and
/// returns the largest buffer it allocates. cubecl reports a failure to create the context
/// or its streams by panicking; that panic becomes this device's error.
pub(super) fn initialize(dev: &CubeDevice, index: usize) -> Result<u64, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.client().properties().memory.max_page_size)).map_err(
        |panic| {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            format!("cubecl could not start cuda:{index}: {why}")
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stub_library_is_named_with_its_path_and_the_fix() {
        let e = stub_library("/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so");
        assert!(e.contains("(/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so)"), "{e}");
        assert!(e.contains("CUDA_ERROR_STUB_LIBRARY") && e.contains("off LD_LIBRARY_PATH"), "{e}");
        // Nothing is loaded in this test process: the path is said to be unknown.
        assert!(loaded_libcuda().contains("libcuda.so") || loaded_libcuda() == "its path unknown");
    }
}
