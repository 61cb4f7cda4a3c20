//! The NVFP4 dual GEMM on GPUs without FP4 tensor cores (Hopper):
//! `C = silu(A·B₁ᵀ) ⊙ (A·B₂ᵀ)` with A `[M, K]`, B₁ and B₂ `[N, K]` in NVFP4
//! (E2M1 values two to a byte, element `2i` in the low nibble, one E4M3
//! scale per 16 values along K) and C `[M, N]` fp16.
//!
//! Principles:
//! * **Decode exactly, multiply in 16 bits.** An E2M1 value times an E4M3
//!   scale has at most five significant bits and lies within fp16's range,
//!   so each program decodes its tiles into fp16 in shared memory, scale
//!   folded in, with no rounding, and the 16-bit tensor cores do the rest
//!   (f32 accumulation). The result is the product of the dequantized
//!   operands, as the task defines it.
//! * **Decode once a program.** A program decodes its A tile once for both
//!   products (the dual GEMM's point) and each B tile once; decoding is
//!   integer work of a few instructions an element, a word of eight values
//!   and a scale byte at a time.
//! * **On Hopper, B is widened once, by warpgroups that do only that.**
//!   `dual_gemm_nvfp4_ws_kernel` (the default): the copy engine brings A's
//!   fp16 tile and B₁'s and B₂'s codes and scales into a stage, widening
//!   warpgroups turn the codes into fp16 tiles beside them, and the other
//!   warpgroups multiply from shared memory with `wgmma`. A value is widened
//!   once a program, where widening in the multiplying threads' registers
//!   (below) did it once a thread's step and held up the products. The
//!   single product's `gemm_nvfp4_ws_kernel` is the same program
//!   (`ws_program!`) over one weight matrix.
//! * **Widening where the products are was slower.** A first Hopper
//!   kernel had each multiplying thread widen its own B values in registers
//!   into the left operand of register `wgmma`s; widening held up the
//!   products, and it was slower than the warp-specialized kernel at every
//!   shape measured (RESULTS), so it is gone.
//! * **Plain layouts in, the copy engine's layouts inside.** The API takes
//!   packed rows `[rows, K/2]` and scales `[rows, K/16]` in the plain layout
//!   ([`crate::nvfp4`]: the formats, decoding, and the conversions to and
//!   from cuBLAS's blocked scale layout). The warp-specialized kernel reads
//!   B's scales in the blocked layout, where one step's scales of 128 rows
//!   are one 512-byte copy; the host converts them once a call.
use crate::gemm::block;
use crate::nvfp4::decoded;
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(unused_imports))]
use crate::nvfp4::{run_codes, run_scaled, scale_f16x2};
use rustile::mma::acc_len;
use rustile::prelude::*;
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(unused_imports))]
use rustile::wgmma::{self, pad};
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(unused_imports))]
use rustile::tma;

/// An NVFP4 operand as the kernels read it: values as words of eight, scales.
type Fp4 = (Ptr<u32>, Ptr<F8E4M3>);

/// The K loop of products of NVFP4 operands: each step decodes the program's
/// tile of `a` (rows `at[0]..`) and of every `b` (rows `at[1]..`) into
/// shared memory (from byte 0: A, then each B), then calls `step(ta, tbs, ks)`
/// for each 16-deep slice.
#[inline(always)]
fn k_loop<T: Elem, const BM: usize, const BN: usize, const BK: usize, const TH: usize, const NB: usize>(
    (a, sa): Fp4, bs: [Fp4; NB], [m, n, k]: [usize; 3], at: [usize; 2], mut step: impl FnMut(&Shared<T, BM, BK, TH>, &[Shared<T, BN, BK, TH>; NB], usize),
) where
    [(); rustile::len(BM, BK, TH)]:,
    [(); rustile::len(BN, BK, TH)]:,
{
    let ta = Shared::<T, BM, BK, TH>::at(0);
    let tbs = core::array::from_fn(|i| Shared::<T, BN, BK, TH>::at((BM + i * BN) * BK * 2));
    for kt in 0..k / BK {
        ta.store(&decoded::<T, BM, BK, TH>(a, sa, m, k, [at[0], kt * BK]));
        for (tb, &(b, sb)) in tbs.iter().zip(&bs) {
            tb.store(&decoded::<T, BN, BK, TH>(b, sb, n, k, [at[1], kt * BK]));
        }
        sync();
        for ks in 0..BK / 16 {
            step(&ta, &tbs, ks);
        }
        // Every thread has read this step's tiles before the next overwrites them.
        sync();
    }
}

