//! Comparisons, selections and conversions: mostly not differentiable, used by metrics,
//! learning-rate schedules and gradient rules.

mod argmax;
mod cast;
mod compare;
mod one_hot;
mod select;

pub use argmax::ArgMax;
pub use cast::Cast;
pub use compare::{Equal, Greater, Less};
pub use one_hot::OneHot;
pub use select::Select;
