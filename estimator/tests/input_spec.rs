//! The RON input spec: parsing (as the job spec embeds it) and building training and
//! evaluation datasets from it.

mod input_common;

use anyhow::Result;
use engine_estimator::input::{AutoShardPolicy, FeatureKind, InputContext, InputSpec, MASK_FEATURE, Map, Predicate};
use input_common::*;

const FASHION_SPEC: &str = r#"Idx(images: "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", labels: "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", scale: 255.0, batch_size: 64, shuffle_buffer: 10000, seed: 1)"#;

#[test]
fn the_fashion_mnist_spec_parses_with_defaults() -> Result<()> {
    let spec: InputSpec = ron::from_str(FASHION_SPEC)?;
    let InputSpec::Idx {
        images,
        scale,
        batch_size,
        shuffle_buffer,
        seed,
        reshuffle_each_iteration,
        shard_policy,
        prefetch,
        maps,
        ..
    } = &spec
    else {
        anyhow::bail!("parsed as {spec:?}");
    };
    assert!(images.ends_with("train-images-idx3-ubyte.gz"));
    assert_eq!((*scale, *batch_size, *shuffle_buffer, *seed), (Some(255.0), 64, 10_000, 1));
    assert!(*reshuffle_each_iteration);
    assert_eq!((*shard_policy, *prefetch), (AutoShardPolicy::Auto, 2));
    assert!(maps.is_empty());
    Ok(())
}

#[test]
fn csv_and_tfrecord_specs_parse_bare_or_optional_fields() -> Result<()> {
    let spec: InputSpec = ron::from_str(
        r#"Csv(path: "iris.csv", label: "species", categorical: {"species": ["a", "b"]}, batch_size: 32,
               shuffle_buffer: 1000, maps: [Normalize(feature: "x", mean: [1.0], std: [2.0])],
               filters: [LabelIn([0])], shard_policy: Data, take: 10)"#,
    )?;
    let InputSpec::Csv { label, maps, filters, take, shard_policy, .. } = &spec else { anyhow::bail!("{spec:?}") };
    assert_eq!(label.as_deref(), Some("species"));
    assert_eq!(maps[0], Map::Normalize { feature: "x".into(), mean: vec![1.0], std: vec![2.0] });
    assert_eq!(filters[0], Predicate::LabelIn(vec![0]));
    assert_eq!((*take, *shard_policy), (Some(10), AutoShardPolicy::Data));
    let spec: InputSpec = ron::from_str(r#"Csv(path: "iris.csv", label: Some("species"), batch_size: 32)"#)?;
    assert!(matches!(spec, InputSpec::Csv { label: Some(ref l), .. } if l == "species"));

    let spec: InputSpec = ron::from_str(
        r#"TfRecord(files: "data/train-*.tfrecord", features: {"x": (kind: Float, shape: [4]), "y": (kind: Int64)},
                    label: "y", batch_size: 32)"#,
    )?;
    let InputSpec::TfRecord { features, .. } = &spec else { anyhow::bail!("{spec:?}") };
    assert_eq!(features["x"].kind, FeatureKind::Float);
    assert_eq!(features["y"].shape, Vec::<usize>::new());

    let err = ron::from_str::<InputSpec>(r#"Idx(images: "a", labels: "b", batch_size: 1, shufle_buffer: 5)"#).err();
    assert!(err.is_some_and(|e| e.to_string().contains("shufle_buffer")), "a misspelt field is an error");
    Ok(())
}

#[test]
fn fashion_mnist_training_and_evaluation_datasets() -> Result<()> {
    fashion("train-images-idx3-ubyte.gz")?;
    let spec: InputSpec = ron::from_str(FASHION_SPEC)?;
    let ctx = InputContext::default();
    assert_eq!(spec.steps_per_epoch(&ctx)?, 937); // 60000 / 64, remainder dropped
    let mut train = spec.build(true, &ctx)?.iter()?;
    let batch = train.next().transpose()?.ok_or_else(|| anyhow::anyhow!("no batch"))?;
    assert_eq!(batch.features["x"].shape, vec![64, 28, 28, 1]);
    assert_eq!(batch.labels.as_ref().map(|l| l.shape.clone()), Some(vec![64]));
    assert!(batch.features["x"].as_f32().unwrap_or_default().iter().all(|v| (0.0..=1.0).contains(v)));
    // The state of a 10 000-example shuffle buffer stays small enough for every checkpoint.
    let json = train.state().to_json()?;
    assert!(json.len() < 128 * 1024, "{} bytes", json.len());

    let eval: InputSpec = ron::from_str(&FASHION_SPEC.replace("train-", "t10k-"))?;
    assert_eq!(eval.eval_steps(&ctx)?, 157);
    let batches = eval.build(false, &ctx)?.iter()?.collect::<Result<Vec<_>, _>>()?;
    assert_eq!(batches.len(), 157);
    // Exact batches: the last holds the 16 remaining examples and no padding or mask.
    assert_eq!(batches[156].len, 16); // 10000 - 156 * 64
    assert!(!batches[156].features.contains_key(MASK_FEATURE));
    assert_eq!(batches.iter().map(|b| b.len).sum::<usize>(), 10000);
    Ok(())
}