// `SMEM ≥ (BM + 2·BN)·BK·2` (one stage of the decoded A, B₁, B₂) and
// `≥ 4·BM·BN` (the staged store of C). 128×128 by 8 warps and 64×64 by 4
// spilled once the decode's loads were all in flight together.
#[kernel(
    configs = [
        (BM = 128, BN = 64, BK = 64, WARPS = 8, SMEM = 32768),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [f16],
)]
/// `c = silu(a·b1ᵀ) ⊙ (a·b2ᵀ)` of NVFP4 operands: `a` `[m, k/8]` words,
/// `sa` `[m, k/16]` scales, likewise `b1`, `sb1`, `b2`, `sb2` with `n` rows;
/// `k` a multiple of 64.
pub fn dual_gemm_nvfp4_kernel<T: Elem>(
    a: Ptr<u32>, sa: Ptr<F8E4M3>, b1: Ptr<u32>, sb1: Ptr<F8E4M3>, b2: Ptr<u32>, sb2: Ptr<F8E4M3>, c: PtrMut<T>, m: usize, n: usize, k: usize,
) {
    let at = block::<BM, BN>(m, n);
    let (mut gate, mut up) = (Acc::<BM, BN>::zeros(), Acc::<BM, BN>::zeros());
    k_loop::<T, BM, BN, BK, THREADS, 2>((a, sa), [(b1, sb1), (b2, sb2)], [m, n, k], at, |ta, [tb1, tb2], ks| {
        let fa = FragA::load(ta, ks);
        gate = mma(&fa, &FragB::load(tb1, ks), gate);
        up = mma(&fa, &FragB::load(tb2, ks), up);
    });
    let h = gate.zip(up, |g, u| math::silu(g) * u);
    store_acc_staged(&BlockPtr::rows(c, m, n, at), &h, 0, |_, _, x: [f32; 8]| x);
}

// One accumulator a program: 128×128 fits (`SMEM ≥ (BM + BN)·BK·2, 4·BM·BN`).
#[kernel(
    configs = [
        (BM = 64, BN = 64, BK = 64, WARPS = 4, SMEM = 16384),
        (BM = 128, BN = 64, BK = 64, WARPS = 8, SMEM = 32768),
        (BM = 128, BN = 128, BK = 64, WARPS = 8, SMEM = 65536),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [f16],
)]
/// `c = a·bᵀ` of NVFP4 operands (as [`dual_gemm_nvfp4_kernel`]'s), fp16 out.
pub fn gemm_nvfp4_kernel<T: Elem>(a: Ptr<u32>, sa: Ptr<F8E4M3>, b: Ptr<u32>, sb: Ptr<F8E4M3>, c: PtrMut<T>, m: usize, n: usize, k: usize) {
    let at = block::<BM, BN>(m, n);
    let mut acc = Acc::<BM, BN>::zeros();
    k_loop::<T, BM, BN, BK, THREADS, 1>((a, sa), [(b, sb)], [m, n, k], at, |ta, [tb], ks| {
        acc = mma(&FragA::load(ta, ks), &FragB::load(tb, ks), acc);
    });
    store_acc_staged(&BlockPtr::rows(c, m, n, at), &acc, 0, |_, _, x: [f32; 8]| x);
}

