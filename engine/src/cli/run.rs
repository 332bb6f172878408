//! `engine run`: validate and compile the job; training itself is the runtime's (not
//! connected yet).

use super::{CliError, RunArgs};
use crate::lower::{self, Mode};

pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let spec = args.common.load(args.overrides())?;
    let train = lower::compile(&spec, Mode::Train, args.common.strategy(&spec, Mode::Train))?;
    if spec.job.eval_input.is_some() {
        lower::compile(&spec, Mode::Eval, args.common.strategy(&spec, Mode::Eval))?;
    }
    Err(CliError::NotWired { spec: spec.file().to_string(), nodes: train.schedule.len() })
}