#[test]
fn spec_datasets_agree_across_pipelines() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pattern = write_csv_parts(dir.path(), &[9, 4, 7])?;
    let spec: InputSpec = ron::from_str(&format!(
        r#"Csv(path: "{pattern}", label: "y", batch_size: 2, shuffle_buffer: 8, seed: 3, shard_policy: File)"#
    ))?;
    let mut steps = Vec::new();
    let mut evaluated = Vec::new();
    for index in 0..3 {
        let ctx = InputContext::new(3, index, 3)?;
        assert_eq!(spec.global_batch_size(&ctx), 6);
        steps.push(spec.steps_per_epoch(&ctx)?);
        // Training repeats forever: three epochs of the agreed 2 steps.
        let train: Vec<_> = spec.build(true, &ctx)?.iter()?.take(6).collect::<Result<_, _>>()?;
        assert_eq!(train.len(), 6);
        // Each pipeline evaluates exactly its own shard (files of 9, 4, 7 examples).
        let eval: Vec<_> = spec.build(false, &ctx)?.iter()?.collect::<Result<_, _>>()?;
        assert_eq!(eval.len(), [5, 2, 4][index], "ceil(shard / 2) batches");
        evaluated.extend(ids(&eval));
    }
    assert_eq!(steps, [2, 2, 2]); // the 4-example file allows 2 full batches
    evaluated.sort_unstable();
    assert_eq!(evaluated, (0..20).collect::<Vec<_>>());

    let ctx = InputContext::new(4, 0, 4)?;
    let err = spec.build(true, &ctx).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("at least as many input files")));
    Ok(())
}

#[test]
fn tfrecord_spec_builds_from_python_written_files() -> Result<()> {
    let dir = tfrecord_fixture()?;
    let spec: InputSpec = ron::from_str(&format!(
        r#"TfRecord(files: "{}/train-*.tfrecord", features: {{"x": (kind: Float, shape: [4]), "y": (kind: Int64)}},
                    label: "y", batch_size: 4, maps: [OneHot(feature: "y", depth: 3)])"#,
        dir.path().display()
    ))?;
    let ctx = InputContext::new(3, 2, 3)?;
    let batches = spec.build(false, &ctx)?.iter()?.collect::<Result<Vec<_>, _>>()?;
    // Three files, three pipelines: pipeline 2 reads train-2 (examples 20..24).
    assert_eq!(ids(&batches), [20, 21, 22, 23, 24]);
    assert_eq!(batches[0].labels.as_ref().map(|l| l.shape.clone()), Some(vec![4, 3]));
    Ok(())
}

