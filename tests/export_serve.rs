//! Export and serving end to end, against real consumers: onnxruntime loads every spec's
//! `model.onnx` and agrees with `engine predict`; `engine serve` answers TensorFlow
//! Serving's REST API to a real HTTP client, batching concurrent requests; exporters in
//! `eval_spec` write, keep and replace exports on disk and on S3 (moto).

mod common;

use anyhow::{Context, Result, ensure};
use common::{Moto, engine, engine_command, finish, python, repo_root, spec_path};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TEST_IMAGES: &str = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

/// Trains `spec` a few steps into `dir`, evaluating one batch.
fn train(spec: &str, dir: &Path, steps: u32, extra: &[&str]) -> Result<()> {
    let d = dir.to_string_lossy();
    let steps = steps.to_string();
    let mut args = vec!["run", spec, "--max-steps", &steps, "--model-dir", &d, "--set", "eval_spec.steps=1"];
    args.extend(extra);
    engine(&args)?.ok()?;
    Ok(())
}

/// `engine predict` on the first `n` test images, as JSON Lines in `dir/predictions.jsonl`.
fn predict(spec: &str, dir: &Path, n: usize) -> Result<std::path::PathBuf> {
    let out = dir.join("predictions.jsonl");
    let take = format!("eval_input.take={n}");
    let (d, o) = (dir.to_string_lossy(), out.to_string_lossy());
    engine(&["predict", spec, "--model-dir", &d, "--set", &take, "--output", &o])?.ok()?;
    Ok(out)
}

fn python_check(script: &str, args: &[&str]) -> Result<serde_json::Value> {
    let out = Command::new(python()?).arg(repo_root().join("scripts").join(script)).args(args).output()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{script}: {}", String::from_utf8_lossy(&out.stderr)))?;
    ensure!(out.status.success(), "{script} found problems: {report}");
    Ok(report)
}

#[test]
fn onnxruntime_agrees_with_engine_predict_for_every_spec() -> Result<()> {
    // The image specs: the checker feeds onnxruntime the test images (the table spec's
    // export is checked in csv_sequential.rs).
    let mut specs: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("specs"))? {
        let path = entry?.path();
        if std::fs::read_to_string(&path)?.contains("Idx(") {
            specs.push(path.to_string_lossy().into_owned());
        }
    }
    specs.sort();
    specs.push(repo_root().join("tests/specs/export_branches.ron").to_string_lossy().into_owned());
    ensure!(specs.len() >= 5, "{specs:?}");
    for spec in &specs {
        let tmp = tempfile::tempdir()?;
        train(spec, tmp.path(), 3, &[])?;
        let export = tmp.path().join("exported");
        let e = export.to_string_lossy();
        let run = engine(&["export", spec, "--model-dir", &tmp.path().to_string_lossy(), "--output", &e])?.ok()?;
        ensure!(run.stdout.trim() == e, "{}", run.stdout);
        for file in ["saved_model.json", "graph.json", "variables.safetensors", "model.onnx"] {
            ensure!(export.join(file).is_file(), "{spec}: no {file}");
        }
        let predictions = predict(spec, tmp.path(), 300)?;
        // The export scales the pixels itself: onnxruntime gets them as the IDX file holds them.
        let report = python_check("check_onnx.py", &[&e, &predictions.to_string_lossy(), TEST_IMAGES, "1"])
            .with_context(|| spec.clone())?;
        ensure!(report["examples"] == 300, "{report}");
        // An export is never overwritten.
        let again = engine(&["export", spec, "--model-dir", &tmp.path().to_string_lossy(), "--output", &e])?;
        ensure!(again.code == Some(1) && again.stderr.contains("already exists"), "{}", again.stderr);
    }
    Ok(())
}

