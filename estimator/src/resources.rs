//! What this machine offers a job: memory and cores. Every size a spec can write (a batch,
//! a prefetch depth, a layer's width) is bounded by these, so that a typo is an error naming
//! the field instead of an allocation failure, an abort or the kernel's OOM killer.

use crate::input::MAX_PARALLEL_CALLS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// Memory the process may use (the smaller of the machine's and its cgroup's limit).
    pub memory_bytes: u64,
    pub cores: usize,
}

impl Resources {
    /// Read from `/proc/meminfo`, the cgroup (v2) memory limit and the scheduler's CPU set.
    pub fn of_this_machine() -> Resources {
        let total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map(|kib| kib * 1024);
        let cgroup =
            std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|t| t.trim().parse::<u64>().ok());
        let memory_bytes = match (total, cgroup) {
            (Some(t), Some(c)) => t.min(c),
            (Some(m), None) | (None, Some(m)) => m,
            // Unknown: assume a small machine rather than none at all.
            (None, None) => 4 << 30,
        };
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Resources { memory_bytes, cores }
    }

    /// Threads decoding input in parallel: more than this many per core only adds contention.
    pub fn max_parallel_calls(&self) -> usize {
        (16 * self.cores).min(MAX_PARALLEL_CALLS)
    }

    /// What the input pipeline's batches in flight (decoded or waiting) may take: half the
    /// memory, the other half being the model's.
    pub fn max_batches_bytes(&self) -> u64 {
        self.memory_bytes / 2
    }

    /// What a model's variables and activations may take: 90 % of the memory (the rest is
    /// the process, the input and the page cache).
    pub fn max_model_bytes(&self) -> u64 {
        self.memory_bytes / 10 * 9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_memory_and_cores() {
        let r = Resources::of_this_machine();
        assert!(r.memory_bytes >= 64 << 20 && r.cores >= 1, "{r:?}");
        assert!(r.max_parallel_calls() >= 16 && r.max_model_bytes() < r.memory_bytes);
    }
}
