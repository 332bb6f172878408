//! `TrainSpec::with_epochs`, Keras' `fit(epochs=...)`: an epoch is one pass over the
//! training input as the strategy shards it, in global steps; `max_steps` ends training
//! earlier when it comes first.

mod estimator_common;

use anyhow::{Result, ensure};
use engine_estimator::{
    Estimator, EvalSpec, Mode, RunConfig, TrainSpec,
    input::{AutoShardPolicy, Dataset, InputContext, InputError},
    strategy::{StrategyKind, StrategyOptions},
    train_and_evaluate,
};
use engine_runtime::DeviceName;
use estimator_common::{config, dataset, dir_string, eval_input, linear_model};

/// The ten examples sharded by the input context, two per replica and step.
fn sharded(_: Mode, ctx: &InputContext) -> std::result::Result<Dataset, InputError> {
    dataset()?.shard_by(ctx, AutoShardPolicy::Data)?.batch_for_training(2).map(|d| d.repeat(None))
}

fn estimator(dir: &tempfile::TempDir, kind: StrategyKind) -> Result<Estimator> {
    let mut config: RunConfig = config(&dir_string(dir), 100);
    config.train_distribute = kind;
    config.strategy =
        StrategyOptions { devices: Some(vec![DeviceName::cpu(0), DeviceName::cpu(1)]), ..StrategyOptions::default() };
    Ok(Estimator::new(linear_model, config)?)
}

#[test]
fn epochs_count_passes_over_the_input_as_the_strategy_shards_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // One replica: 10 examples in batches of 2 are 5 steps an epoch.
    let one = estimator(&dir, StrategyKind::Default)?;
    ensure!(one.steps_per_epoch(&sharded)? == 5);
    ensure!(TrainSpec::new(sharded, None).with_epochs(3).last_step(&one)? == Some(15));
    ensure!(TrainSpec::new(sharded, Some(7)).with_epochs(3).last_step(&one)? == Some(7), "max_steps first");
    ensure!(TrainSpec::new(sharded, Some(70)).with_epochs(3).last_step(&one)? == Some(15), "epochs first");
    // Two replicas in sync take 4 examples a step: 2 steps an epoch, the remainder dropped.
    let two = estimator(&tempfile::tempdir()?, StrategyKind::Mirrored)?;
    ensure!(two.steps_per_epoch(&sharded)? == 2);
    ensure!(TrainSpec::new(sharded, None).with_epochs(3).last_step(&two)? == Some(6));

    // Training stops at the end of the last epoch.
    let result = train_and_evaluate(&one, TrainSpec::new(sharded, None).with_epochs(2), EvalSpec::new(eval_input))?;
    ensure!(result["global_step"] == 10.0, "{result:?}");
    Ok(())
}
