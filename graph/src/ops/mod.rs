//! The op set: one op per file, grouped by family.
//!
//! Each op is a small struct implementing [`OpDef`]: its shape rule, its gradient rule
//! (which wires backward nodes through [`GradCtx`]), its cost and its constructor method on
//! [`crate::GraphBuilder`]. [`Op`] is the closed set the runtime knows how to execute.
//! Composites (`mean_squared_error`, `l2_loss`, `dense`-style helpers) are builder methods
//! that wire primitives, so their gradients come for free.

pub mod activation;
pub mod attention;
pub mod collective;
pub mod debug;
pub mod fused;
pub mod logic;
pub mod loss;
pub mod math;
pub mod nn;
pub mod norm;
pub mod reduce;
pub mod shape;
pub mod source;
pub mod state;

use crate::{Fact, Result, autodiff::GradCtx};
use std::fmt;

pub use activation::*;
pub use attention::*;
pub use collective::*;
pub use debug::*;
pub use fused::*;
pub use logic::*;
pub use loss::*;
pub use math::*;
pub use nn::*;
pub use norm::*;
pub use reduce::*;
pub use shape::*;
pub use source::*;
pub use state::*;

/// How many inputs an op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Arity {
    Exact(usize),
    AtLeast(usize),
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exact(n) => write!(f, "{n}"),
            Arity::AtLeast(n) => write!(f, "at least {n}"),
        }
    }
}

/// What every op defines.
pub trait OpDef {
    /// The op type, TensorFlow's name where there is one (`MatMul`, `Conv2D`).
    fn name(&self) -> &'static str;

    fn arity(&self) -> Arity;

    /// Output facts from input facts. The error is a sentence; the graph adds the node
    /// name and the input facts.
    fn infer(&self, inputs: &[Fact]) -> std::result::Result<Vec<Fact>, String>;

    /// Wires the gradients of the inputs that `ctx.needs(i)`, from the gradients of the
    /// outputs. Ops that are not differentiable by nature (comparisons, argmax) return
    /// `Ok(())` without setting anything; the default refuses, so an op cannot silently
    /// stop gradients by omission.
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        Err(ctx.no_gradient())
    }

    /// Floating-point operations for one execution at the given batch size (plan
    /// statistics only). Elementwise ops count one per output element.
    fn flops(&self, _inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        outputs.iter().map(|f| f.shape.num_elements(batch) as u64).sum()
    }

    /// Whether two nodes with equal ops and inputs compute the same value, so that
    /// common-subexpression elimination may merge them. False for anything with identity
    /// or side effects: placeholders, variables, random ops, assignments, collectives.
    fn is_pure(&self) -> bool {
        true
    }

    /// Whether the output does not depend on the input *values* (only on their shapes, like
    /// `Size`), so autodiff must not look for gradients through it.
    fn stops_gradient(&self) -> bool {
        false
    }
}

macro_rules! op_set {
    ($($variant:ident),* $(,)?) => {
        /// The closed set of ops a graph may contain.
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        pub enum Op {
            $($variant($variant)),*
        }

        impl Op {
            pub fn def(&self) -> &dyn OpDef {
                match self {
                    $(Op::$variant(o) => o),*
                }
            }
        }

        $(impl From<$variant> for Op {
            fn from(o: $variant) -> Op {
                Op::$variant(o)
            }
        })*
    };
}

op_set! {
    // sources
    Placeholder, Variable, Constant,
    // math
    MatMul, Add, Sub, Mul, Div, Maximum, Minimum, AddN, Neg, Exp, Log, Sqrt, Square, Cos, Sin, Erf,
    // activations
    Relu, ReluGrad, Sigmoid, Tanh, Softmax, LogSoftmax,
    // reductions
    ReduceSum, ReduceMean, ReduceMax,
    // shape
    Reshape, Transpose, Concat, Slice, Pad, BroadcastTo, Size, Gather, ScatterAddRows, RowsTouched,
    // neural network
    Conv2d, Conv2dBackpropInput, Conv2dBackpropFilter, MaxPool2d, MaxPool2dGrad, MaxPoolGradWithArgmax,
    AvgPool2d, AvgPool2dGrad, Dropout,
    // normalization and attention, formed by passes before autodiff
    FusedNormalization, FusedNormalizationGrad, FusedAttention, FusedAttentionGrad,
    // fused losses
    SparseSoftmaxCrossEntropy, SoftmaxCrossEntropy, SigmoidCrossEntropy,
    // comparisons and conversions
    ArgMax, Equal, Less, Greater, Cast, OneHot, Select,
    // state
    Assign, Group,
    // formed by fusion passes after autodiff
    FusedConv2d, FusedMatMul, FusedConv2dMaxPool, FusedMaxPoolConv2dBackpropFilter, FusedConv2dBackpropInput,
    FusedElementwise,
    // inserted by strategies
    AllReduce, AllGatherRows, Transfer,
    // inserted by the check-numerics pass
    CheckNumerics,
}

impl Op {
    /// Whether the op communicates between replicas (schedulers launch these as early as
    /// their inputs allow, so communication overlaps computation).
    pub fn is_collective(&self) -> bool {
        matches!(self, Op::AllReduce(_) | Op::AllGatherRows(_))
    }

    pub fn name(&self) -> &'static str {
        self.def().name()
    }

    pub fn arity(&self) -> Arity {
        self.def().arity()
    }

    pub fn infer(&self, inputs: &[Fact]) -> std::result::Result<Vec<Fact>, String> {
        self.def().infer(inputs)
    }

    pub fn is_pure(&self) -> bool {
        self.def().is_pure()
    }
}

/// Shared shape-rule helpers.
pub(crate) mod rules {
    use crate::{DType, Fact};

    pub fn expect_dtype(f: &Fact, dtype: DType, what: &str) -> Result<(), String> {
        if f.dtype == dtype { Ok(()) } else { Err(format!("{what} must be {dtype}, found {}", f.dtype)) }
    }

    pub fn expect_rank(f: &Fact, rank: usize, what: &str) -> Result<(), String> {
        if f.rank() == rank { Ok(()) } else { Err(format!("{what} must have rank {rank}, found {}", f.shape)) }
    }

    /// Elementwise float op: the output has the input's fact.
    pub fn unary_float(inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        expect_dtype(&inputs[0], DType::F32, "input")?;
        Ok(vec![inputs[0].clone()])
    }

    /// Broadcasting binary op whose output dtype is `out` (or the inputs' when `None`).
    pub fn broadcast(inputs: &[Fact], out: Option<DType>) -> Result<Vec<Fact>, String> {
        let (a, b) = (&inputs[0], &inputs[1]);
        if a.dtype != b.dtype {
            return Err(format!("operand dtypes differ: {} and {}", a.dtype, b.dtype));
        }
        let shape = a
            .shape
            .broadcast(&b.shape)
            .ok_or_else(|| format!("shapes {} and {} do not broadcast", a.shape, b.shape))?;
        Ok(vec![Fact::new(out.unwrap_or(a.dtype), shape)])
    }
}
