//! Hostile specs never crash the engine: a few hundred seeded mutations of the specs in
//! `specs/` (and a CSV spec) go through `engine plan`, and those that plan go through a
//! few steps of `engine run`. Every one must end with an error message or success: no
//! panic (status 101), no abort or other signal, no hang. A failure prints the seed and the
//! mutant so it can be pinned as a test of its own. The mutants run side by side, one per
//! core (`fuzz::each_case`).

mod common;

use anyhow::{Context, Result};
use common::fuzz::{Rng, each_case, survives};
use common::{engine_binary, repo_root};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Mutants per run; `ENGINE_FUZZ_MUTANTS` and `ENGINE_FUZZ_SEED` change the count and the
/// seed for a longer campaign by hand.
const MUTANTS: usize = 600;
const SEED: u64 = 0x5eed_1234_abcd_0042;
/// Every how many planned mutants a short training run follows.
const RUN_EVERY: usize = 2;

/// 256 IDX images (28x28) and labels, gzip-free: small enough that a run of any mutant is fast.
fn write_idx(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let n = 256u32;
    let mut images = vec![0, 0, 8, 3];
    for d in [n, 28, 28] {
        images.extend(d.to_be_bytes());
    }
    images.extend((0..n * 784).map(|i| (i * 37 % 251) as u8));
    let mut labels = vec![0, 0, 8, 1];
    labels.extend(n.to_be_bytes());
    labels.extend((0..n).map(|i| (i % 10) as u8));
    let (ip, lp) = (dir.join("images-idx3-ubyte"), dir.join("labels-idx1-ubyte"));
    std::fs::write(&ip, images)?;
    std::fs::write(&lp, labels)?;
    Ok((ip, lp))
}

/// The seed specs: every spec of `specs/` on the small IDX files, and a CSV spec.
fn seeds(dir: &Path) -> Result<Vec<String>> {
    let (images, labels) = write_idx(dir)?;
    // The table spec's CSVs (made by scripts/setup.sh, 60 000 rows) as 1000 rows of the
    // same columns (a batch of 64 and one of 1000 fit): the fuzzer opens every mutant's input.
    let small_table = dir.join("small_table.csv");
    let mut table = (0..49).map(|i| format!("p{i}")).collect::<Vec<_>>().join(",") + ",label\n";
    for row in 0..1000 {
        let cells: Vec<String> = (0..49).map(|i| ((row * 31 + i * 7) % 256).to_string()).collect();
        table.push_str(&format!("{},{}\n", cells.join(","), ["Coat", "Bag", "Ankle boot"][row % 3]));
    }
    std::fs::write(&small_table, table)?;
    // The PNG spec's folders (60 000 files) as 100 images in three classes (a batch of 64 fits).
    let small_png = dir.join("small_png");
    for i in 0..100u32 {
        let class = small_png.join(["Coat", "Bag", "Ankle boot"][i as usize % 3]);
        std::fs::create_dir_all(&class)?;
        let pixels = (0..784u32).map(|p| ((p * 13 + i * 29) % 256) as u8).collect();
        let image = image::GrayImage::from_raw(28, 28, pixels).context("28x28 pixels")?;
        image.save(class.join(format!("{i}.png")))?;
    }
    let mut specs = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("specs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "ron") {
            let text = std::fs::read_to_string(&path)?
                .replace("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", &images.to_string_lossy())
                .replace("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", &images.to_string_lossy())
                .replace("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", &labels.to_string_lossy())
                .replace("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", &labels.to_string_lossy())
                .replace("data/fashion_mnist_table/train.csv", &small_table.to_string_lossy())
                .replace("data/fashion_mnist_table/test.csv", &small_table.to_string_lossy())
                .replace("data/fashion_mnist_png/train", &small_png.to_string_lossy())
                .replace("data/fashion_mnist_png/test", &small_png.to_string_lossy());
            specs.push(text);
        }
    }
    let csv = dir.join("table.csv");
    let mut rows = String::from("a,b,label\n");
    for i in 0..40 {
        rows.push_str(&format!("{},{},{}\n", i as f32 / 10.0, (i * 7 % 13) as f32, i % 3));
    }
    std::fs::write(&csv, rows)?;
    specs.push(format!(
        r#"Job(
    model: Functional(
        inputs: {{"a": [1], "b": [1]}},
        nodes: [
            ("both", Concatenate(axis: -1), ["a", "b"]),
            ("hidden", Dense(units: 8, activation: Relu), ["both"]),
            ("logits", Dense(units: 3), ["hidden"]),
        ],
        outputs: ["logits"],
    ),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: Adam(learning_rate: 0.01),
    metrics: [Accuracy],
    train_input: Csv(path: "{csv}", label: "label", batch_size: 8, shuffle_buffer: 16, seed: 3, prefetch: 2,
        num_parallel_calls: 1, maps: [Reshape(feature: "a", shape: [1]), Reshape(feature: "b", shape: [1])]),
    eval_input: Csv(path: "{csv}", label: "label", batch_size: 10,
        maps: [Reshape(feature: "a", shape: [1]), Reshape(feature: "b", shape: [1])]),
    run_config: (model_dir: "runs/fuzz", random_seed: 1, save_checkpoints_steps: 2),
    train_spec: (max_steps: 4),
    eval_spec: (steps: 1),
)"#,
        csv = csv.to_string_lossy()
    ));
    Ok(specs)
}

