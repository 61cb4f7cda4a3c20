//! QuasarAttention's own kernels around the delta rule
//! ([`crate::delta_rule`]): the short convolution with SiLU that `q`, `k`
//! and `v` pass through after their projections, and the gated RMSNorm of
//! the delta rule's outputs before the output projection; each with its
//! backward. The layer (projections, these, the delta rule, forward and
//! backward) is `rustile_train::quasar`.
//!
//! * **Short convolution**, per channel and causal, width 4, weights
//!   `[4, channels]`: `y[t, c] = silu(a[t, c])`,
//!   `a[t, c] = Σ_j w[j, c]·x[t − 3 + j, c]` (rows before a sequence's start
//!   are zeros). The backward, in one pass down each channel's rows,
//!   makes `da = dy·silu'(a)` (recomputing `a`), each program's share of
//!   `dw[j, c] = Σ_t da[t, c]·x[t − 3 + j, c]`, and
//!   `dx[t, c] = Σ_j w[j, c]·da[t + 3 − j, c]` (`da` stays in registers).
//! * **The projection and the convolution in one kernel** (Hopper): `y =
//!   silu(conv(x·Wᵀ))` without the projection read back. Each block of
//!   rows also computes the 3 rows before it (the convolution's halo),
//!   rounds the accumulator to bf16 as the layer stores it, and walks the
//!   staged accumulator down its rows (`store_acc_stencil`), writing `y`
//!   and the projection the backward reads.
//! * **Gated RMSNorm** over each token's and head's 64 values, weight `[64]`
//!   shared by the heads: `y = o·rstd·w ⊙ sigmoid(g)`,
//!   `rstd = 1/sqrt(mean(o²) + eps)`. With `n = o·rstd` and `s = sigmoid(g)`
//!   the backward is `dg = dy·n·w·s·(1 − s)`, `dn = dy·s·w`,
//!   `do = rstd·(dn − n·mean(dn·n))`, and each program's share of
//!   `dw = Σ dy·s·n`.
//!
//! Everything is elementwise, a 64-wide row or a stencil down the rows:
//! tiles of rows, or (the convolution's backward) one thread's strip of
//! channels walked down them, loaded once.
//! Weight gradients are summed in a fixed order by `reduce::col_sum_split`.
use rustile::prelude::*;

/// The convolution's width.
pub const WIDTH: usize = 4;
/// The gated norm's row: one head.
pub const HEAD: usize = 64;

// ---- the short convolution ----------------------------------------------------------------
// Three configs of each (four of the backward's first half), the same
// 32-row blocks (so the same shares of `dw`): a program's 32×128 tile by
// four warps or eight, or 32×64 by four (or 32×32 by one).
// The host takes the first unless `RUSTILE_QUASAR_CONFIG` names another;
// each kernel's first is the fastest at a million tokens (RESULTS, "The
// layer's weight-gradient shares summed in two passes").

