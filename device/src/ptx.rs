use core::arch::asm;
use core::arch::nvptx;

// ---- special registers -------------------------------------------------------

/// Thread index within the block (x only: Rustile programs are 1-D blocks).
#[inline(always)]
pub fn thread_idx() -> u32 {
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `exit`: this thread is done with the program. Barriers of the whole
/// program stop waiting for it (a warp-specialized program's copy
/// warpgroup leaves this way, so that no code after it is shared with the
/// other warps and held to its register budget).
#[inline(always)]
pub fn exit() -> ! {
    unsafe { core::arch::asm!("exit;", options(noreturn, nostack)) }
}

/// Block index along `axis` (0, 1 or 2).
#[inline(always)]
pub fn block_idx(axis: u32) -> u32 {
    unsafe {
        (match axis {
            0 => nvptx::_block_idx_x(),
            1 => nvptx::_block_idx_y(),
            _ => nvptx::_block_idx_z(),
        }) as u32
    }
}

/// Grid size along `axis`.
#[inline(always)]
pub fn grid_dim(axis: u32) -> u32 {
    unsafe {
        (match axis {
            0 => nvptx::_grid_dim_x(),
            1 => nvptx::_grid_dim_y(),
            _ => nvptx::_grid_dim_z(),
        }) as u32
    }
}

// ---- synchronization ------------------------------------------------------------

/// `bar.sync 0`: every thread of the block waits here; orders shared memory.
#[inline(always)]
pub fn sync_threads() {
    unsafe { nvptx::_syncthreads() }
}

/// `bar.sync id, threads`: the calling warps wait at named barrier `id`
/// (1..=15; 0 is [`sync_threads`]'s) until `threads` threads (whole warps)
/// have arrived at it, counting those that [`bar_arrive`]d; orders shared
/// memory among them. An LLVM intrinsic, so that it stays convergent.
#[inline(always)]
pub fn bar_sync(id: u32, threads: u32) {
    unsafe { barrier_cta_sync_count(id, threads) }
}

/// `bar.arrive id, threads`: the calling warps count towards named barrier
/// `id`'s next `threads` arrivals and go on without waiting.
#[inline(always)]
pub fn bar_arrive(id: u32, threads: u32) {
    unsafe { barrier_cta_arrive_count(id, threads) }
}

unsafe extern "C" {
    #[link_name = "llvm.nvvm.barrier.cta.sync.aligned.count"]
    fn barrier_cta_sync_count(id: u32, threads: u32);
    #[link_name = "llvm.nvvm.barrier.cta.arrive.aligned.count"]
    fn barrier_cta_arrive_count(id: u32, threads: u32);
}

// ---- shared memory ----------------------------------------------------------------

/// The block's dynamic shared memory (sized by the launch's `smem_bytes`).
#[inline(always)]
pub fn dyn_smem<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}

// ---- warp shuffles ---------------------------------------------------------------

// The shuffle must be the LLVM intrinsic, not inline asm: the intrinsic is
// `convergent`, so LLVM never moves it into a branch that only some lanes
// take. (As asm it was sunk into an `if lane == 0` block, and the full-mask
// shuffle then waited forever for the other 31 lanes.)
unsafe extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.f32"]
    fn shfl_sync_bfly_f32(member_mask: u32, v: f32, lane_mask: u32, clamp: u32) -> f32;
}

/// Butterfly exchange across the full warp: lane `i` gets lane `i ^ mask`'s value.
#[inline(always)]
pub fn shfl_xor(v: f32, mask: u32) -> f32 {
    unsafe { shfl_sync_bfly_f32(0xffff_ffff, v, mask, 0x1f) }
}

// ---- fast math (the `.approx` unit; relative error around 2^-22) --------------------

macro_rules! unary_f32 {
    ($(#[$doc:meta])* $name:ident, $insn:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(x: f32) -> f32 {
            let y: f32;
            unsafe { asm!(concat!($insn, " {y}, {x};"), y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack)); }
            y
        }
    };
}
unary_f32!(/// 2^x
    ex2, "ex2.approx.ftz.f32");
unary_f32!(/// log2(x)
    lg2, "lg2.approx.ftz.f32");
unary_f32!(/// 1/sqrt(x)
    rsqrt, "rsqrt.approx.ftz.f32");
unary_f32!(/// sqrt(x), correctly rounded
    sqrt, "sqrt.rn.f32");
unary_f32!(/// 1/x, correctly rounded
    rcp, "rcp.rn.f32");
unary_f32!(/// 1/x to within one unit in the last place (one instruction; `rcp.rn`
    /// and `/` are a subroutine of a dozen)
    rcp_approx, "rcp.approx.ftz.f32");
