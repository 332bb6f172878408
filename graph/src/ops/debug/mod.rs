//! Ops that watch values rather than compute them.

mod check_numerics;

pub use check_numerics::CheckNumerics;
