//! Examples per second of the Fashion-MNIST input pipeline alone (decode, scale, shuffle
//! 10 000, batch 64, prefetch 2), to compare with the training step rate: input must run
//! well ahead of training (at least 10x) so that it never limits it.
//!
//! ```text
//! cargo run --release --example input_throughput [BATCHES] [DECODE_THREADS]
//! ```

use anyhow::{Context, Result};
use engine_estimator::input::{Dataset, Map};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let batches: usize = args.next().map(|a| a.parse()).transpose().context("BATCHES")?.unwrap_or(5_000);
    let threads: usize = args.next().map(|a| a.parse()).transpose().context("DECODE_THREADS")?.unwrap_or(1);
    let dir = std::env::var("FASHION_MNIST_DIR").unwrap_or_else(|_| "/usr/share/datasets/fashion-mnist".into());
    let dir = Path::new(&dir);

    let opened = Instant::now();
    let dataset = Dataset::from_idx(dir.join("train-images-idx3-ubyte.gz"), dir.join("train-labels-idx1-ubyte.gz"))?
        .map(Map::Scale(255.0))
        .shuffle(10_000, 1)
        .batch(64)
        .repeat(None)
        .prefetch(2)
        .num_parallel_calls(threads);
    let open_s = opened.elapsed().as_secs_f64();

    let mut iter = dataset.iter()?;
    // The first batch fills the shuffle buffer; time the steady state.
    iter.next().context("empty dataset")??;
    let started = Instant::now();
    let mut examples = 0usize;
    for _ in 0..batches {
        let batch = iter.next().context("the dataset ended")??;
        examples += batch.len;
        black_box(&batch);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "input_throughput: fashion-mnist decode+scale+shuffle(10000)+batch(64)+prefetch(2), {threads} decode thread(s): \
         {:.0} examples/s ({batches} batches in {seconds:.2} s; open and gunzip {open_s:.2} s)",
        examples as f64 / seconds
    );
    Ok(())
}
