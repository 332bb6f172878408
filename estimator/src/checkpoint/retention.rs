//! Which checkpoints a save keeps: TensorFlow 2's `CheckpointManager` rule, as a pure function.
//!
//! The newest `keep_checkpoint_max` stay listed (0 keeps all). A checkpoint pushed out of the list is
//! preserved for good when it is at least `keep_checkpoint_every_n_hours` younger than the previously
//! preserved one; everything else pushed out becomes garbage, deleted by the collector once no lease
//! holds it. Deciding here and deleting elsewhere keeps the decision testable without a store.

use super::state_file::CheckpointState;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetentionPolicy {
    /// How many checkpoints the state file lists; 0 keeps all.
    pub keep_checkpoint_max: usize,
    /// Keep one checkpoint for good every this many hours; `None` or non-positive disables it.
    pub keep_checkpoint_every_n_hours: Option<f64>,
}

impl Default for RetentionPolicy {
    /// RunConfig's defaults: five checkpoints, no hourly preservation.
    fn default() -> Self {
        RetentionPolicy { keep_checkpoint_max: 5, keep_checkpoint_every_n_hours: None }
    }
}

/// The state to publish after saving `name`, and the checkpoints it preserves (name, timestamp).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NextState {
    pub state: CheckpointState,
    pub preserved: Vec<(String, f64)>,
}

/// `first_preserved` seeds `last_preserved_timestamp` when the previous state has none (TensorFlow uses
/// the time the manager was created).
pub(crate) fn next_state(
    previous: Option<&CheckpointState>,
    name: &str,
    timestamp: f64,
    policy: &RetentionPolicy,
    first_preserved: f64,
) -> NextState {
    let mut entries: Vec<(String, f64)> = match previous {
        Some(state) => state
            .all_model_checkpoint_paths
            .iter()
            .map(|path| (path.clone(), state.timestamp_of(path).unwrap_or(0.0)))
            .collect(),
        None => Vec::new(),
    };
    // Saving a step again (after a restart from an older checkpoint) moves it to the newest position.
    entries.retain(|(path, _)| path != name);
    entries.push((name.to_string(), timestamp));

    let mut last_preserved = previous.and_then(|s| s.last_preserved_timestamp).unwrap_or(first_preserved);
    let hours = policy.keep_checkpoint_every_n_hours.filter(|h| *h > 0.0);
    let mut preserved = Vec::new();
    if policy.keep_checkpoint_max > 0 {
        while entries.len() > policy.keep_checkpoint_max {
            let (path, saved_at) = entries.remove(0);
            if let Some(hours) = hours
                && saved_at - hours * 3600.0 >= last_preserved
            {
                last_preserved = saved_at;
                preserved.push((path, saved_at));
            }
        }
    }
    let state = CheckpointState {
        model_checkpoint_path: name.to_string(),
        all_model_checkpoint_paths: entries.iter().map(|(p, _)| p.clone()).collect(),
        all_model_checkpoint_timestamps: entries.iter().map(|(_, t)| *t).collect(),
        last_preserved_timestamp: Some(last_preserved),
    };
    NextState { state, preserved }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: RetentionPolicy, saves: &[(&str, f64)]) -> (CheckpointState, Vec<String>) {
        let mut state: Option<CheckpointState> = None;
        let mut preserved = Vec::new();
        for (name, at) in saves {
            let next = next_state(state.as_ref(), name, *at, &policy, 0.0);
            preserved.extend(next.preserved.into_iter().map(|(p, _)| p));
            state = Some(next.state);
        }
        (state.unwrap_or_default(), preserved)
    }

    #[test]
    fn keeps_the_newest_max() {
        let policy = RetentionPolicy { keep_checkpoint_max: 2, keep_checkpoint_every_n_hours: None };
        let (state, preserved) = run(policy, &[("a", 1.0), ("b", 2.0), ("c", 3.0)]);
        assert_eq!(state.all_model_checkpoint_paths, vec!["b", "c"]);
        assert_eq!(state.all_model_checkpoint_timestamps, vec![2.0, 3.0]);
        assert_eq!(state.model_checkpoint_path, "c");
        assert!(preserved.is_empty());
    }

    #[test]
    fn zero_keeps_all() {
        let policy = RetentionPolicy { keep_checkpoint_max: 0, keep_checkpoint_every_n_hours: None };
        let (state, _) = run(policy, &[("a", 1.0), ("b", 2.0), ("c", 3.0)]);
        assert_eq!(state.all_model_checkpoint_paths.len(), 3);
    }

    #[test]
    fn preserves_one_per_period() {
        // One save every 30 minutes, keep 1, preserve every hour: the pushed-out checkpoints at 1h, 2h,
        // 3h are preserved, those at 0.5h, 1.5h, 2.5h are not.
        let policy = RetentionPolicy { keep_checkpoint_max: 1, keep_checkpoint_every_n_hours: Some(1.0) };
        let saves: Vec<(String, f64)> = (1..=7).map(|i| (format!("c{i}"), i as f64 * 1800.0)).collect();
        let saves: Vec<(&str, f64)> = saves.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let (state, preserved) = run(policy, &saves);
        assert_eq!(preserved, vec!["c2", "c4", "c6"]);
        assert_eq!(state.last_preserved_timestamp, Some(6.0 * 1800.0));
        assert_eq!(state.all_model_checkpoint_paths, vec!["c7"]);
    }

    #[test]
    fn resaving_a_step_moves_it_last() {
        let policy = RetentionPolicy::default();
        let (state, _) = run(policy, &[("a", 1.0), ("b", 2.0), ("a", 3.0)]);
        assert_eq!(state.all_model_checkpoint_paths, vec!["b", "a"]);
        assert_eq!(state.model_checkpoint_path, "a");
    }
}
