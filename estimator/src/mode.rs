//! The three things a model function can be asked to build, as TensorFlow's `ModeKeys`:
//! training has dropout, labels and a loss; evaluation has labels and a loss; prediction
//! has neither.

use std::{fmt, str::FromStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Train,
    Eval,
    Predict,
}

impl Mode {
    /// The names the command line takes (`engine plan --mode predict`).
    pub const NAMES: &'static [&'static str] = &["train", "eval", "predict"];

    pub fn is_training(self) -> bool {
        self == Mode::Train
    }

    /// The command-line name; `Display` gives TensorFlow's `ModeKeys` value instead.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
            Mode::Predict => "predict",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Mode::Train, Mode::Eval, Mode::Predict]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown mode `{s}`, expected one of: {}", Mode::NAMES.join(", ")))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // TensorFlow's ModeKeys spelling, which users grep their logs for.
        f.write_str(match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
            Mode::Predict => "infer",
        })
    }
}
