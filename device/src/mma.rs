//! Tensor-core primitives (sm_80+): shared-memory stores, `ldmatrix` and
//! `mma.sync`. Shared-memory addresses are 32-bit offsets in the `.shared`
//! window (what `cvta.to.shared` gives), as the instructions take them.
use core::arch::asm;

/// The `.shared` address of a generic pointer into shared memory.
#[inline(always)]
pub fn smem_addr<T>(p: *const T) -> u32 {
    let a: u64;
    unsafe { asm!("cvta.to.shared.u64 {a}, {p};", a = out(reg64) a, p = in(reg64) p, options(pure, nomem, nostack)) };
    a as u32
}

/// Writes 16 bytes at shared address `addr` (16-aligned).
#[inline(always)]
pub unsafe fn st_shared_v4(addr: u32, x: [u32; 4]) {
    unsafe {
        asm!("st.shared.v4.b32 [{a}], {{{x0}, {x1}, {x2}, {x3}}};", a = in(reg32) addr,
             x0 = in(reg32) x[0], x1 = in(reg32) x[1], x2 = in(reg32) x[2], x3 = in(reg32) x[3], options(nostack));
    }
}

/// `st.shared.b32`: one 32-bit word at a shared address.
#[inline(always)]
pub unsafe fn st_shared_b32(addr: u32, x: u32) {
    unsafe { asm!("st.shared.b32 [{a}], {x};", a = in(reg32) addr, x = in(reg32) x, options(nostack)) };
}

/// Writes 8 bytes at shared address `addr` (8-aligned).
#[inline(always)]
pub unsafe fn st_shared_v2(addr: u32, x: [u32; 2]) {
    unsafe {
        asm!("st.shared.v2.b32 [{a}], {{{x0}, {x1}}};", a = in(reg32) addr, x0 = in(reg32) x[0], x1 = in(reg32) x[1],
             options(nostack));
    }
}

/// Reads 16 bytes at shared address `addr` (16-aligned).
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    unsafe {
        asm!("ld.shared.v4.b32 {{{x0}, {x1}, {x2}, {x3}}}, [{a}];", a = in(reg32) addr,
             x0 = out(reg32) a, x1 = out(reg32) b, x2 = out(reg32) c, x3 = out(reg32) d, options(nostack));
    }
    [a, b, c, d]
}

/// Starts copying 16 bytes from global `src` to shared `dst` without
/// registers (`cp.async.cg`); `src` must be 16-aligned and all 16 bytes
/// inside its allocation. (No `.L2::128B` prefetch hint: it needs PTX ISA
/// 7.4, above what the sm_80 build emits.)
#[inline(always)]
pub unsafe fn cp_async_16(dst: u32, src: *const u8) {
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16;", d = in(reg32) dst, s = in(reg64) src, options(nostack));
    }
}

/// `cp_async_16` of the first `bytes` of `src`, the rest zeros. Use it with
/// `bytes` 16 or 0 only: compute-sanitizer counts any other as a read of
/// all 16 (an out-of-bounds read when they pass the allocation's end); a
/// copy of 0 bytes reads nothing, wherever `src` points
/// (`bench/probes/cp_async_memcheck.cu`, measured on the H100).
#[inline(always)]
pub unsafe fn cp_async_16_zfill(dst: u32, src: *const u8, bytes: u32) {
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src, n = in(reg32) bytes,
             options(nostack));
    }
}

/// Starts copying 4 bytes from global `src` to shared `dst` (`cp.async.ca`,
/// 4-byte aligned both): for vectors whose start need not be 16-byte aligned.
#[inline(always)]
pub unsafe fn cp_async_4(dst: u32, src: *const u8) {
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 4;", d = in(reg32) dst, s = in(reg64) src, options(nostack));
    }
}

/// Reads 8 bytes at shared address `addr` (8-aligned).
#[inline(always)]
pub unsafe fn ld_shared_v2(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    unsafe { asm!("ld.shared.v2.b32 {{{a}, {b}}}, [{p}];", p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b, options(nostack)) };
    [a, b]
}

/// Reads 4 bytes at shared address `addr` (4-aligned).
#[inline(always)]
pub unsafe fn ld_shared_b32(addr: u32) -> u32 {
    let x: u32;
    unsafe { asm!("ld.shared.b32 {x}, [{a}];", a = in(reg32) addr, x = out(reg32) x, options(nostack)) };
    x
}

/// Closes the group of `cp.async` copies issued since the last commit.
#[inline(always)]
pub fn cp_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// Waits until at most `N` committed groups of this thread are in flight.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8×8 matrices of 16-bit
/// elements; lane `8·i + r` gives the address of row `r` of matrix `i`, and
/// each lane receives its fragment of every matrix (one register each).
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(nostack));
    }
    [a, b, c, d]
}

/// `ldmatrix_x4` with `.trans`: each lane receives its fragment of every
/// matrix transposed (for operands stored with the other dimension
/// contiguous: A as `[k, m]`, B as `[k, n]`).
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(nostack));
    }
    [a, b, c, d]
}

macro_rules! mma_16816 {
    ($(#[$doc:meta])* $name:ident, $ty:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
            let [mut d0, mut d1, mut d2, mut d3] = c;
            unsafe {
                asm!(concat!("mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 ",
                             "{{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};"),
                     d0 = inout(reg32) d0, d1 = inout(reg32) d1, d2 = inout(reg32) d2, d3 = inout(reg32) d3,
                     a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                     b0 = in(reg32) b[0], b1 = in(reg32) b[1], options(pure, nomem, nostack));
            }
            [d0, d1, d2, d3]
        }
    };
}
mma_16816!(/// `D = A·B + C` for a 16×16 bf16 A (row-major fragment), a 16×8 bf16 B
    /// (column-major fragment) and a 16×8 f32 accumulator, on one warp.
    mma_bf16_16816, "bf16");
mma_16816!(/// `mma_bf16_16816` for f16 operands.
    mma_f16_16816, "f16");