#[kernel(
    configs = [(BT = 32, BC = 64, WARPS = 4), (BT = 32, BC = 128, WARPS = 4), (BT = 32, BC = 128, WARPS = 8)],
    grid = [cdiv(tokens, BT), cdiv(channels, BC), batch],
    dtypes = [bf16],
)]
/// `y = silu(conv(x))` for rows `BT·program_id(0) ..` and channels
/// `BC·program_id(1) ..` of sequence `program_id(2)` (`x`, `y`: `[batch,
/// tokens, channels]`).
pub fn conv_silu_kernel<T: Elem>(x: Ptr<T>, w: Ptr<T>, y: PtrMut<T>, tokens: usize, channels: usize, batch: usize) {
    let _ = batch; // the grid
    let (t0, c0, at) = (program_id(0) * BT, program_id(1) * BC, program_id(2) * tokens * channels);
    // Tap j: rows t0 − 3 + j .. of x in f32, zeros before the sequence's start.
    let taps: [Tile<f32, BT, BC>; WIDTH] = core::array::from_fn(|j| {
        let back = WIDTH - 1 - j;
        if t0 >= back {
            load(&BlockPtr::<T, BT, BC>::rows(x.offset(at), tokens, channels, [t0 - back, c0])).cast::<f32>()
        } else {
            // A sequence's first block: element by element, the rows before it zeros.
            let xs = BlockPtr::<T, BT, BC>::rows(x.offset(at), tokens, channels, [0, c0]);
            Tile::<f32, BT, BC>::from_fn(|r, c| if t0 + r >= back { xs.get(t0 + r - back, c, 0.0) } else { 0.0 })
        }
    });
    // The pre-activation a = Σ_j w[j]·tap_j.
    let mut a = Tile::<f32, BT, BC>::zeros();
    for (j, tap) in taps.iter().enumerate() {
        a = a + *tap * Row::<T, BT, BC>::load(w, j * channels + c0, (j + 1) * channels).cast::<f32>();
    }
    store(&BlockPtr::<T, BT, BC>::rows(y.offset(at), tokens, channels, [t0, c0]), &a.map(math::silu).cast::<T>());
}

// The backward in one pass: each thread walks an 8-channel strip down its
// block's rows and the 3 after them, keeping the last four rows of `x` and
// of `da` in registers, so `da` is never stored and each row of `x` and
// `dy` is loaded once (the 3-row halos twice). Its share of `dw` is the
// thread's own running sum: no reduction across threads, no barrier.
// Each thread has the rows of `x` and `dy` of its next `AHEAD` steps in
// flight (four: no faster, 15 more registers). One-warp programs (196
// registers a thread); the host takes the longest blocks that still give
// each SM 4 warps: 128 rows from about 65,536 tokens, down to 16 for a few
// thousand (RESULTS, 2026-11-28, "The convolution's backward in one pass…").

