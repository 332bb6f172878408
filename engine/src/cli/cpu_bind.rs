//! Disjoint CPU sets for the training tasks of a local cluster.
//!
//! `engine launch` starts every task on one machine. Left to the OS, two single-threaded
//! workers on this 2-CPU host migrate and share caches: 52–60k examples/s on the tutorial
//! CNN against 62–70k with each bound to a CPU of its own (BENCHMARKS.md). Unbound, each
//! task's compute pool would also start one thread per CPU of the machine, so N workers
//! ran N times as many compute threads as there are CPUs. Open MPI binds ranks to cores by
//! default for the same reasons.

use std::process::Command;

/// How `engine launch` places its tasks on this machine's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CpuBind {
    /// Each training task (chief and workers) gets a share of the CPUs the launcher may
    /// use, and as many compute threads (unless `RAYON_NUM_THREADS` is set), when there
    /// are at least as many CPUs as training tasks; ps tasks and the evaluator may run
    /// anywhere.
    #[default]
    Auto,
    /// Every task may run on every CPU, with rayon's default thread count.
    None,
}

pub(super) use engine_runtime::allowed_cpus;

/// `cpus` split into `tasks` contiguous runs, as even as possible (the first runs one
/// longer when it does not divide); `None` with fewer CPUs than tasks, where binding would
/// put two tasks on one CPU and leave none of them better off.
pub(super) fn split(cpus: &[usize], tasks: usize) -> Option<Vec<Vec<usize>>> {
    if tasks == 0 || cpus.len() < tasks {
        return None;
    }
    let (each, extra) = (cpus.len() / tasks, cpus.len() % tasks);
    let mut rest = cpus;
    Some(
        (0..tasks)
            .map(|t| {
                let (run, after) = rest.split_at(each + usize::from(t < extra));
                rest = after;
                run.to_vec()
            })
            .collect(),
    )
}

/// Makes the command's process run on `cpus` only (inherited by all of its threads), with
/// that many compute threads unless the launcher's environment chose a number.
pub(super) fn bind(cmd: &mut Command, cpus: &[usize]) {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        cmd.env("RAYON_NUM_THREADS", cpus.len().to_string());
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the set is built here, before the fork; between fork and exec the closure
        // only calls sched_setaffinity, which is async-signal-safe, and allocates nothing.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_SET(c, &mut set);
            }
            cmd.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// `0-3`, `0,2`: a CPU list as `taskset` and `/proc/*/status` write it.
pub(super) fn describe(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", cpus[i], cpus[j]) } else { cpus[i].to_string() });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_are_split_into_even_contiguous_runs_or_not_at_all() {
        assert_eq!(split(&[0, 1], 2), Some(vec![vec![0], vec![1]]));
        assert_eq!(split(&[0, 1, 2, 3, 4], 2), Some(vec![vec![0, 1, 2], vec![3, 4]]));
        assert_eq!(split(&[2, 3, 6, 7], 4), Some(vec![vec![2], vec![3], vec![6], vec![7]]));
        assert_eq!(split(&[0, 1, 2, 3], 1), Some(vec![vec![0, 1, 2, 3]]));
        assert_eq!(split(&[0, 1], 3), None);
        assert_eq!(split(&[0, 1], 0), None);
        assert_eq!(describe(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(describe(&[3]), "3");
    }

    /// A real child process sees the set it was bound to, and one compute thread per CPU.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_bound_process_runs_on_its_cpus_with_as_many_threads() -> std::io::Result<()> {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        let one = &allowed[allowed.len() - 1..];
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("grep Cpus_allowed_list /proc/self/status; echo threads=$RAYON_NUM_THREADS");
        cmd.env_remove("RAYON_NUM_THREADS");
        bind(&mut cmd, one);
        let out = cmd.output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("Cpus_allowed_list:\t{}\n", describe(one))), "{text}");
        if std::env::var_os("RAYON_NUM_THREADS").is_none() {
            assert!(text.contains("threads=1"), "{text}");
        }
        Ok(())
    }
}
