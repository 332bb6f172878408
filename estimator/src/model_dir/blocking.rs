//! Running the object store's futures from the synchronous training loop.
//!
//! One small multi-threaded tokio runtime (one worker) serves every model dir of the process. A runtime
//! rather than `futures::executor::block_on` because the S3 client (hyper) spawns connection tasks that
//! need a tokio reactor; a single shared runtime rather than one per model dir because pooled
//! connections die with the runtime that opened them, and because dropping a runtime inside another
//! async context panics.

use super::error::{ModelDirError, Result};
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::{Builder, Handle, Runtime};

fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("engine-model-dir-io")
        .enable_all()
        .build()
        .map_err(|source| ModelDirError::Runtime { source })?;
    // Two threads may race to build it; the loser's runtime is dropped here, outside any async context.
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// Runs `future` to completion on the shared runtime and returns its output.
///
/// Called from inside some other tokio runtime (a gRPC service, an async test), `block_on` would panic,
/// so there the wait happens on a short-lived helper thread instead.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let runtime = runtime()?;
    if Handle::try_current().is_err() {
        return Ok(runtime.block_on(future));
    }
    std::thread::scope(|scope| match scope.spawn(|| runtime.block_on(future)).join() {
        Ok(output) => Ok(output),
        // The future itself panicked: a bug, not an I/O condition, so let it propagate.
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn works_outside_and_inside_a_runtime() {
        assert_eq!(block_on(async { 1 + 1 }).ok(), Some(2));
        let outer = Builder::new_current_thread().build();
        let Ok(outer) = outer else { panic!("cannot build a test runtime") };
        let inner = outer.block_on(async { block_on(async { 40 + 2 }) });
        assert_eq!(inner.ok(), Some(42));
    }
}
