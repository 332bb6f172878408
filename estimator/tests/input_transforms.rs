//! Each transform's semantics, on in-memory data whose example `i` is recognisable.

mod input_common;

use anyhow::Result;
use engine_estimator::input::{Dataset, MASK_FEATURE, Map, Predicate};
use engine_graph::DType;
use input_common::*;

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

#[test]
fn batch_keeps_or_drops_the_remainder() -> Result<()> {
    let sizes = |ds: &Dataset| -> Result<Vec<usize>> { Ok(collect(ds)?.iter().map(|b| b.len).collect()) };
    assert_eq!(sizes(&tensors(10)?.batch(4))?, [4, 4, 2]);
    assert_eq!(sizes(&tensors(10)?.batch_drop_remainder(4))?, [4, 4]);
    assert_eq!(ids(&collect(&tensors(10)?.batch(4))?), (0..10).collect::<Vec<_>>());
    // Unbatched datasets yield batches of one.
    assert_eq!(sizes(&tensors(3)?)?, [1, 1, 1]);
    Ok(())
}

#[test]
fn shuffle_permutes_deterministically_and_reshuffles_each_epoch() -> Result<()> {
    let epoch = |ds: Dataset| -> Result<Vec<Vec<u64>>> {
        let all = ids(&collect(&ds.batch(100))?);
        Ok(all.chunks(100).map(<[u64]>::to_vec).collect())
    };
    let a = epoch(tensors(100)?.shuffle(30, 7).repeat(Some(3)))?;
    let b = epoch(tensors(100)?.shuffle(30, 7).repeat(Some(3)))?;
    assert_eq!(a, b, "same seed, same order");
    assert_eq!(a.len(), 3);
    for e in &a {
        assert_eq!(sorted(e.clone()), (0..100).collect::<Vec<_>>(), "each epoch is a permutation");
        assert_ne!(*e, (0..100).collect::<Vec<_>>());
    }
    assert_ne!(a[0], a[1], "each epoch has its own order");
    let c = epoch(tensors(100)?.shuffle(30, 8).repeat(Some(3)))?;
    assert_ne!(a, c, "another seed, another order");
    let fixed = epoch(tensors(100)?.shuffle_with(30, 7, false).repeat(Some(2)))?;
    assert_eq!(fixed[0], fixed[1], "reshuffle_each_iteration = false repeats the order");
    // A buffer of 30 can move an example at most 29 places earlier.
    for (pos, &id) in a[0].iter().enumerate() {
        assert!(id as usize <= pos + 29, "example {id} at position {pos}");
    }
    Ok(())
}

#[test]
fn repeat_after_shuffle_mixes_across_epochs() -> Result<()> {
    // repeat().shuffle(): one buffer spans the epoch boundary; every example of both epochs
    // still comes out exactly once.
    let all = ids(&collect(&tensors(10)?.repeat(Some(2)).shuffle(8, 3).batch(20))?);
    assert_eq!(sorted(all.clone()), sorted((0..10).chain(0..10).collect()));
    Ok(())
}

#[test]
fn repeat_take_skip() -> Result<()> {
    assert_eq!(ids(&collect(&tensors(3)?.repeat(Some(2)))?), [0, 1, 2, 0, 1, 2]);
    assert_eq!(ids(&collect(&tensors(10)?.skip(3).take(4))?), [3, 4, 5, 6]);
    assert_eq!(ids(&collect(&tensors(3)?.repeat(Some(0)))?), Vec::<u64>::new());
    let forever: Vec<u64> =
        tensors(3)?.repeat(None).iter()?.take(7).map(|b| b.map(|b| b.ids[0])).collect::<Result<_, _>>()?;
    assert_eq!(forever, [0, 1, 2, 0, 1, 2, 0]);
    // take after batch counts batches, and repeat after it restarts the whole pass.
    let ds = tensors(10)?.batch(3).take(2).repeat(Some(2));
    assert_eq!(ids(&collect(&ds)?), [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]);
    // An empty dataset repeated forever ends instead of spinning.
    let empty = tensors(5)?.filter(Predicate::LabelIn(vec![9])).repeat(None);
    assert_eq!(collect(&empty)?.len(), 0);
    Ok(())
}

#[test]
fn maps_apply_in_order_and_change_the_schema() -> Result<()> {
    let ds = tensors(4)?
        .map(Map::Scale(2.0))
        .map(Map::Normalize { feature: "x".into(), mean: vec![0.0, 5.0], std: vec![1.0, 5.0] })
        .map(Map::Reshape { feature: "x".into(), shape: vec![2, 1] })
        .map(Map::OneHot { feature: "label".into(), depth: 5 })
        .batch(4);
    let schema = ds.schema()?;
    assert_eq!(schema.features[0].shape, vec![2, 1]);
    assert_eq!(schema.label.as_ref().map(|l| (l.dtype, l.shape.clone())), Some((DType::F32, vec![5])));
    let b = &collect(&ds)?[0];
    // x = [i, 10 i] / 2 then ((x0 - 0) / 1, (x1 - 5) / 5).
    assert_eq!(b.features["x"].as_f32(), Some(&[0.0, -1.0, 0.5, 0.0, 1.0, 1.0, 1.5, 2.0][..]));
    assert_eq!(b.features["x"].shape, vec![4, 2, 1]);
    let labels = b.labels.as_ref().and_then(|l| l.as_f32()).unwrap_or_default();
    assert_eq!(&labels[5..10], &[0.0, 1.0, 0.0, 0.0, 0.0]);
    let cast = tensors(2)?.map(Map::Cast { feature: "x".into(), dtype: DType::I64 }).batch(2);
    assert_eq!(collect(&cast)?[0].features["x"].as_i64(), Some(&[0i64, 0, 1, 10][..]));
    Ok(())
}

