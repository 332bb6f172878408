//! The `engine` command: the RON job spec ([`spec`]), its lowering to graphs and plans
//! ([`lower`]), and the command line ([`cli`]).

pub mod cli;
pub mod job;
pub mod lower;
pub mod spec;
