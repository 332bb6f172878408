//! Random augmentation of training images, as Keras' preprocessing layers `RandomFlip`,
//! `RandomTranslation`, `RandomBrightness` and `RandomContrast` do it, but in the input
//! pipeline: per example, on the decoding threads, after every other map, filter and
//! cache, and only in a dataset built for training (evaluation, prediction and exported
//! models never see them, as Keras' layers are inactive at inference).
//!
//! An example's draws are a pure function of the seed, the augmentation's position, the
//! shard, the batch's number in the iteration and the example's place in the batch. A run
//! resumed from a checkpoint (whose iterator state holds the batch count) therefore augments
//! every later batch exactly as the unbroken run would have, with no generator state to
//! save, and an epoch's second pass over an image draws afresh (its batch number differs).

use super::error::{InputError, Result};
use super::rng::{derive, mix64};
use super::schema::Schema;
use engine_graph::{DType, HostData};
use serde::{Deserialize, Serialize};

/// Which axes `RandomFlip` may flip (each with probability one half), Keras' `mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlipMode {
    #[default]
    HorizontalAndVertical,
    Horizontal,
    Vertical,
}

/// What `RandomTranslation` puts where the shifted image leaves the frame, as Keras'
/// `fill_mode`: `Reflect` (the default) mirrors about the edge (`d c b a | a b c d | d c b
/// a`), `Wrap` repeats the image, `Nearest` repeats the edge pixel, `Constant` writes
/// `fill_value`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FillMode {
    #[default]
    Reflect,
    Wrap,
    Nearest,
    Constant,
}

/// An augmentation resolved against the schema: the column and the image's layout.
#[derive(Debug, Clone)]
pub(crate) struct CompiledAugment {
    column: usize,
    /// `[height, width, channels]` of one example (channels 1 for a `[h, w]` feature).
    hwc: [usize; 3],
    /// The stream this augmentation draws from, for the whole iteration.
    seed: u64,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Flip { horizontal: bool, vertical: bool },
    Translate { height: f32, width: f32, fill: FillMode, value: f32 },
    Brightness { factor: f32, range: [f32; 2] },
    Contrast { factor: f32, range: [f32; 2] },
}

