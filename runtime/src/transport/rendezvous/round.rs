//! One rendezvous round as its coordinator keeps it: who joined, and when it closes.
//!
//! Plain data and a clock passed in, so that every rule is tested without sockets. The
//! rules are torchrun's: the round closes at once when every expected member (or the
//! maximum) has joined, else when at least the minimum has and nobody new came for a
//! "last call" interval; below the minimum when the timeout passes, it fails.

use super::super::membership::Membership;
use crate::cluster::TaskId;
use std::time::{Duration, Instant};

/// How a round closes; from the job's `min_workers`, `max_workers` and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundRules {
    /// Below this many members the job cannot go on.
    pub min: usize,
    /// Joiners past this many are refused.
    pub max: usize,
    /// How long the round waits for more members once it has the minimum.
    pub last_call: Duration,
    /// How long the round waits for the minimum.
    pub timeout: Duration,
}

/// A task that joined the round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub task: TaskId,
    /// Where it listens.
    pub address: String,
    /// What orders the new group among members and among joiners: a member's rank in the
    /// last epoch (so the first survivor stays the chief), a joiner's in the cluster's
    /// collective order (past the cluster's size for a task from outside it).
    pub order: usize,
    /// The last epoch it trained in.
    pub epoch: u64,
    /// The last step it completed.
    pub step: u64,
    /// It was not in the last epoch: ranked after those who were.
    pub joining: bool,
}

/// How the round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Formed(Membership),
    /// Why the job cannot go on: fewer than the minimum joined in time.
    Failed(String),
}

#[derive(Debug)]
pub(crate) struct Round {
    rules: RoundRules,
    /// Members the coordinator expects (the last epoch's, less those known lost): the
    /// round closes as soon as they are all in, without waiting for the last call.
    expected: usize,
    joined: Vec<Candidate>,
    opened: Instant,
    last_join: Instant,
    outcome: Option<Outcome>,
}

impl Round {
    pub fn new(rules: RoundRules, expected: usize, now: Instant) -> Self {
        Round { rules, expected, joined: Vec::new(), opened: now, last_join: now, outcome: None }
    }

    /// Adds a member; a task that joins again (a restarted process) replaces its entry.
    pub fn join(&mut self, candidate: Candidate, now: Instant) -> Result<(), String> {
        if self.outcome.is_some() {
            return Err(format!(
                "{} joined after the rendezvous closed: it must wait for the job's next one",
                candidate.task
            ));
        }
        if let Some(other) = self.joined.iter().find(|c| (c.task == candidate.task) != (c.address == candidate.address))
        {
            return Err(format!(
                "{} at {} cannot join: {} at {} already did (two processes cannot be one task, nor share an address)",
                candidate.task, candidate.address, other.task, other.address
            ));
        }
        if let Some(known) = self.joined.iter_mut().find(|c| c.task == candidate.task) {
            *known = candidate;
        } else if self.joined.len() >= self.rules.max {
            return Err(format!(
                "{} cannot join: the job already has max_workers = {} members ({})",
                candidate.task,
                self.rules.max,
                self.names()
            ));
        } else {
            self.joined.push(candidate);
        }
        self.last_join = now;
        Ok(())
    }

    pub fn joined(&self) -> usize {
        self.joined.len()
    }

    /// The outcome, once the rules close the round.
    pub fn poll(&mut self, now: Instant) -> Option<&Outcome> {
        if self.outcome.is_none() {
            let n = self.joined.len();
            let enough = n >= self.rules.min.max(1);
            let complete = n >= self.rules.max || n >= self.expected;
            if enough && (complete || now.duration_since(self.last_join) >= self.rules.last_call) {
                self.outcome = Some(Outcome::Formed(self.form()));
            } else if !enough && now.duration_since(self.opened) >= self.rules.timeout {
                self.outcome = Some(Outcome::Failed(format!(
                    "{n} member(s) joined the rendezvous within {:?} ({}), fewer than min_workers = {}",
                    self.rules.timeout,
                    self.names(),
                    self.rules.min
                )));
            }
        }
        self.outcome.as_ref()
    }

    fn form(&self) -> Membership {
        let mut members = self.joined.clone();
        // Members keep their order (the first stays the chief, who holds the model dir's
        // writer lock); joiners come after them.
        members.sort_by_key(|c| (c.joining, c.order, c.task));
        let epoch = members.iter().map(|c| c.epoch).max().unwrap_or(0) + 1;
        let step = members.iter().map(|c| c.step).max().unwrap_or(0);
        let holder = members.iter().position(|c| c.step == step).unwrap_or(0);
        Membership {
            epoch,
            tasks: members.iter().map(|c| c.task).collect(),
            addresses: members.iter().map(|c| c.address.clone()).collect(),
            holder,
            step,
        }
    }

