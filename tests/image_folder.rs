//! A model trained from a folder of PNG files, one subfolder per class, as a Keras user's
//! `image_dataset_from_directory` reads them: Fashion-MNIST's first images written as PNGs
//! under their class names, `engine run` on them, `engine predict` answering class names;
//! random augmentation that a resumed run repeats exactly; and the shipped spec on the
//! folders scripts/setup.sh writes.

mod common;

use anyhow::{Context, Result, ensure};
use common::{engine, printed_dict, repo_root, spec_path};
use engine::estimator::checkpoint::read_checkpoint;
use flate2::read::GzDecoder;
use std::io::Read;
use std::path::Path;

const CLASSES: [&str; 10] =
    ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"];

fn read_gz(path: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    GzDecoder::new(std::fs::File::open(path)?).read_to_end(&mut out)?;
    Ok(out)
}

/// The first `n` images of an IDX pair as `dir/<class name>/<index>.png`.
fn write_pngs(images: &str, labels: &str, n: usize, dir: &Path) -> Result<()> {
    let (images, labels) = (read_gz(images)?, read_gz(labels)?);
    for i in 0..n {
        let class = CLASSES[usize::from(labels[8 + i])];
        std::fs::create_dir_all(dir.join(class))?;
        let pixels = images[16 + i * 784..16 + (i + 1) * 784].to_vec();
        let image = image::GrayImage::from_raw(28, 28, pixels).context("28x28 pixels")?;
        image.save(dir.join(class).join(format!("{i:05}.png")))?;
    }
    Ok(())
}

#[test]
fn a_model_trains_from_a_folder_of_pngs_and_predicts_class_names() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let fashion = "/usr/share/datasets/fashion-mnist";
    let (train, test) = (tmp.path().join("train"), tmp.path().join("test"));
    write_pngs(
        &format!("{fashion}/train-images-idx3-ubyte.gz"),
        &format!("{fashion}/train-labels-idx1-ubyte.gz"),
        600,
        &train,
    )?;
    write_pngs(
        &format!("{fashion}/t10k-images-idx3-ubyte.gz"),
        &format!("{fashion}/t10k-labels-idx1-ubyte.gz"),
        200,
        &test,
    )?;
    let input = |root: &Path, rest: &str| {
        format!(
            r#"ImageFolder(root: "{}", image_size: (28, 28), color_mode: Grayscale, maps: [Scale(255.0)], {rest})"#,
            root.display()
        )
    };
    let spec = format!(
        r#"Job(
    model: Sequential(input_shape: [28, 28, 1], layers: [Flatten, Dense(units: 64, activation: Relu), Dense(units: 10)]),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: SGD(learning_rate: 0.1),
    metrics: [Accuracy],
    train_input: {},
    eval_input: {},
    run_config: (model_dir: "{}", random_seed: 1),
    train_spec: (epochs: 5),
)"#,
        input(&train, "batch_size: 20, shuffle_buffer: 600, seed: 1"),
        input(&test, "batch_size: 100"),
        tmp.path().join("run").display()
    );
    let path = tmp.path().join("folder.ron");
    std::fs::write(&path, spec)?;
    let path = path.to_string_lossy().into_owned();
    let run = engine(&["run", &path])?.ok()?;
    let result = printed_dict(&run.stdout)?;
    // 600 examples in batches of 20: 30 steps an epoch.
    ensure!(result["global_step"] == 150.0 && result["accuracy"] > 0.6, "{result:?}\n{}", run.stderr);
    let predicted = engine(&["predict", &path])?.ok()?;
    let first: serde_json::Value = serde_json::from_str(predicted.stdout.lines().next().context("no prediction")?)?;
    ensure!(first["classes"].as_str().is_some_and(|c| CLASSES.contains(&c)), "{first}");
    ensure!(predicted.stdout.lines().count() == 200, "{} predictions", predicted.stdout.lines().count());
    Ok(())
}

