//! Every source read end to end, and malformed input reported with file and record/line.

mod input_common;

use anyhow::Result;
use engine_estimator::input::{CsvOptions, Dataset, FeatureDef, FeatureKind, FeatureSpec, InputError, Map, TensorRef};
use engine_graph::{DType, HostData};
use input_common::*;
use serde_json::Value;

#[test]
fn idx_raw_and_gzipped_give_the_same_batches() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let raw = write_idx(dir.path(), 7, 3, 2, false)?;
    let gz = write_idx(dir.path(), 7, 3, 2, true)?;
    let a = collect(&Dataset::from_idx(&raw.0, &raw.1)?.batch(4))?;
    let b = collect(&Dataset::from_idx(&gz.0, &gz.1)?.batch(4))?;
    assert_eq!(a, b);
    assert_eq!(a.len(), 2);
    let x = &a[1].features["x"];
    assert_eq!(x.shape, vec![3, 3, 2, 1]);
    let expected: Vec<f32> = (4..7).flat_map(|i| (0..6).map(move |k| f32::from(pixel(i, k)))).collect();
    assert_eq!(x.as_f32(), Some(expected.as_slice()));
    assert_eq!(a[1].labels.as_ref().and_then(|l| l.as_i64()), Some(&[4i64, 5, 6][..]));
    Ok(())
}

#[test]
fn fashion_mnist_decodes_as_nhwc_with_labels() -> Result<()> {
    let ds = Dataset::from_idx(fashion("t10k-images-idx3-ubyte.gz")?, fashion("t10k-labels-idx1-ubyte.gz")?)?;
    assert_eq!(ds.source_len(), 10_000);
    let schema = ds.source_schema();
    assert_eq!(schema.features[0].name, "x");
    assert_eq!(schema.features[0].shape, vec![28, 28, 1]);
    assert_eq!(schema.label.as_ref().map(|l| l.dtype), Some(DType::I64));
    let batches = collect(&ds.map(Map::Scale(255.0)).batch(1000))?;
    assert_eq!(batches.len(), 10);
    let mut class_counts = [0usize; 10];
    for batch in &batches {
        let x = batch.features["x"].as_f32().unwrap_or_default();
        assert!(x.iter().all(|v| (0.0..=1.0).contains(v)));
        for &label in batch.labels.as_ref().and_then(|l| l.as_i64()).unwrap_or_default() {
            class_counts[label as usize] += 1;
        }
    }
    // The test set is balanced: 1000 examples of each class.
    assert_eq!(class_counts, [1000; 10]);
    Ok(())
}

#[test]
fn csv_columns_labels_and_vocabularies() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("iris.csv");
    std::fs::write(
        &path,
        "sepal_length,sepal_width,note,species\n5.1,3.5,x,setosa\n7.0,3.2,y,versicolor\n6.3,3.3,z,virginica\n",
    )?;
    let options = CsvOptions::new(path.display().to_string())
        .label("species")
        .columns(["sepal_width", "sepal_length"])
        .categorical("species", ["setosa", "versicolor", "virginica"]);
    let batches = collect(&Dataset::from_csv(options)?.batch(3))?;
    let batch = &batches[0];
    assert_eq!(batch.features.keys().collect::<Vec<_>>(), ["sepal_length", "sepal_width"]);
    assert_eq!(batch.features["sepal_width"].as_f32(), Some(&[3.5f32, 3.2, 3.3][..]));
    assert_eq!(batch.labels.as_ref().and_then(|l| l.as_i64()), Some(&[0i64, 1, 2][..]));
    Ok(())
}

#[test]
fn csv_missing_column_names_file_and_column() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("data.csv");
    std::fs::write(&path, "a,b\n1,2\n")?;
    let Err(err) = Dataset::from_csv(CsvOptions::new(path.display().to_string()).label("species")) else {
        anyhow::bail!("a missing label column must be an error");
    };
    let text = err.to_string();
    assert!(matches!(err, InputError::MissingColumn { .. }), "{text}");
    assert!(text.contains("data.csv") && text.contains("`species`") && text.contains("a, b"), "{text}");

    std::fs::write(&path, "a,b\n1,2\n3\n")?;
    let err = Dataset::from_csv(CsvOptions::new(path.display().to_string())).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("data.csv:3:")), "{err:?}");
    Ok(())
}

fn spec() -> FeatureSpec {
    FeatureSpec::new()
        .feature("x", FeatureDef::float(vec![2, 2]))
        .feature("y", FeatureDef::int64(vec![]))
        .feature("big", FeatureDef::int64(vec![2]))
        .feature("color", FeatureDef::new(FeatureKind::Bytes, vec![]).with_vocabulary(["red", "green", "blue"]))
        .feature("img", FeatureDef::raw_bytes(vec![3, 2, 1]))
        .label("y")
}