// ---- Hopper: the epilogue of the warp-specialized kernels ---------------------------------------------------

/// `silu(gate) ⊙ up` of accumulators over B widened to 2⁻⁸ of its values:
/// both products are 2⁸ short, exactly.
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
#[inline(always)]
fn gated<const BN: usize, const BM: usize, const TH: usize>(gate: rustile::Acc<BN, BM, TH, true>, up: rustile::Acc<BN, BM, TH, true>) -> rustile::Acc<BN, BM, TH, true>
where
    [(); acc_len(BN, BM, TH)]:,
{
    gate.zip(up, |g, u| math::silu_fast(g * 256.0) * (u * 256.0))
}

/// `c[m0.., n0..] = h`, an accumulator of Cᵀ's block (weight rows down,
/// A's rows across). The block turns around through the shared memory from
/// `pad(TH)` (free: every stage read, no copy in flight) so that each of the
/// `TH` threads stores whole chunks of C's rows.
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
#[inline(always)]
fn store_turned<T: Elem, const BN: usize, const BM: usize, const TH: usize>(h: rustile::Acc<BN, BM, TH, true>, c: PtrMut<T>, [m, n]: [usize; 2], [m0, n0]: [usize; 2])
where
    [(); acc_len(BN, BM, TH)]:,
    [(); rustile::len(BM, BN, TH)]:,
{
    sync();
    let turned = rustile::SharedF32::<BM, BN, TH>::at(pad(TH));
    let _ = h.map(|r, col, x| {
        turned.set(col, r, x);
        x
    });
    sync();
    store(&rustile::BlockPtr::<T, BM, BN, TH>::rows(c, m, n, [m0, n0]), &turned.load().cast::<T>());
}

// ---- Hopper, warp-specialized: B widened once into shared memory ----------------------------

/// The stages of the warp-specialized kernels, for `P` weight matrices
/// (B₁ and B₂, or B). Each holds A's `BM×64` fp16 tile, each B's `BN×64`
/// widened tile (what the products read), their codes as the copy engine
/// brings them (`BN` rows of 32 bytes) and their scales of the step (an
/// atom of cuBLAS's blocked layout: 128 rows × 4 scales in 512 bytes, given
/// 1024 for its swizzle period). After the stages, three barriers a stage:
/// `full` (its copies landed), `widened` (the widening warpgroups stored
/// every B) and `empty` (the multiplying threads saw the products that read
/// it finish).
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
#[derive(Clone, Copy)]
struct Stages<T, const BM: usize, const BN: usize, const STAGES: usize, const TH: usize, const P: usize>(core::marker::PhantomData<T>);

#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
impl<T: Elem, const BM: usize, const BN: usize, const STAGES: usize, const TH: usize, const P: usize> Stages<T, BM, BN, STAGES, TH, P> {
    const A: usize = BM * 128;
    const W: usize = BN * 128;
    const CODES: usize = BN * 32;
    const SCALES: usize = 1024;
    const BYTES: usize = Self::A + P * (Self::W + Self::CODES + Self::SCALES);
    /// Bytes a stage's copies bring: A's tile, each B's codes and scale atom.
    const COPIED: usize = Self::A + P * (Self::CODES + 512);

    /// Sets up the barriers (`widened` counts `wideners` threads) and meets every thread.
    #[inline(always)]
    fn new(wideners: u32) -> Self {
        let st = Stages(core::marker::PhantomData);
        for s in 0..STAGES {
            st.full(s).init(1);
            st.widened(s).init(wideners);
            st.empty(s).init(TH as u32);
        }
        tma::fence_init();
        sync();
        st
    }

    #[inline(always)]
    fn at(s: usize) -> usize {
        pad(TH) + s * Self::BYTES
    }

    #[inline(always)]
    fn a(&self, s: usize) -> Shared<T, BM, 64, TH> {
        Shared::at(Self::at(s))
    }

