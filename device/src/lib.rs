//! Thin wrappers over PTX instructions for the Rustile GPU backend.
//!
//! Everything here is `#[inline(always)]` and compiles only for `nvptx64`; on
//! the host this crate is empty. Each wrapper is one instruction (or one
//! obvious sequence), so the DSL above can be read without knowing PTX and
//! the PTX that comes out can be read without knowing the DSL.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(stdarch_nvptx, asm_experimental_arch, core_intrinsics, gpu_intrinsics, gpu_launch_sized_workgroup_mem, link_llvm_intrinsics)
)]
#![allow(internal_features)]

#[cfg(target_arch = "nvptx64")]
mod mma;
#[cfg(target_arch = "nvptx64")]
pub use mma::*;
#[cfg(target_arch = "nvptx64")]
mod ptx;
#[cfg(target_arch = "nvptx64")]
pub use ptx::*;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod wgmma;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
pub use wgmma::*;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
mod tma;
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
pub use tma::*;
