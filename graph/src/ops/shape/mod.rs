//! Ops that move data without arithmetic: reshape, transpose, concat, slice, pad,
//! broadcast, gather, its scatter-add and the rows it touches, and `Size` (a shape read as a number).

mod broadcast_to;
mod concat;
mod gather;
mod pad;
mod reshape;
mod rows_touched;
mod scatter_add_rows;
mod size;
mod slice;
mod transpose;

pub use broadcast_to::BroadcastTo;
pub use concat::Concat;
pub use gather::Gather;
pub use pad::Pad;
pub use reshape::Reshape;
pub use rows_touched::RowsTouched;
pub(crate) use rows_touched::mask_shape;
pub use scatter_add_rows::ScatterAddRows;
pub(crate) use scatter_add_rows::row_of;
pub use size::Size;
pub use slice::Slice;
pub use transpose::Transpose;
