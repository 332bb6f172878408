//! `eval_spec.exporters`: TensorFlow's exporters, which write `<model_dir>/export/<name>/<unix time>/`
//! after evaluations (see `engine serve` for serving them).

use serde::Deserialize;

/// The most exports an exporter may keep.
pub const MAX_EXPORTS_TO_KEEP: usize = 1000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Exporter {
    /// An export after every evaluation, keeping the newest `exports_to_keep`
    /// (`None` keeps all).
    Latest {
        #[serde(default = "latest")]
        name: String,
        #[serde(default = "five")]
        exports_to_keep: Option<usize>,
    },
    /// An export whenever an evaluation's `metric` beats the best so far: smaller is better
    /// unless `higher_is_better` (TensorFlow's default compares the loss).
    Best {
        #[serde(default = "best")]
        name: String,
        #[serde(default = "loss")]
        metric: String,
        #[serde(default)]
        higher_is_better: bool,
        #[serde(default = "five")]
        exports_to_keep: Option<usize>,
    },
    /// One export, of the final evaluation.
    Final {
        #[serde(default = "final_name")]
        name: String,
    },
}

impl Exporter {
    pub fn name(&self) -> &str {
        match self {
            Exporter::Latest { name, .. } | Exporter::Best { name, .. } | Exporter::Final { name } => name,
        }
    }
}

fn latest() -> String {
    "latest".into()
}

fn best() -> String {
    "best".into()
}

fn final_name() -> String {
    "final".into()
}

fn loss() -> String {
    "loss".into()
}

fn five() -> Option<usize> {
    Some(5)
}
