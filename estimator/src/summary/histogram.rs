//! Histograms as TensorFlow's `tf.summary.histogram` (v1) builds them, so that TensorBoard's
//! distribution and histogram dashboards treat ours exactly like TensorFlow's.
//!
//! The default buckets (`tensorflow/core/lib/histogram/histogram.cc`) grow by 10% from 1e-12 to 1e20, are
//! mirrored for negative values around a bucket at 0, and end with ±DBL_MAX. Runs of empty buckets are
//! collapsed into one entry when encoded, as TensorFlow's `EncodeToProto` does, which keeps a summary of
//! a few values small although there are ~1500 buckets.

use super::proto::HistogramProto;
use std::sync::OnceLock;

/// TensorFlow's default bucket limits.
pub fn default_bucket_limits() -> &'static [f64] {
    static LIMITS: OnceLock<Vec<f64>> = OnceLock::new();
    LIMITS.get_or_init(|| {
        let mut positive = Vec::new();
        let mut v = 1.0e-12;
        while v < 1.0e20 {
            positive.push(v);
            v *= 1.1;
        }
        positive.push(f64::MAX);
        let mut limits: Vec<f64> = positive.iter().rev().map(|x| -x).collect();
        limits.push(0.0);
        limits.extend(positive);
        limits
    })
}

/// The histogram of `values`, which must all be finite (the caller reports the others).
pub fn histogram_of(values: &[f64]) -> HistogramProto {
    let limits = default_bucket_limits();
    let mut counts = vec![0.0f64; limits.len()];
    let (mut min, mut max) = (f64::MAX, -f64::MAX);
    let (mut sum, mut sum_squares) = (0.0, 0.0);
    for &value in values {
        // `std::upper_bound`: the first limit strictly greater than the value.
        let bucket = limits.partition_point(|limit| *limit <= value).min(limits.len() - 1);
        counts[bucket] += 1.0;
        min = min.min(value);
        max = max.max(value);
        sum += value;
        sum_squares += value * value;
    }
    let mut proto = HistogramProto { min, max, num: values.len() as f64, sum, sum_squares, ..Default::default() };
    let mut i = 0;
    while i < counts.len() {
        let (mut end, mut count) = (limits[i], counts[i]);
        i += 1;
        if count <= 0.0 {
            while i < counts.len() && counts[i] <= 0.0 {
                end = limits[i];
                count = counts[i];
                i += 1;
            }
        }
        proto.bucket_limit.push(end);
        proto.bucket.push(count);
    }
    proto
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_buckets_match_tensorflow() {
        let limits = default_bucket_limits();
        // 774 positive limits below 1e20, DBL_MAX, the mirror image and zero.
        assert_eq!(limits.len(), 2 * 775 + 1);
        assert_eq!(limits[0], -f64::MAX);
        assert_eq!(limits[775], 0.0);
        assert_eq!(limits[776], 1e-12);
        assert!((limits[777] - 1.1e-12).abs() < 1e-27);
        assert_eq!(limits[limits.len() - 1], f64::MAX);
        assert!(limits.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn counts_collapse_empty_runs() {
        let histo = histogram_of(&[0.0, 1.0, 1.0, -3.0]);
        assert_eq!((histo.min, histo.max, histo.num, histo.sum, histo.sum_squares), (-3.0, 1.0, 4.0, -1.0, 11.0));
        assert_eq!(histo.bucket.iter().sum::<f64>(), 4.0);
        // Non-empty buckets alternate with single collapsed runs of empty ones.
        let non_empty: Vec<f64> = histo.bucket.iter().copied().filter(|c| *c > 0.0).collect();
        assert_eq!(non_empty, vec![1.0, 1.0, 2.0]);
        assert!(histo.bucket.len() <= 7, "{:?}", histo.bucket);
        // 1.0 lands in the bucket whose upper limit is the first limit above 1.0.
        let index = histo.bucket.iter().position(|c| *c == 2.0).unwrap_or(0);
        assert!(histo.bucket_limit[index] > 1.0 && histo.bucket_limit[index] < 1.1, "{}", histo.bucket_limit[index]);
    }

    #[test]
    fn empty_histogram_has_one_bucket() {
        let histo = histogram_of(&[]);
        assert_eq!(histo.bucket_limit, vec![f64::MAX]);
        assert_eq!(histo.bucket, vec![0.0]);
        assert_eq!(histo.num, 0.0);
    }
}
