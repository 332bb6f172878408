//! RON text to a located value tree.

mod cursor;
mod parser;
mod value;

pub use parser::{parse_document, parse_value};
pub use value::{Field, Node, Value};