#[test]
fn serve_answers_the_tf_serving_rest_api_and_batches_concurrent_requests() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_cnn.ron");
    // A Latest exporter keeping 2 of the 3 evaluations' exports: the server takes the newest.
    let exporters = "eval_spec.exporters=[Latest(exports_to_keep: 2)]";
    train(&spec, tmp.path(), 30, &["--set", "eval_spec.every_n_steps=10", "--set", exporters])?;
    let base = tmp.path().join("export/latest");
    let mut versions: Vec<String> = std::fs::read_dir(&base)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    versions.sort();
    ensure!(versions.len() == 2, "{versions:?}");
    let predictions = predict(&spec, tmp.path(), 64)?;

    let (server, url) = serve(&base, &["--max-batch-size", "16", "--batch-timeout-micros", "20000"])?;
    ensure!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1/models/model"), "{url:?}");
    // Requests carry raw pixels (0 to 255): the export runs the spec's scale.
    let report = python_check("serve_client.py", &[&url, &predictions.to_string_lossy(), TEST_IMAGES, "1"]);
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let started = Instant::now();
    let (ok, log) = finish(server, Duration::from_secs(30))?;
    let report = report?;
    ensure!(ok && started.elapsed() < Duration::from_secs(10), "{log}");
    ensure!(log.contains(&format!("version {}", versions[1])), "not the newest export: {log}");
    // 64 single-image requests from 16 threads ran in fewer batches than requests.
    let served = log.lines().find(|l| l.contains("Served")).context("no summary")?.to_string();
    let numbers: Vec<u64> = served.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
    let (requests, batches) = (numbers[numbers.len() - 3], numbers[numbers.len() - 1]);
    ensure!(requests >= 65 && batches < requests, "{served}\n{report}");
    Ok(())
}

#[test]
fn exporters_write_to_an_s3_model_dir_and_serve_reads_them() -> Result<()> {
    let moto = Moto::start()?;
    moto.create_bucket("models")?;
    let url = "s3://models/jobs/exported";
    let spec = spec_path("fashion_mnist_mlp.ron");
    let mut run = engine_command(&[
        "run",
        &spec,
        "--max-steps",
        "20",
        "--model-dir",
        url,
        "--set",
        "eval_spec.steps=1",
        "--set",
        "eval_spec.every_n_steps=10",
        "--set",
        r#"eval_spec.exporters=[Best(metric: "accuracy", higher_is_better: true), Final()]"#,
    ])?;
    run.envs(moto.env());
    let out = common::finished(run.output()?)?.ok()?;
    ensure!(out.stderr.contains("Exporter final wrote s3://models/jobs/exported/export/final/"), "{}", out.stderr);

    let mut serve = engine_command(&["serve", &format!("{url}/export/final"), "--port", "0"])?;
    serve.envs(moto.env()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut server = serve.spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut line)?;
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let (ok, log) = finish(server, Duration::from_secs(30))?;
    ensure!(ok && line.contains("/v1/models/model"), "{line}\n{log}");
    ensure!(log.contains("(step 20)"), "{log}");
    Ok(())
}

/// `engine serve EXPORT --port 0 FLAGS`, and the URL it printed once it answers.
fn serve(export: &Path, flags: &[&str]) -> Result<(std::process::Child, String)> {
    let export = export.to_string_lossy();
    let mut args = vec!["serve", &export, "--port", "0"];
    args.extend(flags);
    let mut server = engine_command(&args)?.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut url = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut url)?;
    Ok((server, url.trim().to_string()))
}

/// Sends `head` then `body` on a fresh connection and returns the status code, or `None`
/// when the server closed the connection without answering.
fn raw_request(address: &str, head: &str, body: &[u8], timeout: Duration) -> Result<Option<u16>> {
    Ok(exchange(address, head, body, timeout)?.0)
}

/// As [`raw_request`], with the answer's body.
fn exchange(address: &str, head: &str, body: &[u8], timeout: Duration) -> Result<(Option<u16>, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(head.as_bytes())?;
    // A server that answers before the body (413) may close while it is sent.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let status = text.strip_prefix("HTTP/1.1 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok());
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn post(address: &str, path: &str, body: &[u8], declared: Option<usize>) -> Result<Option<u16>> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        declared.unwrap_or(body.len())
    );
    raw_request(address, &head, body, Duration::from_secs(30))
}

/// The peak and current resident memory of process `pid`, in MiB (`VmHWM`, `VmRSS`).
fn memory_mib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kib| kib >> 10)
    };
    Ok((field("VmHWM:").context("no VmHWM")?, field("VmRSS:").context("no VmRSS")?))
}

