//! Ops that cross devices: collectives between replicas, transfers between devices.
//! Strategy passes insert them; the runtime executes them with a `Collective`.

mod all_gather_rows;
mod all_reduce;
mod transfer;

pub use all_gather_rows::AllGatherRows;
pub use all_reduce::{AllReduce, ReduceOp};
pub use transfer::Transfer;
