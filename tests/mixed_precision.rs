//! `run_config.precision: Bf16Mixed` on the tutorial CNN and the ViT (Fashion-MNIST):
//! the products and convolutions compute in bfloat16 while the variables, the master
//! weights, stay f32 and take f32 updates, and the model learns as it does in f32. The
//! accuracy after the full 2814 steps is a benchmark figure (BENCHMARKS.md), not a test.

use anyhow::{Result, anyhow};
use engine::cli::{
    job,
    spec::{Override, Spec},
};
use engine::estimator::{Estimator, RunConfig, StepLimit};
use engine::runtime::Precision;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The variables' values and the evaluation loss on 2000 test images after `steps` steps.
fn train(file: &str, precision: Precision, steps: u64) -> Result<(BTreeMap<String, Vec<f64>>, f64)> {
    let path = format!("{}/specs/{file}", env!("CARGO_MANIFEST_DIR"));
    let overrides = [Override::parse("train_input.batch_size=32")?, Override::parse("eval_input.batch_size=500")?];
    let spec = Arc::new(Spec::from_file(std::path::Path::new(&path), &overrides)?);
    let config = RunConfig {
        model_dir: format!("memory://mixed-precision-{file}-{precision:?}/model"),
        random_seed: Some(3),
        save_summary_steps: 0,
        log_step_count_steps: 1000,
        precision,
        ..RunConfig::default()
    };
    let estimator = Estimator::new(job::SpecModelFn::new(spec.clone(), 3), config)?;
    let input = job::train_input_fn(&spec)?;
    let outcome = estimator.train(input.as_ref(), Vec::new(), StepLimit::MaxSteps(steps), Vec::new())?;
    if outcome.global_step != steps {
        return Err(anyhow!("{file}: stopped at step {}", outcome.global_step));
    }
    let eval = job::eval_input_fn(&spec)?.ok_or_else(|| anyhow!("{file} has no eval input"))?;
    let result = estimator.evaluate(eval.as_ref(), Some(4), Vec::new(), None, None)?;
    let loss = *result.get("loss").ok_or_else(|| anyhow!("no loss in {result:?}"))?;
    let mut variables = BTreeMap::new();
    for name in estimator.get_variable_names()? {
        variables.insert(name.clone(), estimator.get_variable_value(&name)?.to_f64_vec());
    }
    Ok((variables, loss))
}

fn is_bf16(x: f64) -> bool {
    (x as f32).to_bits() & 0xffff == 0
}

fn check(file: &str, steps: u64) -> Result<()> {
    let (full, full_loss) = train(file, Precision::F32, steps)?;
    let (mixed, mixed_loss) = train(file, Precision::Bf16Mixed, steps)?;
    if full.keys().ne(mixed.keys()) {
        return Err(anyhow!("{file}: variables differ: {:?} vs {:?}", full.keys(), mixed.keys()));
    }
    let mut changed = false;
    for (name, values) in &mixed {
        // A weight stored in bfloat16 would be all bfloat16 values; an f32 one that took
        // f32 updates almost never is (a zero-initialized bias that no update reached
        // would be, so only variables with many values count).
        let rounded = values.iter().filter(|&&x| is_bf16(x)).count();
        if values.len() >= 64 && rounded * 2 > values.len() {
            return Err(anyhow!(
                "{file}: {rounded} of {name}'s {} values are bfloat16: not f32 master weights",
                values.len()
            ));
        }
        changed |= values != &full[name];
    }
    if !changed {
        return Err(anyhow!("{file}: Bf16Mixed trained to the same bits as F32: nothing was computed in bfloat16"));
    }
    // Both have learned (an untrained classifier of 10 classes sits near ln 10 = 2.30)
    // and agree within what bfloat16's rounding moves a short run.
    if !(mixed_loss < 1.5 && (mixed_loss - full_loss).abs() < 0.15 * full_loss.max(0.1)) {
        return Err(anyhow!("{file}: evaluation loss {mixed_loss} in Bf16Mixed, {full_loss} in F32"));
    }
    Ok(())
}

#[test]
fn the_cnn_learns_in_mixed_precision_with_f32_master_weights() -> Result<()> {
    check("fashion_mnist_cnn.ron", 150)
}

#[test]
fn the_vit_learns_in_mixed_precision_with_f32_master_weights() -> Result<()> {
    check("fashion_mnist_vit.ron", 150)
}
