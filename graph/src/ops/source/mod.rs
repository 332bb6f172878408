//! Where values come from: fed placeholders, variables, constants.

mod constant;
mod placeholder;
mod variable;

pub use constant::Constant;
pub use placeholder::Placeholder;
pub use variable::{Partition, Variable};
