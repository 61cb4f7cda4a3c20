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
// `#[inline(always)]` on the closures of `gemm::pipeline`.
#![feature(stmt_expr_attributes)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

// The cubins of every arch `cargo xtask build` produced, embedded for the host launchers.
#[cfg(not(target_arch = "nvptx64"))]
include!(concat!(env!("OUT_DIR"), "/cubins.rs"));

/// The config space shared by the row-wise ops (softmax, LayerNorm,
/// RMSNorm): `BM` rows × `BN` columns a tile, `RP` consecutive row blocks a
/// program (the next one prefetched), so one program per row block for
/// short rows and one 8192- or 16384-wide row per program for long ones.
/// `OCC` caps registers so that many programs share an SM: rows in flight
/// per SM (programs × prefetch depth) is what a memory-bound row op needs on
/// the H100 (bench/RESULTS.md: three one-row programs an SM won for all three).
/// Narrow configs first: the host APIs pick the first whose `BN` holds a row.
/// Use: `row_kernel! { grid = [cdiv(rows, BM * RP)], pub fn k<T: Elem>(...) {...} }`.
/// Measured choices: bench/RESULTS.md.
macro_rules! row_kernel {
    (grid = $grid:tt, $($item:tt)*) => {
        #[kernel(
            configs = [
                (BM = 32, BN = 32, WARPS = 4, RP = 4, OCC = 1),
                (BM = 16, BN = 128, WARPS = 4, RP = 4, OCC = 1),
                (BM = 4, BN = 512, WARPS = 4, RP = 4, OCC = 1),
                (BM = 1, BN = 1024, WARPS = 4, RP = 4, OCC = 1),
                (BM = 1, BN = 2048, WARPS = 8, RP = 4, OCC = 1),
                (BM = 1, BN = 4096, WARPS = 8, RP = 4, OCC = 1),
                (BM = 1, BN = 8192, WARPS = 16, RP = 1, OCC = 1),
                (BM = 1, BN = 8192, WARPS = 16, RP = 2, OCC = 1),
                (BM = 1, BN = 8192, WARPS = 16, RP = 2, OCC = 2),
                (BM = 1, BN = 8192, WARPS = 16, RP = 1, OCC = 3),
                (BM = 1, BN = 16384, WARPS = 32, RP = 1, OCC = 1),
            ],
            grid = $grid,
            dtypes = [f32, bf16, f16],
        )]
        $($item)*
    };
}

pub mod adamw;
pub mod attention;
pub mod delta_rule;
pub mod dual_gemm;
pub mod dual_gemm_nvfp4;
pub mod gemm;
pub mod gemm_fp8;
pub mod gmm_loss;
pub mod grouped_gemm;
pub mod mlp;
pub mod norm;
pub mod nvfp4;
pub mod quasar;
pub mod reduce;
pub mod softmax;
pub mod transpose;
pub mod trimul;
pub mod vector;

#[cfg(not(target_arch = "nvptx64"))]
mod check;
#[cfg(not(target_arch = "nvptx64"))]
pub mod tune;
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference;
#[cfg(not(target_arch = "nvptx64"))]
pub mod testing;
#[cfg(not(target_arch = "nvptx64"))]
pub use check::pick_config;

/// The row-op config for rows of `cols` elements: the narrowest tile that
/// holds a whole row (one read, one write; past 16384 columns the widest, in
/// two passes); at 4097-8192 columns the `(RP, OCC)` the op measured best for
/// its element type (`at_8192`, bench/RESULTS.md), until the tuner's table
/// takes over.
#[cfg(not(target_arch = "nvptx64"))]
pub(crate) fn row_config(configs: &[rustile::KernelConfig], cols: usize, at_8192: (usize, usize)) -> usize {
    let (rp, occ) = at_8192;
    pick_config(configs, |c| {
        let bn = c.get("BN").unwrap();
        bn >= cols && (bn != 8192 || (c.get("RP") == Some(rp) && c.get("OCC") == Some(occ)))
    })
}