    #[inline(always)]
    fn w(&self, s: usize, i: usize) -> Shared<T, BN, 64, TH> {
        Shared::at(Self::at(s) + Self::A + i * Self::W)
    }

    #[inline(always)]
    fn codes(&self, s: usize, i: usize) -> Shared<F4E2M1x2, BN, 32, TH> {
        Shared::at(Self::at(s) + Self::A + P * Self::W + i * Self::CODES)
    }

    #[inline(always)]
    fn scales(&self, s: usize, i: usize) -> Shared<F8E4M3, 4, 128, TH> {
        Shared::at(Self::at(s) + Self::A + P * (Self::W + Self::CODES) + i * Self::SCALES)
    }

    #[inline(always)]
    fn barrier(&self, s: usize, j: usize) -> tma::Barrier {
        tma::Barrier::at::<TH>(pad(TH) + STAGES * Self::BYTES + 8 * (3 * s + j))
    }

    #[inline(always)]
    fn full(&self, s: usize) -> tma::Barrier {
        self.barrier(s, 0)
    }

    #[inline(always)]
    fn widened(&self, s: usize) -> tma::Barrier {
        self.barrier(s, 1)
    }

    #[inline(always)]
    fn empty(&self, s: usize) -> tma::Barrier {
        self.barrier(s, 2)
    }
}

/// What the copy engine reads: A decoded (`[m, k]`), and each of the `P`
/// weight matrices' codes (`[n, k/2]` bytes) and blocked scales
/// (`[atoms·4, 128]` bytes), each with its tensor map.
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
#[derive(Clone, Copy)]
struct Sources<T, const P: usize> {
    a: (Ptr<T>, u64),
    codes: [(Ptr<F4E2M1x2>, u64); P],
    scales: [(Ptr<F8E4M3>, u64); P],
}

#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
impl<T: Elem, const P: usize> Sources<T, P> {
    /// Starts k-step `kt`'s copies into its stage: by the program's copy
    /// leader ([`tma::leader`]), or (`by_this_thread`) by the caller.
    #[inline(always)]
    fn fill<const BM: usize, const BN: usize, const STAGES: usize, const TH: usize>(
        &self, st: &Stages<T, BM, BN, STAGES, TH, P>, [m, n, k]: [usize; 3], [n0, m0]: [usize; 2], kt: usize, by_this_thread: bool,
    ) {
        if !(by_this_thread || tma::leader()) {
            return;
        }
        let (s, full) = (kt % STAGES, st.full(kt % STAGES));
        full.expect_by_this_thread(Stages::<T, BM, BN, STAGES, TH, P>::COPIED);
        st.a(s).load_tma_by_this_thread(self.a.1, &BlockPtr::new(self.a.0, [m, k], [k, 1], [m0, kt * 64]), 0, &full);
        // The step's atom of 128 rows: 4 rows of 128 bytes.
        let (atom, rows) = ((n0 / 128) * (k / 64) + kt, cdiv(n, 128) * (k / 16));
        for i in 0..P {
            let (codes, map) = self.codes[i];
            st.codes(s, i).load_tma_by_this_thread(map, &BlockPtr::new(codes, [n, k / 2], [k / 2, 1], [n0, kt * 32]), 0, &full);
            let (scales, map) = self.scales[i];
            st.scales(s, i).load_tma_by_this_thread(map, &BlockPtr::new(scales, [rows, 128], [128, 1], [4 * atom, 0]), 0, &full);
        }
    }
}

