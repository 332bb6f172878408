//! Checkpoints through a real S3 API: moto's standalone server on 127.0.0.1, started by the test and
//! killed at the end even when the test fails.

use anyhow::{Context, Result, bail, ensure};
use engine_estimator::checkpoint::{CheckpointManager, CheckpointMeta, STATE_FILE};
use engine_estimator::model_dir::{ModelDir, PutOutcome, S3Options};
use engine_graph::HostTensor;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$ENGINE_TEST_PYTHON`, else the repository's `.venv`; missing is a failure, never a skip.
fn python() -> Result<PathBuf> {
    let python = match std::env::var_os("ENGINE_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => repo_root().join(".venv/bin/python"),
    };
    ensure!(
        python.exists(),
        "Python for tests not found at {}: run scripts/setup-test-env.sh (or set ENGINE_TEST_PYTHON)",
        python.display()
    );
    Ok(python)
}

/// The moto server; killed and reaped on drop, so a failing assertion cannot leak it.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_status(port: u16, request: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

impl Moto {
    fn start() -> Result<Moto> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(python()?)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting moto.server (is moto[server] installed? run scripts/setup-test-env.sh)")?;
        let mut moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(60);
        let probe = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        while http_status(port, &probe).is_none() {
            if let Some(status) = moto.child.try_wait()? {
                bail!("moto.server exited with {status} before answering on port {port}");
            }
            ensure!(Instant::now() < deadline, "moto.server did not answer on port {port} within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(moto)
    }

    /// moto does not check signatures, so a bare HTTP PUT creates the bucket.
    fn create_bucket(&self, bucket: &str) -> Result<()> {
        let port: u16 = self.endpoint.rsplit(':').next().context("port")?.parse()?;
        let request = format!(
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let status = http_status(port, &request).context("no answer to CreateBucket")?;
        ensure!(status == 200, "CreateBucket {bucket} answered {status}");
        Ok(())
    }

    fn options(&self) -> S3Options {
        S3Options {
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".into()),
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            allow_http: Some(true),
        }
    }
}

fn variables(step: u64) -> Result<BTreeMap<String, HostTensor>> {
    let mut vars = BTreeMap::new();
    vars.insert("conv/kernel".into(), HostTensor::f32(vec![2, 2], vec![step as f32, -1.0, 0.5, 2.0])?);
    vars.insert("conv/kernel/Adam_1".into(), HostTensor::f32(vec![2, 2], vec![1e-3; 4])?);
    vars.insert("global_step".into(), HostTensor::scalar_i64(step as i64));
    Ok(vars)
}

#[test]
fn checkpoints_on_s3_save_restore_collect_and_resume() -> Result<()> {
    let moto = Moto::start()?;
    moto.create_bucket("models")?;
    let options = moto.options();
    let url = "s3://models/jobs/mnist";

    // Conditional puts against the real API.
    let dir = ModelDir::open_with(url, Some(&options))?;
    let PutOutcome::Written(first) = dir.put_if_absent("probe", b"1".to_vec())? else { bail!("create refused") };
    assert_eq!(dir.put_if_absent("probe", b"2".to_vec())?, PutOutcome::Conflict);
    assert!(matches!(dir.put_if_match("probe", b"3".to_vec(), &first)?, PutOutcome::Written(_)));
    assert_eq!(dir.put_if_match("probe", b"4".to_vec(), &first)?, PutOutcome::Conflict);
    assert_eq!(dir.get("probe")?, b"3");
    dir.delete("probe")?;

    // Save five, keep three.
    let meta = |step: u64| CheckpointMeta {
        fingerprint: "fp-s3".into(),
        input_state: format!("{{\"step\":{step}}}"),
        examples_seen: None,
    };
    let chief = CheckpointManager::new(dir.clone(), 3, None);
    for step in [10, 20, 30, 40, 50] {
        chief.save(step, &variables(step)?, &meta(step))?;
    }
    let names: Vec<String> = dir.list("")?.into_iter().map(|i| i.name).collect();
    assert_eq!(
        names,
        vec!["checkpoint", "model.ckpt-30.safetensors", "model.ckpt-40.safetensors", "model.ckpt-50.safetensors"]
    );
    let state = String::from_utf8(dir.get(STATE_FILE)?)?;
    assert!(
        state.starts_with("model_checkpoint_path: \"model.ckpt-50\"\nall_model_checkpoint_paths: \"model.ckpt-30\"\n"),
        "{state}"
    );

    // An evaluator's lease holds a checkpoint through a collection.
    let evaluator = CheckpointManager::new(ModelDir::open_with(url, Some(&options))?, 3, None);
    let lease = evaluator.acquire_lease("model.ckpt-50", "evaluator-0", Duration::from_secs(300))?;
    for step in [60, 70, 80] {
        chief.save(step, &variables(step)?, &meta(step))?;
    }
    assert_eq!(chief.last_gc_report().held_by_lease, vec!["model.ckpt-50"]);
    assert_eq!(evaluator.restore(lease.checkpoint())?.tensors, variables(50)?);
    lease.release()?;
    chief.save(90, &variables(90)?, &meta(90))?;
    let kept: Vec<u64> = chief.list()?.iter().map(|c| c.step).collect();
    assert_eq!(kept, vec![70, 80, 90]);
    assert!(!dir.exists("model.ckpt-50.safetensors")?);

    // Resume: a new process (new manager, new client) finds the latest with its input position.
    let resumed = CheckpointManager::new(ModelDir::open_with(url, Some(&options))?, 3, None);
    let restored = resumed.restore_latest_valid()?.context("nothing to resume from")?;
    assert_eq!(restored.checkpoint.step, 90);
    assert_eq!(restored.checkpoint.tensors, variables(90)?);
    assert_eq!(restored.checkpoint.meta.input_state, "{\"step\":90}");
    resumed.save(100, &variables(100)?, &meta(100))?;
    assert_eq!(chief.latest()?.map(|c| c.step), Some(100));

    // A corrupted latest on S3 is reported and skipped.
    dir.put("model.ckpt-100.safetensors", b"truncated".to_vec())?;
    let fallback = resumed.restore_latest_valid()?.context("no fallback")?;
    assert_eq!(fallback.checkpoint.step, 90);
    assert!(fallback.skipped[0].to_string().contains("s3://models/jobs/mnist/model.ckpt-100.safetensors"));
    Ok(())
}
