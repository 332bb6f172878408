//! Ops that move data without arithmetic: reshape, transpose, concat, slice, pad,
//! broadcast, and `Size` (a shape read as a number).

mod broadcast_to;
mod concat;
mod pad;
mod reshape;
mod size;
mod slice;
mod transpose;

pub use broadcast_to::BroadcastTo;
pub use concat::Concat;
pub use pad::Pad;
pub use reshape::Reshape;
pub use size::Size;
pub use slice::Slice;
pub use transpose::Transpose;