/// The program of the warp-specialized kernels over `$P` weight matrices
/// (`$codes`, `$scales`: each one's codes and blocked scales with their
/// tensor maps): [`dual_gemm_nvfp4_ws_kernel`]'s two, gated, or
/// [`gemm_nvfp4_ws_kernel`]'s one. A macro, not a function: it reads the
/// calling kernel's config constants.
#[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(unused_macros))]
macro_rules! ws_program {
    ($P:literal, $a:expr, $map_a:expr, $codes:expr, $scales:expr, $c:expr, [$m:expr, $n:expr, $k:expr]) => {{
        const TH: usize = 2 * BN;
        // The product is Cᵀ's block: weight rows down, A's rows across.
        let (a, map_a, c, [m, n, k]) = ($a, $map_a, $c, [$m, $n, $k]);
        let [n0, m0] = block::<BN, BM>(n, m);
        let steps = k / 64;
        let src = Sources { a: (a, map_a), codes: $codes, scales: $scales };
        let st = Stages::<T, BM, BN, STAGES, TH, $P>::new(128 * WIDENERS as u32);
        let fill = |kt: usize, by_this_thread: bool| src.fill(&st, [m, n, k], [n0, m0], kt, by_this_thread);
        // Each thread widens its runs of 16 values (one scale each) of the Bs
        // `mats` into two 16-byte chunks of a row ([`run_f16x2`]'s pairs,
        // 2⁻⁸ of the values). Every run's codes and scale word are loaded
        // first, then widened and stored: a load after a store to shared
        // memory waits for it (the compiler cannot tell they do not overlap),
        // which exposed each run's load latency in turn.
        const SHARERS: usize = if cfg!(target_arch = "nvptx64") { 128 } else { 1 };
        let widen = |kt: usize, mats: core::ops::Range<usize>| {
            let s = kt % STAGES;
            let mut loaded = [[([0u32; 2], 0u32); BN * 4 / SHARERS]; $P];
            // Constant bounds and indices, so that `loaded` stays in registers.
            for i in 0..$P {
                if !mats.contains(&i) {
                    continue;
                }
                let (codes, scales) = (st.codes(s, i), st.scales(s, i));
                let mut j = 0;
                wgmma::warpgroup_pieces::<BN, 4>(|row, run| {
                    // The row's four scales of the step, in its atom.
                    let r = (n0 + row) % 128;
                    let at = (r % 32) * 16 + (r / 32) * 4;
                    loaded[i][j] = (codes.words::<2>(row, 8 * run), scales.words::<1>(at / 128, at % 128)[0]);
                    j += 1;
                });
            }
            for i in 0..$P {
                if !mats.contains(&i) {
                    continue;
                }
                let w = st.w(s, i);
                let mut j = 0;
                wgmma::warpgroup_pieces::<BN, 4>(|row, run| {
                    let (words, four) = loaded[i][j];
                    j += 1;
                    let p = run_scaled(run_codes(words), scale_f16x2(F8E4M3((four >> (8 * run)) as u8)));
                    w.put_words(row, 32 * run, [p[0], p[1], p[2], p[3]]);
                    w.put_words(row, 32 * run + 16, [p[4], p[5], p[6], p[7]]);
                });
            }
            // The tensor cores read what the threads stored.
            wgmma::fence_shared();
            st.widened(s).arrive();
        };
        if COPIER == 1 && wgmma::warpgroup() == TH / 128 + WIDENERS {
            wgmma::lower_registers::<24>();
            if wgmma::is_copy_issuer::<{ TH + 128 * WIDENERS }>() {
                for kt in 0..steps {
                    let (s, use_) = (kt % STAGES, kt / STAGES);
                    if use_ > 0 {
                        st.empty(s).wait((use_ - 1) % 2);
                    }
                    fill(kt, true);
                }
            }
            wgmma::copier_done();
        }
        if wgmma::is_copier::<TH>() {
            if WREGS > 0 {
                wgmma::lower_registers::<{ WREGS as u32 }>();
            }
            let mats = if WIDENERS == 2 {
                let g = wgmma::warpgroup() - TH / 128;
                g..g + 1
            } else {
                0..$P
            };
            for kt in 0..steps {
                st.full(kt % STAGES).wait((kt / STAGES) % 2);
                widen(kt, mats.clone());
            }
            wgmma::copier_done();
        }
        if CREGS > 0 {
            wgmma::raise_registers::<{ CREGS as u32 }>();
        }
        // Without a copy warpgroup (and in the interpreter) the first thread copies.
        let copies_here = COPIER == 0 || cfg!(not(target_arch = "nvptx64"));
        if copies_here {
            for kt in 0..STAGES.min(steps) {
                fill(kt, false);
            }
        }
        let (mut gate, mut up) = (rustile::Acc::<BN, BM, TH, true>::zeros(), rustile::Acc::<BN, BM, TH, true>::zeros());
        for kt in 0..steps {
            let (s, parity) = (kt % STAGES, (kt / STAGES) % 2);
            // The interpreter's one thread widens too.
            if cfg!(not(target_arch = "nvptx64")) {
                widen(kt, 0..$P);
            }
            st.full(s).wait(parity);
            st.widened(s).wait(parity);
            wgmma::dot_async(&st.w(s, 0), &st.a(s), &mut gate);
            if $P == 2 {
                wgmma::dot_async(&st.w(s, 1), &st.a(s), &mut up);
            }
            // Each product is one group: when only this step's run, the step
            // before is read and its stage goes back to the copy engine.
            wgmma::wait::<$P, BN, BM, TH>(&mut gate);
            if $P == 2 {
                wgmma::wait::<$P, BN, BM, TH>(&mut up);
            }
            if kt > 0 {
                let (prev, use_) = ((kt - 1) % STAGES, (kt - 1) / STAGES);
                st.empty(prev).arrive();
                if copies_here && kt - 1 + STAGES < steps {
                    st.empty(prev).wait_leader(use_ % 2);
                    fill(kt - 1 + STAGES, false);
                }
            }
        }
        wgmma::wait::<0, BN, BM, TH>(&mut gate);
        if $P == 2 {
            wgmma::wait::<0, BN, BM, TH>(&mut up);
        }
        // Every stage is read and no copy is in flight: the stages' memory
        // turns C's block around. The widening warpgroups have exited: the
        // tiles and the store are spread over the `TH` threads that remain.
        let h = if $P == 2 { gated(gate, up) } else { gate.map(|_, _, x| x * 256.0) };
        store_turned::<T, BN, BM, TH>(h, c, [m, n], [m0, n0]);
    }};
}

