//! Helpers for end-to-end tests that run the real `engine` binary as a separate process.
//!
//! The binary belongs to the `engine-cli` package, so Cargo does not hand its path to this
//! package's tests (`CARGO_BIN_EXE_*` covers a package's own binaries only). The first test
//! that needs it or an example runs `cargo test --no-run --workspace` for the profile and
//! target directory this test binary was built with, and with its GPU features (this
//! package's `wgpu` and `cuda`): the build that made this test binary, which Cargo finds
//! fresh, and which built the binary and the examples beside the tests. A narrower
//! `cargo build -p engine-cli --bin engine` resolves features without the workspace's
//! dev-dependencies (burn's `autodiff`, which a runtime test uses), and compiled burn and
//! everything above it a second time: 4.5 minutes of a cold CI run.

#![allow(dead_code)]

pub mod fuzz;

use anyhow::{Context, Result, bail, ensure};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An IDX file (MNIST's format) of u8 values with dimensions `dims`.
pub fn idx(dims: &[u32], values: impl IntoIterator<Item = u8>) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend(values);
    out
}

pub fn spec_path(name: &str) -> String {
    repo_root().join("specs").join(name).to_string_lossy().into_owned()
}

/// `<target>/<profile>`: this test binary is `<target>/<profile>/deps/<name>-<hash>`.
fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let deps = exe.parent().context("test binary without a directory")?;
    Ok(deps.parent().context("test binary not in <target>/<profile>/deps")?.to_path_buf())
}

/// `--features` for the GPU backends this test binary was built with, if any.
fn gpu_features() -> Vec<String> {
    let features: Vec<&str> = [("engine/wgpu", cfg!(feature = "wgpu")), ("engine/cuda", cfg!(feature = "cuda"))]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
    if features.is_empty() { Vec::new() } else { vec!["--features".into(), features.join(",")] }
}

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// This build's profile directory, once its binaries and examples are built.
fn built() -> Result<PathBuf> {
    let built = BUILT.get_or_init(|| build().map_err(|e| format!("{e:#}")));
    built.clone().map_err(|e| anyhow::anyhow!("{e}"))
}

/// The `engine` binary of this build, built first if needed.
pub fn engine_binary() -> Result<PathBuf> {
    let binary = built()?.join(format!("engine{}", std::env::consts::EXE_SUFFIX));
    ensure!(binary.is_file(), "cargo built the workspace's tests, but {} is missing", binary.display());
    Ok(binary)
}

/// The binary of example `name` (in `examples/`) of this build, built first if needed.
pub fn example_binary(name: &str) -> Result<PathBuf> {
    let binary = built()?.join("examples").join(name);
    ensure!(binary.is_file(), "cargo built the workspace's examples, but {} is missing", binary.display());
    Ok(binary)
}

/// Runs `cargo test --no-run --workspace` for this test's target directory, profile and
/// GPU features; returns the profile directory.
fn build() -> Result<PathBuf> {
    let profile_dir = profile_dir()?;
    let target = profile_dir.parent().context("no target directory")?;
    let profile = profile_dir.file_name().and_then(|n| n.to_str()).context("profile directory name")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(repo_root())
        .args(["test", "--no-run", "--quiet", "--workspace"])
        .args(gpu_features())
        .arg("--target-dir");
    // Cargo gives this test process its package's variables (CARGO_PKG_NAME, OUT_DIR, ...).
    // Passed on, they differ from a shell's build, and build scripts watching them (ring's
    // does) run again: every `cargo test` would then rebuild the TLS stack and all above it.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let per_package =
            ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_PRIMARY_", "CARGO_TARGET_TMPDIR"];
        if key == "OUT_DIR" || per_package.iter().any(|p| key.starts_with(p)) {
            build.env_remove(&*key);
        }
    }
    build.arg(target);
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    let out = build.output().context("running cargo test --no-run --workspace")?;
    if !out.status.success() {
        bail!("cargo test --no-run --workspace failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(profile_dir)
}

/// The engine command with `args`, logging on stderr, no inherited AWS settings.
pub fn engine_command(args: &[&str]) -> Result<Command> {
    let mut command = Command::new(engine_binary()?);
    command.args(args).current_dir(repo_root());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("AWS_") {
            command.env_remove(key);
        }
    }
    Ok(command)
}

pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(self) -> Result<Run> {
        ensure!(self.code == Some(0), "engine exited with {:?}:\n{}\n{}", self.code, self.stdout, self.stderr);
        Ok(self)
    }
}

pub fn finished(out: Output) -> Result<Run> {
    Ok(Run { code: out.status.code(), stdout: String::from_utf8(out.stdout)?, stderr: String::from_utf8(out.stderr)? })
}

pub fn engine(args: &[&str]) -> Result<Run> {
    finished(engine_command(args)?.output()?)
}

