//! What building a job from a spec can fail with: the spec itself (located), its model's
//! lowering, or the estimator (an input that does not open, a model dir that refuses a
//! write). Its own type, so the job layer does not borrow the command line's.

use crate::{lower::LowerError, spec::SpecError};

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    Estimator(#[from] engine_estimator::EstimatorError),
}
