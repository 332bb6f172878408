//! What this machine's CPU is, read once at start: the vector extension the native
//! kernels dispatch on, the cache sizes the GEMM blocks for, and which of the CPUs this
//! process may use share a core. `engine plan` and the training log print it, so that a
//! figure measured on one machine kind can be told from one measured on another.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::OnceLock;

/// The widest vector extension the native kernels use on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 16-float registers: the AVX-512 convolution, pooling and Winograd kernels, and
    /// `gemm`'s x86-v4 kernels.
    Avx512,
    /// 8-float registers with fused multiply-add.
    Avx2,
    /// Neither: the portable loops.
    Portable,
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isa::Avx512 => "AVX-512 (16-float registers)",
            Isa::Avx2 => "AVX2 + FMA (8-float registers)",
            Isa::Portable => "portable loops",
        })
    }
}

/// The most partial sums a reduction makes (see [`HostCpu::sum_parts`]).
const MAX_SUM_PARTS: usize = 16;

/// The host CPU as the kernels and the thread choice see it.
#[derive(Debug, Clone)]
pub struct HostCpu {
    /// `/proc/cpuinfo`'s model name, with its family and model numbers when given.
    pub model: String,
    pub isa: Isa,
    /// Data cache sizes in bytes per level (L1d, L2, L3), as `gemm` detects them for its
    /// blocking.
    pub caches: [usize; 3],
    /// The CPUs this process may run on.
    pub cpus: Vec<usize>,
    /// Physical cores among them: CPUs that are SMT siblings of one another count once.
    pub cores: usize,
    /// The machine's online CPUs, whatever this process's affinity: what the reductions'
    /// partial sums are split by (see [`HostCpu::sum_parts`]).
    pub online: usize,
}

impl HostCpu {
    pub fn get() -> &'static HostCpu {
        static HOST: OnceLock<HostCpu> = OnceLock::new();
        HOST.get_or_init(HostCpu::detect)
    }

    fn detect() -> HostCpu {
        let cpus = allowed_cpus();
        let cores = cores_of(&cpus);
        let info = &*gemm_common::cache::CACHE_INFO;
        let online = online_cpus().unwrap_or(cpus.len()).max(1);
        HostCpu { model: model_name(), isa: isa(), caches: [0, 1, 2].map(|i| info[i].cache_bytes), cpus, cores, online }
    }

    /// How many partial sums a reduction split over the threads makes: one per online CPU
    /// of the machine, at most 16, so that the split, and with it every rounding of a sum,
    /// is the same whatever the pool's thread count (`RAYON_NUM_THREADS`, a `taskset`, or
    /// the thread probe's or a session's timed choice). Two runs of one job on one machine then agree to the
    /// last bit at any thread count; at fewer threads than parts a thread takes several in
    /// turn. The bound keeps a filter gradient's partial buffers few where a container sees
    /// a large host's CPUs; past 16 threads those reductions use 16 of them.
    pub fn sum_parts(&self) -> usize {
        self.online.min(MAX_SUM_PARTS)
    }

    /// Whether some of the allowed CPUs are hyperthreads of one core.
    pub fn has_smt_siblings(&self) -> bool {
        self.cores < self.cpus.len()
    }
}

impl fmt::Display for HostCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [l1, l2, l3] = self.caches.map(kib);
        write!(f, "{}: {}; caches L1d {l1}, L2 {l2}, L3 {l3}; ", self.model, self.isa)?;
        let siblings = if self.has_smt_siblings() { "SMT siblings" } else { "no SMT siblings" };
        write!(
            f,
            "{} CPUs on {} cores ({siblings}); large f32 products: {}",
            self.cpus.len(),
            self.cores,
            crate::kernels::large_f32_kernel()
        )
    }
}

fn kib(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::has_avx512() {
            return Isa::Avx512;
        }
        if crate::kernels::has_avx2() {
            return Isa::Avx2;
        }
    }
    Isa::Portable
}

/// `AMD EPYC (family 26, model 2)` from `/proc/cpuinfo`, or the architecture's name.
fn model_name() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        text.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let name = field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string());
    match (field("cpu family"), field("model")) {
        (Some(family), Some(model)) => format!("{name} (family {family}, model {model})"),
        _ => name,
    }
}

/// The CPUs this process may run on, ascending (its affinity mask on Linux; elsewhere,
/// `0..available_parallelism`).
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
        // its size, and CPU_ISSET reads within it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect();
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// The CPUs online on this machine (not only those this process may use).
fn online_cpus() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf only reads a system parameter.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if n > 0 {
            return usize::try_from(n).ok();
        }
    }
    std::thread::available_parallelism().ok().map(|n| n.get())
}

/// Physical cores among `cpus`: each CPU's SMT sibling list (sysfs) names its core; a CPU
/// whose list cannot be read counts as a core of its own.
fn cores_of(cpus: &[usize]) -> usize {
    cores_by(cpus, |c| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")).ok()
    })
}

fn cores_by(cpus: &[usize], siblings: impl Fn(usize) -> Option<String>) -> usize {
    let core = |c: usize| siblings(c).map(|s| s.trim().to_string()).unwrap_or_else(|| format!("cpu{c}"));
    cpus.iter().map(|&c| core(c)).collect::<BTreeSet<_>>().len().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_count_as_one_core() {
        let ht =
            |c: usize| Some(if c.is_multiple_of(2) { format!("{c},{}\n", c + 1) } else { format!("{},{c}\n", c - 1) });
        assert_eq!(cores_by(&[0, 1, 2, 3], ht), 2);
        assert_eq!(cores_by(&[0, 2], ht), 2);
        assert_eq!(cores_by(&[0, 1], |c| Some(format!("{c}"))), 2);
        assert_eq!(cores_by(&[0, 1], |_| None), 2, "unknown topology: a core each");
    }

    #[test]
    fn the_host_is_described() {
        let host = HostCpu::get();
        assert!(!host.cpus.is_empty() && host.cores >= 1 && host.cores <= host.cpus.len());
        let text = host.to_string();
        assert!(text.contains("caches L1d") && text.contains("cores"), "{text}");
    }
}