/// The training section of the augmentation tests: every augmentation, `flip_seed` for the flip.
fn augmented_spec(root: &Path, model_dir: &Path, flip_seed: u64) -> String {
    format!(
        r#"Job(
    model: Sequential(input_shape: [28, 28, 1], layers: [Conv2D(filters: 4, kernel_size: 3, activation: Relu), Flatten, Dense(units: 10)]),
    loss: SparseCategoricalCrossentropy(from_logits: true),
    optimizer: SGD(learning_rate: 0.05),
    train_input: ImageFolder(root: "{}", image_size: (28, 28), color_mode: Grayscale, batch_size: 20, shuffle_buffer: 600,
        seed: 1, num_parallel_calls: 2, maps: [Scale(255.0), RandomFlip(feature: "image", seed: {flip_seed}),
        RandomTranslation(feature: "image", height_factor: 0.2, width_factor: 0.2),
        RandomBrightness(feature: "image", factor: 0.2, value_range: (0.0, 1.0)),
        RandomContrast(feature: "image", factor: 0.3, value_range: (0.0, 1.0))]),
    run_config: (model_dir: "{}", random_seed: 1, save_checkpoints_steps: 10),
    train_spec: (max_steps: 60),
)"#,
        root.display(),
        model_dir.display()
    )
}

/// A run stopped at step 30 and started again ends with the weights of an unbroken run, bit
/// for bit: each example's augmentation is drawn from the seed and its batch's number, which
/// the checkpoint's input position holds. Another flip seed alone gives other weights, so
/// the augmentations did shape the training.
#[test]
fn augmented_training_resumes_exactly() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let fashion = "/usr/share/datasets/fashion-mnist";
    let root = tmp.path().join("train");
    write_pngs(
        &format!("{fashion}/train-images-idx3-ubyte.gz"),
        &format!("{fashion}/train-labels-idx1-ubyte.gz"),
        600,
        &root,
    )?;
    let train = |name: &str, flip_seed: u64, stops: &[u64]| -> Result<std::collections::BTreeMap<String, Vec<f64>>> {
        let dir = tmp.path().join(name);
        let spec = tmp.path().join(format!("{name}.ron"));
        std::fs::write(&spec, augmented_spec(&root, &dir, flip_seed))?;
        let spec = spec.to_string_lossy().into_owned();
        for stop in stops {
            engine(&["run", &spec, "--max-steps", &stop.to_string()])?.ok()?;
        }
        let last = read_checkpoint(&dir.join("model.ckpt-60").to_string_lossy(), None)?;
        Ok(last.tensors.into_iter().map(|(k, t)| (k, t.to_f64_vec())).collect())
    };
    let unbroken = train("unbroken", 7, &[60])?;
    let resumed = train("resumed", 7, &[30, 60])?;
    ensure!(unbroken.contains_key("conv2d/kernel"), "{:?}", unbroken.keys());
    for (name, values) in &unbroken {
        ensure!(resumed.get(name) == Some(values), "{name} differs after the resume");
    }
    let reseeded = train("reseeded", 8, &[60])?;
    ensure!(reseeded["conv2d/kernel"] != unbroken["conv2d/kernel"], "the flip's seed changed nothing");
    Ok(())
}

/// specs/fashion_mnist_png.ron trains from the folders scripts/setup.sh writes, and answers
/// class names.
#[test]
fn the_shipped_png_spec_trains_from_the_setup_folders() -> Result<()> {
    let root = repo_root().join("data/fashion_mnist_png");
    ensure!(root.join("test").is_dir(), "{} is missing: run scripts/setup.sh", root.display());
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("model").to_string_lossy().into_owned();
    let spec = spec_path("fashion_mnist_png.ron");
    let run = engine(&["run", &spec, "--max-steps", "300", "--model-dir", &dir])?.ok()?;
    let result = printed_dict(&run.stdout)?;
    ensure!(result["global_step"] == 300.0 && result["accuracy"] > 0.55, "{result:?}\n{}", run.stderr);
    ensure!(!run.stderr.contains("neighbouring classes"), "{}", run.stderr);
    Ok(())
}
