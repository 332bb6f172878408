//! The three things a model function can be asked to build.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Train,
    Eval,
    Predict,
}

impl Mode {
    pub fn is_training(self) -> bool {
        self == Mode::Train
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
