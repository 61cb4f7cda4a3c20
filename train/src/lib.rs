//! Training on Rustile kernels.
//!
//! Principles, as llm.c's: plain buffers made once (a step allocates
//! nothing, so it can be captured as one CUDA graph and replayed); each
//! layer's forward and backward side by side in the model's one file; the
//! parameters in flat buffers, so the optimizer is one launch. Everything
//! goes through the ops' public host API on a [`rustile_host::Gpu`], which
//! may be the CPU interpreter ([`rustile_host::Gpu::interpreter`]): the same
//! model code trains a tiny configuration on a machine without a GPU, and
//! its tests run there.
//!
//! - [`params`]: flat parameters, gradients, AdamW state, the bf16 copy.
//! - [`data`]: Gaussian-process regression batches.
//! - [`transformer_np`]: the Transformer Neural Process, forward, backward, step.
//! - [`quasar`]: QuasarAttention, the delta-rule layer, forward and backward.
pub mod data;
pub mod params;
pub mod quasar;
pub mod transformer_np;

pub use transformer_np::{Config, Shape, TransformerNp};