unary_f32!(/// tanh(x) (sm_75+; absolute error around 2^-11, use `tanh_accurate` for f32 accuracy)
    tanh_approx, "tanh.approx.f32");

// ---- conversions ------------------------------------------------------------------

/// f32 → bf16 bits, round to nearest even (sm_80+).
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let y: u16;
    unsafe { asm!("cvt.rn.bf16.f32 {y}, {x};", y = out(reg16) y, x = in(reg32) x, options(pure, nomem, nostack)); }
    y
}

/// f32 → f16 bits, round to nearest even.
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    let y: u16;
    unsafe { asm!("cvt.rn.f16.f32 {y}, {x};", y = out(reg16) y, x = in(reg32) x, options(pure, nomem, nostack)); }
    y
}

macro_rules! pair_to_16 {
    ($(#[$doc:meta])* $name:ident, $cvt:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(a: f32, b: f32) -> [u16; 2] {
            let y: u32;
            // The first source goes to the upper half.
            unsafe { asm!(concat!($cvt, " {y}, {b}, {a};"), y = out(reg32) y, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack)); }
            [y as u16, (y >> 16) as u16]
        }
    };
}
pair_to_16!(/// (a, b) f32 → bf16 bits, round to nearest even, one instruction (sm_80+).
    f32x2_to_bf16x2, "cvt.rn.bf16x2.f32");
pair_to_16!(/// (a, b) f32 → f16 bits, round to nearest even, one instruction (sm_80+).
    f32x2_to_f16x2, "cvt.rn.f16x2.f32");

macro_rules! pair_to_8 {
    ($(#[$doc:meta])* $name:ident, $cvt:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(a: f32, b: f32) -> [u8; 2] {
            let y: u16;
            // The first source goes to the upper byte.
            unsafe { asm!(concat!($cvt, " {y}, {b}, {a};"), y = out(reg16) y, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack)); }
            [y as u8, (y >> 8) as u8]
        }
    };
}
pair_to_8!(/// (a, b) f32 → FP8 e4m3 bits, round to nearest even, saturating to ±448 (NaN stays NaN), one instruction (sm_89+).
    f32x2_to_e4m3x2, "cvt.rn.satfinite.e4m3x2.f32");
pair_to_8!(/// (a, b) f32 → FP8 e5m2 bits, round to nearest even, saturating to ±57344 (NaN stays NaN), one instruction (sm_89+).
    f32x2_to_e5m2x2, "cvt.rn.satfinite.e5m2x2.f32");

/// f16 bits → f32 (exact).
#[inline(always)]
pub fn f16_to_f32(x: u16) -> f32 {
    let y: f32;
    unsafe { asm!("cvt.f32.f16 {y}, {x};", y = out(reg32) y, x = in(reg16) x, options(pure, nomem, nostack)); }
    y
}

// ---- predicated global memory access ------------------------------------------------
//
// Each is one straight-line instruction with a predicate instead of a branch:
// a kernel's loads can then all be issued before the first one is used (a
// branch around each load made the compiler consume it before the next).
// A load whose predicate is false leaves `fill` and touches no memory.
// (Edge chunks use plain scalar accesses behind a branch that only edge
// threads take; see rustile's GPU backend.)
// Loads are deliberately not `readonly`: LLVM then keeps them in program
// order with the other memory operations, so a kernel's own prefetch
// distance (one tile ahead) is what runs, not every later load hoisted into
// registers at once.

/// 16 bytes at `p` (16-aligned) if `on`, else `fill`.
#[inline(always)]
pub unsafe fn ld_v4_if(p: *const u32, on: bool, fill: u32) -> [u32; 4] {
    let (mut a, mut b, mut c, mut d) = (fill, fill, fill, fill);
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.b32 p, {on}, 0; @p ld.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}]; }}",
             on = in(reg32) on as u32, p = in(reg64) p, a = inout(reg32) a, b = inout(reg32) b,
             c = inout(reg32) c, d = inout(reg32) d, options(nostack, preserves_flags));
    }
    [a, b, c, d]
}

/// `mul.rn.f16x2`: the products of two f16 pairs packed in 32 bits, each
/// rounded to nearest even.
#[inline(always)]
pub fn mul_f16x2(a: u32, b: u32) -> u32 {
    let out: u32;
    unsafe { asm!("mul.rn.f16x2 {o}, {a}, {b};", o = out(reg32) out, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack)) };
    out
}