#[test]
fn configuration_errors_surface_before_reading() -> Result<()> {
    let err = tensors(2)?.map(Map::OneHot { feature: "nope".into(), depth: 3 }).iter().err();
    assert!(err.is_some_and(|e| e.to_string().contains("no feature or label named `nope`")));
    let err = tensors(2)?.batch(1).filter(Predicate::LabelIn(vec![1])).iter().err();
    assert!(err.is_some_and(|e| e.to_string().contains("filter before `batch`")));
    assert!(tensors(2)?.batch(0).iter().is_err());
    assert!(tensors(2)?.shuffle(0, 1).iter().is_err());
    Ok(())
}

#[test]
fn filter_by_label() -> Result<()> {
    let kept = ids(&collect(&tensors(20)?.filter(Predicate::LabelIn(vec![1, 3])).batch(20))?);
    assert_eq!(kept, [1, 3, 6, 8, 11, 13, 16, 18]);
    let dropped = ids(&collect(&tensors(10)?.filter(Predicate::LabelNotIn(vec![0])).batch(20))?);
    assert_eq!(dropped, [1, 2, 3, 4, 6, 7, 8, 9]);
    Ok(())
}

#[test]
fn filter_out_examples_that_are_not_finite() -> Result<()> {
    let mut x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    x[4] = f32::NAN;
    x[9] = f32::NEG_INFINITY;
    let features = std::collections::BTreeMap::from([("x".to_string(), engine_graph::HostTensor::f32(vec![6, 2], x)?)]);
    let labels = engine_graph::HostTensor::i64(vec![6], (0..6).collect())?;
    let kept = ids(&collect(&Dataset::from_tensors(features, Some(labels))?.filter(Predicate::AllFinite).batch(10))?);
    assert_eq!(kept, [0, 1, 3, 5]);
    Ok(())
}

#[test]
fn cache_returns_the_same_batches() -> Result<()> {
    let plain = tensors(50)?.map(Map::Scale(3.0)).shuffle(10, 2).batch(8).repeat(Some(2));
    let cached = tensors(50)?.map(Map::Scale(3.0)).cache().shuffle(10, 2).batch(8).repeat(Some(2));
    assert_eq!(collect(&plain)?, collect(&cached)?);
    // A second pass over a clone reads the shared cache.
    assert_eq!(collect(&cached.clone())?, collect(&plain)?);
    Ok(())
}

#[test]
fn prefetch_and_parallel_decoding_do_not_change_the_sequence() -> Result<()> {
    let base = || -> Result<Dataset> {
        Ok(tensors(500)?
            .map(Map::Scale(2.0))
            .filter(Predicate::LabelNotIn(vec![4]))
            .shuffle(64, 9)
            .batch(16)
            .repeat(Some(3)))
    };
    let inline = collect(&base()?)?;
    assert_eq!(collect(&base()?.prefetch(2))?, inline);
    assert_eq!(collect(&base()?.prefetch(4).num_parallel_calls(3))?, inline);
    // Dropping a prefetching iterator midway stops its threads (the test would hang otherwise).
    let mut it = base()?.repeat(None).prefetch(8).num_parallel_calls(2).iter()?;
    assert!(it.next().is_some());
    drop(it);
    Ok(())
}

#[test]
fn padded_batches_mask_the_padding() -> Result<()> {
    let batches = collect(&tensors(5)?.padded_batch(2, 4))?;
    assert_eq!(batches.len(), 4);
    let masks: Vec<Vec<f32>> =
        batches.iter().map(|b| b.features[MASK_FEATURE].as_f32().unwrap_or_default().to_vec()).collect();
    assert_eq!(masks, [vec![1.0, 1.0], vec![1.0, 1.0], vec![1.0, 0.0], vec![0.0, 0.0]]);
    assert_eq!(batches[2].features["x"].as_f32(), Some(&[4.0, 40.0, 0.0, 0.0][..]));
    assert!(batches.iter().all(|b| b.len == 2));
    assert_eq!(ids(&batches), [0, 1, 2, 3, 4]);
    // Too few batches for the data is an error, not silent truncation.
    let results: Vec<_> = tensors(5)?.padded_batch(2, 2).iter()?.collect();
    assert!(results.last().is_some_and(|r| r.as_ref().is_err_and(|e| e.to_string().contains("left over"))));
    Ok(())
}

#[test]
fn time_blocked_is_reported() -> Result<()> {
    let mut it = tensors(100)?.batch(10).prefetch(2).iter()?;
    for batch in it.by_ref().take(3) {
        batch?;
    }
    let blocked = it.take_time_blocked();
    assert_eq!(it.take_time_blocked(), std::time::Duration::ZERO, "reset by the previous call");
    assert!(it.stats().blocked >= blocked);
    assert_eq!(it.stats().batches, 3);
    Ok(())
}
