//! cubek's implicit-GEMM convolution (through burn-cubecl), one of the forms
//! `conv_form` measures: a tiled GEMM on the device's matrix instructions (CMMA) that
//! reads the NHWC input where each window lands, so no patch matrix is written at all.
//!
//! Views only: burn-cubecl's entry points take NCHW/OIHW tensors and turn them into
//! NHWC/OHWI views, so the graph's NHWC/HWIO tensors go in as views that come out of that
//! turn as the buffers they are, and the results go back the same way. Each function
//! returns `None` where cubek refuses (no matrix instructions, as on lavapipe; a shape its
//! tiles do not take; a tensor that is not a cubecl buffer), and the caller runs another
//! form.

pub(super) use cubecl_form::*;

/// Whether this build has the form at all: a cubecl device's tensors are cubecl buffers
/// (not under burn's `fusion`, whose device tensors are its own).
pub(super) const BUILT: bool = cfg!(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")));

#[cfg(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion")))]
mod cubecl_form {
    use super::super::conv::{HWIO_TO_OIHW, NCHW_TO_NHWC, NHWC_TO_NCHW, OIHW_TO_HWIO};
    use crate::device::cube::{cube, float_tensor, launched};
    use crate::value::{B, T};
    use burn::backend::ops::{ConvOptions, FloatTensorOps};
    use burn::tensor::Shape as BurnShape;
    use burn_cubecl::kernel::conv::{ConvStrategy, conv_data_backward, conv_forward_nhwc, conv_weight_backward};

    /// burn-cubecl's forward entry takes its weight as OHWI.
    const HWIO_TO_OHWI: [usize; 4] = [3, 0, 1, 2];

    /// `y = conv(x, w)`, x `[n, h, w, c]`, w `[kh, kw, c, o]`, y `[n, oh, ow, o]`.
    pub(in super::super) fn forward(x: &T, w: &T, opts: &ConvOptions<2>) -> Option<T> {
        let w = B::float_permute(w.clone(), &HWIO_TO_OHWI);
        let (x, w) = (cube(x)?.clone(), cube(&w)?.clone());
        let opts = opts.clone();
        refused_as_none(|| conv_forward_nhwc::<2>(x, w, None, opts, ConvStrategy::ImplicitGemm).ok()).map(float_tensor)
    }

    /// The input's gradient `[n, h, w, c]` (`in_shape`) from the filter and `gy`. Strided
    /// convolutions are left to the other forms: cubek's input gradient takes unit strides
    /// only, and burn would run its direct kernel in its place.
    pub(in super::super) fn input_grad(w: &T, gy: &T, in_shape: [usize; 4], opts: &ConvOptions<2>) -> Option<T> {
        if opts.stride != [1, 1] {
            return None;
        }
        let w = B::float_permute(w.clone(), &HWIO_TO_OIHW);
        let gy = B::float_permute(gy.clone(), &NHWC_TO_NCHW);
        let (w, gy) = (cube(&w)?.clone(), cube(&gy)?.clone());
        let [n, h, wd, c] = in_shape;
        let (shape, opts) = (BurnShape::from(vec![n, c, h, wd]), opts.clone());
        let gx = refused_as_none(|| conv_data_backward::<2>(gy, w, shape, opts, ConvStrategy::ImplicitGemm).ok())?;
        Some(B::float_permute(float_tensor(gx), &NCHW_TO_NHWC))
    }

    /// The filter's gradient `[kh, kw, c, o]` (`w_shape`) from x and `gy`.
    pub(in super::super) fn filter_grad(x: &T, gy: &T, w_shape: [usize; 4], opts: &ConvOptions<2>) -> Option<T> {
        let x = B::float_permute(x.clone(), &NHWC_TO_NCHW);
        let gy = B::float_permute(gy.clone(), &NHWC_TO_NCHW);
        let (x, gy) = (cube(&x)?.clone(), cube(&gy)?.clone());
        let [kh, kw, c, o] = w_shape;
        let (shape, opts) = (BurnShape::from(vec![o, c, kh, kw]), opts.clone());
        let gw = refused_as_none(|| conv_weight_backward::<2>(x, gy, shape, opts, ConvStrategy::ImplicitGemm).ok())?;
        Some(B::float_permute(float_tensor(gw), &OIHW_TO_HWIO))
    }

    /// cubecl reports some launches it cannot do by panicking: a refusal here too.
    fn refused_as_none<R>(f: impl FnOnce() -> Option<R>) -> Option<R> {
        let mut out = None;
        if launched(|| out = f()) { out } else { None }
    }
}

/// Without cubecl buffers, no form to run.
#[cfg(not(all(any(feature = "wgpu", feature = "cuda"), not(feature = "fusion"))))]
mod cubecl_form {
    use crate::value::T;
    use burn::backend::ops::ConvOptions;

    pub(in super::super) fn forward(_: &T, _: &T, _: &ConvOptions<2>) -> Option<T> {
        None
    }

    pub(in super::super) fn input_grad(_: &T, _: &T, _: [usize; 4], _: &ConvOptions<2>) -> Option<T> {
        None
    }

    pub(in super::super) fn filter_grad(_: &T, _: &T, _: [usize; 4], _: &ConvOptions<2>) -> Option<T> {
        None
    }
}