fn as_f32s(v: &Value) -> Vec<f32> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_f64).map(|x| x as f32).collect()).unwrap_or_default()
}

fn as_i64s(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(a) => a.iter().filter_map(Value::as_i64).collect(),
        other => other.as_i64().into_iter().collect(),
    }
}

#[test]
fn tfrecord_written_by_python_reads_back() -> Result<()> {
    let dir = tfrecord_fixture()?;
    let expected: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(dir.path().join("expected.json"))?)?;
    let ds = Dataset::from_tfrecord(&format!("{}/train-*.tfrecord", dir.path().display()), spec())?;
    assert_eq!(ds.source_len(), 25);
    let batches = collect(&ds.batch(25))?;
    let b = &batches[0];
    let want = |key: &str| expected.iter().map(|e| e[key].clone()).collect::<Vec<_>>();
    let x: Vec<f32> = want("x").iter().flat_map(as_f32s).collect();
    assert_eq!(b.features["x"].shape, vec![25, 2, 2]);
    assert_eq!(b.features["x"].as_f32(), Some(x.as_slice()));
    let big: Vec<i64> = want("big").iter().flat_map(as_i64s).collect();
    assert_eq!(b.features["big"].as_i64(), Some(big.as_slice()));
    let color: Vec<i64> = want("color").iter().flat_map(as_i64s).collect();
    assert_eq!(b.features["color"].as_i64(), Some(color.as_slice()));
    let img: Vec<f32> = want("img").iter().flat_map(as_f32s).collect();
    assert_eq!(b.features["img"].as_f32(), Some(img.as_slice()));
    let y: Vec<i64> = want("y").iter().flat_map(as_i64s).collect();
    assert_eq!(b.labels.as_ref().and_then(|l| l.as_i64()), Some(y.as_slice()));
    Ok(())
}

#[test]
fn tfrecord_malformed_files_name_file_and_record() -> Result<()> {
    let dir = tfrecord_fixture()?;
    let path = |name: &str| format!("{}/{name}", dir.path().display());

    let err = Dataset::from_tfrecord(&path("truncated.tfrecord"), spec()).err();
    let text = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(matches!(err, Some(InputError::TruncatedRecord { record: 9, .. })), "{text}");
    assert!(text.contains("truncated.tfrecord: record 9"), "{text}");

    let ds = Dataset::from_tfrecord(&path("badcrc.tfrecord"), spec())?;
    let results: Vec<_> = ds.batch(1).iter()?.collect();
    assert_eq!(results.len(), 5, "iteration stops at the first error");
    assert!(results[..4].iter().all(Result::is_ok));
    let text = results[4].as_ref().err().map(ToString::to_string).unwrap_or_default();
    assert!(text.contains("badcrc.tfrecord: record 4") && text.contains("data CRC mismatch"), "{text}");

    let wrong_dtype = FeatureSpec::new().feature("y", FeatureDef::float(vec![]));
    let ds = Dataset::from_tfrecord(&path("train-1.tfrecord"), wrong_dtype)?;
    let err = ds.iter()?.next().and_then(Result::err);
    let text = err.as_ref().map(ToString::to_string).unwrap_or_default();
    assert!(matches!(err, Some(InputError::BadFeature { record: 0, .. })), "{text}");
    assert!(text.contains("train-1.tfrecord: record 0: feature `y`") && text.contains("int64_list"), "{text}");
    Ok(())
}

