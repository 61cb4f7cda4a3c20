//! Flash attention forward on Hopper (sm_90a): [`super::attention_fwd_kernel`]'s
//! program with both products on the warpgroup tensor cores (`wgmma`).
//!
//! Each warpgroup takes 64 query rows, two of a 128-row block. At D = 80
//! (head dim 72) the key blocks are 64 rows, so that two programs share a
//! SM: a vision encoder's 256 tokens are then two programs a head, each
//! hiding its first loads behind the other's products (93.9 µs at the
//! vision shape with two stages, where one 64-row program copying by
//! `cp.async`, four a SM, took 105.6; bench/RESULTS.md, 2026-11-23,
//! “Head dim 72: two-warpgroup forward by TMA…”). `S = Q·Kᵀ` reads Q and
//! K straight from shared memory; `O += P·V` takes `P` from the
//! registers the softmax left it in and V from shared memory, N-major (V's
//! rows are keys). `wgmma` reads rows of at most 128 bytes, so a head is
//! stored as 64-column tiles: one at D = 64, two at 128, and 64 plus a tile
//! of 16 or 32 columns at 72/80 and 96.
//!
//! The tiles come in by TMA, one thread issuing each copy: 10-15 % faster
//! than with every thread copying (`cp.async`, whose masks and addresses
//! are a large share of a program's instructions; bench/RESULTS.md,
//! 2026-11-23, “Attention forward by TMA at 128-row configs” and
//! “Head dim 72: two-warpgroup forward by TMA…”). A TMA copy is a few
//! instructions of one thread, so it issues before the products it
//! overlaps.
//!
//! `STAGES` is how many key blocks a program has in shared memory, the
//! next ones' copies in flight while it multiplies one. At D = 80 four, so
//! that at the vision shape (four key blocks of 64) every copy is issued
//! before the first product: 89.0 µs against 94.4-94.8 with two, and 91.0
//! with three (bench/RESULTS.md, 2026-11-23,
//! “Head dim 72: four K/V stages…”). At 64, three stages were 2 % slower
//! at S = 4096; at 96 and 128 a third does not fit beside Q.
//!
//! `PIPE = 1` pipelines a program's loop: block j's scores run on the
//! tensor cores beside block j−1's `P·V`, so that the softmax of one block
//! overlaps the other's product (D = 64: 2-4 % faster; at 128 the same
//! speed, and at 80, two programs a SM, 1-2 % slower: the other program's
//! products already fill the softmax's gaps).
//!
//! `COPIER = 1` is the warp-specialized program (after FlashAttention-3):
//! one more warpgroup than multiply, whose first thread only issues the
//! copies (Q once, then each block's K and V as soon as its stage is free:
//! every multiplying thread arrives at the stage's `kv_read` barrier once
//! its products are done with it), giving its registers to the others
//! (`setmaxnreg`). The multiplying warpgroups never meet at a barrier of
//! the program: each runs the pipelined loop on its own 64 rows, waiting
//! only for the copies it reads, with 240 registers each. `PING = 1`
//! makes them take turns at issuing their products (`wgmma::Turns`), one's
//! softmax running while the other's products do. Against the program
//! without a copy warpgroup the forward is 1.24-1.39× as fast at S ≥ 1024
//! (D = 64 and 128), and ping-pong adds 2-9 % of that (bench/RESULTS.md,
//! 2026-11-26, “Attention forward, warp-specialized…”).
use rustile::prelude::*;

