//! Exact resumption: iterate, save the iterator state, restore it (in this process, and in
//! a fresh process running this test binary again), continue; the concatenation must be
//! the unbroken sequence, with shuffle, filter, random augmentation, repeat and prefetch on.

mod input_common;

use anyhow::{Context, Result, bail};
use engine_estimator::input::{Batch, Dataset, FillMode, FlipMode, IteratorState, Map, Predicate};
use input_common::*;
use std::path::Path;
use std::process::Command;

const DIR_VAR: &str = "ENGINE_INPUT_RESUME_DIR";
const BATCHES_VAR: &str = "ENGINE_INPUT_RESUME_BATCHES";
const TOTAL: usize = 60;
const FIRST: usize = 25;

/// 300 examples, about 17 batches an epoch after the filter: 60 batches cross three epoch
/// boundaries, with a shuffle buffer spanning a fifth of the data.
fn dataset(dir: &Path) -> Result<Dataset> {
    Ok(augmented(unaugmented(dir)?).batch(16).repeat(None).prefetch(3).num_parallel_calls(2))
}

fn unaugmented(dir: &Path) -> Result<Dataset> {
    Ok(Dataset::from_idx(dir.join("images.gz"), dir.join("labels.gz"))?
        .map(Map::Scale(255.0))
        .filter(Predicate::LabelNotIn(vec![3])))
}

/// Random augmentations, drawn by batch number: a resumed iterator must draw as the
/// unbroken one did.
fn augmented(ds: Dataset) -> Dataset {
    ds.map(Map::RandomFlip { feature: "x".into(), mode: FlipMode::HorizontalAndVertical, seed: Some(3) })
        .map(Map::RandomTranslation {
            feature: "x".into(),
            height_factor: 0.3,
            width_factor: 0.3,
            fill_mode: FillMode::Reflect,
            fill_value: 0.0,
            seed: None,
        })
        .map(Map::RandomContrast { feature: "x".into(), factor: 0.3, value_range: [0.0, 1.0], seed: Some(4) })
        .shuffle(64, 42)
}

/// What is compared: ids, labels and pixels of each batch.
fn summary(batches: &[Batch]) -> Vec<(Vec<u64>, Vec<i64>, Vec<f32>)> {
    batches
        .iter()
        .map(|b| {
            let labels = b.labels.as_ref().and_then(|l| l.as_i64()).unwrap_or_default().to_vec();
            (b.ids.clone(), labels, b.features["x"].as_f32().unwrap_or_default().to_vec())
        })
        .collect()
}

fn take(
    iter: impl Iterator<Item = Result<Batch, engine_estimator::input::InputError>>,
    n: usize,
) -> Result<Vec<Batch>> {
    let batches = iter.take(n).collect::<Result<Vec<_>, _>>()?;
    if batches.len() != n {
        bail!("the dataset ended after {} batches", batches.len());
    }
    Ok(batches)
}

fn setup() -> Result<(tempfile::TempDir, Vec<Batch>)> {
    let dir = tempfile::tempdir()?;
    write_idx(dir.path(), 300, 4, 3, true)?;
    let unbroken = take(dataset(dir.path())?.iter()?, TOTAL)?;
    Ok((dir, unbroken))
}

