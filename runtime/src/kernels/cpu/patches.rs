//! A convolution's patches read in place: tap `t` of output pixel `p` is
//! `image[base[p] + offset[t]]`, on the image itself or, with padding, on a zero-padded
//! copy of it. Small-patch kernels read taps this way instead of building the patch matrix
//! (`im2col`), whose per-element copying cost more than the arithmetic on a first layer.

use super::{buffer::Elem, conv::Geometry, microkernel::TapIndex};

/// Where each pixel's window and each tap sit in the (padded) image.
pub(super) struct PatchIndex {
    pub taps: TapIndex,
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
        let base: Vec<usize> =
            (0..g.oh * g.ow).map(|p| ((p / g.ow) * g.sh * width + (p % g.ow) * g.sw) * g.c).collect();
        let mut offset = Vec::with_capacity(g.patch());
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                for c in 0..g.c {
                    offset.push((ky * width + kx) * g.c + c);
                }
            }
        }
        PatchIndex { taps: TapIndex::new(base, offset), width, height, padded }
    }

    /// Elements of the image the index reads.
    pub fn image_len(&self, g: &Geometry) -> usize {
        self.width * self.height * g.c
    }

    /// The image to read taps from: `x` itself, or a zero-padded copy in `scratch`.
    ///
    /// Each element of the copy is written once, border zeros and rows alike: zeroing the
    /// whole buffer first and then copying the rows over it doubled the traffic, and on a
    /// `Same`-padded 16-channel network this copy is most of what is not arithmetic.
    pub fn image<'a, E: Elem>(&self, x: &'a [E], g: &Geometry, scratch: &'a mut Vec<E>) -> &'a [E] {
        if !self.padded {
            return x;
        }
        scratch.resize(self.image_len(g), E::zero());
        let (row, inner) = (self.width * g.c, g.w * g.c);
        let (left, right) = (g.left * g.c, row - g.left * g.c - inner);
        for (y, out) in scratch.chunks_exact_mut(row).enumerate() {
            match y.checked_sub(g.top).filter(|r| *r < g.h) {
                Some(r) => {
                    out[..left].iter_mut().for_each(|v| *v = E::zero());
                    out[left..left + inner].copy_from_slice(&x[r * inner..][..inner]);
                    out[left + inner..][..right].iter_mut().for_each(|v| *v = E::zero());
                }
                None => out.iter_mut().for_each(|v| *v = E::zero()),
            }
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
        // A reused scratch buffer holds anything: the border must still read as zeros.
        let mut scratch = vec![f32::NAN; index.image_len(&g)];
        let image = index.image(&x, &g, &mut scratch);
        for p in 0..g.pixels() {
            for t in 0..g.patch() {
                assert_eq!(
                    image[index.taps.base()[p] + index.taps.offset()[t]],
                    cols[p * g.patch() + t],
                    "pixel {p} tap {t}"
                );
            }
        }
    }
}
