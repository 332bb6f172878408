//! Updates of persistent state.

mod assign;
mod group;

pub use assign::Assign;
pub use group::Group;