#[test]
fn resume_in_process_continues_the_unbroken_sequence() -> Result<()> {
    let (dir, unbroken) = setup()?;
    let ds = dataset(dir.path())?;
    let mut first = ds.iter()?;
    let head = take(first.by_ref(), FIRST)?;
    let state = first.state();
    assert_eq!(state.batches, FIRST as u64);
    drop(first);

    // Through JSON, as a checkpoint stores it.
    let restored = IteratorState::from_json(&state.to_json()?)?;
    assert_eq!(restored, state);
    let tail = take(ds.iter_from(&restored)?, TOTAL - FIRST)?;
    assert_eq!(summary(&[head.clone(), tail].concat()), summary(&unbroken));

    // The state does not depend on how batches were produced: restore it without prefetching.
    let inline = augmented(unaugmented(dir.path())?).batch(16).repeat(None);
    let tail = take(inline.iter_from(&restored)?, TOTAL - FIRST)?;
    assert_eq!(summary(&tail), summary(&unbroken[FIRST..]));

    // The augmentations did change the pixels (the same examples in the same order
    // without them differ), and they draw anew when an example comes round again.
    let plain = take(unaugmented(dir.path())?.shuffle(64, 42).batch(16).repeat(None).iter()?, TOTAL)?;
    let (plain, seen) = (summary(&plain), summary(&unbroken));
    let changed = plain.iter().zip(&seen).filter(|(a, b)| a.0 == b.0 && a.2 != b.2).count();
    assert!(changed > TOTAL * 9 / 10, "only {changed} of {TOTAL} batches changed");
    let mut versions: std::collections::BTreeMap<u64, Vec<&[f32]>> = Default::default();
    for (ids, _, pixels) in &seen {
        let size = pixels.len() / ids.len();
        for (id, example) in ids.iter().zip(pixels.chunks(size)) {
            versions.entry(*id).or_default().push(example);
        }
    }
    let redrawn = versions.values().filter(|v| v.len() > 1 && v.iter().any(|e| *e != v[0])).count();
    assert!(redrawn > 100, "{redrawn} examples seen twice were augmented alike");

    // Resuming by batch count alone replays the index stream to the same place.
    let tail = take(ds.iter_after(FIRST as u64)?, TOTAL - FIRST)?;
    assert_eq!(summary(&tail), summary(&unbroken[FIRST..]));

    // A state saved mid-stream again, after resuming, still continues exactly.
    let mut resumed = ds.iter_from(&restored)?;
    take(resumed.by_ref(), 10)?;
    let again = resumed.state();
    let tail = take(ds.iter_from(&again)?, TOTAL - FIRST - 10)?;
    assert_eq!(summary(&tail), summary(&unbroken[FIRST + 10..]));
    Ok(())
}

#[test]
fn resume_in_a_fresh_process_continues_the_unbroken_sequence() -> Result<()> {
    let (dir, unbroken) = setup()?;
    let mut first = dataset(dir.path())?.iter()?;
    let head = take(first.by_ref(), FIRST)?;
    std::fs::write(dir.path().join("state.json"), first.state().to_json()?)?;
    drop(first);

    let exe = std::env::current_exe()?;
    let out = Command::new(&exe)
        .args(["--exact", "fresh_process_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, dir.path())
        .env(BATCHES_VAR, (TOTAL - FIRST).to_string())
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if !out.status.success() {
        bail!("child failed: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    let text = std::fs::read_to_string(dir.path().join("continued.json")).context("the child wrote no batches")?;
    let tail: Vec<(Vec<u64>, Vec<i64>, Vec<f32>)> = serde_json::from_str(&text)?;
    let mut joined = summary(&head);
    joined.extend(tail);
    assert_eq!(joined.len(), TOTAL);
    assert_eq!(joined, summary(&unbroken));
    Ok(())
}

/// The child half of the test above; it runs only when that test starts it.
#[test]
#[ignore = "run by resume_in_a_fresh_process_continues_the_unbroken_sequence in a child process"]
fn fresh_process_child() -> Result<()> {
    let Some(dir) = std::env::var_os(DIR_VAR).map(std::path::PathBuf::from) else {
        // Run directly (e.g. with --include-ignored): there is nothing to continue.
        eprintln!("fresh_process_child: {DIR_VAR} is not set; only its parent test runs it");
        return Ok(());
    };
    let n: usize = std::env::var(BATCHES_VAR)?.parse()?;
    let state = IteratorState::from_json(&std::fs::read_to_string(dir.join("state.json"))?)?;
    let tail = take(dataset(&dir)?.iter_from(&state)?, n)?;
    std::fs::write(dir.join("continued.json"), serde_json::to_string(&summary(&tail))?)?;
    Ok(())
}

#[test]
fn a_state_is_refused_by_another_dataset_or_shard() -> Result<()> {
    let (dir, _) = setup()?;
    let mut it = dataset(dir.path())?.iter()?;
    take(it.by_ref(), 2)?;
    let state = it.state();
    let other = dataset(dir.path())?.shuffle(10, 1);
    let err = other.iter_from(&state).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("iterator state does not fit this dataset"), "{err}");
    let sharded = dataset(dir.path())?.shard(2, 1);
    let err = sharded.iter_from(&state).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("pipeline 0 of 1") && err.contains("pipeline 1 of 2"), "{err}");
    Ok(())
}
