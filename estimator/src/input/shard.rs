//! Which source examples one input pipeline reads.
//!
//! Sharding is a pure function of (source layout, number of pipelines, pipeline id, policy),
//! so every pipeline can compute every other pipeline's shard, and with it the step count
//! they must all agree on (see `steps`), without talking to each other.

use super::context::{AutoShardPolicy, InputContext};
use super::error::{InputError, Result};
use super::source::FileSpan;

/// A dataset's sharding request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sharding {
    pub num: usize,
    pub index: usize,
    pub policy: AutoShardPolicy,
    /// Replicas fed per pipeline, to agree on step counts in whole steps.
    pub replicas_per_pipeline: usize,
}

impl Default for Sharding {
    fn default() -> Self {
        Sharding { num: 1, index: 0, policy: AutoShardPolicy::Off, replicas_per_pipeline: 1 }
    }
}

impl Sharding {
    pub fn from_context(ctx: &InputContext, policy: AutoShardPolicy) -> Result<Self> {
        Ok(Sharding {
            num: ctx.num_input_pipelines,
            index: ctx.input_pipeline_id,
            policy,
            replicas_per_pipeline: ctx.replicas_per_pipeline()?,
        })
    }

    /// The same request for another pipeline.
    pub fn for_index(&self, index: usize) -> Self {
        Sharding { index, ..*self }
    }
}

/// An arithmetic run of source indices: `start, start + step, ...` (`count` of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IdRange {
    start: u64,
    count: u64,
    step: u64,
}

/// The source indices of one shard, in reading order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardIds {
    ranges: Vec<IdRange>,
    /// `ends[k]` = ids in ranges `0..=k`.
    ends: Vec<u64>,
}

impl ShardIds {
    pub fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The id at a position of the reading order.
    pub fn get(&self, position: u64) -> Option<u64> {
        let k = self.ends.partition_point(|&end| end <= position);
        let range = self.ranges.get(k)?;
        let before = if k == 0 { 0 } else { self.ends[k - 1] };
        Some(range.start + (position - before) * range.step)
    }

    fn from_ranges(ranges: Vec<IdRange>) -> Self {
        let ranges: Vec<IdRange> = ranges.into_iter().filter(|r| r.count > 0).collect();
        let mut total = 0;
        let ends = ranges
            .iter()
            .map(|r| {
                total += r.count;
                total
            })
            .collect();
        ShardIds { ranges, ends }
    }

    /// Resolves a sharding request against a source of `total` examples laid out in `files`.
    pub fn resolve(files: &[FileSpan], total: u64, sharding: &Sharding) -> Result<Self> {
        let (num, index) = (sharding.num as u64, sharding.index as u64);
        if num == 0 || index >= num {
            return Err(InputError::Sharding(format!("shard {index} of {num} does not exist")));
        }
        let whole = || ShardIds::from_ranges(vec![IdRange { start: 0, count: total, step: 1 }]);
        if num == 1 {
            return Ok(whole());
        }
        let by_data = || {
            let count = if total > index { (total - index).div_ceil(num) } else { 0 };
            ShardIds::from_ranges(vec![IdRange { start: index, count, step: num }])
        };
        match sharding.policy {
            AutoShardPolicy::Off => Ok(whole()),
            AutoShardPolicy::Data => Ok(by_data()),
            AutoShardPolicy::Auto if (files.len() as u64) < num => Ok(by_data()),
            AutoShardPolicy::Auto | AutoShardPolicy::File => {
                if (files.len() as u64) < num {
                    return Err(InputError::Sharding(format!(
                        "AutoShardPolicy::File needs at least as many input files as input pipelines, \
                         but there are {} file(s) for {num} pipelines{}; use Data (or Auto) sharding instead",
                        files.len(),
                        files.first().map(|f| format!(" (first: {})", f.path.display())).unwrap_or_default()
                    )));
                }
                let ranges = files
                    .iter()
                    .skip(index as usize)
                    .step_by(num as usize)
                    .map(|f| IdRange { start: f.start, count: f.count, step: 1 })
                    .collect();
                Ok(ShardIds::from_ranges(ranges))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn files(counts: &[u64]) -> Vec<FileSpan> {
        let mut start = 0;
        counts
            .iter()
            .enumerate()
            .map(|(i, &count)| {
                let span = FileSpan { path: PathBuf::from(format!("f{i}")), start, count };
                start += count;
                span
            })
            .collect()
    }

    fn ids(s: &ShardIds) -> Vec<u64> {
        (0..s.len()).map(|p| s.get(p).unwrap()).collect()
    }

    #[test]
    fn data_sharding_strides() {
        let s = Sharding { num: 3, index: 1, policy: AutoShardPolicy::Data, replicas_per_pipeline: 1 };
        assert_eq!(ids(&ShardIds::resolve(&files(&[10]), 10, &s).unwrap()), vec![1, 4, 7]);
        let s = Sharding { index: 2, ..s };
        assert_eq!(ids(&ShardIds::resolve(&files(&[1]), 1, &s).unwrap()), Vec::<u64>::new());
    }

    #[test]
    fn file_sharding_takes_whole_files() {
        let s = Sharding { num: 2, index: 1, policy: AutoShardPolicy::File, replicas_per_pipeline: 1 };
        let shard = ShardIds::resolve(&files(&[2, 3, 1]), 6, &s).unwrap();
        assert_eq!(ids(&shard), vec![2, 3, 4]);
        assert_eq!(shard.get(3), None);
    }

    #[test]
    fn auto_falls_back_to_data_and_file_refuses() {
        let s = Sharding { num: 2, index: 0, policy: AutoShardPolicy::Auto, replicas_per_pipeline: 1 };
        assert_eq!(ids(&ShardIds::resolve(&files(&[4]), 4, &s).unwrap()), vec![0, 2]);
        let s = Sharding { policy: AutoShardPolicy::File, ..s };
        let err = ShardIds::resolve(&files(&[4]), 4, &s).unwrap_err().to_string();
        assert!(err.contains("at least as many input files as input pipelines") && err.contains("1 file(s)"), "{err}");
    }
}