#[test]
fn tensors_and_filter_closures_see_examples() -> Result<()> {
    let ds = tensors(10)?.filter_fn("even x", |ex| {
        ex.feature("x").and_then(|t: TensorRef<'_>| t.as_f32()).is_some_and(|x| x[0] as i64 % 2 == 0)
    });
    let batches = collect(&ds.batch(10))?;
    assert_eq!(ids(&batches), vec![0, 2, 4, 6, 8]);
    assert_eq!(batches[0].features["x"].data, HostData::F32(vec![0., 0., 2., 20., 4., 40., 6., 60., 8., 80.]));
    let example = batches[0].example(1).map(|e| e.label);
    assert_eq!(example, Some(Some(engine_graph::HostTensor::scalar_i64(2))));
    Ok(())
}

/// `ImageFolder`: classes from the subfolders, sorted; PNG and JPEG decoded to the image
/// size (resized when they differ) in the color mode, as values 0 to 255; a file that is no
/// image is named when read; an evaluation folder is read in the training folder's classes.
#[test]
fn image_folder_reads_classes_from_subfolders() -> Result<()> {
    use engine_estimator::input::ColorMode;
    let tmp = tempfile::tempdir()?;
    let root = tmp.path();
    for class in ["shirt", "boot"] {
        std::fs::create_dir(root.join(class))?;
    }
    let gray = |side: u32, value: u8| image::GrayImage::from_pixel(side, side, image::Luma([value]));
    gray(4, 10).save(root.join("boot/a.png"))?;
    gray(4, 20).save(root.join("boot/b.png"))?;
    gray(8, 200).save(root.join("shirt/big.png"))?;
    image::RgbImage::from_pixel(4, 4, image::Rgb([90, 90, 90])).save(root.join("shirt/c.jpg"))?;
    std::fs::write(root.join("shirt/notes.txt"), "not an image")?;

    let ds = Dataset::from_image_folder(root, [4, 4], ColorMode::Grayscale, None)?;
    assert_eq!(ds.source_len(), 4, "the .txt file is not an example");
    assert_eq!(ds.source_schema().features[0].shape, vec![4, 4, 1]);
    let batches = collect(&ds.batch(4))?;
    let x = batches[0].features["image"].as_f32().unwrap_or_default().to_vec();
    let labels = batches[0].labels.as_ref().and_then(|l| l.as_i64()).unwrap_or_default().to_vec();
    assert_eq!(labels, vec![0, 0, 1, 1], "boot before shirt, each folder's files sorted");
    let mean = |k: usize| x[k * 16..(k + 1) * 16].iter().sum::<f32>() / 16.0;
    assert_eq!((mean(0), mean(1), mean(2)), (10.0, 20.0, 200.0), "the 8x8 image resized to 4x4");
    assert!((mean(3) - 90.0).abs() < 3.0, "the JPEG's gray: {}", mean(3));

    let rgb = Dataset::from_image_folder(root, [4, 4], ColorMode::Rgb, None)?;
    assert_eq!(rgb.source_schema().features[0].shape, vec![4, 4, 3]);

    // An evaluation folder in the training folder's classes: a folder it lacks is refused.
    let classes = vec!["boot".to_string(), "coat".to_string(), "shirt".to_string()];
    let ds = Dataset::from_image_folder(root, [4, 4], ColorMode::Grayscale, Some(&classes))?;
    let labels = collect(&ds.batch(4))?[0].labels.as_ref().and_then(|l| l.as_i64()).unwrap_or_default().to_vec();
    assert_eq!(labels, vec![0, 0, 2, 2], "shirt is class 2 of the training folder");
    let err = Dataset::from_image_folder(root, [4, 4], ColorMode::Grayscale, Some(&classes[..2]))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("`shirt`") && err.contains("boot, coat"), "{err}");

    // A file with an image's name but not its bytes is named when it is read.
    std::fs::write(root.join("boot/broken.png"), b"\x89PNG but no more")?;
    let ds = Dataset::from_image_folder(root, [4, 4], ColorMode::Grayscale, None)?;
    let err = collect(&ds.batch(5)).err().map(|e| format!("{e:#}")).unwrap_or_default();
    assert!(err.contains("broken.png"), "{err}");
    Ok(())
}

/// A strided iterator (one replica's share of an elastic job's pipeline) decodes only its
/// own batches: a broken image in another replica's batch does not fail it, inline (where
/// it is not even read) or prefetched, while the replica whose batch holds it gets the
/// error naming the file.
#[test]
fn a_strided_iterator_decodes_only_its_own_batches() -> Result<()> {
    use engine_estimator::input::ColorMode;
    let tmp = tempfile::tempdir()?;
    let root = tmp.path();
    std::fs::create_dir(root.join("boot"))?;
    let gray = |value: u8| image::GrayImage::from_pixel(4, 4, image::Luma([value]));
    gray(10).save(root.join("boot/a.png"))?;
    gray(20).save(root.join("boot/b.png"))?;
    std::fs::write(root.join("boot/broken.png"), b"\x89PNG but no more")?;
    gray(30).save(root.join("boot/c.png"))?;
    // Batches of one, in file order: a, b, broken, c.
    let folder = || Dataset::from_image_folder(root, [4, 4], ColorMode::Grayscale, None);
    for prefetched in [false, true] {
        let ds = match prefetched {
            false => folder()?.batch(1).prefetch(0),
            true => folder()?.batch(1).prefetch(4).num_parallel_calls(2),
        };
        let mine: Vec<Vec<u64>> = ds.iter()?.strided(2, 1).map(|b| Ok(b?.ids)).collect::<Result<_>>()?;
        assert_eq!(mine, vec![vec![1], vec![3]], "prefetched: {prefetched}");
        let other = ds.iter()?.strided(2, 0).map(|b| b.map(|b| b.ids)).collect::<Result<Vec<_>, _>>();
        let err = other.err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(err.contains("broken.png"), "prefetched: {prefetched}: {err}");
    }
    Ok(())
}