/// What an export runs before the model: the input's scale and its Scale and Normalize maps
/// (a map of the label alone does not concern a request), composed per element when a Pack
/// follows; nothing when another map changes the features' form, since a request must then
/// carry them as the model sees them.
#[test]
fn serving_preprocessing_is_the_scale_and_normalize_of_features() -> Result<()> {
    use engine_estimator::input::{FeatureInfo, Schema};
    use engine_graph::DType;
    let images = Schema::new(
        vec![FeatureInfo::new("image", DType::F32, vec![28, 28, 1])],
        Some(FeatureInfo::new("label", DType::I64, vec![])),
    )?;
    let with_maps = |maps: &str| -> Result<InputSpec> {
        Ok(ron::from_str(&FASHION_SPEC.replace("seed: 1)", &format!("seed: 1, maps: [{maps}])")))?)
    };
    let normalize = Map::Normalize { feature: "image".into(), mean: vec![0.5], std: vec![0.25] };
    let spec: InputSpec = ron::from_str(FASHION_SPEC)?;
    assert_eq!(spec.serving_preprocessing(&images), Some(vec![Map::Scale(255.0)]));
    let spec =
        with_maps(r#"Normalize(feature: "image", mean: [0.5], std: [0.25]), OneHot(feature: "label", depth: 10)"#)?;
    assert_eq!(spec.serving_preprocessing(&images), Some(vec![Map::Scale(255.0), normalize]));
    let spec = with_maps(r#"Reshape(feature: "image", shape: [784])"#)?;
    assert_eq!(spec.serving_preprocessing(&images), None);

    // A table: `a` (f32), `colour` (a class index: not scaled), `c` (f32 [2]); Scale(2) then
    // Normalize(c) then Pack. Element by element, raw r becomes a r + c' with
    // a: [1/2, 1, 1/8, 1/12], c': [0, 0, -1/4, -2/12], i.e. mean -c'/a, std 1/a.
    let table = Schema::new(
        vec![
            FeatureInfo::new("a", DType::F32, vec![]),
            FeatureInfo::new("colour", DType::I64, vec![]),
            FeatureInfo::new("c", DType::F32, vec![2]),
        ],
        Some(FeatureInfo::new("label", DType::I64, vec![])),
    )?;
    let csv = r#"Csv(path: "t.csv", label: "label", batch_size: 4, maps: [Scale(2.0), Normalize(feature: "c", mean: [1.0, 2.0], std: [4.0, 6.0]), Pack(into: "x")])"#;
    let spec: InputSpec = ron::from_str(csv)?;
    let maps = spec.serving_preprocessing(&table).unwrap_or_default();
    let [Map::Normalize { feature, mean, std }] = maps.as_slice() else {
        anyhow::bail!("no per-element Normalize for the packed table: {maps:?}");
    };
    assert_eq!(feature, "x");
    assert_eq!(std, &[2.0, 1.0, 8.0, 12.0]);
    assert_eq!(mean, &[0.0, 0.0, 2.0, 4.0]);
    let cast =
        r#"Csv(path: "t.csv", label: "label", batch_size: 4, maps: [Cast(feature: "a", dtype: I64), Pack(into: "x")])"#;
    assert_eq!(ron::from_str::<InputSpec>(cast)?.serving_preprocessing(&table), None);
    Ok(())
}

/// Random augmentations in a spec's `maps`: parsed with Keras' names and defaults, run on
/// training batches only (an evaluation dataset of the same section sees the images as they
/// are, and so does a served model), and refused anywhere but after every other map.
#[test]
fn augmentations_run_in_training_only_and_come_last() -> Result<()> {
    fashion("t10k-images-idx3-ubyte.gz")?;
    let with_maps = |maps: &str| -> Result<InputSpec> {
        let spec = FASHION_SPEC.replace("train-", "t10k-").replace("seed: 1)", &format!("seed: 1, maps: [{maps}])"));
        Ok(ron::from_str(&spec)?)
    };
    let augment = r#"RandomFlip(feature: "x", mode: Horizontal), RandomTranslation(feature: "x", height_factor: 0.1, width_factor: 0.1),
        RandomBrightness(feature: "x", factor: 0.2, value_range: (0.0, 1.0)), RandomContrast(feature: "x", factor: 0.2, value_range: (0.0, 1.0))"#;
    let spec = with_maps(augment)?;
    let plain = with_maps("")?;
    let ctx = InputContext::default();
    let source = spec.open()?;
    spec.check(&source, &engine_estimator::Resources::of_this_machine())?;
    let first = |spec: &InputSpec, training: bool| -> Result<Vec<f32>> {
        let batch = spec.build_from(&source, training, &ctx)?.iter()?.next().transpose()?;
        Ok(batch.and_then(|b| b.features["x"].as_f32().map(<[f32]>::to_vec)).unwrap_or_default())
    };
    assert_eq!(first(&spec, false)?, first(&plain, false)?, "evaluation must see the images as they are");
    let (augmented, unaugmented) = (first(&spec, true)?, first(&plain, true)?);
    assert_eq!(augmented.len(), unaugmented.len());
    assert_ne!(augmented, unaugmented, "training batches are augmented");
    assert!(augmented.iter().all(|v| (0.0..=1.0).contains(v)), "clipped to the value range");
    // Seeded by the section's seed: the same spec draws the same augmentations.
    assert_eq!(first(&spec, true)?, augmented);
    let reseeded: InputSpec = ron::from_str(&ron::to_string(&spec)?.replace("seed:1", "seed:2"))?;
    assert_ne!(first(&reseeded, true)?, augmented);

    use engine_estimator::input::{FeatureInfo, Schema};
    let images = Schema::new(
        vec![FeatureInfo::new("x", engine_graph::DType::F32, vec![28, 28, 1])],
        Some(FeatureInfo::new("y", engine_graph::DType::I64, vec![])),
    )?;
    assert_eq!(spec.serving_preprocessing(&images), Some(vec![Map::Scale(255.0)]));

    let late = with_maps(r#"RandomFlip(feature: "x"), Normalize(feature: "x", mean: [0.5], std: [0.5])"#)?;
    let err = late
        .check(&source, &engine_estimator::Resources::of_this_machine())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("maps[1]") && err.contains("after every other map"), "{err}");
    let far = with_maps(r#"RandomTranslation(feature: "x", height_factor: 2.0, width_factor: 0.1)"#)?;
    let err = far
        .check(&source, &engine_estimator::Resources::of_this_machine())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("maps[0]") && err.contains("height_factor 2"), "{err}");
    Ok(())
}