/// 8 bytes at `p` (8-aligned) if `on`, else `fill`.
#[inline(always)]
pub unsafe fn ld_v2_if(p: *const u32, on: bool, fill: u32) -> [u32; 2] {
    let (mut a, mut b) = (fill, fill);
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.b32 p, {on}, 0; @p ld.global.v2.b32 {{{a}, {b}}}, [{p}]; }}",
             on = in(reg32) on as u32, p = in(reg64) p, a = inout(reg32) a, b = inout(reg32) b,
             options(nostack, preserves_flags));
    }
    [a, b]
}

macro_rules! scalar_load {
    ($ld:ident, $t:ty, $reg:ident, $w:literal) => {
        /// One element at `p` if `on`, else `fill`.
        #[inline(always)]
        pub unsafe fn $ld(p: *const $t, on: bool, fill: $t) -> $t {
            let mut x = fill;
            unsafe {
                asm!(concat!("{{ .reg .pred p; setp.ne.b32 p, {on}, 0; @p ld.global.", $w, " {x}, [{p}]; }}"),
                     on = in(reg32) on as u32, p = in(reg64) p, x = inout($reg) x, options(nostack, preserves_flags));
            }
            x
        }
    };
}
scalar_load!(ld_b32_if, u32, reg32, "b32");
scalar_load!(ld_b16_if, u16, reg16, "b16");

/// One byte at `p` if `on`, else `fill` (PTX has no 8-bit registers: through 16).
#[inline(always)]
pub unsafe fn ld_b8_if(p: *const u8, on: bool, fill: u8) -> u8 {
    let mut x = fill as u16;
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.b32 p, {on}, 0; @p ld.global.b8 {x}, [{p}]; }}",
             on = in(reg32) on as u32, p = in(reg64) p, x = inout(reg16) x, options(nostack, preserves_flags));
    }
    x as u8
}

/// Writes 16 bytes at `p` (16-aligned) if `on`.
#[inline(always)]
pub unsafe fn st_v4_if(p: *mut u32, on: bool, x: [u32; 4]) {
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.b32 p, {on}, 0; @p st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}}; }}",
             on = in(reg32) on as u32, p = in(reg64) p, a = in(reg32) x[0], b = in(reg32) x[1],
             c = in(reg32) x[2], d = in(reg32) x[3], options(nostack, preserves_flags));
    }
}

/// Writes 8 bytes at `p` (8-aligned) if `on`.
#[inline(always)]
pub unsafe fn st_v2_if(p: *mut u32, on: bool, x: [u32; 2]) {
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.b32 p, {on}, 0; @p st.global.v2.b32 [{p}], {{{a}, {b}}}; }}",
             on = in(reg32) on as u32, p = in(reg64) p, a = in(reg32) x[0], b = in(reg32) x[1],
             options(nostack, preserves_flags));
    }
}

/// `*p = max(*p, x)` as one atomic reduction in global memory (no result
/// comes back, so the thread does not wait for it).
#[inline(always)]
pub unsafe fn red_max_u32(p: *mut u32, x: u32) {
    unsafe { asm!("red.global.max.u32 [{p}], {x};", p = in(reg64) p, x = in(reg32) x, options(nostack, preserves_flags)) };
}

/// Emits nothing, but hands back `x` as if it were written here: code that
/// uses the words cannot be moved above this point, and (not being `pure`)
/// this point stays after earlier memory accesses. Used to unpack loaded
/// words only once every load of a tile has been issued.
#[inline(always)]
pub fn settle4(x: [u32; 4]) -> [u32; 4] {
    let [mut a, mut b, mut c, mut d] = x;
    unsafe { asm!("// settle {a} {b} {c} {d}", a = inout(reg32) a, b = inout(reg32) b, c = inout(reg32) c, d = inout(reg32) d, options(nostack, preserves_flags)) };
    [a, b, c, d]
}

/// `settle4` for two words.
#[inline(always)]
pub fn settle2(x: [u32; 2]) -> [u32; 2] {
    let [mut a, mut b] = x;
    unsafe { asm!("// settle {a} {b}", a = inout(reg32) a, b = inout(reg32) b, options(nostack, preserves_flags)) };
    [a, b]
}

/// `x`, as if computed here: code that uses it cannot be hoisted out of the
/// enclosing loop (the empty `asm` is not `pure`). For values only a rare
/// path needs, which LLVM would otherwise hoist into registers that stay
/// live across the whole loop.
#[inline(always)]
pub fn opaque(x: u64) -> u64 {
    let mut y = x;
    unsafe { asm!("// opaque {y}", y = inout(reg64) y, options(nostack, preserves_flags)) };
    y
}