/// One block of `BM` query rows of one head, as [`super::attention_fwd_kernel`]
/// (the same arguments), plus the tensor maps it copies through: `map_q`,
/// `map_q1` are q's for a head's first 64 columns and for the rest (boxes
/// of `BM` rows), `map_k`, `map_v` and their tails K's and V's (boxes of
/// `BN` rows), as `host::head_maps` builds them.
#[kernel(
    configs = [
        (D = 64, BM = 128, BN = 128, WARPS = 12, OCC = 1, PIPE = 1, STAGES = 2, COPIER = 1, PING = 1, SMEM = 81992),
        (D = 64, BM = 128, BN = 128, WARPS = 8, OCC = 1, PIPE = 1, STAGES = 2, COPIER = 0, PING = 0, SMEM = 81984),
        (D = 80, BM = 128, BN = 64, WARPS = 8, OCC = 2, PIPE = 0, STAGES = 4, COPIER = 0, PING = 0, SMEM = 102528),
        (D = 96, BM = 128, BN = 128, WARPS = 8, OCC = 1, PIPE = 0, STAGES = 2, COPIER = 0, PING = 0, SMEM = 122944),
        (D = 128, BM = 128, BN = 128, WARPS = 12, OCC = 1, PIPE = 1, STAGES = 2, COPIER = 1, PING = 1, SMEM = 163912),
        (D = 128, BM = 128, BN = 128, WARPS = 8, OCC = 1, PIPE = 0, STAGES = 2, COPIER = 0, PING = 0, SMEM = 163904),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
pub fn attention_fwd_wgmma_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, o: PtrMut<T>, lse: PtrMut<f32>, cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
    map_q: u64, map_q1: u64, map_k: u64, map_k1: u64, map_v: u64, map_v1: u64,
) {
    // Here, not at the top: on other arches the macro leaves the body out.
    use crate::attention::{query_block, store_head, Head, Seq, CAUSAL, VARLEN};
    use rustile::{tma, wgmma};
    // A head as a 64-column tile and, past 64, a second one of D1 columns
    // (otherwise D1 names an unused tile).
    const TAIL: bool = D > 64;
    const D1: usize = if TAIL { D - 64 } else { 64 };
    // `wgmma` groups a product over the head takes: one per tile.
    const GROUPS: u32 = if TAIL { 2 } else { 1 };
    // The threads that multiply: all, or all but the copy warpgroup; 64
    // query rows a warpgroup.
    const TH: usize = THREADS - 128 * COPIER;
    const CONSUMERS: usize = TH / 128;
    // Registers a multiplying thread may use once the copy warpgroup gave
    // its own back (down to 24): the SM's 65536 shared out. (Three
    // multiplying warpgroups, 160 registers each, spilled; RESULTS.)
    const REGS: u32 = 240;
    type AccW<const N: usize> = rustile::Acc<BM, N, TH, true>;
    type Rows<const R: usize> = Head<T, R, 64, D1, TH>;

    let (h, z) = (program_id(1), program_id(2));
    let _ = batch;
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let qb = query_block(program_id(0), sq, BM, causal);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    let r0 = qb * BM;
    if r0 >= s.lq {
        return;
    }
    let kvh = h / (heads / kv_heads);
    let blocks = s.key_blocks(r0, BM, BN, causal);

    // Shared memory: Q, then `STAGES` stages of K and V (every tile on a
    // multiple of 1024 bytes, the swizzle period wgmma's descriptors
    // assume), then the barriers the copies land on: Q's, then K's and V's
    // of each stage; with a copy warpgroup, then a barrier per stage's K and
    // V that every multiplying thread arrives at once it has read them.
    let at = wgmma::pad(TH);
    let sq_ = Rows::<BM>::at(at, TAIL);
    let kv = |stage: usize, which: usize| Rows::<BN>::at(at + BM * D * 2 + (2 * stage + which) * BN * D * 2, TAIL);
    let landed = |i: usize| tma::Barrier::at::<TH>(at + (BM + 2 * STAGES * BN) * D * 2 + 8 * i);
    let kv_landed = |j: usize, which: usize| landed(1 + 2 * (j % STAGES) + which);
    let kv_read = |j: usize, which: usize| landed(1 + 2 * STAGES + 2 * (j % STAGES) + which);
    for i in 0..1 + 2 * STAGES {
        landed(i).init(1);
    }
    for i in 0..2 * STAGES * COPIER {
        landed(1 + 2 * STAGES + i).init(TH as u32);
    }
    tma::fence_init();
    sync();
    // Q, by the program's copy leader or (`by_this_thread`) the caller.
    let load_q = |by_this_thread: bool| {
        let bytes = sq_.bytes();
        if by_this_thread { landed(0).expect_by_this_thread(bytes) } else { landed(0).expect(bytes) }
        sq_.load_tma([map_q, map_q1], q, [s.q0 + s.lq, s.ldq, h, d], s.q0 + r0, &landed(0), by_this_thread);
    };
    // Block j of K (which 0) or V (1) into stage j % STAGES, if there is a
    // block j. Rows are tokens of the whole tensor, so that past this
    // sequence's keys the copy engine reads the next sequence's (masked out
    // below) or zeros.
    let load_kv = |j: usize, which: usize, by_this_thread: bool| {
        if j >= blocks {
            return;
        }
        let tile = kv(j % STAGES, which);
        let bar = kv_landed(j, which);
        if by_this_thread { bar.expect_by_this_thread(tile.bytes()) } else { bar.expect(tile.bytes()) }
        let (maps, src) = if which == 0 { ([map_k, map_k1], k) } else { ([map_v, map_v1], v) };
        tile.load_tma(maps, src, [s.k0 + s.lk, s.ldk, kvh, d], s.k0 + j * BN, &bar, by_this_thread);
    };
    // Waits until block j's K or V has landed. Each stage's barriers
    // complete once a use: block j is stage j % STAGES's (j / STAGES)-th.
    let kv_wait = |j: usize, which: usize| kv_landed(j, which).wait((j / STAGES) % 2);
    // Zeroes block j's V rows past the keys, if it has any (only the last
    // block can): they meet P's zeros, but 0·NaN is NaN.
    let v_zeroed = |j: usize| {
        let crosses = j * BN + BN > s.lk;
        if crosses {
            kv(j % STAGES, 1).zero_rows_from(s.lk - j * BN);
            wgmma::fence_shared();
        }
        crosses
    };
    // Block j's scores `S = Q·Kᵀ`, issued (read them after a `wait`).
    let scores = |j: usize| {
        let kt = kv(j % STAGES, 0);
        let mut sc = AccW::<BN>::zeros();
        wgmma::dot_async(&sq_.main, &kt.main, &mut sc);
        if TAIL {
            wgmma::dot_async(&sq_.rest, &kt.rest, &mut sc);
        }
        sc
    };
    // Block j's scores with keys past the end (or, causal, past the query) at −∞.
    let masked = |j: usize, sc: AccW<BN>| {
        let c0 = j * BN;
        if c0 + BN > s.lk || (causal && c0 + BN > r0 + 1) {
            sc.map(|r, c, x| if c0 + c >= s.lk || (causal && c0 + c > r0 + r) { f32::NEG_INFINITY } else { x })
        } else {
            sc
        }
    };
    // `O += P·V` with block j's V, issued.
    let add_pv = |p: &rustile::Packed<T, BM, BN, TH>, j: usize, o0: &mut AccW<64>, o1: &mut AccW<D1>| {
        let vt = kv(j % STAGES, 1);
        wgmma::dot_acc_async(p, &vt.main, o0);
        if TAIL {
            wgmma::dot_acc_async(p, &vt.rest, o1);
        }
    };
    // Waits for every `P·V` issued.
    let pv_done = |o0: &mut AccW<64>, o1: &mut AccW<D1>| {
        wgmma::wait::<0, BM, 64, TH>(o0);
        if TAIL {
            wgmma::wait::<0, BM, D1, TH>(o1);
        }
    };
    let rescale = |o0: &mut AccW<64>, o1: &mut AccW<D1>, alpha: &rustile::AccRows<BM, TH>| {
        *o0 = o0.map_rows(alpha, |x, a| x * a);
        if TAIL {
            *o1 = o1.map_rows(alpha, |x, a| x * a);
        }
    };

    let mut stats = rustile::AccSoftmax::<BM, TH>::new(scale);
    let (mut o0, mut o1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());
    if COPIER == 1 {
        // Warp-specialized: the copy warpgroup's first thread issues every
        // copy as soon as its stage is free; the others multiply, each
        // warpgroup on its own, pipelined as below (`PIPE`), and release
        // each block's K and V (`kv_read`) when their products are done.
        crate::attention::copy_warpgroup::<TH, false>(blocks, STAGES, || load_q(true), |j, which| load_kv(j, which, true), kv_read);
        wgmma::raise_registers::<REGS>();
        // The interpreter's one thread is the copier too: block j's copies
        // right before its scores (stage j % STAGES held blocks j − STAGES,
        // whose products are done).
        let on_cpu = cfg!(not(target_arch = "nvptx64"));
        let cpu_loads = |j: usize| {
            if on_cpu {
                load_kv(j, 0, true);
                load_kv(j, 1, true);
            }
        };
        if on_cpu {
            load_q(true);
        }
        landed(0).wait(0);
        if blocks > 0 {
            // `PING`: the warpgroups take turns at issuing their products
            // (turn j: block j's scores and block j−1's `P·V`), so that one's
            // softmax runs beside the other's tensor-core work.
            let turns = wgmma::Turns::<CONSUMERS>::new(PING == 1, 1);
            cpu_loads(0);
            kv_wait(0, 0);
            turns.wait();
            let mut sc = scores(0);
            turns.pass(false);
            wgmma::wait::<0, BM, BN, TH>(&mut sc);
            kv_read(0, 0).arrive();
            let mut p = stats.step(masked(0, sc)).0.pack::<T>();
            for j in 1..blocks {
                cpu_loads(j);
                kv_wait(j, 0);
                // Block j−1 is not the last: no rows past the keys.
                kv_wait(j - 1, 1);
                turns.wait();
                let mut sc = scores(j);
                add_pv(&p, j - 1, &mut o0, &mut o1);
                turns.pass(false);
                wgmma::wait::<GROUPS, BM, BN, TH>(&mut sc);
                kv_read(j, 0).arrive();
                let (pj, alpha) = stats.step(masked(j, sc));
                pv_done(&mut o0, &mut o1);
                kv_read(j - 1, 1).arrive();
                rescale(&mut o0, &mut o1, &alpha);
                p = pj.pack::<T>();
            }
            // The last block's V, zeroed past the keys by the multiplying
            // threads together (named barrier 8: the copy warpgroup is not there).
            kv_wait(blocks - 1, 1);
            if v_zeroed(blocks - 1) {
                sync_named(8, TH);
            }
            turns.wait();
            add_pv(&p, blocks - 1, &mut o0, &mut o1);
            turns.pass(true);
            pv_done(&mut o0, &mut o1);
        }
    } else {
        load_q(false);
        // Every stage but one filled ahead; the loops below refill a stage as
        // soon as every warpgroup is done with it.
        for j in 0..STAGES - 1 {
            load_kv(j, 0, false);
            load_kv(j, 1, false);
        }
        landed(0).wait(0);
        // Block j's V has landed, its rows past the keys zeroed.
        let v_ready = |j: usize| {
            kv_wait(j, 1);
            v_zeroed(j);
        };
        if PIPE == 1 && blocks > 0 {
            // Pipelined: block j's scores run on the tensor cores together with
            // block j−1's `P·V`, and block j's softmax waits only for the scores.
            kv_wait(0, 0);
            sync();
            load_kv(STAGES - 1, 0, false);
            let mut sc = scores(0);
            wgmma::wait::<0, BM, BN, TH>(&mut sc);
            let mut p = stats.step(masked(0, sc)).0.pack::<T>();
            for j in 1..blocks {
                kv_wait(j, 0);
                v_ready(j - 1);
                // Block j+STAGES−1's K goes where block j−1's scores read it,
                // block j+STAGES−2's V where block j−2's P·V did: both finished
                // before this barrier.
                sync();
                load_kv(j + STAGES - 1, 0, false);
                load_kv(j + STAGES - 2, 1, false);
                let mut sc = scores(j);
                add_pv(&p, j - 1, &mut o0, &mut o1);
                wgmma::wait::<GROUPS, BM, BN, TH>(&mut sc);
                let (pj, alpha) = stats.step(masked(j, sc));
                pv_done(&mut o0, &mut o1);
                rescale(&mut o0, &mut o1, &alpha);
                p = pj.pack::<T>();
            }
            v_ready(blocks - 1);
            sync();
            add_pv(&p, blocks - 1, &mut o0, &mut o1);
            pv_done(&mut o0, &mut o1);
        } else {
            for j in 0..blocks {
                kv_wait(j, 0);
                // Block j+STAGES−1 goes where block j−1 was, which every
                // warpgroup finished before this barrier: its K (which 0) or V
                // (1), issued before the products it overlaps.
                sync();
                let next = |which: usize| load_kv(j + STAGES - 1, which, false);
                next(0);
                let mut sc = scores(j);
                wgmma::wait::<0, BM, BN, TH>(&mut sc);
                let (p, alpha) = stats.step(masked(j, sc));
                let p = p.pack::<T>();
                rescale(&mut o0, &mut o1, &alpha);
                v_ready(j);
                // Every thread's zeros are written before a warpgroup reads V.
                sync();
                next(1);
                add_pv(&p, j, &mut o0, &mut o1);
                pv_done(&mut o0, &mut o1);
            }
        }
    }
    let inv_l = stats.inv_l();
    let out = [s.lq, s.ldq, h * d, d];
    store_head(o.offset(s.q_at()), out, r0, &o0.map_rows(&inv_l, |x, i| x * i), &o1.map_rows(&inv_l, |x, i| x * i), TAIL, 1.0);
    stats.lse().store(lse.offset(s.lse0 + h * lse_h), r0, s.lq);
}