// `SMEM = pad(TH) + STAGES·(BM·128 + BN·320 + 2048 + 24)` (the stages,
// then their barriers), with `BM·BN·4` in the stages for the epilogue.
// The first `TH = 2·BN` threads multiply (64 weight rows a warpgroup), the
// `WIDENERS` warpgroups after them widen (one: B₁ and B₂; two: one each).
// With `COPIER`, a last warpgroup only issues the copies (one thread, at 24
// registers a thread); else the first multiplying thread issues them
// between its products. `WREGS`, `CREGS`: registers a widening and a
// multiplying thread get (`setmaxnreg`; 0: the launch bound's, `64K /
// THREADS` rounded down to 8). What the multiplying threads take must be
// what the others gave back, or the raise waits forever. (128 × 128 with a
// copy warpgroup, 512 threads, spilled at the launch bound's 128 registers.)
#[kernel(
    configs = [
        (BN = 64, BM = 128, WARPS = 8, WIDENERS = 1, COPIER = 0, STAGES = 4, WREGS = 0, CREGS = 0, SMEM = 156256),
        (BN = 64, BM = 128, WARPS = 12, WIDENERS = 2, COPIER = 0, STAGES = 4, WREGS = 120, CREGS = 240, SMEM = 156256),
        (BN = 128, BM = 64, WARPS = 12, WIDENERS = 1, COPIER = 0, STAGES = 4, WREGS = 0, CREGS = 0, SMEM = 204896),
        (BN = 128, BM = 64, WARPS = 16, WIDENERS = 2, COPIER = 0, STAGES = 4, WREGS = 88, CREGS = 168, SMEM = 204896),
        (BN = 128, BM = 128, WARPS = 12, WIDENERS = 1, COPIER = 0, STAGES = 3, WREGS = 104, CREGS = 200, SMEM = 178248),
        (BN = 64, BM = 128, WARPS = 12, WIDENERS = 1, COPIER = 1, STAGES = 4, WREGS = 0, CREGS = 232, SMEM = 156256),
        (BN = 64, BM = 128, WARPS = 12, WIDENERS = 1, COPIER = 1, STAGES = 5, WREGS = 0, CREGS = 232, SMEM = 195192),
        (BN = 64, BM = 128, WARPS = 12, WIDENERS = 2, COPIER = 0, STAGES = 5, WREGS = 120, CREGS = 240, SMEM = 195192),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [f16],
    arch = sm_90a,
)]
/// [`dual_gemm_nvfp4_kernel`] on Hopper with a warpgroup that only widens:
/// the copy engine brings each step's tile of A (decoded to fp16 `[m, k]` in
/// the order of `nvfp4::chunk_k_position`, `map_a` its map, boxes `BM×64`),
/// and of B₁'s and B₂'s codes (`[n, k/2]` bytes, boxes `BN×32`) and scales
/// (cuBLAS's blocked layout as `[atoms·4, 128]` bytes, boxes `4×128`); the
/// widening warpgroups turn B₁ and B₂ into fp16 in shared memory once, and
/// the first warpgroups (64 weight rows each) multiply them by A's rows with
/// `wgmma` from shared memory.
pub fn dual_gemm_nvfp4_ws_kernel<T: Elem>(
    a: Ptr<T>, b1: Ptr<F4E2M1x2>, sb1: Ptr<F8E4M3>, b2: Ptr<F4E2M1x2>, sb2: Ptr<F8E4M3>, c: PtrMut<T>,
    m: usize, n: usize, k: usize, map_a: u64, map_b1: u64, map_s1: u64, map_b2: u64, map_s2: u64,
) {
    ws_program!(2, a, map_a, [(b1, map_b1), (b2, map_b2)], [(sb1, map_s1), (sb2, map_s2)], c, [m, n, k]);
}

