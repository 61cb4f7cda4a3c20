//! Hopper's warpgroup tensor-core instructions (sm_90a only): `wgmma`, its
//! shared-memory matrix descriptors, and the fences around it.
//!
//! A `wgmma` is issued by the four warps of a warpgroup together and runs
//! asynchronously: it reads both operands straight from shared memory and
//! accumulates into registers that must not be touched until
//! `wgmma_wait` says it finished.
use core::arch::asm;

/// `wgmma.fence`: orders this warpgroup's earlier register and shared-memory
/// accesses before the `wgmma`s that follow (needed before the first of
/// every batch, since the accumulators were last written by other code).
#[inline(always)]
pub fn wgmma_fence() {
    unsafe { asm!("wgmma.fence.sync.aligned;", options(nostack)) };
}

/// Closes the group of `wgmma`s issued since the last commit.
#[inline(always)]
pub fn wgmma_commit() {
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) };
}

/// Waits until at most `N` committed `wgmma` groups are still running.
#[inline(always)]
pub fn wgmma_wait<const N: u32>() {
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) };
}

/// `setmaxnreg.inc`: this warpgroup's threads may use up to `N` registers
/// (taken from a warpgroup that gave them back with [`setmaxnreg_dec`]).
/// The four warps call it together; `N` is a multiple of 8 in 24..=256.
#[inline(always)]
pub fn setmaxnreg_inc<const N: u32>() {
    unsafe { asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}

/// `setmaxnreg.dec`: this warpgroup gives back registers down to `N` a thread.
#[inline(always)]
pub fn setmaxnreg_dec<const N: u32>() {
    unsafe { asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}

/// `fence.proxy.async.shared::cta`: this thread's earlier writes to shared
/// memory (stores, finished `cp.async` copies) become visible to the async
/// proxy that `wgmma` reads through. Then a barrier, as for ordinary reads.
#[inline(always)]
pub fn fence_proxy_async() {
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}

/// Hands back `x` as if this point had written it: code that reads the
/// value cannot move above this point (used after `wgmma_wait` on each
/// accumulator register, as CUTLASS's `warpgroup_fence_operand`).
#[inline(always)]
pub fn fence_reg(x: &mut f32) {
    unsafe { asm!("// fence {x}", x = inout(reg32) *x, options(nostack, preserves_flags)) };
}

/// The `wgmma` descriptor of a K-major operand tile at shared address
/// `addr`: rows of `row_bytes` (32, 64 or 128) stored with the matching
/// hardware swizzle (16-byte chunk `c` of row `r` at chunk `c ^ f(r)`, the
/// layout `rustile::Shared` uses), groups of 8 rows `8·row_bytes` apart.
/// The tile must start at a multiple of `8·row_bytes`.
///
/// The same descriptor serves an N-major tile one swizzle row wide (`[K, N]`
/// with rows of N elements, `row_bytes` long): its 8-row groups along K are
/// `8·row_bytes` apart as well, and N spans no second group.
#[inline(always)]
pub fn wgmma_desc(addr: u32, row_bytes: u32) -> u64 {
    let swizzle: u64 = match row_bytes {
        128 => 1,
        64 => 2,
        _ => 3, // 32 bytes
    };
    let enc = |x: u32| ((x & 0x3ffff) >> 4) as u64;
    // Leading-dimension offset (bits 16-29) is unused for swizzled K-major
    // tiles whose k-extent per instruction fits in one row; 1 by convention.
    enc(addr) | 1 << 16 | enc(8 * row_bytes) << 32 | swizzle << 62
}

macro_rules! wgmma_m64 {
    ($(#[$doc:meta])* $name:ident, $n:literal, $k:literal, $ta:literal, $tb:literal, $tail:literal, $d0:tt $($d:tt)*) => {
        $(#[$doc])*
        ///
        /// `FRESH` starts `d = A·Bᵀ` instead (scale-d 0): `d` is then only
        /// written, so nothing has to put zeros in its registers first. A
        /// zeroing `mov` between two products in flight made ptxas wait for
        /// the first before starting the second.
        #[inline(always)]
        pub unsafe fn $name<const FRESH: bool>(d: &mut [f32; $n / 2], a: u64, b: u64) {
            unsafe {
                if FRESH {
                    asm!(
                        concat!("wgmma.mma_async.sync.aligned.m64n", $n, "k", $k, ".f32.", $ta, ".", $tb, " {{",
                                "{", $d0, "}" $(, ", {", $d, "}")*, "}}, {a}, {b}, 0, 1, 1", $tail, ";"),
                        out(reg32) d[$d0], $(out(reg32) d[$d],)*
                        a = in(reg64) a, b = in(reg64) b, options(nostack));
                } else {
                    asm!(
                        concat!("wgmma.mma_async.sync.aligned.m64n", $n, "k", $k, ".f32.", $ta, ".", $tb, " {{",
                                "{", $d0, "}" $(, ", {", $d, "}")*, "}}, {a}, {b}, 1, 1, 1", $tail, ";"),
                        inout(reg32) d[$d0], $(inout(reg32) d[$d],)*
                        a = in(reg64) a, b = in(reg64) b, options(nostack));
                }
            }
        }
    };
}

/// One `wgmma_m64!` per block width N = 64, 128, 256 (the accumulator's
/// N/2 registers a thread, listed because `asm!` names each operand).
macro_rules! wgmma_widths {
    ($(#[$doc:meta])* [$n64:ident, $n128:ident, $n256:ident], $k:literal, $ta:literal, $tb:literal, $tail:literal) => {
        wgmma_m64!($(#[$doc])* $n64, 64, $k, $ta, $tb, $tail, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
        wgmma_m64!($(#[$doc])* $n128, 128, $k, $ta, $tb, $tail, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);
        wgmma_m64!($(#[$doc])* $n256, 256, $k, $ta, $tb, $tail, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    };
}

// `d += A·Bᵀ` for a warpgroup: A 64×K and B N×K, K-major in shared memory
// (descriptors `a`, `b`), `d` the 64×N f32 accumulator (thread `t` holds
// rows `16·(t/32) + (t%32)/4 (+8)`, column pairs `8j + 2·(t%4)`: the
// `mma.sync` m16n8 layout, N/8 times). The 16-bit forms end in the two
// transpose flags (0: K-major); the 8-bit forms have none, since they read
// K-major operands only, and multiply 32 deep (one 32-byte row slice, as a
// 16-bit k16). FP8 operands may mix formats (e5m2 gradients × e4m3 weights).
wgmma_widths!(/// `d += A·Bᵀ`, bf16 operands 16 deep.
    [wgmma_m64n64k16_bf16, wgmma_m64n128k16_bf16, wgmma_m64n256k16_bf16], 16, "bf16", "bf16", ", 0, 0");
wgmma_widths!(/// `d += A·Bᵀ`, f16 operands 16 deep.
    [wgmma_m64n64k16_f16, wgmma_m64n128k16_f16, wgmma_m64n256k16_f16], 16, "f16", "f16", ", 0, 0");
wgmma_widths!(/// `d += A·Bᵀ`, e4m3 operands 32 deep.
    [wgmma_m64n64k32_e4m3, wgmma_m64n128k32_e4m3, wgmma_m64n256k32_e4m3], 32, "e4m3", "e4m3", "");
wgmma_widths!(/// `d += A·Bᵀ`, e5m2 operands 32 deep.
    [wgmma_m64n64k32_e5m2, wgmma_m64n128k32_e5m2, wgmma_m64n256k32_e5m2], 32, "e5m2", "e5m2", "");
wgmma_widths!(/// `d += A·Bᵀ`, A e4m3 and B e5m2, 32 deep.
    [wgmma_m64n64k32_e4m3_e5m2, wgmma_m64n128k32_e4m3_e5m2, wgmma_m64n256k32_e4m3_e5m2], 32, "e4m3", "e5m2", "");
wgmma_widths!(/// `d += A·Bᵀ`, A e5m2 and B e4m3, 32 deep.
    [wgmma_m64n64k32_e5m2_e4m3, wgmma_m64n128k32_e5m2_e4m3, wgmma_m64n256k32_e5m2_e4m3], 32, "e5m2", "e4m3", "");

// `d = Aᵀ·B` or `d += Aᵀ·B` for a warpgroup with both operands stored
// M- and N-major in shared memory (both transpose flags 1): A `[16, 64]`
// (rows along K, 64 elements of M each), B `[16, N]` (N elements each) a
// column slice of a tile one swizzle row wide. The accumulator layout is
// `wgmma_m64n64k16_bf16`'s: attention's dQ = dS·K from `dSᵀ` and K as stored.
wgmma_m64!(/// `d += Aᵀ·B`, bf16, both operands transposed, N = 32.
    wgmma_m64n32k16_bf16_tt, 32, 16, "bf16", "bf16", ", 1, 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
wgmma_m64!(/// `d += Aᵀ·B`, bf16, both operands transposed, N = 64.
    wgmma_m64n64k16_bf16_tt, 64, 16, "bf16", "bf16", ", 1, 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
wgmma_m64!(/// `d += Aᵀ·B`, f16, both operands transposed, N = 32.
    wgmma_m64n32k16_f16_tt, 32, 16, "f16", "f16", ", 1, 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
wgmma_m64!(/// `d += Aᵀ·B`, f16, both operands transposed, N = 64.
    wgmma_m64n64k16_f16_tt, 64, 16, "f16", "f16", ", 1, 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);

// `d += A·B` for a warpgroup with both operands in shared memory, A
// K-major (`[64, 16]`, flag 0) and B N-major (`[16, 64]`, flag 1, a tile
// one swizzle row wide): attention's dK += dS·Q from `dSᵀ` and Q as stored.
wgmma_m64!(/// `d += A·B`, bf16, A K-major, B N-major, N = 64.
    wgmma_m64n64k16_bf16_kn, 64, 16, "bf16", "bf16", ", 0, 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
wgmma_m64!(/// `d += A·B`, f16, A K-major, B N-major, N = 64.
    wgmma_m64n64k16_f16_kn, 64, 16, "f16", "f16", ", 0, 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);

macro_rules! wgmma_m64_rs {
    ($(#[$doc:meta])* $name:ident, $n:literal, $k:literal, $ty:literal, $tail:literal, $d0:tt $($d:tt)*) => {
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(d: &mut [f32; $n / 2], a: [u32; 4], b: u64) {
            unsafe {
                asm!(
                    concat!("wgmma.mma_async.sync.aligned.m64n", $n, "k", $k, ".f32.", $ty, ".", $ty, " {{",
                            "{", $d0, "}" $(, ", {", $d, "}")*, "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, 1, 1, 1", $tail, ";"),
                    inout(reg32) d[$d0], $(inout(reg32) d[$d],)*
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b = in(reg64) b, options(nostack));
            }
        }
    };
}

/// One `wgmma_m64_rs!` per width N = 16, 32, 64 (a B tile's rows of 32, 64
/// or 128 bytes).
macro_rules! wgmma_rs_widths {
    ($(#[$doc:meta])* [$n16:ident, $n32:ident, $n64:ident], $ty:literal) => {
        wgmma_m64_rs!($(#[$doc])* $n16, 16, 16, $ty, ", 1", 0 1 2 3 4 5 6 7);
        wgmma_m64_rs!($(#[$doc])* $n32, 32, 16, $ty, ", 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
        wgmma_m64_rs!($(#[$doc])* $n64, 64, 16, $ty, ", 1", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
    };
}

// `d += A·B` for a warpgroup with A in registers (64×16: thread `t` holds
// the `mma.sync` m16n8k16 A fragment of rows `16·(t/32)..`, four registers
// of two 16-bit values) and B stored `[16, N]` N-major in shared memory
// (descriptor `b`; the instruction's last flag, 1, transposes it). The
// accumulator layout is `wgmma_m64n64k16_bf16`'s, so an accumulator packed
// to 16 bits is, four registers per 16 columns, the next product's A.
wgmma_rs_widths!(/// `d += A·B`, bf16, A from registers, B N-major.
    [wgmma_m64n16k16_bf16_rs, wgmma_m64n32k16_bf16_rs, wgmma_m64n64k16_bf16_rs], "bf16");
wgmma_rs_widths!(/// `d += A·B`, f16, A from registers, B N-major.
    [wgmma_m64n16k16_f16_rs, wgmma_m64n32k16_f16_rs, wgmma_m64n64k16_f16_rs], "f16");

/// One `wgmma_m64_rs!` per width N = 64, 128, 256 with B K-major (the
/// instruction's last flag 0): `d += A·Bᵀ`, B stored `[N, 16]`.
macro_rules! wgmma_rs_k_widths {
    ($(#[$doc:meta])* [$n64:ident, $n128:ident, $n256:ident], $ty:literal) => {
        wgmma_m64_rs!($(#[$doc])* $n64, 64, 16, $ty, ", 0", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
        wgmma_m64_rs!($(#[$doc])* $n128, 128, 16, $ty, ", 0", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);
        wgmma_m64_rs!($(#[$doc])* $n256, 256, 16, $ty, ", 0", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127);
    };
}

// `d += A·Bᵀ` for a warpgroup with A in registers (as above) and B stored
// `[N, 16]` K-major in shared memory, as the shared-operand forms read it:
// a GEMM whose left operand is made in registers (a norm in its prologue).
wgmma_rs_k_widths!(/// `d += A·Bᵀ`, bf16, A from registers, B K-major.
    [wgmma_m64n64k16_bf16_rs_k, wgmma_m64n128k16_bf16_rs_k, wgmma_m64n256k16_bf16_rs_k], "bf16");
wgmma_rs_k_widths!(/// `d += A·Bᵀ`, f16, A from registers, B K-major.
    [wgmma_m64n64k16_f16_rs_k, wgmma_m64n128k16_f16_rs_k, wgmma_m64n256k16_f16_rs_k], "f16");

// `d += A·Bᵀ` for a warpgroup with 8-bit A in registers (64×32: thread `t`
// holds rows `16·(t/32) + (t%32)/4 (+8)`, four registers of four values:
// columns `4·(t%4)..+4` of both rows, then columns `16 + 4·(t%4)..+4`) and
// B `[N, 32]` K-major in shared memory (8-bit `wgmma` has no transpose).
wgmma_m64_rs!(/// `d += A·Bᵀ`, e4m3, A from registers, N = 64.
    wgmma_m64n64k32_e4m3_rs, 64, 32, "e4m3", "", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
wgmma_m64_rs!(/// `d += A·Bᵀ`, e4m3, A from registers, N = 128.
    wgmma_m64n128k32_e4m3_rs, 128, 32, "e4m3", "", 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);