#[kernel(
    configs = [
        (BT = 128, BC = 256, WARPS = 1, AHEAD = 2),
        (BT = 64, BC = 256, WARPS = 1, AHEAD = 2),
        (BT = 32, BC = 256, WARPS = 1, AHEAD = 2),
        (BT = 16, BC = 256, WARPS = 1, AHEAD = 2),
    ],
    grid = [cdiv(tokens, BT), cdiv(channels, BC), batch],
    dtypes = [bf16],
)]
/// The gradients of [`conv_silu_kernel`] for rows `BT·program_id(0) ..`
/// and channels `BC·program_id(1) ..` of sequence `program_id(2)`: `dx[t] =
/// Σ_j w[j]·da[t + 3 − j]` with `da = dy·silu'(a)` (`a` recomputed from
/// `x`), and the block's share of `dw`, `part[(s·blocks + i)·4 + j, c] =
/// Σ_t da[t, c]·x[t − 3 + j, c]` over its rows (block `i` of `blocks =
/// cdiv(tokens, BT)`, tap `j`).
pub fn conv_silu_bwd_kernel<T: Elem>(
    x: Ptr<T>, w: Ptr<T>, dy: Ptr<T>, dx: PtrMut<T>, part: PtrMut<f32>, tokens: usize, channels: usize, batch: usize,
) {
    let (t0, c0, s) = (program_id(0) * BT, program_id(1) * BC, program_id(2));
    let at = s * tokens * channels;
    // Row t of these is token t of the sequence (zeros past its end).
    let xs = BlockPtr::<T, BT, BC>::rows(x.offset(at), tokens, channels, [0, c0]);
    let dys = BlockPtr::<T, BT, BC>::rows(dy.offset(at), tokens, channels, [0, c0]);
    let dxs = BlockPtr::<T, BT, BC>::rows(dx.offset(at), tokens, channels, [0, c0]);
    let blocks = tokens.div_ceil(BT);
    let share = BlockPtr::<f32, WIDTH, BC>::rows(part, batch * blocks * WIDTH, channels, [(s * blocks + program_id(0)) * WIDTH, c0]);
    let wp = BlockPtr::<T, WIDTH, BC>::rows(w, WIDTH, channels, [0, c0]);
    // Strip `c`, its chunks read and written whole (one vector access each) or in general.
    let walk = #[inline(always)]
    |c: usize, whole: bool| {
        let fetch = |p: &BlockPtr<T, BT, BC>, r: usize| if whole { p.fetch_whole_chunk(r, c) } else { p.fetch_chunk(r, c) };
        // Row m of x: token t0 − 3 + m (zeros before the sequence's start).
        let fetch_x = |m: usize| if t0 + m >= WIDTH - 1 { fetch(&xs, t0 + m - (WIDTH - 1)) } else { Fetched::zeros() };
        let taps: [[f32; 8]; WIDTH] = core::array::from_fn(|j| wp.fetch_chunk(j, c).get());
        // Step i works on token u = t0 + i: xw[j] is x[u − 3 + j], daw[j] is da[u − 3 + j].
        let (mut xw, mut daw) = ([[0.0f32; 8]; WIDTH], [[0.0f32; 8]; WIDTH]);
        for j in 1..WIDTH {
            xw[j] = fetch_x(j - 1).get();
        }
        // The rows of steps i .. i + AHEAD, in flight: x (3 rows behind the token) and dy.
        let mut ahead = [(Fetched::<T>::zeros(), Fetched::<T>::zeros()); AHEAD];
        for (k, a) in ahead.iter_mut().enumerate() {
            *a = (fetch_x(k + WIDTH - 1), fetch(&dys, t0 + k));
        }
        let mut sums = [[0.0f32; 8]; WIDTH];
        // Steps past the sequence's end change nothing (dy is zero there).
        for i in 0..(BT + WIDTH - 1).min(tokens + WIDTH - 1 - t0) {
            let (fx, fdy) = ahead[0];
            for k in 1..AHEAD {
                ahead[k - 1] = ahead[k];
            }
            ahead[AHEAD - 1] = (fetch_x(i + AHEAD + WIDTH - 1), fetch(&dys, t0 + i + AHEAD));
            for j in 1..WIDTH {
                xw[j - 1] = xw[j];
                daw[j - 1] = daw[j];
            }
            xw[WIDTH - 1] = fx.get();
            let dyu = fdy.get();
            let mut da = [0.0f32; 8];
            for v in 0..8 {
                let mut a = 0.0;
                for j in 0..WIDTH {
                    a += taps[j][v] * xw[j][v];
                }
                da[v] = dyu[v] * math::silu_grad_fast(a);
            }
            daw[WIDTH - 1] = da;
            if i < BT {
                for j in 0..WIDTH {
                    for v in 0..8 {
                        sums[j][v] += da[v] * xw[j][v];
                    }
                }
            }
            // dx of token u − 3 = Σ_j w[j]·da[u − j]: every da it needs is made.
            if i >= WIDTH - 1 {
                let mut g = [0.0f32; 8];
                for j in 0..WIDTH {
                    for v in 0..8 {
                        g[v] += taps[j][v] * daw[WIDTH - 1 - j][v];
                    }
                }
                let r = t0 + i - (WIDTH - 1);
                if whole { dxs.put_whole_chunk(r, c, g) } else { dxs.put_chunk(r, c, g) }
            }
        }
        for (j, sj) in sums.iter().enumerate() {
            share.put_chunk(j, c, *sj);
        }
    };
    if xs.whole_chunks() && dys.whole_chunks() && dxs.whole_chunks() {
        for_each_strip::<BC, THREADS>(|c| walk(c, true));
    } else {
        for_each_strip::<BC, THREADS>(|c| walk(c, false));
    }
}