// As above with one weight matrix: `SMEM = pad(TH) + STAGES·(BM·128 +
// BN·160 + 1048)`; its stages are smaller, so it takes more of them.
#[kernel(
    configs = [
        (BN = 64, BM = 128, WARPS = 12, WIDENERS = 1, COPIER = 1, STAGES = 6, WREGS = 0, CREGS = 232, SMEM = 166544),
        (BN = 128, BM = 128, WARPS = 12, WIDENERS = 1, COPIER = 0, STAGES = 5, WREGS = 104, CREGS = 200, SMEM = 189560),
        (BN = 128, BM = 64, WARPS = 12, WIDENERS = 1, COPIER = 0, STAGES = 6, WREGS = 0, CREGS = 0, SMEM = 178320),
    ],
    grid = [cdiv(m, BM) * cdiv(n, BN)],
    dtypes = [f16],
    arch = sm_90a,
)]
/// [`gemm_nvfp4_kernel`] on Hopper, as [`dual_gemm_nvfp4_ws_kernel`] with
/// one weight matrix `b` (codes `[n, k/2]` bytes and blocked scales, maps
/// `map_b`, `map_s`) and no gate: `c = a·bᵀ`.
pub fn gemm_nvfp4_ws_kernel<T: Elem>(
    a: Ptr<T>, b: Ptr<F4E2M1x2>, sb: Ptr<F8E4M3>, c: PtrMut<T>, m: usize, n: usize, k: usize, map_a: u64, map_b: u64, map_s: u64,
) {
    ws_program!(1, a, map_a, [(b, map_b)], [(sb, map_s)], c, [m, n, k]);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