    fn names(&self) -> String {
        let mut names: Vec<((bool, usize), String)> =
            self.joined.iter().map(|c| ((c.joining, c.order), c.task.to_string())).collect();
        names.sort();
        let names: Vec<String> = names.into_iter().map(|(_, n)| n).collect();
        if names.is_empty() { "none".to_string() } else { names.join(", ") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::TaskType;

    const RULES: RoundRules =
        RoundRules { min: 2, max: 3, last_call: Duration::from_secs(2), timeout: Duration::from_secs(10) };

    fn worker(index: usize, epoch: u64, step: u64) -> Candidate {
        Candidate {
            task: TaskId::new(TaskType::Worker, index),
            address: format!("w{index}:1"),
            order: index + 1,
            epoch,
            step,
            joining: false,
        }
    }

    fn chief(epoch: u64, step: u64) -> Candidate {
        Candidate {
            task: TaskId::new(TaskType::Chief, 0),
            address: "c:1".into(),
            order: 0,
            epoch,
            step,
            joining: false,
        }
    }

    fn formed(round: &mut Round, now: Instant) -> Membership {
        match round.poll(now) {
            Some(Outcome::Formed(m)) => m.clone(),
            other => panic!("not formed: {other:?}"),
        }
    }

    #[test]
    fn the_expected_members_close_the_round_at_once_in_cluster_order() {
        let t = Instant::now();
        let mut round = Round::new(RULES, 2, t);
        round.join(worker(1, 4, 17), t).unwrap();
        assert!(round.poll(t).is_none());
        round.join(chief(4, 16), t).unwrap();
        let m = formed(&mut round, t);
        assert_eq!(m.epoch, 5);
        assert_eq!(m.tasks, [TaskId::new(TaskType::Chief, 0), TaskId::new(TaskType::Worker, 1)]);
        // worker:1 applied step 17 before the failure; everyone continues from it.
        assert_eq!((m.holder, m.step), (1, 17));
    }

    #[test]
    fn a_joiner_ranks_after_the_members_so_the_chief_stays() {
        let t = Instant::now();
        let mut round = Round::new(RULES, 3, t);
        round.join(worker(1, 2, 30), t).unwrap();
        round.join(worker(2, 2, 30), t).unwrap();
        // The lost chief, started again, joins the round of the workers that went on.
        round.join(Candidate { joining: true, step: 0, ..chief(2, 0) }, t).unwrap();
        let m = formed(&mut round, t);
        let order: Vec<String> = m.tasks.iter().map(ToString::to_string).collect();
        assert_eq!(order, ["worker:1", "worker:2", "chief:0"]);
        assert_eq!((m.epoch, m.holder, m.step), (3, 0, 30));
    }

    #[test]
    fn without_the_expected_count_the_last_call_closes_it() {
        let t = Instant::now();
        let mut round = Round::new(RULES, 3, t);
        round.join(chief(0, 5), t).unwrap();
        round.join(worker(0, 0, 5), t + Duration::from_secs(1)).unwrap();
        assert!(round.poll(t + Duration::from_secs(2)).is_none(), "the last call runs from the last join");
        let m = formed(&mut round, t + Duration::from_secs(3));
        assert_eq!((m.size(), m.holder, m.step, m.epoch), (2, 0, 5, 1));
    }

    #[test]
    fn below_the_minimum_the_round_fails_naming_who_came() {
        let t = Instant::now();
        let mut round = Round::new(RULES, 2, t);
        round.join(worker(0, 0, 3), t).unwrap();
        assert!(round.poll(t + Duration::from_secs(9)).is_none());
        match round.poll(t + Duration::from_secs(10)) {
            Some(Outcome::Failed(why)) => assert!(
                why.contains("1 member(s) joined the rendezvous within 10s (worker:0), fewer than min_workers = 2"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(round.join(chief(0, 3), t).unwrap_err().contains("after the rendezvous closed"));
    }

    #[test]
    fn the_maximum_is_enforced_and_a_rejoining_task_replaces_itself() {
        let t = Instant::now();
        let mut round = Round::new(RULES, 9, t);
        round.join(chief(0, 1), t).unwrap();
        round.join(worker(0, 0, 1), t).unwrap();
        round.join(worker(0, 0, 2), t).unwrap();
        assert_eq!(round.joined(), 2);
        round.join(worker(1, 0, 1), t).unwrap();
        let error = round.join(worker(2, 0, 1), t).unwrap_err();
        assert!(error.contains("max_workers = 3 members (chief:0, worker:0, worker:1)"), "{error}");
        let m = formed(&mut round, t);
        assert_eq!((m.size(), m.holder, m.step), (3, 1, 2));
    }

    #[test]
    fn members_keep_their_last_ranks_and_a_task_is_one_process_at_one_address() {
        let t = Instant::now();
        let mut round = Round::new(RULES, 3, t);
        // Epoch 2 was worker:1, chief:0 (it rejoined after worker:1 had taken over): the
        // ranks they had keep worker:1 first, not the cluster's order.
        round.join(Candidate { order: 1, ..chief(2, 9) }, t).unwrap();
        round.join(Candidate { order: 0, ..worker(1, 2, 9) }, t).unwrap();
        let stranger = || Candidate { address: "new-host:7".into(), order: 4, joining: true, ..worker(5, 0, 0) };
        // Another process naming itself worker:1, or taking chief:0's address, is refused.
        let twin = Candidate { address: "elsewhere:1".into(), ..worker(1, 2, 9) };
        assert!(round.join(twin, t).unwrap_err().contains("worker:1 at w1:1 already did"));
        let squatter = Candidate { address: "c:1".into(), ..stranger() };
        assert!(round.join(squatter, t).unwrap_err().contains("chief:0 at c:1 already did"));
        round.join(stranger(), t).unwrap();
        let m = formed(&mut round, t);
        let order: Vec<String> = m.tasks.iter().map(ToString::to_string).collect();
        assert_eq!(order, ["worker:1", "chief:0", "worker:5"]);
        assert_eq!(m.addresses, ["w1:1", "c:1", "new-host:7"]);
    }
}