// ---- the projection and its convolution in one kernel (Hopper) -----------------------------
// The GEMM of `gemm_tma_kernel` over blocks whose first `WIDTH − 1` rows are
// the previous tokens' projections (the halo: computed again, 3 rows in
// 128), then the convolution and SiLU from the f32 accumulator staged in
// the finished main loop's stages (`store_acc_stencil`). The projection
// `pre` is written too when the backward needs it. `SMEM = pad(32·WARPS) +
// STAGES·((BM + BN)·BK·2 + 16)`, the main loop's; the staged accumulator
// (`4·BM·BN` bytes) fits in its stages.

#[kernel(
    configs = [
        (BM = 128, BN = 128, BK = 64, WARPS = 8, STAGES = 3, OCC = 2, SMEM = 98352),
        (BM = 64, BN = 128, BK = 64, WARPS = 4, STAGES = 3, OCC = 3, SMEM = 74288),
        (BM = 128, BN = 256, BK = 64, WARPS = 8, STAGES = 4, OCC = 1, SMEM = 196672),
    ],
    grid = [cdiv(tokens, BM - (WIDTH - 1)), cdiv(channels, BN), batch],
    dtypes = [bf16],
    arch = sm_90a,
)]
/// `pre = x·wpᵀ` and `y = silu(conv(pre))` for tokens `(BM − 3)·program_id(0)
/// ..` and channels `BN·program_id(1) ..` of sequence `program_id(2)` (`x`
/// `[batch, tokens, hidden]`, `wp` `[channels, hidden]`, `w` `[4, channels]`,
/// `pre`, `y` `[batch, tokens, channels]`); `pre` only where `keep_pre` is
/// not 0. `map_x`, `map_wp`: tensor maps of `x` (as `[batch·tokens, hidden]`)
/// and `wp`, boxes of `BM×64` and `BN×64`.
pub fn proj_conv_silu_kernel<T: Elem>(
    x: Ptr<T>, wp: Ptr<T>, w: Ptr<T>, pre: PtrMut<T>, y: PtrMut<T>,
    tokens: usize, channels: usize, hidden: usize, batch: usize, keep_pre: u32, map_x: u64, map_wp: u64,
) {
    use crate::gemm::{mainloop_tma, pad, Mapped, Operand};
    const OUT: usize = BM - (WIDTH - 1);
    let (t0, c0, s) = (program_id(0) * OUT, program_id(1) * BN, program_id(2));
    // The block starts `h` rows before its first token: WIDTH − 1, except
    // at the tensor's first row. Halo rows of the previous sequence are
    // computed, then masked as the zeros before this one's start.
    let first = s * tokens + t0;
    let row0 = first.saturating_sub(WIDTH - 1);
    let h = first - row0;
    let op = |ptr: Ptr<T>, map: u64| Mapped { map, z: 0, op: Operand { ptr, ld: hidden } };
    // Else each step's swizzle check stays in the loop, a branch that serializes its `wgmma`s.
    rustile::wgmma::check_periods_once();
    let [acc] = mainloop_tma::<T, T, BM, BN, BK, STAGES, THREADS, 1>(op(x, map_x), [op(wp, map_wp)], [batch * tokens, channels, hidden], [row0, c0]);
    // The projection as the layer stores it, rounded to T, is what the convolution reads.
    let acc = acc.rounded::<T>();
    // Rows of this program's tokens: the next ones are the next program's (or sequence's).
    let end = s * tokens + tokens.min(t0 + OUT);
    let out = |p: PtrMut<T>| rustile::BlockPtr::<T, BM, BN, THREADS>::new(p, [end, channels], [channels, 1], [row0, c0]);
    let (y, pre) = (out(y), out(pre));
    let taps = |c: usize| -> [[f32; 8]; WIDTH] {
        core::array::from_fn(|j| core::array::from_fn(|i| if c0 + c + i < channels { w.read(j * channels + c0 + c + i).to_f32() } else { 0.0 }))
    };
    store_acc_stencil::<T, BM, BN, THREADS, true, WIDTH, _>(&y, &acc, pad(THREADS), h, taps, #[inline(always)] |r, c, rows: [[f32; 8]; WIDTH], taps: &[[f32; 8]; WIDTH]| {
        if keep_pre != 0 {
            pre.put_chunk(r, c, rows[WIDTH - 1]);
        }
        // Row r is token t0 + r − h; tap j reads token t0 + r − h − (WIDTH − 1) + j.
        let token = t0 + r - h;
        let mut a = [0.0f32; 8];
        for j in 0..WIDTH {
            if token + j >= WIDTH - 1 {
                for i in 0..8 {
                    a[i] += rows[j][i] * taps[j][i];
                }
            }
        }
        // rcp.approx: a few ulp of f32 before the bf16 store, a third of IEEE division's instructions.
        a.map(math::silu_fast)
    });
}