const INTEGERS: [&str; 10] = [
    "0",
    "1",
    "-1",
    "3",
    "65536",
    "1000000000",
    "4294967296",
    "18446744073709551615",
    "-9223372036854775808",
    "99999999999999999999999",
];
const FLOATS: [&str; 8] = ["0.0", "-1.0", "1e308", "-1e308", "1e-45", "NaN", "inf", "0.5"];
const WORDS: [&str; 12] =
    ["Relu", "Same", "Valid", "None", "Some(3)", "true", "Dense", "Flatten", "[]", "()", "\"\"", "Sgd"];
const STRINGS: [&str; 5] = ["\"\"", "\"/nonexistent/file\"", "\"relu\"", "\"image\"", "\"x\""];

/// Byte ranges of the tokens of `kind` in `text` (numbers, identifiers, strings), found by a
/// small scanner (comments are tokens too: mutating them is harmless).
fn tokens(text: &str, kind: char) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += 1;
            }
            i += 1;
            if kind == 's' {
                out.push((start, i.min(bytes.len())));
            }
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
            let is_float = text[start..i].contains('.') || text[start..i].contains('e');
            if (kind == 'f' && is_float) || (kind == 'i' && !is_float) {
                out.push((start, i));
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            if kind == 'w' {
                out.push((start, i));
            }
        } else {
            i += 1;
        }
    }
    out
}

fn replace_token(rng: &mut Rng, text: &str, kind: char, choices: &[&str]) -> String {
    let found = tokens(text, kind);
    if found.is_empty() {
        return text.to_string();
    }
    let (a, b) = *rng.pick(&found);
    format!("{}{}{}", &text[..a], rng.pick(choices), &text[b..])
}

/// One to three mutations of `text`.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut out = text.to_string();
    for _ in 0..1 + rng.below(2) {
        let lines: Vec<&str> = out.lines().collect();
        // Mostly values (the spec still parses, so lowering, inputs and training see them),
        // some structure (the parser's share).
        out = match rng.below(20) {
            0..=7 => replace_token(rng, &out, 'i', &INTEGERS),
            8..=10 => replace_token(rng, &out, 'f', &FLOATS),
            11..=13 => replace_token(rng, &out, 'w', &WORDS),
            14 => replace_token(rng, &out, 's', &STRINGS),
            15 => {
                let k = rng.below(lines.len());
                lines.iter().enumerate().filter(|(i, _)| *i != k).map(|(_, l)| *l).collect::<Vec<_>>().join("\n")
            }
            16 => {
                let k = rng.below(lines.len());
                let mut v = lines.clone();
                v.insert(k, lines[k]);
                v.join("\n")
            }
            17 => {
                let mut at = rng.below(out.len());
                while !out.is_char_boundary(at) {
                    at -= 1;
                }
                out[..at].to_string()
            }
            _ => {
                let mut at = rng.below(out.len());
                while !out.is_char_boundary(at) {
                    at -= 1;
                }
                format!("{}{}{}", &out[..at], rng.pick(&[",", ")", "(", ":", "[", "]", "\"", "{"]), &out[at..])
            }
        };
    }
    out
}

#[test]
fn mutated_specs_get_errors_never_crashes() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let seeds = seeds(tmp.path())?;
    engine_binary()?;
    for (k, spec) in seeds.iter().enumerate() {
        let path = tmp.path().join(format!("seed-{k}.ron"));
        std::fs::write(&path, spec)?;
        anyhow::ensure!(
            survives(&["plan", &path.to_string_lossy()], Duration::from_secs(60))?.code == 0,
            "seed spec {k} does not plan:\n{spec}"
        );
    }
    let from_env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let mutants = from_env("ENGINE_FUZZ_MUTANTS").map_or(MUTANTS, |n| n as usize);
    let mut rng = Rng(from_env("ENGINE_FUZZ_SEED").unwrap_or(SEED) | 1);
    // (seed spec, mutant), all made before any runs: the same mutants however they are run.
    let cases: Vec<(usize, String)> = (0..mutants)
        .map(|_| {
            let seed = rng.below(seeds.len());
            (seed, mutate(&mut rng, &seeds[seed]))
        })
        .collect();
    let fail = |index: usize, what: &str, e: anyhow::Error| {
        let (seed, mutant) = &cases[index];
        anyhow::anyhow!("mutant {index} (of seed spec {seed}) {what}: {e:#}\n--- mutant ---\n{mutant}")
    };
    let path_of = |index: usize| tmp.path().join(format!("mutant-{index}.ron")).to_string_lossy().into_owned();
    let plans = each_case(cases.len(), |index| {
        let path = path_of(index);
        std::fs::write(&path, &cases[index].1)?;
        let ended = survives(&["plan", &path], Duration::from_secs(60));
        Ok(ended.map_err(|e| fail(index, "under `engine plan`", e))?.code == 0)
    })?;
    // Every `RUN_EVERY`th mutant that planned also trains a few steps.
    let planned: Vec<usize> = (0..cases.len()).filter(|&index| plans[index]).collect();
    let to_run: Vec<usize> = planned.iter().copied().skip(RUN_EVERY - 1).step_by(RUN_EVERY).collect();
    each_case(to_run.len(), |k| {
        let index = to_run[k];
        let model_dir = tmp.path().join(format!("run-{index}")).to_string_lossy().into_owned();
        let args =
            ["run", &path_of(index), "--max-steps", "3", "--model-dir", &model_dir, "--set", "eval_spec.steps=1"];
        survives(&args, Duration::from_secs(30)).map_err(|e| fail(index, "under `engine run`", e))
    })?;
    let (planned, ran) = (planned.len(), to_run.len());
    eprintln!("{mutants} mutants: {planned} planned, {ran} also ran");
    anyhow::ensure!(
        planned >= mutants / 10 && ran >= mutants / 40,
        "too few mutants got through the parser to test the rest ({planned}, {ran})"
    );
    Ok(())
}
