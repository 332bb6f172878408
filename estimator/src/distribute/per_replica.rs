//! Values with one entry per local replica, as `tf.distribute`'s `PerReplica`.

/// One value per replica of this process, in replica order. Under `multi_worker` each task
/// has one replica; under `mirrored` one per device. `DistributionStrategy::reduce`
/// combines them over every replica of the job, other processes' included.
#[derive(Debug, Clone, PartialEq)]
pub struct PerReplica<T>(pub Vec<T>);

impl<T> PerReplica<T> {
    pub fn values(&self) -> &[T] {
        &self.0
    }

    pub fn into_values(self) -> Vec<T> {
        self.0
    }

    /// Replicas in this process.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `f` applied to every replica's value (TF's `tf.nest.map_structure` over a `PerReplica`).
    pub fn map<U>(&self, f: impl FnMut(&T) -> U) -> PerReplica<U> {
        PerReplica(self.0.iter().map(f).collect())
    }
}

impl<T> IntoIterator for PerReplica<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