// ---- the gated RMSNorm ------------------------------------------------------------------

/// Tokens `t0 ..` of head `h` of `[tokens, heads·64]` rows at `p`.
#[inline(always)]
fn head_rows<T: Elem, const BT: usize, const TH: usize>(p: impl rustile::AsRaw<T>, tokens: usize, heads: usize, t0: usize, h: usize) -> BlockPtr<T, BT, HEAD, TH> {
    BlockPtr::new(p, [tokens, (h + 1) * HEAD], [heads * HEAD, 1], [t0, h * HEAD])
}

#[kernel(
    configs = [(BT = 32, WARPS = 4)],
    grid = [cdiv(tokens, BT), heads],
    dtypes = [bf16],
)]
/// `y = o·rstd·w ⊙ sigmoid(g)` for tokens `BT·program_id(0) ..` of head
/// `h = program_id(1)` (`o`, `g`, `y`: `[tokens, heads·64]`), saving `rstd`
/// (`[heads, tokens]`).
pub fn gated_rms_norm_kernel<T: Elem>(o: Ptr<T>, g: Ptr<T>, w: Ptr<T>, y: PtrMut<T>, rstd_out: PtrMut<f32>, tokens: usize, heads: usize, eps: f32) {
    let (t0, h) = (program_id(0) * BT, program_id(1));
    let ot = load(&head_rows::<T, BT, THREADS>(o, tokens, heads, t0, h)).cast::<f32>();
    let rstd = ((ot * ot).row_sum() * (1.0 / HEAD as f32) + eps).rsqrt();
    rstd.store(rstd_out, h * tokens + t0, (h + 1) * tokens);
    let gate = load(&head_rows::<T, BT, THREADS>(g, tokens, heads, t0, h)).cast::<f32>().map(math::sigmoid);
    let wr = Row::<T, BT, HEAD>::load(w, 0, HEAD).cast::<f32>();
    store(&head_rows::<T, BT, THREADS>(y, tokens, heads, t0, h), &(ot * rstd * wr * gate).cast::<T>());
}

// ---- the gated RMSNorm in the output projection's prologue (Hopper) ------------------------
// `out = y·Woᵀ` with `y = RMSNorm(o)·w ⊙ sigmoid(g1·Wg2ᵀ + b)`, neither `g`
// nor `y` leaving the registers. Step `h` of the product's K is head `h`,
// whose 64 columns are exactly one RMSNorm row: its gate `g1·Wg2ₕᵀ` is a
// shared-operand `wgmma`, `yₕ` is made in registers from it and `oₕ` (in
// the accumulator's layout, so a row's statistics are a quad's shuffles),
// packed to bf16, and is the left operand of `out += yₕ·Woₕᵀ`
// (`wgmma::dot_packed_async`). Each step issues its gate product and then
// the previous step's output product, and makes `yₕ` while that runs.
// One ring of cp.async stages holds `oₕ`, `Wg2ₕ` and `Woₕ`; a stage is
// refilled two steps after its products were issued (`SMEM = pad(32·WARPS)
// + BM·64·2 + STAGES·(BM·64 + 64·64 + BN·64)·2`).
// The gate's product starts from the head's biases, which a stage copies
// beside its tiles (`SMEM` adds `STAGES·64·2`), and the output leaves
// through the finished stages: 2.10 ms at a million tokens against 3.33 for
// the three steps it replaces (bench/RESULTS.md, 2026-11-28, "The gated
// norm in the output projection's prologue, 37 % faster…"). 128×128 blocks
// with four stages, and 64-row blocks, were slower.