/// `engine serve` under hostile requests (seeded mutations of a valid one: numbers past
/// f32, broken JSON, wrong shapes, deep nesting, bodies larger than declared or than
/// allowed, a body that never arrives, a header that never ends, a request as large as the
/// body limit from several clients at once): every answer is a status a client can act
/// on, the server stays up, and its memory stays bounded and is returned after the peak.
#[test]
fn serve_answers_hostile_requests_with_statuses_in_bounded_memory() -> Result<()> {
    use common::fuzz::Rng;
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_mlp.ron");
    train(&spec, tmp.path(), 2, &["--set", "eval_spec.exporters=[Latest(exports_to_keep: 1)]"])?;
    let export = tmp.path().join("export/latest");
    let limits = ["--max-body-mib", "16", "--max-inflight-mib", "512", "--request-timeout-secs", "2"];
    let (server, url) = serve(&export, &limits)?;
    let address = url.trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
    let path = "/v1/models/model:predict";
    let image = |v: &str| format!("[{}]", vec![format!("[{}]", vec![format!("[{v}]"); 28].join(",")); 28].join(","));
    let valid = format!(r#"{{"instances": [{}]}}"#, image("0.5"));
    let result = (|| -> Result<(usize, u64, u64)> {
        ensure!(post(&address, path, valid.as_bytes(), None)? == Some(200), "a valid request failed");
        let mut rng = Rng(0x5e7e_0b5e_55ed_0001);
        let mut answered = 0;
        for case in 0..150 {
            let mut body = valid.clone().into_bytes();
            let mut declared = None;
            match rng.below(10) {
                0 => {
                    let value: &&str = rng.pick(&["1e300", "-1e39", "NaN", "\"x\"", "null", "[]"]);
                    body = valid.replacen("0.5", value, 1).into_bytes()
                }
                1 => body.truncate(rng.below(body.len())),
                2 => body = valid.replacen("[0.5]", "[0.5, 0.5]", 1).into_bytes(),
                3 => body = format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
                4 => body = format!(r#"{{"instances": [{}], "inputs": {{}}}}"#, image("1")).into_bytes(),
                5 => declared = Some(64 << 20),
                6 => {
                    let at = rng.below(body.len());
                    body[at] = 0xff;
                }
                7 => {
                    body = format!(r#"{{"instances": [{}]}}"#, vec![image("0.25"); 1 + rng.below(500)].join(","))
                        .into_bytes()
                }
                8 => {
                    body = format!(r#"{{"inputs": {{"x": [{}]}}, "signature_name": "other"}}"#, image("1")).into_bytes()
                }
                _ => body = format!(r#"{{"instances": [{}]}}"#, image("-3e38")).into_bytes(),
            }
            let status = post(&address, path, &body, declared)?;
            ensure!(
                matches!(status, Some(200 | 400 | 413 | 503)),
                "case {case}: status {status:?} for {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            );
            answered += 1;
        }
        // A body shorter than declared, and headers that never end: answered or dropped within
        // the timeout, never held.
        let started = Instant::now();
        let short = post(&address, path, &valid.as_bytes()[..100], Some(valid.len()))?;
        ensure!(matches!(short, Some(408) | None), "a body that never came: {short:?}");
        let dribble = raw_request(
            &address,
            "POST /v1/models/model:predict HTTP/1.1\r\nHost: x\r\n",
            b"",
            Duration::from_secs(30),
        )?;
        ensure!(dribble.is_none() || dribble == Some(408), "unfinished headers: {dribble:?}");
        ensure!(started.elapsed() < Duration::from_secs(20), "slow clients were held {:?}", started.elapsed());
        // Requests of 15 MiB (2,400 images) from six clients at once: answered or refused 503.
        let big =
            std::sync::Arc::new(format!(r#"{{"instances": [{}]}}"#, vec![image("0.125"); 2400].join(",")).into_bytes());
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (address, big) = (address.clone(), big.clone());
                std::thread::spawn(move || post(&address, path, &big, None))
            })
            .collect();
        for t in threads {
            let status = t.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
            ensure!(matches!(status, Some(200 | 503)), "a large request got {status:?}");
        }
        ensure!(post(&address, path, valid.as_bytes(), None)? == Some(200), "the server stopped answering");
        std::thread::sleep(Duration::from_millis(500));
        let (peak, now) = memory_mib(server.id())?;
        Ok((answered, peak, now))
    })();
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let (ok, log) = finish(server, Duration::from_secs(30))?;
    let (answered, peak, now) = result.with_context(|| log.clone())?;
    eprintln!("serve fuzz: {answered} hostile requests answered, 0 crashes; peak RSS {peak} MiB, {now} MiB after");
    ensure!(ok, "{log}");
    ensure!(peak <= 1536, "the server's memory peaked at {peak} MiB");
    ensure!(now <= 512, "the server held {now} MiB after the load");
    Ok(())
}

/// A model trained on string labels is served by class name, with the ids beside them, as
/// `engine predict` prints them; the metadata says so in TensorFlow Serving's dtype names.
/// The table's columns are sent as the file holds them: the export runs the section's
/// Scale on the packed columns, so the logits are engine predict's.
#[test]
fn serve_answers_the_class_names_of_a_label_vocabulary() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let spec = spec_path("fashion_mnist_table.ron");
    train(&spec, tmp.path(), 5, &["--set", "eval_spec.exporters=[Latest()]"])?;
    let (server, url) = serve(&tmp.path().join("export/latest"), &[])?;
    let address = url.trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
    // The first test rows as the table holds them (pixel sums, 0 to 255 * 16): the export
    // packs and scales them itself, as engine predict's pipeline does.
    let table = std::fs::read_to_string(common::repo_root().join("data/fashion_mnist_table/test.csv"))?;
    let rows: Vec<Vec<f32>> =
        table.lines().skip(1).take(3).map(|l| l.split(',').filter_map(|v| v.parse().ok()).collect()).collect();
    ensure!(rows.iter().all(|r| r.len() == 49), "{rows:?}");
    let predicted = std::fs::read_to_string(predict(&spec, tmp.path(), 3)?)?;
    let body = serde_json::json!({ "instances": rows }).to_string();
    let head = format!(
        "POST /v1/models/model:predict HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let answer = exchange(&address, &head, body.as_bytes(), Duration::from_secs(30));
    let get = format!("GET /v1/models/model/metadata HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    let metadata = exchange(&address, &get, b"", Duration::from_secs(30));
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let (ok, log) = finish(server, Duration::from_secs(30))?;
    ensure!(ok, "{log}");
    let (status, text) = answer?;
    ensure!(status == Some(200), "{status:?} {text}");
    let reply: serde_json::Value = serde_json::from_str(&text)?;
    let names = std::fs::read_to_string(tmp.path().join("label_vocabulary.txt"))?;
    let names: Vec<&str> = names.lines().collect();
    let served = reply["predictions"].as_array().context("no predictions")?;
    for (prediction, line) in served.iter().zip(predicted.lines()) {
        let id = prediction["class_ids"].as_u64().context("no class id")? as usize;
        ensure!(prediction["classes"] == names[id], "{prediction} (classes {names:?})");
        let want: serde_json::Value = serde_json::from_str(line)?;
        let (got, want) = (prediction["logits"].as_array(), want["logits"].as_array());
        let close = got.zip(want).is_some_and(|(g, w)| {
            g.len() == w.len()
                && g.iter()
                    .zip(w)
                    .all(|(g, w)| (g.as_f64().unwrap_or(f64::NAN) - w.as_f64().unwrap_or(0.0)).abs() < 1e-4)
        });
        ensure!(close, "served on raw columns {prediction}, engine predict {line}");
    }
    ensure!(served.len() == 3, "{reply}");
    let (status, text) = metadata?;
    let metadata: serde_json::Value = serde_json::from_str(&text)?;
    let outputs = &metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]["outputs"];
    ensure!(status == Some(200) && outputs["classes"]["dtype"] == "DT_STRING", "{metadata}");
    ensure!(outputs["class_ids"]["dtype"] == "DT_INT64" && outputs["logits"]["dtype"] == "DT_FLOAT", "{metadata}");
    Ok(())
}
