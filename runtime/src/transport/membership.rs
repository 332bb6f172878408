//! One epoch of an elastic job's collective group: who trains, in which rank order, and
//! whose state the members continue from.
//!
//! Epoch 0 is the group the cluster spec defines. Each rendezvous after a member is lost
//! (or joins) forms the next epoch; the handshake refuses peers of another epoch, so a
//! worker that missed the re-formation cannot feed segments into the new group.

use crate::cluster::{ClusterSpec, TaskId};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub epoch: u64,
    /// The members in rank order: the last epoch's members in the cluster's collective
    /// order (chief first, then the workers by index), then the tasks that joined. So the
    /// lowest-ranked survivor takes the chief's duties when the chief is gone, and keeps them
    /// when the old chief comes back.
    pub tasks: Vec<TaskId>,
    /// Where each member listens (`host:port`), in rank order. The cluster spec's address
    /// for its own tasks; a task that joined from outside the spec is known only by this.
    pub addresses: Vec<String>,
    /// The rank whose variables, slots and step every member continues from: the one that
    /// completed the most steps (the lowest rank on a tie). A member that applied the step
    /// the failure interrupted holds that step's exact result, because all-reduce gives
    /// every member the same bits; the others roll forward to it.
    pub holder: usize,
    /// The step the holder's state is at.
    pub step: u64,
}

impl Membership {
    /// Epoch 0: every chief and worker of the cluster, as [`NetworkGroup::connect`] forms it.
    ///
    /// [`NetworkGroup::connect`]: super::NetworkGroup::connect
    pub fn initial(spec: &ClusterSpec) -> Membership {
        let tasks: Vec<TaskId> = spec.collective_tasks().collect();
        let addresses = tasks.iter().map(|t| spec.address(t).unwrap_or_default().to_string()).collect();
        Membership { epoch: 0, tasks, addresses, holder: 0, step: 0 }
    }

    pub fn size(&self) -> usize {
        self.tasks.len()
    }

    pub fn rank_of(&self, task: &TaskId) -> Option<usize> {
        self.tasks.iter().position(|t| t == task)
    }

    /// The member that saves checkpoints and writes summaries in this epoch.
    pub fn chief(&self) -> Option<TaskId> {
        self.tasks.first().copied()
    }

    /// Where member `rank` listens.
    pub fn address(&self, rank: usize) -> Option<&str> {
        self.addresses.get(rank).map(String::as_str)
    }
}

/// `epoch 2: chief:0, worker:1 (state of worker:1 at step 40)`, for logs (epoch 0 has no
/// holder: every task starts from the same checkpoint).
impl fmt::Display for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tasks: Vec<String> = self.tasks.iter().map(ToString::to_string).collect();
        write!(f, "epoch {}: {}", self.epoch, tasks.join(", "))?;
        if let Some(holder) = self.tasks.get(self.holder).filter(|_| self.epoch > 0) {
            write!(f, " (state of {holder} at step {})", self.step)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::TaskType;

    #[test]
    fn the_initial_membership_is_the_clusters_collective_order() {
        let spec = ClusterSpec {
            chief: vec!["c:1".into()],
            worker: vec!["w:1".into(), "w:2".into()],
            ps: vec!["p:1".into()],
            ..ClusterSpec::default()
        };
        let initial = Membership::initial(&spec);
        assert_eq!(initial.size(), 3);
        assert_eq!(initial.rank_of(&TaskId::new(TaskType::Worker, 1)), Some(2));
        assert_eq!(initial.rank_of(&TaskId::new(TaskType::Ps, 0)), None);
        assert_eq!(initial.chief(), Some(TaskId::new(TaskType::Chief, 0)));
        assert_eq!(initial.to_string(), "epoch 0: chief:0, worker:0, worker:1");
        assert_eq!(initial.address(2), Some("w:2"));
        let next = Membership {
            epoch: 1,
            tasks: initial.tasks[1..].to_vec(),
            addresses: initial.addresses[1..].to_vec(),
            holder: 1,
            step: 40,
        };
        assert_eq!(next.to_string(), "epoch 1: worker:0, worker:1 (state of worker:1 at step 40)");
    }
}
