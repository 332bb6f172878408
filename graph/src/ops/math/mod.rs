//! Arithmetic: matrix products, broadcasting binary ops, elementwise unary functions.

mod add;
mod add_n;
mod cos;
mod div;
mod erf;
mod exp;
mod log;
mod matmul;
mod maximum;
mod minimum;
mod mul;
mod neg;
mod project;
mod sin;
mod sqrt;
mod square;
mod sub;
mod sum_to;

pub use add::Add;
pub use add_n::AddN;
pub use cos::Cos;
pub use div::Div;
pub use erf::Erf;
pub use exp::Exp;
pub use log::Log;
pub use matmul::MatMul;
pub use maximum::Maximum;
pub use minimum::Minimum;
pub use mul::Mul;
pub use neg::Neg;
pub use sin::Sin;
pub use sqrt::Sqrt;
pub use square::Square;
pub use sub::Sub;
