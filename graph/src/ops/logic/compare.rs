//! Elementwise comparisons with broadcasting, producing booleans. Three ops sharing one
//! shape rule; none has a gradient (their outputs are not floats).

use crate::{
    DType, Fact, GraphBuilder, Outlet, Result,
    ops::{Arity, OpDef, rules},
};

macro_rules! comparison {
    ($name:ident, $tf:literal, $method:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $name;

        impl OpDef for $name {
            fn name(&self) -> &'static str {
                $tf
            }
            fn arity(&self) -> Arity {
                Arity::Exact(2)
            }
            fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
                rules::broadcast(inputs, Some(DType::Bool))
            }
        }

        impl GraphBuilder<'_> {
            pub fn $method(&mut self, a: Outlet, b: Outlet) -> Result<Outlet> {
                self.op($name.into(), &[a, b])
            }
        }
    };
}

comparison!(Equal, "Equal", equal, "`a == b`");
comparison!(Less, "Less", less, "`a < b`");
comparison!(Greater, "Greater", greater, "`a > b`");