/// `engine run` of the tutorial CNN spec to `max_steps` in `model_dir`, with `extra` flags;
/// evaluation reads one batch of 1000 so that runs stay short.
pub fn run_args(model_dir: &str, max_steps: u64, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "run".into(),
        spec_path("fashion_mnist_cnn.ron"),
        "--max-steps".into(),
        max_steps.to_string(),
        "--model-dir".into(),
        model_dir.into(),
        "--set".into(),
        "eval_spec.steps=1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The test interpreter (`$ENGINE_TEST_PYTHON`, else `<repo>/.venv/bin/python`); missing
/// is a failure, never a skip.
pub fn python() -> Result<PathBuf> {
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

/// Runs `scripts/<script> <arg>` with the test Python and parses its JSON output.
pub fn python_json(script: &str, arg: &Path) -> Result<serde_json::Value> {
    let out = Command::new(python()?).arg(repo_root().join("scripts").join(script)).arg(arg).output()?;
    if !out.status.success() {
        bail!("{script} failed on {}: {}", arg.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The numbers of a Python-style dict line as `engine run` prints it: `{'accuracy': 0.5, ...}`.
pub fn printed_dict(stdout: &str) -> Result<BTreeMap<String, f64>> {
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).with_context(|| format!("no dict in {stdout}"))?;
    let mut out = BTreeMap::new();
    for item in line.trim_matches(['{', '}']).split(", ") {
        let (k, v) = item.split_once(": ").with_context(|| format!("bad item {item}"))?;
        out.insert(k.trim_matches('\'').to_string(), v.parse()?);
    }
    Ok(out)
}

/// moto's S3 server on 127.0.0.1; killed and reaped on drop, so a failing assertion cannot
/// leak it.
pub struct Moto {
    child: Child,
    pub port: u16,
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
    pub fn start() -> Result<Moto> {
        let port = free_ports(1)?[0];
        let child = Command::new(python()?)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting moto.server (is moto[server] installed? run scripts/setup-test-env.sh)")?;
        let mut moto = Moto { child, port };
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

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// moto does not check signatures, so a bare HTTP PUT creates the bucket.
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        let port = self.port;
        let request = format!(
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let status = http_status(port, &request).context("no answer to CreateBucket")?;
        ensure!(status == 200, "CreateBucket {bucket} answered {status}");
        Ok(())
    }

    /// The environment a process needs to reach this server as S3, with fake keys.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}

/// The latest step a model dir's state file names, if any (a torn read is just "not yet").
pub fn latest_step(model_dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(model_dir.join("checkpoint")).ok()?;
    let state = engine::estimator::checkpoint::CheckpointState::parse(&text, "checkpoint").ok()?;
    state.model_checkpoint_path.strip_prefix("model.ckpt-")?.parse().ok()
}

/// `n` distinct free ports on 127.0.0.1, below the ephemeral range as `engine launch` takes
/// them (the listeners are held until all are chosen).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = engine::cli::cli::ports::free_loopback_ports(n)?;
    Ok(listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>()?)
}

/// Waits for a task of a hand-made cluster: whether it succeeded, and its output (stdout,
/// then stderr). One still running after `within` is killed and is an error.
pub fn finish(mut child: Child, within: Duration) -> Result<(bool, String)> {
    let deadline = Instant::now() + within;
    loop {
        if child.try_wait()?.is_some() {
            let out = child.wait_with_output()?;
            let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            return Ok((out.status.success(), log));
        }
        if Instant::now() > deadline {
            child.kill()?;
            let out = child.wait_with_output()?;
            bail!("still running after {within:?}; stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The variables of `model.ckpt-<step>` in a model dir.
pub fn checkpoint_variables(model_dir: &Path, step: u64) -> Result<BTreeMap<String, engine::graph::HostTensor>> {
    let path = model_dir.join(format!("model.ckpt-{step}"));
    let checkpoint = engine::estimator::checkpoint::read_checkpoint(&path.to_string_lossy(), None)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(checkpoint.tensors)
}

/// Two runs' variables agree to 1e-5 of each tensor's largest magnitude (f64 runs whose
/// sums were ordered differently), naming `what` and the first that does not.
pub fn assert_same_variables(
    got: &BTreeMap<String, engine::graph::HostTensor>,
    want: &BTreeMap<String, engine::graph::HostTensor>,
    what: &str,
) -> Result<()> {
    ensure!(got.keys().eq(want.keys()), "{what}: variables differ: {:?} vs {:?}", got.keys(), want.keys());
    for (name, w) in want {
        let (x, y) = (got[name].to_f64_vec(), w.to_f64_vec());
        let scale = y.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        let d = x.iter().zip(&y).fold(0.0f64, |m, (p, q)| m.max((p - q).abs())) / scale;
        ensure!(d <= 1e-5, "{what}: {name} differs by {d:.2e} (relative)");
    }
    Ok(())
}