#[kernel(
    configs = [(BM = 128, BN = 256, WARPS = 8, STAGES = 3, SMEM = 188800)],
    grid = [cdiv(n_out, BN), cdiv(rows, BM)],
    dtypes = [bf16],
    arch = sm_90a,
)]
/// `out = y·woᵀ`, `y = o·rstd·w ⊙ sigmoid(g1·wg2ᵀ + bias)` per head of 64,
/// for rows `BM·program_id(1) ..` and output columns `BN·program_id(0) ..`
/// (`o` `[rows, channels]`, `g1` `[rows, 64]`, `wg2` `[channels, 64]`,
/// `bias` `[channels]`, `w` `[64]`, `wo` `[n_out, channels]`, `out` `[rows,
/// n_out]`). Column blocks of the same rows are neighbours in the grid, so
/// that `o` is read from memory about once.
pub fn gated_out_proj_kernel<T: Elem>(
    o: Ptr<T>, g1: Ptr<T>, wg2: Ptr<T>, bias: Ptr<T>, w: Ptr<T>, wo: Ptr<T>, out: PtrMut<T>,
    rows: usize, channels: usize, n_out: usize, eps: f32,
) {
    use rustile::wgmma;
    let (c0, r0) = (program_id(0) * BN, program_id(1) * BM);
    let steps = channels / HEAD;
    const TILE: usize = HEAD * HEAD * 2;
    let at = |bytes: usize| wgmma::pad(THREADS) + bytes;
    let g1s = Shared::<T, BM, HEAD>::at(at(0));
    const STAGE: usize = BM * HEAD * 2 + TILE + BN * HEAD * 2;
    let stage = #[inline(always)]
    |s: usize| {
        let base = at(BM * HEAD * 2 + s * STAGE);
        (Shared::<T, BM, HEAD>::at(base), Shared::<T, HEAD, HEAD>::at(base + BM * HEAD * 2), Shared::<T, BN, HEAD>::at(base + BM * HEAD * 2 + TILE))
    };
    // The head's 64 gate biases, behind the stages (which keep their 1024-byte
    // alignment): read from global memory the step they were used, their waits
    // were 11 % of the stall samples (bench/RESULTS.md, 2026-11-28, "The gated
    // norm in the output projection's prologue…").
    let bias_tile = #[inline(always)]
    |s: usize| Shared::<T, 1, HEAD>::at(at(BM * HEAD * 2 + STAGES * STAGE + s * HEAD * 2));
    // One group a step (empty past the last), so `wait_copies` counts the same.
    let fill = #[inline(always)]
    |h: usize| {
        if h < steps {
            let (os, wg2s, wos) = stage(h % STAGES);
            os.copy_from(&BlockPtr::new(o, [rows, channels], [channels, 1], [r0, h * HEAD]));
            wg2s.copy_from(&BlockPtr::new(wg2, [channels, HEAD], [HEAD, 1], [h * HEAD, 0]));
            wos.copy_from(&BlockPtr::new(wo, [n_out, channels], [channels, 1], [c0, h * HEAD]));
            bias_tile(h % STAGES).copy_from(&BlockPtr::new(bias, [1, channels], [channels, 1], [0, h * HEAD]));
        }
        commit_copies();
    };
    let ready = #[inline(always)]
    || {
        wait_copies::<{ STAGES as u32 - 3 }>();
        wgmma::fence_shared();
        sync();
    };
    let wr = AccCols::<HEAD>::from_fn(|c| w.read(c).to_f32());
    // The gate's product of head h starts from its biases (added after it,
    // they held 16 registers more beside the head's `o`: 108 bytes of spill).
    let biased = #[inline(always)]
    |h: usize| {
        let bt = bias_tile(h % STAGES);
        let b = AccCols::<HEAD>::from_fn(|c| {
            // Value c of the row: the low or high half of a word (T is 16-bit, as `Shared` requires).
            let half = (bt.words::<1>(0, c / 2 * 4)[0] >> (16 * (c % 2))) as u16;
            unsafe { core::mem::transmute_copy::<u16, T>(&half) }.to_f32()
        });
        rustile::Acc::<BM, HEAD, THREADS, true>::zeros().map_cols(&b, |_, b| b)
    };
    // y of head h from its gate's product: as the layer's unfused path
    // rounds it, g to T after the bias, y to T when packed. (Packed only
    // after the output product in flight is waited for: a register of the
    // next product's operand written while one runs serializes them, C7513.)
    let y = #[inline(always)]
    |h: usize, g: rustile::Acc<BM, HEAD, THREADS, true>| {
        let gate = g.rounded::<T>();
        let ot: rustile::Acc<BM, HEAD, THREADS, true> = stage(h % STAGES).0.load_acc();
        let rstd = ot.map(|_, _, x| x * x).row_sum().map(|s| math::rsqrt(s * (1.0 / HEAD as f32) + eps));
        ot.map_rows(&rstd, |x, r| x * r).map_cols(&wr, |x, w| x * w).zip(gate, |x, g| x * math::recip(1.0 + math::exp(-g)))
    };

    // Else each product's swizzle check stays in the loop, a branch that serializes the `wgmma`s.
    wgmma::check_periods_once();
    g1s.copy_from(&BlockPtr::new(g1, [rows, HEAD], [HEAD, 1], [r0, 0]));
    for h in 0..STAGES - 2 {
        fill(h);
    }
    let mut acc = rustile::Acc::<BM, BN, THREADS, true>::zeros();
    // Step 0: its gate alone.
    ready();
    let mut g = biased(0);
    wgmma::dot_async(&g1s, &stage(0).1, &mut g);
    fill(STAGES - 2);
    wgmma::wait::<0, BM, HEAD, THREADS>(&mut g);
    let mut yh = y(0, g).pack::<T>();
    // Step h: the gate of h, then the output product of h − 1 (whose
    // stage is refilled at step h + 1, after every warpgroup waited for it).
    for h in 1..steps {
        ready();
        g = biased(h);
        wgmma::dot_async(&g1s, &stage(h % STAGES).1, &mut g);
        wgmma::dot_packed_async(&yh, &stage((h - 1) % STAGES).2, &mut acc);
        fill(h + STAGES - 2);
        wgmma::wait::<1, BM, HEAD, THREADS>(&mut g);
        let next = y(h, g);
        wgmma::wait::<0, BM, BN, THREADS>(&mut acc);
        yh = next.pack::<T>();
    }
    ready();
    wgmma::dot_packed_async(&yh, &stage((steps - 1) % STAGES).2, &mut acc);
    wgmma::wait::<0, BM, BN, THREADS>(&mut acc);
    // Through the finished stages: a warp's stores cover whole rows. Straight
    // from the registers, a kernel argument was read again from the constant
    // bank before each store at the register cap (9 % of the stall samples).
    store_acc_staged(&BlockPtr::new(out, [rows, n_out], [n_out, 1], [r0, c0]), &acc, at(0), |_, _, x: [f32; 8]| x);
}

