//! Kernels written in the Rustile DSL, one folder per op family: the kernel,
//! its config space and its host API read top to bottom, with the op's
//! CPU-interpreter tests beside it (`tests.rs`).
//!
//! Every op has three entry points: the typed host API that validates
//! tensors and picks a config (`softmax(&gpu, &x, &mut y)`), the kernel's own
//! launcher for a chosen config (`softmax::kernel::launch`), and the CPU
//! interpreter (`softmax_cpu(&x, rows, cols)`).
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![allow(incomplete_features)]
#![feature(generic_const_exprs)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

// The cubins of every arch `cargo xtask build` produced, embedded for the host launchers.
#[cfg(not(target_arch = "nvptx64"))]
include!(concat!(env!("OUT_DIR"), "/cubins.rs"));

pub mod norm;
pub mod softmax;
pub mod vector;

#[cfg(not(target_arch = "nvptx64"))]
mod check;
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference;
#[cfg(not(target_arch = "nvptx64"))]
pub mod testing;
#[cfg(not(target_arch = "nvptx64"))]
pub use check::pick_config;
