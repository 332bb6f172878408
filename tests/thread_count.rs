//! The compute threads change how fast a step runs, never what it computes: each model of
//! `specs/` that reads the IDX files (the PNG and CSV specs train the same kinds of layers
//! on converted copies), trained for a few steps in f32 on pools of 1, 2 and 3 threads,
//! ends with the same variables to the last bit. The reductions split their partial sums by the
//! machine's CPUs, not by the pool's threads (`HostCpu::sum_parts`); before that, a
//! filter gradient or a batch statistic rounded differently at each thread count, so the
//! thread count could not be chosen by timing (issue 41, item 4) without two processes of
//! one job, or a run and its evaluation, disagreeing in the seventh digit.

use anyhow::{Result, anyhow};
use engine::cli::{
    job,
    spec::{Override, Spec},
};
use engine::estimator::{Estimator, RunConfig, StepLimit};
use std::collections::BTreeMap;
use std::sync::Arc;

const STEPS: u64 = 3;

/// Every variable's values as bits, after `STEPS` steps on a pool of `threads`.
fn train(file: &str, batch: usize, threads: usize) -> Result<BTreeMap<String, Vec<u64>>> {
    let path = format!("{}/specs/{file}", env!("CARGO_MANIFEST_DIR"));
    let overrides = [
        Override::parse(&format!("train_input.batch_size={batch}"))?,
        Override::parse("train_input.shuffle_buffer=100")?,
    ];
    let spec = Arc::new(Spec::from_file(std::path::Path::new(&path), &overrides)?);
    let config = RunConfig {
        model_dir: format!("memory://thread-count-{file}-{threads}/model"),
        random_seed: Some(7),
        save_summary_steps: 0,
        log_step_count_steps: 1000,
        ..RunConfig::default()
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    // The single-replica session runs its kernels on the calling thread: inside
    // `install`, they split their work over this pool and see its thread count.
    pool.install(|| {
        let estimator = Estimator::new(job::SpecModelFn::new(spec.clone(), 7), config)?;
        let input = job::train_input_fn(&spec)?;
        let outcome = estimator.train(input.as_ref(), Vec::new(), StepLimit::MaxSteps(STEPS), Vec::new())?;
        if outcome.global_step != STEPS {
            return Err(anyhow!("{file}: stopped at step {}", outcome.global_step));
        }
        let mut out = BTreeMap::new();
        for name in estimator.get_variable_names()? {
            let bits = estimator.get_variable_value(&name)?.to_f64_vec().iter().map(|v| v.to_bits()).collect();
            out.insert(name, bits);
        }
        Ok(out)
    })
}

fn check(file: &str, batch: usize) -> Result<()> {
    let one = train(file, batch, 1)?;
    for threads in [2, 3] {
        let many = train(file, batch, threads)?;
        if one.keys().ne(many.keys()) {
            return Err(anyhow!("{file}: variables differ: {:?} vs {:?}", one.keys(), many.keys()));
        }
        for (name, want) in &one {
            let got = &many[name];
            let differing = want.iter().zip(got).filter(|(a, b)| a != b).count();
            if differing > 0 {
                return Err(anyhow!(
                    "{file}: {name} differs in {differing} of {} values between 1 and {threads} threads",
                    want.len()
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn the_tutorial_cnn_is_the_same_at_any_thread_count() -> Result<()> {
    check("fashion_mnist_cnn.ron", 64)
}

#[test]
fn the_mlp_is_the_same_at_any_thread_count() -> Result<()> {
    check("fashion_mnist_mlp.ron", 128)
}

#[test]
fn the_residual_model_is_the_same_at_any_thread_count() -> Result<()> {
    check("fashion_mnist_residual.ron", 32)
}

#[test]
fn the_resnet_is_the_same_at_any_thread_count() -> Result<()> {
    check("fashion_mnist_resnet.ron", 32)
}

#[test]
fn the_vit_is_the_same_at_any_thread_count() -> Result<()> {
    check("fashion_mnist_vit.ron", 32)
}

#[test]
fn the_vgg_is_the_same_at_any_thread_count() -> Result<()> {
    check("fashion_mnist_vgg.ron", 8)
}
