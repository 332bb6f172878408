//! The items of cubecl-llvm 0.11.3 that cubecl-cuda 0.11.3 names, with no LLVM behind
//! them (see README.md). cubecl-cuda reaches the LLVM backend only when its `cpp` feature is
//! off; the engine's `cuda` feature turns it on, so `PlironCompiler::compile` below is
//! never called in an engine build, and says why if another build calls it.

use cubecl_core::ir::nvidia::SmArch;
use cubecl_core::prelude::KernelDefinition;
use cubecl_runtime::compiler::{CompilationError, Compiler};
use cubecl_runtime::kernel::BufferIOAttr;

pub mod nvptx {
    pub mod ptx_version {
        use core::fmt;

        /// A PTX ISA version, as `ptx87` names 8.7. Only the LLVM backend reads it; the
        /// runtime still computes it from the driver for its cache namespace.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct PtxVersion(u32);

        /// (first driver, newest PTX it loads), newest first: CUDA's release notes.
        const DRIVER_PTX: &[(i32, u32)] = &[
            (13000, 90),
            (12090, 88),
            (12080, 87),
            (12070, 86),
            (12060, 85),
            (12050, 85),
            (12040, 84),
            (12030, 83),
            (12020, 82),
            (12010, 81),
            (12000, 80),
            (11080, 78),
            (10000, 63),
        ];

        impl PtxVersion {
            /// The newest version a driver loads (`cuDriverGetVersion`'s number: 12.8 is
            /// 12080); `None` below CUDA 10.
            pub fn for_driver(driver: i32) -> Option<Self> {
                DRIVER_PTX.iter().find(|(first, _)| driver >= *first).map(|(_, ptx)| Self(*ptx))
            }
        }

        impl fmt::Display for PtxVersion {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "ptx{}", self.0)
            }
        }
    }
}

pub mod shared {
    pub mod lowered_features {
        use cubecl_core::ir::DeviceProperties;

        /// The GPU a device's features are narrowed for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            Nvptx,
            AmdGpu,
        }

        /// Narrows what a device advertises to what the LLVM backend lowers. cubecl-cuda
        /// calls it only when that backend compiles; with NVRTC compiling, the device keeps
        /// everything the C++ backend supports.
        pub fn restrict_features(_: &mut DeviceProperties, _: GpuTarget) {}
    }
}

/// Which code the (absent) LLVM backend would emit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LlvmTarget {
    #[default]
    Cpu,
    AmdGpu,
    Nvptx,
}

impl LlvmTarget {
    pub fn is_gpu(self) -> bool {
        !matches!(self, LlvmTarget::Cpu)
    }
}

#[derive(Clone, Debug, Default)]
pub struct PlironOptions {
    pub cpu_buffer_alignment: Option<u32>,
    pub sm_arch: Option<SmArch>,
    pub ptx_version: Option<nvptx::ptx_version::PtxVersion>,
    pub grid_constants: bool,
    /// cubecl-cuda sets this field (to `None`); the real type is an AMD architecture.
    pub arch: Option<()>,
}

/// What the LLVM backend would hand cubecl-cuda: PTX text and the launch's needs.
#[derive(Clone, Debug)]
pub struct NvptxModule {
    pub ptx: Vec<core::ffi::c_char>,
    pub entrypoint: String,
    pub ir: String,
    pub shared_memory_size: usize,
    pub io: Vec<BufferIOAttr>,
}

#[derive(Clone, Debug)]
pub enum PlironArtifact {
    NvptxCode(NvptxModule),
}

impl core::fmt::Display for PlironArtifact {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PlironArtifact::NvptxCode(module) => f.write_str(&module.ir),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct PlironCompiler {
    pub target: LlvmTarget,
}

impl Compiler for PlironCompiler {
    type Representation = PlironArtifact;
    type CompilationOptions = PlironOptions;

    fn compile(&mut self, _: KernelDefinition, _: &PlironOptions) -> Result<PlironArtifact, CompilationError> {
        Err(CompilationError::Generic {
            reason: "this build replaced cubecl-llvm with a stand-in that has no LLVM (see the engine's \
                     vendor/cubecl-llvm/README.md): enable cubecl-cuda's `cpp` feature to compile kernels \
                     with NVRTC"
                .into(),
            backtrace: Default::default(),
        })
    }

    fn buffer_io(repr: &PlironArtifact) -> Option<Vec<BufferIOAttr>> {
        match repr {
            PlironArtifact::NvptxCode(module) => Some(module.io.clone()),
        }
    }

    fn extension(&self) -> &'static str {
        "ll"
    }

    fn lang_tag(&self) -> &'static str {
        "llvm"
    }
}