// One block a program (RB = 1): sixteen in a loop took 8.6 ms at a million
// tokens against 2.2 (fewer programs an SM at 188 registers, each block's
// loads waited on in turn); its shares' reduction is the smaller cost.
#[kernel(
    configs = [(BT = 32, RB = 1, WARPS = 4)],
    grid = [cdiv(tokens, BT * RB), heads],
    dtypes = [bf16],
)]
/// The backward of [`gated_rms_norm_kernel`] for tokens `BT·RB·program_id(0)
/// ..` of head `h = program_id(1)` (`RB` of its blocks): `do`, `dg`, and
/// their shares of `dw` (`part_w[program_id(0)·heads + h, ..64]`) and of
/// `Σ_t dg` (`part_g[program_id(0), h·64 ..]`: a bias of `g`'s gradient).
pub fn gated_rms_norm_bwd_kernel<T: Elem>(
    dy: Ptr<T>, o: Ptr<T>, g: Ptr<T>, w: Ptr<T>, rstd: Ptr<f32>, d_o: PtrMut<T>, dg: PtrMut<T>, part_w: PtrMut<f32>, part_g: PtrMut<f32>,
    tokens: usize, heads: usize,
) {
    let (p, h) = (program_id(0), program_id(1));
    let wr = Row::<T, BT, HEAD>::load(w, 0, HEAD).cast::<f32>();
    let (mut share_w, mut share_g) = (Row::<f32, BT, HEAD>::splat(0.0), Row::<f32, BT, HEAD>::splat(0.0));
    for b in 0..RB {
        let t0 = (p * RB + b) * BT;
        if t0 >= tokens {
            break;
        }
        let rows = |x| head_rows::<T, BT, THREADS>(x, tokens, heads, t0, h);
        let rs = Col::<f32, BT, HEAD>::load(rstd, h * tokens + t0, (h + 1) * tokens);
        let n = load(&rows(o)).cast::<f32>() * rs;
        let s = load(&rows(g)).cast::<f32>().map(math::sigmoid);
        let dyt = load(&rows(dy)).cast::<f32>();
        let dz = dyt * s;
        share_w = share_w + (dz * n).col_sum();
        let dgt = dyt * n * wr * s * (Tile::splat(1.0) - s);
        share_g = share_g + dgt.col_sum();
        store(&head_rows::<T, BT, THREADS>(dg, tokens, heads, t0, h), &dgt.cast::<T>());
        let dn = dz * wr;
        let mean = (dn * n).row_sum() * (1.0 / HEAD as f32);
        store(&head_rows::<T, BT, THREADS>(d_o, tokens, heads, t0, h), &((dn - n * mean) * rs).cast::<T>());
    }
    let at = (p * heads + h) * HEAD;
    share_w.store(part_w, at, at + HEAD);
    share_g.store(part_g, at, at + HEAD);
}

