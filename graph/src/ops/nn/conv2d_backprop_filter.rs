//! The gradient of `Conv2d` with respect to its filter.

use super::{
    Conv2d,
    conv2d::{adjacent, one},
    padding::{Padding, nhwc, spatial},
};
use crate::{
    DType, Dim, Fact, GraphBuilder, Outlet, Result, Shape,
    autodiff::GradCtx,
    ops::{Arity, OpDef, rules},
};

/// Inputs: `(conv input, gradient of the output)`.
///
/// With `with_bias`, a second output holds the bias gradient (the output gradient summed
/// over batch and space), computed in the same pass over the gradient: the fusion of the
/// `Sum` a bias add's gradient would otherwise be.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Conv2dBackpropFilter {
    pub filter_hw: [usize; 2],
    pub strides: [usize; 2],
    pub padding: Padding,
    pub with_bias: bool,
    #[serde(default = "adjacent")]
    pub dilation: [usize; 2],
    #[serde(default = "one")]
    pub groups: usize,
}

impl Conv2dBackpropFilter {
    /// The forward convolution this is the filter gradient of.
    pub fn conv(&self) -> Conv2d {
        Conv2d { strides: self.strides, padding: self.padding, dilation: self.dilation, groups: self.groups }
    }
}

impl OpDef for Conv2dBackpropFilter {
    fn name(&self) -> &'static str {
        "Conv2DBackpropFilter"
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[Fact]) -> Result<Vec<Fact>, String> {
        let (x, gy) = (&inputs[0], &inputs[1]);
        rules::expect_dtype(x, DType::F32, "input")?;
        rules::expect_rank(gy, 4, "output gradient")?;
        let hw = spatial(x, "input")?;
        let (ohw, _) = self.conv().window(self.filter_hw).output(hw)?;
        let out = gy.shape.dim(3);
        let expected = nhwc(x.shape.dim(0), ohw, out);
        if gy.shape != expected {
            return Err(format!("output gradient must be {expected}, found {}", gy.shape));
        }
        let (Dim::Known(c), Dim::Known(f)) = (x.shape.dim(3), out) else {
            return Err("channel counts must be known".to_string());
        };
        if self.groups == 0 || c % self.groups != 0 || f % self.groups != 0 {
            return Err(format!("{c} input and {f} output channels do not split into {} groups", self.groups));
        }
        let per_group = c / self.groups;
        let mut out = vec![Fact::f32(Shape::known(&[self.filter_hw[0], self.filter_hw[1], per_group, f]))];
        if self.with_bias {
            out.push(Fact::f32(Shape::known(&[f])));
        }
        Ok(out)
    }
    fn grad(&self, ctx: &mut GradCtx<'_, '_>) -> Result<()> {
        // Bilinear in (x, gy): <ggw, BF(x, gy)> = <gy, conv(x, ggw)>.
        let ggw = ctx.out_grad(0)?;
        let (x, gy) = (ctx.input(0), ctx.input(1));
        let hw = spatial(&ctx.input_fact(0)?, "input").map_err(|_| ctx.no_gradient())?;
        if ctx.needs(1) {
            let g = ctx.b.conv2d_general(x, ggw, self.conv())?;
            ctx.set(1, g);
        }
        if ctx.needs(0) {
            let g = ctx.b.op(self.conv().backprop_input(hw).into(), &[ggw, gy])?;
            ctx.set(0, g);
        }
        Ok(())
    }
    fn flops(&self, inputs: &[Fact], outputs: &[Fact], batch: usize) -> u64 {
        let w = outputs[0].shape.as_known().unwrap_or_default();
        2 * (inputs[1].shape.num_elements(batch) * w.iter().take(3).product::<usize>()) as u64
    }
}

impl GraphBuilder<'_> {
    pub fn conv2d_backprop_filter(
        &mut self,
        x: Outlet,
        gy: Outlet,
        filter_hw: [usize; 2],
        strides: [usize; 2],
        padding: Padding,
    ) -> Result<Outlet> {
        self.op(Conv2d::plain(strides, padding).backprop_filter(filter_hw).into(), &[x, gy])
    }
}