/// What a `Map` variant that augments asks for, before it is checked.
pub(crate) enum Request<'a> {
    Flip { feature: &'a str, mode: FlipMode },
    Translate { feature: &'a str, height: f32, width: f32, fill: FillMode, value: f32 },
    Brightness { feature: &'a str, factor: f32, range: [f32; 2] },
    Contrast { feature: &'a str, factor: f32, range: [f32; 2] },
}

impl Request<'_> {
    fn feature(&self) -> &str {
        match self {
            Request::Flip { feature, .. }
            | Request::Translate { feature, .. }
            | Request::Brightness { feature, .. }
            | Request::Contrast { feature, .. } => feature,
        }
    }

    /// Checks the request against the schema it will see (an f32 feature, an image where
    /// the augmentation is spatial, factors within Keras' bounds) and resolves it. `seed`
    /// is the augmentation's own stream (its seed mixed with its position and the shard).
    pub(crate) fn compile(&self, schema: &Schema, seed: u64) -> Result<CompiledAugment> {
        let feature = self.feature();
        let invalid = |detail: String| InputError::invalid(format!("augmenting `{feature}`: {detail}"));
        let column = schema.index_of(feature)?;
        if Some(column) == schema.label_index() {
            return Err(invalid("the label is not augmented".into()));
        }
        let info = schema.column(column).ok_or_else(|| invalid("no such column".into()))?;
        if info.dtype != DType::F32 {
            return Err(invalid(format!("needs an f32 feature, this one is {}", info.dtype)));
        }
        let spatial = !matches!(self, Request::Brightness { .. });
        let hwc = match info.shape[..] {
            [h, w] => [h, w, 1],
            [h, w, c] => [h, w, c],
            _ if !spatial => [1, info.size(), 1],
            _ => {
                return Err(invalid(format!(
                    "needs an image, [height, width] or [height, width, channels]; this feature is {:?}",
                    info.shape
                )));
            }
        };
        let fraction = |name: &str, f: f32| {
            if (0.0..=1.0).contains(&f) { Ok(f) } else { Err(invalid(format!("{name} {f} must be between 0 and 1"))) }
        };
        let range = |r: [f32; 2]| {
            if r[0].is_finite() && r[1].is_finite() && r[0] < r[1] {
                Ok(r)
            } else {
                Err(invalid(format!("value_range {r:?} must be two finite numbers, the lower first")))
            }
        };
        let kind = match *self {
            Request::Flip { mode, .. } => {
                Kind::Flip { horizontal: mode != FlipMode::Vertical, vertical: mode != FlipMode::Horizontal }
            }
            Request::Translate { height, width, fill, value, .. } => {
                if !value.is_finite() {
                    return Err(invalid(format!("fill_value {value} must be finite")));
                }
                Kind::Translate {
                    height: fraction("height_factor", height)?,
                    width: fraction("width_factor", width)?,
                    fill,
                    value,
                }
            }
            Request::Brightness { factor, range: r, .. } => {
                Kind::Brightness { factor: fraction("factor", factor)?, range: range(r)? }
            }
            Request::Contrast { factor, range: r, .. } => {
                Kind::Contrast { factor: fraction("factor", factor)?, range: range(r)? }
            }
        };
        Ok(CompiledAugment { column, hwc, seed, kind })
    }
}

/// Draw `k` of an example's stream, uniform in [0, 1).
fn uniform(example: u64, k: u64) -> f32 {
    // 24 bits: every value is an exact f32.
    (mix64(example ^ mix64(k)) >> 40) as f32 / (1u64 << 24) as f32
}

/// `u` in [0, 1) to [-f, f].
fn symmetric(u: f32, f: f32) -> f32 {
    (2.0 * u - 1.0) * f
}

impl CompiledAugment {
    /// Gives the augmentation its stream for the whole iteration: its seed mixed with its
    /// position among the dataset's augmentations and the shard, so that two augmentations
    /// (or two pipelines) never draw alike.
    pub(crate) fn reseed(mut self, position: usize, shard: usize) -> Self {
        self.seed = derive(derive(self.seed, position as u64), shard as u64);
        self
    }

    /// Augments the example whose values start at `starts[column]` of `batch`'s column:
    /// example `place` of batch number `batch_number` of the iteration.
    pub(crate) fn apply(&self, batch: &mut [HostData], starts: &[usize], batch_number: u64, place: usize) {
        let Some(HostData::F32(values)) = batch.get_mut(self.column) else { return };
        let start = starts.get(self.column).copied().unwrap_or(0);
        let [h, w, c] = self.hwc;
        let Some(image) = values.get_mut(start..start + h * w * c) else { return };
        let example = derive(derive(self.seed, batch_number), place as u64);
        match self.kind {
            Kind::Flip { horizontal, vertical } => {
                if horizontal && uniform(example, 0) < 0.5 {
                    for row in image.chunks_exact_mut(w * c) {
                        for x in 0..w / 2 {
                            for k in 0..c {
                                row.swap(x * c + k, (w - 1 - x) * c + k);
                            }
                        }
                    }
                }
                if vertical && uniform(example, 1) < 0.5 {
                    for y in 0..h / 2 {
                        let (top, bottom) = image.split_at_mut((h - 1 - y) * w * c);
                        top[y * w * c..(y + 1) * w * c].swap_with_slice(&mut bottom[..w * c]);
                    }
                }
            }
            Kind::Translate { height, width, fill, value } => {
                // Whole pixels, as Keras' `interpolation="nearest"`.
                let dy = (symmetric(uniform(example, 0), height) * h as f32).round() as i64;
                let dx = (symmetric(uniform(example, 1), width) * w as f32).round() as i64;
                if dy != 0 || dx != 0 {
                    let source = image.to_vec();
                    for y in 0..h {
                        let sy = locate(y as i64 - dy, h, fill);
                        for x in 0..w {
                            let sx = locate(x as i64 - dx, w, fill);
                            let out = &mut image[(y * w + x) * c..(y * w + x + 1) * c];
                            match (sy, sx) {
                                (Some(sy), Some(sx)) => {
                                    out.copy_from_slice(&source[(sy * w + sx) * c..(sy * w + sx + 1) * c])
                                }
                                _ => out.fill(value),
                            }
                        }
                    }
                }
            }
            Kind::Brightness { factor, range: [lo, hi] } => {
                let delta = symmetric(uniform(example, 0), factor) * (hi - lo);
                for v in image.iter_mut() {
                    *v = (*v + delta).clamp(lo, hi);
                }
            }
            Kind::Contrast { factor, range: [lo, hi] } => {
                let scale = 1.0 + symmetric(uniform(example, 0), factor);
                for k in 0..c {
                    let mean = image.iter().skip(k).step_by(c).map(|&v| f64::from(v)).sum::<f64>() / (h * w) as f64;
                    let mean = mean as f32;
                    for v in image.iter_mut().skip(k).step_by(c) {
                        *v = ((*v - mean) * scale + mean).clamp(lo, hi);
                    }
                }
            }
        }
    }
}

/// Where coordinate `i` of an axis of length `n` reads from under `fill`; `None`: the fill value.
fn locate(i: i64, n: usize, fill: FillMode) -> Option<usize> {
    let n = n as i64;
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    let at = match fill {
        FillMode::Constant => return None,
        FillMode::Nearest => i.clamp(0, n - 1),
        FillMode::Wrap => i.rem_euclid(n),
        FillMode::Reflect => {
            let k = i.rem_euclid(2 * n);
            if k < n { k } else { 2 * n - 1 - k }
        }
    };
    Some(at as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::schema::FeatureInfo;

    /// One `[h, w, c]` image feature `x` and a label.
    fn schema(h: usize, w: usize, c: usize) -> Schema {
        Schema::new(
            vec![FeatureInfo::new("x", DType::F32, vec![h, w, c])],
            Some(FeatureInfo::new("y", DType::I64, vec![])),
        )
        .unwrap()
    }

    /// `request` applied to `image` as example `place` of batch `number`.
    fn run(request: Request<'_>, hwc: [usize; 3], image: &[f32], number: u64, place: usize) -> Vec<f32> {
        let augment = request.compile(&schema(hwc[0], hwc[1], hwc[2]), 7).unwrap().reseed(0, 0);
        let mut batch = vec![HostData::F32(image.to_vec()), HostData::I64(vec![0])];
        augment.apply(&mut batch, &[0, 0], number, place);
        match batch.swap_remove(0) {
            HostData::F32(v) => v,
            other => panic!("{other:?}"),
        }
    }

    fn ramp(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn flips_mirror_the_image_about_half_the_time() {
        // 2 x 3 pixels, 2 channels: a horizontal flip swaps whole pixels, not channels.
        let image = ramp(12);
        let mirrored = vec![4.0, 5.0, 2.0, 3.0, 0.0, 1.0, 10.0, 11.0, 8.0, 9.0, 6.0, 7.0];
        let upside_down = vec![6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let mut flipped = 0;
        for number in 0..200 {
            let out = run(Request::Flip { feature: "x", mode: FlipMode::Horizontal }, [2, 3, 2], &image, number, 1);
            assert!(out == image || out == mirrored, "{out:?}");
            flipped += usize::from(out == mirrored);
            let out = run(Request::Flip { feature: "x", mode: FlipMode::Vertical }, [2, 3, 2], &image, number, 1);
            assert!(out == image || out == upside_down, "{out:?}");
        }
        assert!((70..130).contains(&flipped), "{flipped} of 200 flipped");
    }

    #[test]
    fn draws_are_a_function_of_the_batch_number_and_place() {
        let image = ramp(64);
        let request = || Request::Brightness { feature: "x", factor: 0.5, range: [-1000.0, 1000.0] };
        let a = run(request(), [8, 8, 1], &image, 3, 2);
        assert_eq!(a, run(request(), [8, 8, 1], &image, 3, 2));
        assert_ne!(a, run(request(), [8, 8, 1], &image, 4, 2));
        assert_ne!(a, run(request(), [8, 8, 1], &image, 3, 1));
    }

    #[test]
    fn fill_modes_place_coordinates_as_keras_does() {
        // Keras' reflect: d c b a | a b c d | d c b a.
        let reflect: Vec<_> = (-5..9).map(|i| locate(i, 4, FillMode::Reflect).unwrap()).collect();
        assert_eq!(reflect, [3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0]);
        let wrap: Vec<_> = (-2..6).map(|i| locate(i, 4, FillMode::Wrap).unwrap()).collect();
        assert_eq!(wrap, [2, 3, 0, 1, 2, 3, 0, 1]);
        let nearest: Vec<_> = (-2..6).map(|i| locate(i, 4, FillMode::Nearest).unwrap()).collect();
        assert_eq!(nearest, [0, 0, 0, 1, 2, 3, 3, 3]);
        assert_eq!(locate(-1, 4, FillMode::Constant), None);
        assert_eq!(locate(2, 4, FillMode::Constant), Some(2));
    }

    #[test]
    fn translation_shifts_whole_pixels_within_its_factor() {
        // A 10 x 10 ramp: a shift by (dy, dx) moves value v = 10 y + x to (y + dy, x + dx).
        let image = ramp(100);
        let mut shifted = 0;
        for number in 0..50 {
            let request =
                Request::Translate { feature: "x", height: 0.2, width: 0.3, fill: FillMode::Constant, value: -1.0 };
            let out = run(request, [10, 10, 1], &image, number, 0);
            // Find the shift from any pixel that came from inside the frame.
            let (at, v) = out.iter().enumerate().find(|(_, v)| **v >= 0.0).map(|(i, v)| (i as i64, *v as i64)).unwrap();
            let (dy, dx) = (at / 10 - v / 10, at % 10 - v % 10);
            assert!(dy.abs() <= 2 && dx.abs() <= 3, "shift ({dy}, {dx})");
            shifted += usize::from(dy != 0 || dx != 0);
            for (i, &o) in out.iter().enumerate() {
                let (y, x) = (i as i64 / 10 - dy, i as i64 % 10 - dx);
                let expected = if (0..10).contains(&y) && (0..10).contains(&x) { (y * 10 + x) as f32 } else { -1.0 };
                assert_eq!(o, expected, "pixel {i} of the shift ({dy}, {dx})");
            }
        }
        assert!(shifted > 35, "{shifted} of 50 shifted");
    }

    #[test]
    fn brightness_adds_one_delta_and_clips() {
        let image = vec![0.0, 0.25, 0.5, 0.75, 1.0, 0.5];
        for number in 0..20 {
            let request = Request::Brightness { feature: "x", factor: 0.2, range: [0.0, 1.0] };
            let out = run(request, [2, 3, 1], &image, number, 0);
            let delta = out[2] - 0.5;
            assert!(delta.abs() <= 0.2, "{delta}");
            for (o, i) in out.iter().zip(&image) {
                assert!((o - (i + delta).clamp(0.0, 1.0)).abs() < 1e-6, "{out:?}");
            }
        }
    }

    #[test]
    fn contrast_scales_about_each_channels_mean() {
        // Two channels with means 10 and 100, far from the clipping range's ends.
        let image = vec![8.0, 90.0, 12.0, 110.0, 9.0, 100.0, 11.0, 100.0];
        for number in 0..20 {
            let request = Request::Contrast { feature: "x", factor: 0.5, range: [-1e4, 1e4] };
            let out = run(request, [2, 2, 2], &image, number, 0);
            let scale = (out[2] - 10.0) / 2.0;
            assert!((0.5..=1.5).contains(&scale), "{scale}");
            for (k, mean) in [(0, 10.0), (1, 100.0)] {
                for (o, i) in out.iter().zip(&image).skip(k).step_by(2) {
                    assert!((o - ((i - mean) * scale + mean)).abs() < 1e-4, "{out:?}");
                }
            }
        }
    }

    #[test]
    fn requests_are_checked_against_the_schema() {
        let image = schema(4, 4, 1);
        let err = |r: Request<'_>, s: &Schema| r.compile(s, 0).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(Request::Flip { feature: "y", mode: FlipMode::Horizontal }, &image).contains("the label"));
        assert!(err(Request::Flip { feature: "z", mode: FlipMode::Horizontal }, &image).contains("no feature"));
        let flat = Schema::new(vec![FeatureInfo::new("x", DType::F32, vec![16])], None).unwrap();
        assert!(err(Request::Flip { feature: "x", mode: FlipMode::Horizontal }, &flat).contains("needs an image"));
        // Brightness needs no image.
        assert!(Request::Brightness { feature: "x", factor: 0.1, range: [0.0, 1.0] }.compile(&flat, 0).is_ok());
        let ids = Schema::new(vec![FeatureInfo::new("x", DType::I64, vec![4, 4])], None).unwrap();
        assert!(err(Request::Flip { feature: "x", mode: FlipMode::Horizontal }, &ids).contains("f32"));
        let far = Request::Translate { feature: "x", height: 1.5, width: 0.1, fill: FillMode::Reflect, value: 0.0 };
        assert!(err(far, &image).contains("height_factor 1.5"));
        let bad = Request::Contrast { feature: "x", factor: 0.1, range: [1.0, 0.0] };
        assert!(err(bad, &image).contains("value_range"));
        let nan = Request::Brightness { feature: "x", factor: f32::NAN, range: [0.0, 1.0] };
        assert!(err(nan, &image).contains("factor NaN"));
    }
}