// ---- the step size's parameter ---------------------------------------------------------------

#[kernel(
    configs = [(WARPS = 1)],
    grid = [cdiv(n, 256)],
    dtypes = [bf16],
)]
/// `y = softplus(x) = log(1 + eˣ)` (f32 out): each head's `β` from its parameter.
pub fn softplus_kernel<T: Elem>(x: Ptr<T>, y: PtrMut<f32>, n: usize) {
    let i0 = program_id(0) * 256;
    let x = Row::<T, 1, 256>::load(x, i0, n).cast::<f32>();
    // Without overflow for large x.
    x.map(|x| math::max(x, 0.0) + math::log(1.0 + math::exp(-math::abs(x)))).store(y, i0, n);
}

#[kernel(
    configs = [(WARPS = 1)],
    grid = [cdiv(n, 256)],
    dtypes = [bf16],
)]
/// `dx = dy·sigmoid(x)`: [`softplus_kernel`]'s backward.
pub fn softplus_bwd_kernel<T: Elem>(x: Ptr<T>, dy: Ptr<f32>, dx: PtrMut<f32>, n: usize) {
    let i0 = program_id(0) * 256;
    let x = Row::<T, 1, 256>::load(x, i0, n).cast::<f32>();
    Row::<f32, 1, 256>::load(dy, i0, n).zip(x, |d, x| d * math::sigmoid(x)).store(dx, i0, n);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
