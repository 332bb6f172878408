//! A convolution's patches read in place: tap `t` of output pixel `p` is
//! `image[base[p] + offset[t]]`, on the image itself or, with padding, on a zero-padded
//! copy of it. Small-patch kernels read taps this way instead of building the patch matrix
//! (`im2col`), whose per-element copying cost more than the arithmetic on a first layer.

use super::{buffer::Elem, conv::Geometry};

/// Where each pixel's window and each tap sit in the (padded) image.
pub(super) struct PatchIndex {
    pub base: Vec<usize>,
    pub offset: Vec<usize>,
    /// The padded image's width and height (the image's own without padding).
    width: usize,
    height: usize,
    padded: bool,
}

impl PatchIndex {
    pub fn new(g: &Geometry) -> PatchIndex {
        // Padding on every side the windows reach past the image.
        let bottom = ((g.oh - 1) * g.sh + g.kh).saturating_sub(g.h + g.top);
        let right = ((g.ow - 1) * g.sw + g.kw).saturating_sub(g.w + g.left);
        let (height, width) = (g.h + g.top + bottom, g.w + g.left + right);
        let padded = g.top + bottom + g.left + right > 0;
        let base = (0..g.oh * g.ow).map(|p| ((p / g.ow) * g.sh * width + (p % g.ow) * g.sw) * g.c).collect();
        let mut offset = Vec::with_capacity(g.patch());
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                for c in 0..g.c {
                    offset.push((ky * width + kx) * g.c + c);
                }
            }
        }
        PatchIndex { base, offset, width, height, padded }
    }

    /// Elements of the image the index reads.
    pub fn image_len(&self, g: &Geometry) -> usize {
        self.width * self.height * g.c
    }

    /// The image to read taps from: `x` itself, or a zero-padded copy in `scratch`.
    pub fn image<'a, E: Elem>(&self, x: &'a [E], g: &Geometry, scratch: &'a mut Vec<E>) -> &'a [E] {
        if !self.padded {
            return x;
        }
        scratch.clear();
        scratch.resize(self.image_len(g), E::zero());
        for y in 0..g.h {
            let row = &x[y * g.w * g.c..][..g.w * g.c];
            scratch[((y + g.top) * self.width + g.left) * g.c..][..g.w * g.c].copy_from_slice(row);
        }
        scratch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_read_through_the_index_are_the_patch_matrix() {
        let g = Geometry { n: 1, h: 5, w: 4, c: 2, kh: 3, kw: 2, oh: 3, ow: 2, sh: 2, sw: 3, top: 1, left: 1 };
        let x: Vec<f32> = (0..g.image()).map(|i| i as f32 + 1.0).collect();
        let mut cols = vec![0.0; g.pixels() * g.patch()];
        super::super::conv::im2col(&x, &g, &mut cols);
        let index = PatchIndex::new(&g);
        let mut scratch = Vec::new();
        let image = index.image(&x, &g, &mut scratch);
        for p in 0..g.pixels() {
            for t in 0..g.patch() {
                assert_eq!(image[index.base[p] + index.offset[t]], cols[p * g.patch() + t], "pixel {p} tap {t}");
            }
        }
    }
}
