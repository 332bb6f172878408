//! `engine run` with its model dir on S3 (moto's server on 127.0.0.1, reached through the
//! usual `AWS_*` environment variables with fake keys): checkpoints, state file and event
//! files land in the bucket, `engine checkpoints` and `engine eval` read them back, and a
//! second run resumes from S3.

mod common;

use anyhow::{Result, ensure};
use common::{Moto, Run, engine_command, finished, printed_dict, run_args, spec_path, strs};
use engine::estimator::{
    checkpoint::{CheckpointManager, CheckpointState},
    model_dir::{ModelDir, S3Options},
};

const URL: &str = "s3://models/jobs/cnn";

fn engine_with(moto: &Moto, args: &[&str]) -> Result<Run> {
    let mut command = engine_command(args)?;
    command.envs(moto.env());
    finished(command.output()?)
}

#[test]
fn a_run_on_s3_checkpoints_summarizes_and_resumes() -> Result<()> {
    let moto = Moto::start()?;
    moto.create_bucket("models")?;
    let extra = ["--set", "run_config.save_checkpoints_steps=10", "--set", "run_config.keep_checkpoint_max=2"];
    let first = engine_with(&moto, &strs(&run_args(URL, 30, &extra)))?.ok()?;
    ensure!(
        first.stderr.contains("Saving checkpoints for 30 into s3://models/jobs/cnn/model.ckpt"),
        "{}",
        first.stderr
    );
    ensure!(printed_dict(&first.stdout)?["global_step"] == 30.0, "{}", first.stdout);

    // What landed in the bucket, seen by a client of our own.
    let options = S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some("us-east-1".into()),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: Some(true),
    };
    let dir = ModelDir::open_with(URL, Some(&options))?;
    let names: Vec<String> = dir.list("")?.into_iter().map(|i| i.name).collect();
    let checkpoints: Vec<&String> = names.iter().filter(|n| n.starts_with("model.ckpt-")).collect();
    ensure!(checkpoints == ["model.ckpt-20.safetensors", "model.ckpt-30.safetensors"], "{names:?}");
    ensure!(names.iter().any(|n| n.starts_with("events.out.tfevents.")), "{names:?}");
    ensure!(names.iter().any(|n| n.starts_with("eval/events.out.tfevents.")), "{names:?}");
    let state = CheckpointState::parse(&String::from_utf8(dir.get("checkpoint")?)?, URL)?;
    ensure!(state.model_checkpoint_path == "model.ckpt-30");
    ensure!(state.all_model_checkpoint_paths == ["model.ckpt-20", "model.ckpt-30"], "{state:?}");

    // `engine checkpoints` and `engine eval` against the bucket.
    let listed = engine_with(&moto, &["checkpoints", URL])?.ok()?;
    let rows: Vec<&str> = listed.stdout.lines().filter(|l| l.starts_with("model.ckpt-")).collect();
    ensure!(
        rows.len() == 2 && rows[1].starts_with("model.ckpt-30") && rows[1].ends_with("latest"),
        "{}",
        listed.stdout
    );
    let spec = spec_path("fashion_mnist_cnn.ron");
    let eval = engine_with(&moto, &["eval", &spec, "--model-dir", URL, "--set", "eval_spec.steps=1"])?.ok()?;
    ensure!(printed_dict(&eval.stdout)? == printed_dict(&first.stdout)?, "{} vs {}", eval.stdout, first.stdout);

    // A new process resumes from the checkpoint on S3.
    let second = engine_with(&moto, &strs(&run_args(URL, 40, &extra)))?.ok()?;
    ensure!(second.stderr.contains("Restoring parameters from model.ckpt-30"), "{}", second.stderr);
    ensure!(printed_dict(&second.stdout)?["global_step"] == 40.0, "{}", second.stdout);
    let manager = CheckpointManager::new(ModelDir::open_with(URL, Some(&options))?, 0, None);
    let kept: Vec<u64> = manager.list()?.iter().map(|c| c.step).collect();
    ensure!(kept == [30, 40], "{kept:?}");
    let restored = manager.restore_latest_valid()?.ok_or_else(|| anyhow::anyhow!("nothing to restore"))?;
    ensure!(restored.checkpoint.tensors["global_step"].scalar_value() == Some(40.0));
    Ok(())
}

/// Training and evaluation files on S3 (`train_input.images: "s3://data/..."`): fetched
/// into a local cache once, then read as local files; the run trains and evaluates on
/// them like on the local copies.
#[test]
fn training_and_evaluation_files_can_live_on_s3() -> Result<()> {
    let moto = Moto::start()?;
    moto.create_bucket("data")?;
    moto.create_bucket("models")?;
    let options = S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some("us-east-1".into()),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: Some(true),
    };
    let data = ModelDir::open_with("s3://data/fashion-mnist", Some(&options))?;
    let local = "/usr/share/datasets/fashion-mnist";
    let files = [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ];
    for file in files {
        data.put(file, std::fs::read(format!("{local}/{file}"))?)?;
    }
    let sets: Vec<String> = [
        ("train_input.images", files[0]),
        ("train_input.labels", files[1]),
        ("eval_input.images", files[2]),
        ("eval_input.labels", files[3]),
    ]
    .iter()
    .flat_map(|(field, file)| ["--set".to_string(), format!("{field}=s3://data/fashion-mnist/{file}")])
    .chain(["--set".to_string(), "eval_spec.steps=2".to_string()])
    .collect();
    let extra: Vec<&str> = sets.iter().map(String::as_str).collect();
    let run = engine_with(&moto, &strs(&run_args("s3://models/jobs/remote-data", 5, &extra)))?.ok()?;
    ensure!(printed_dict(&run.stdout)?["global_step"] == 5.0, "{}", run.stdout);
    ensure!(run.stderr.contains("Fetching s3://data/fashion-mnist/train-images-idx3-ubyte.gz"), "{}", run.stderr);
    Ok(())
}
