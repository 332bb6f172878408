//! Hostile data files never crash the engine or take its memory: seeded mutations of small
//! IDX files (headers, lengths, gzip members, a gzip bomb, a device for a path) and CSV
//! tables (rows, quotes, headers, numbers past f32, bytes that are not UTF-8) go through
//! `engine plan` and a few steps of `engine run`. Each case must end with an error message
//! or success, within a time limit and under a memory bound: no panic, no abort, no hang.
//! The test prints its figures (cases, errors, peak memory); the README's "Reliability"
//! section records them.

mod common;

use anyhow::{Result, anyhow, ensure};
use common::fuzz::{Rng, each_case, survives};
use common::{engine_binary, idx};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Cases per run; `ENGINE_FUZZ_CASES` and `ENGINE_FUZZ_SEED` change them for a longer
/// campaign by hand.
const CASES: usize = 400;
const SEED: u64 = 0xda7a_f00d_5eed_0007;
/// No case may take more memory than this: every file here is under a few MB, and the
/// bomb inflates to 64 MiB if read to its end.
const MEMORY_BOUND: u64 = 1 << 30;

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes)?;
    Ok(enc.finish()?)
}

/// The seed data: 64 images of 4x4 with labels, and a CSV table of three columns.
fn seed_images() -> Vec<u8> {
    idx(&[64, 4, 4], (0..64 * 16).map(|i| (i * 37 % 251) as u8))
}
fn seed_labels() -> Vec<u8> {
    idx(&[64], (0..64).map(|i| (i % 10) as u8))
}
fn seed_table() -> String {
    let mut t = String::from("a,b,label\n");
    for i in 0..64 {
        t.push_str(&format!("{},{},{}\n", i as f32 / 10.0, (i * 7 % 13) as f32, i % 3));
    }
    t
}

/// One mutation of an IDX file's bytes.
fn mutate_idx(rng: &mut Rng, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut b = bytes.to_vec();
    Ok(match rng.below(9) {
        // A byte of the header (magic, type, rank, dimensions).
        0 => {
            let at = rng.below(b.len().min(16));
            b[at] = rng.next() as u8;
            b
        }
        // A dimension set to something large.
        1 => {
            let at = 4 + 4 * rng.below(usize::from(b[3]).max(1));
            let big = *rng.pick(&[u32::MAX, 1 << 31, 65_536, 0, 1_000_000]);
            if at + 4 <= b.len() {
                b[at..at + 4].copy_from_slice(&big.to_be_bytes());
            }
            b
        }
        // Cut short, or longer than the header says.
        2 => {
            b.truncate(rng.below(b.len()));
            b
        }
        3 => {
            b.extend((0..1 + rng.below(4096)).map(|_| rng.next() as u8));
            b
        }
        // Gzipped, then damaged: a byte flipped, cut short, garbage after the member.
        4 => gzip(&b)?,
        5 => {
            let mut g = gzip(&b)?;
            let at = rng.below(g.len());
            g[at] ^= 1 << rng.below(8);
            g
        }
        6 => {
            let mut g = gzip(&b)?;
            g.truncate(rng.below(g.len()));
            g
        }
        7 => {
            let mut g = gzip(&b)?;
            g.extend_from_slice(b"not a gzip member at all");
            g
        }
        // A bomb: the header's data followed by 64 MiB of zeros, in a few hundred KB.
        _ => {
            b.extend(std::iter::repeat_n(0u8, 64 << 20));
            gzip(&b)?
        }
    })
}

/// One mutation of a CSV table's text (as bytes: some are not UTF-8).
fn mutate_csv(rng: &mut Rng, text: &str) -> Vec<u8> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let row = 1 + rng.below(lines.len() - 1);
    match rng.below(10) {
        0 => lines[0] = "a,a,label".into(),
        1 => lines[row] = lines[row].rsplit_once(',').map_or(String::new(), |(r, _)| r.to_string()),
        2 => lines[row].push_str(",7"),
        3 => {
            let cell = *rng.pick(&["NaN", "inf", "-inf", "1e400", "-3e39", "", "\"", "\"1,2\"", "0x10", "１"]);
            lines[row] = format!("{cell},{}", lines[row].split_once(',').map_or("", |(_, r)| r));
        }
        4 => lines[row] = format!("1,2,{}", rng.pick(&["-1", "3", "99999999999999999999", "1.5", "x"])),
        5 => lines.truncate(rng.below(2)),
        6 => lines.insert(row, "x".repeat(1 << 20)),
        7 => lines[0] = format!("\u{feff}{}", lines[0]),
        8 => {
            let mut bytes = lines.join("\n").into_bytes();
            let at = rng.below(bytes.len());
            bytes.insert(at, 0xff);
            return bytes;
        }
        _ => lines.insert(row, String::new()),
    }
    (lines.join(if rng.below(2) == 0 { "\n" } else { "\r\n" }) + "\n").into_bytes()
}

