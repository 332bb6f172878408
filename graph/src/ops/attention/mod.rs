//! Scaled dot-product attention as single ops, as PyTorch has
//! `scaled_dot_product_attention` and XLA fuses it: a kernel that sees the whole of one
//! head's attention keeps its `Tq x Tk` scores in cache and reads the projections in
//! place, where the composite (`MultiHeadAttention`'s lowering, which autodiff and every
//! backend see through) writes the scores, the softmax, the dropout's mask and four
//! head-major copies of the projections through memory. The `fuse-attention` pass forms
//! these ops from the composite before autodiff, so their gradient is fused too.

mod fused_attention;
mod fused_attention_grad;

pub use fused_attention::{AttentionDims, FusedAttention};
pub use fused_attention_grad::FusedAttentionGrad;