fn idx_spec(images: &str, labels: &str, dir: &Path) -> String {
    format!(
        r#"Job(
    model: Sequential(input_shape: [4, 4, 1], layers: [Flatten, Dense(units: 8, activation: Relu), Dense(units: 10)]),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Sgd(learning_rate: 0.1),
    metrics: [Accuracy],
    train_input: Idx(images: "{images}", labels: "{labels}", scale: 255.0, batch_size: 8, shuffle_buffer: 16, seed: 1),
    eval_input: Idx(images: "{images}", labels: "{labels}", scale: 255.0, batch_size: 16),
    run_config: (model_dir: "{dir}/run", random_seed: 1),
    train_spec: (max_steps: 2),
    eval_spec: (steps: 1),
)"#,
        dir = dir.display()
    )
}

fn csv_spec(train: &str, eval: &str, dir: &Path) -> String {
    format!(
        r#"Job(
    model: Functional(
        inputs: {{"a": [1], "b": [1]}},
        nodes: [("both", Concatenate(axis: -1), ["a", "b"]), ("logits", Dense(units: 3), ["both"])],
        outputs: ["logits"],
    ),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Sgd(learning_rate: 0.1),
    metrics: [Accuracy],
    train_input: Csv(path: "{train}", label: "label", batch_size: 8,
        maps: [Reshape(feature: "a", shape: [1]), Reshape(feature: "b", shape: [1])]),
    eval_input: Csv(path: "{eval}", label: "label", batch_size: 16,
        maps: [Reshape(feature: "a", shape: [1]), Reshape(feature: "b", shape: [1])]),
    run_config: (model_dir: "{dir}/run", random_seed: 1),
    train_spec: (max_steps: 2),
    eval_spec: (steps: 1),
)"#,
        dir = dir.display()
    )
}

#[test]
fn mutated_data_files_get_errors_never_crashes() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    engine_binary()?;
    let from_env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let cases = from_env("ENGINE_FUZZ_CASES").map_or(CASES, |n| n as usize);
    let mut rng = Rng(from_env("ENGINE_FUZZ_SEED").unwrap_or(SEED) | 1);
    let (images, labels, table) = (seed_images(), seed_labels(), seed_table());
    // Every case's files and spec, all made before any runs: the same cases however they run.
    let mut specs = Vec::with_capacity(cases);
    for case in 0..cases {
        let dir = tmp.path().join(format!("case-{case}"));
        std::fs::create_dir_all(&dir)?;
        let d = dir.display().to_string();
        // Which file is hostile: an IDX file, a CSV table, or a device where a file belongs.
        let what = rng.below(9);
        let spec = match what {
            0..=4 => {
                let (mut im, mut la) = (images.clone(), labels.clone());
                if what.is_multiple_of(2) {
                    im = mutate_idx(&mut rng, &im)?
                } else {
                    la = mutate_idx(&mut rng, &la)?
                }
                std::fs::write(dir.join("images"), im)?;
                std::fs::write(dir.join("labels"), la)?;
                idx_spec(&format!("{d}/images"), &format!("{d}/labels"), &dir)
            }
            5..=7 => {
                let mutated = mutate_csv(&mut rng, &table);
                std::fs::write(dir.join("clean.csv"), &table)?;
                std::fs::write(dir.join("bad.csv"), mutated)?;
                let (train, eval) = if what == 7 { ("clean.csv", "bad.csv") } else { ("bad.csv", "clean.csv") };
                csv_spec(&format!("{d}/{train}"), &format!("{d}/{eval}"), &dir)
            }
            _ => {
                std::fs::write(dir.join("labels"), &labels)?;
                let device = *rng.pick(&["/dev/zero", "/dev/urandom", "/dev/null"]);
                idx_spec(device, &format!("{d}/labels"), &dir)
            }
        };
        let path = dir.join("spec.ron");
        std::fs::write(&path, &spec)?;
        specs.push((path.to_string_lossy().into_owned(), spec));
    }
    let ended = each_case(cases, |case| {
        let (path, spec) = &specs[case];
        let fail =
            |under: &str, e: anyhow::Error| anyhow!("case {case} under `engine {under}`: {e:#}\n--- spec ---\n{spec}");
        let plan = survives(&["plan", path], Duration::from_secs(60)).map_err(|e| fail("plan", e))?;
        let run = survives(&["run", path], Duration::from_secs(60)).map_err(|e| fail("run", e))?;
        for (under, ended) in [("plan", plan), ("run", run)] {
            ensure!(
                ended.peak_rss_bytes <= MEMORY_BOUND,
                "case {case} took {} MiB under `engine {under}`\n--- spec ---\n{spec}",
                ended.peak_rss_bytes >> 20
            );
        }
        Ok((plan, run))
    })?;
    let errors = ended.iter().filter(|(plan, run)| plan.code != 0 || run.code != 0).count();
    let trained = ended.iter().filter(|(_, run)| run.code == 0).count();
    let peak = ended.iter().map(|(plan, run)| plan.peak_rss_bytes.max(run.peak_rss_bytes)).max().unwrap_or(0);
    eprintln!(
        "data fuzz: {cases} cases (plan and run each), {errors} ended with an error message, {trained} trained, \
         0 panics, 0 aborts, peak RSS {} MiB",
        peak >> 20
    );
    ensure!(errors >= cases / 4, "too few cases were hostile enough to fail ({errors} of {cases})");
    Ok(())
}
