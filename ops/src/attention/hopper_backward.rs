//! Flash attention backward on Hopper (sm_90a): [`super::attention_bwd_kv_kernel`]
//! and [`super::attention_bwd_q_kernel`]'s programs with every product on
//! the warpgroup tensor cores (`wgmma`).
//!
//! Both run warpgroups of 64 accumulator rows each, and keep every
//! right operand where `wgmma` reads it, in shared memory:
//! - dK/dV: the rows are 128 keys. `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ` read K, V,
//!   Q and dO as stored (K-major); `dV += Pᵀ·dO` and `dK += dSᵀ·Q` take
//!   `Pᵀ`, `dSᵀ` from the registers the elementwise step left them in and
//!   dO, Q N-major (their rows are queries, the products' depth);
//! - dQ: the rows are 128 queries. `S = Q·Kᵀ`, `dP = dO·Vᵀ`, then
//!   `dQ += dS·K` with K N-major.
//!
//! The head dims are 64, 80 (72 padded) and 128. At 80 a program is one
//! warpgroup of 64 rows (the dQ program fits in 168 registers, so three
//! share a SM): two warpgroups, 128 keys a dK/dV program or 128 queries a
//! dQ one, were 2-7 % slower at the vision shape (bench/RESULTS.md,
//! 2026-11-23, “Head dim 72: two-warpgroup forward by TMA…”). Each step
//! issues both score products before it waits for the first, so the
//! second runs under the probabilities' exponentials. Both start with
//! `dot_new_async`, which writes its accumulator without reading it:
//! zeroing the second's registers while the first ran made ptxas wait for
//! the first.
//!
//! `LATE` is where a step issues the next step's copies: `LATE = 1` after
//! its first products, so that the tensor cores start while every thread
//! issues its `cp.async` chunks (D = 128: the backward 7-9 % faster);
//! `LATE = 0` before them (D = 64 and 80, where copying late was 5-7 %
//! slower; bench/RESULTS.md, 2026-11-23, “Attention copy order…”). Issuing
//! them after the wait for the first score product instead, so that a step
//! need not wait for its own last product, made ptxas serialize the
//! products (note C7515) and spill (bench/RESULTS.md, 2026-11-23,
//! “Head dim 72 backward: a memory-bound delta kernel…”); not kept.
//!
//! The dK/dV program keeps `QD = 2` steps' Q and dO in shared memory:
//! a step copies the one `QD − 1` ahead. Four at D = 80 made the kernel
//! alone faster at the vision shape (203 µs against 207-211), but the
//! backward slower (354 µs against 344): dK/dV runs beside dQ, and at
//! 105 KB a program leaves no room for a dQ program on its SM
//! (bench/RESULTS.md, 2026-11-23, “Head dim 72: four K/V stages…”).
//!
//! `COPIER = 1` (D = 64) is the dK/dV program warp-specialized as the
//! forward's: a copy warpgroup whose first thread issues K and V, then each
//! step's Q and dO by TMA into `QD = 4` stages on mbarriers (its 384
//! threads fill the register file, so no dQ program shares its SM and the
//! shared memory is free), and two multiplying warpgroups that never meet
//! at a barrier of the program (each 64 keys). The copy warpgroup's first
//! warp copies each step's log-sum-exp and delta beside Q and dO
//! (`SharedVec::copy_from_warp`). 4-10 % faster than the program without a
//! copy warpgroup (bench/RESULTS.md, 2026-11-27, “The staged dK/dV program
//! under Nsight Compute…”). Its multiplying warpgroups get the 240
//! registers `setmaxnreg` raises them to only while no trap lies on their
//! path: with the tiles' swizzle-period checks trapping inside their loop,
//! ptxas kept their code to the entry's 168 registers and spilled 128 bytes
//! a thread. `wgmma::check_periods_once` checks the shared memory's start
//! before the raise, and the loop's checks fold away: 8-9 % faster at
//! D = 64 (bench/RESULTS.md, 2026-11-27, “The dK/dV program's
//! registers…”). The same program is D = 128's default (`QD = 2`: K, V and
//! two stages take 129 KB), 19-25 % faster than the one without a copy
//! warpgroup (`COPIER = 0`, kept for comparison), whose 255 registers
//! spill 168 bytes. The dQ program at D = 64 and 128 is warp-specialized
//! too ([`attention_bwd_q_wgmma_kernel`]'s `COPIER = 1`: 0.4-10 % off the
//! backward).
//!
//! `DQ = 1` (D = 64, warp-specialized) makes dQ in the dK/dV program, as
//! FlashAttention-3 does, so that no second program makes `S` and `dP`
//! again (five products a step instead of seven). Each step the two
//! multiplying warpgroups store their `dSᵀ` (keys × queries) in shared
//! memory and meet at a named barrier; each then multiplies all 128 keys
//! into its half of dQ's columns (`wgmma::dot_t_split_new_async`: `dSᵀ`
//! and K read as stored, both transposed), stores that in a swizzled f32
//! tile, and its first thread has the copy engine add the tile into an f32
//! sum of dQ (`tma::SharedSum`), which [`super::attention_bwd_dq_kernel`]
//! rounds into `dq`. Two tiles of each kind alternate, so a step writes
//! while the previous step's are still read. dK's product reads the stored
//! `dSᵀ` too (`wgmma::dot_kn_async`), so that no product in flight has a
//! register operand still being written: dV's runs while `dSᵀ` is made and
//! stored, dK's while the dQ block goes to the copy engine (1-1.5 % faster
//! than dK from registers, waited with dQ). Correct, but 4-7 % slower than
//! the two programs on two streams since the dQ program is
//! warp-specialized, so not the default: both warpgroups meet at a barrier
//! every step (each needs the other's `dSᵀ`), which keeps them in lockstep,
//! and the chain around dQ's product costs about what the dQ program takes
//! (Nsight Compute: 5.38 ms against 3.42 + 1.98). Handing the sum to the copy
//! engine a step later, behind the score products, spilled 268 bytes and
//! was 19 % slower (bench/RESULTS.md, 2026-11-28, “dQ inside the dK/dV
//! program…” and “dK's product from the stored dSᵀ…”).
use rustile::prelude::*;

/// [`super::attention_bwd_kv_kernel`] on `wgmma` (the same arguments): one
/// block of `BN` keys of one key/value head, walking `BM` queries a step.
#[kernel(
    configs = [
        (D = 64, BM = 64, BN = 128, WARPS = 12, OCC = 1, LATE = 0, COPIER = 1, QD = 4, DQ = 0, SMEM = 100488),
        (D = 64, BM = 64, BN = 128, WARPS = 12, OCC = 1, LATE = 0, COPIER = 1, QD = 2, DQ = 0, SMEM = 66632),
        (D = 64, BM = 64, BN = 128, WARPS = 8, OCC = 1, LATE = 0, COPIER = 0, QD = 2, DQ = 0, SMEM = 66560),
        (D = 64, BM = 64, BN = 128, WARPS = 12, OCC = 1, LATE = 0, COPIER = 1, QD = 4, DQ = 1, SMEM = 166912),
        (D = 80, BM = 64, BN = 64, WARPS = 4, OCC = 2, LATE = 0, COPIER = 0, QD = 2, DQ = 0, SMEM = 62976),
        (D = 128, BM = 64, BN = 128, WARPS = 12, OCC = 1, LATE = 0, COPIER = 1, QD = 2, DQ = 0, SMEM = 132168),
        (D = 128, BM = 64, BN = 128, WARPS = 8, OCC = 1, LATE = 1, COPIER = 0, QD = 2, DQ = 0, SMEM = 131072),
    ],
    grid = [cdiv(crate::attention::key_rows(sk, kv_bs, flags), BN), kv_heads, batch],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
pub fn attention_bwd_kv_wgmma_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, d_o: Ptr<T>, lse: Ptr<f32>, delta: Ptr<f32>, dk: PtrMut<T>, dv: PtrMut<T>,
    dq_sum: PtrMut<f32>,
    cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
    map_q: u64, map_q1: u64, map_do: u64, map_do1: u64, map_k: u64, map_k1: u64, map_v: u64, map_v1: u64, map_dq: u64,
) {
    // Here, not at the top: on other arches the macro leaves the body out.
    use crate::attention::{query_tokens, store_head, Head, Seq, Walk, CAUSAL, VARLEN};
    use core::f32::consts::LOG2_E;
    use rustile::{tma, wgmma};
    const TAIL: bool = D > 64;
    const D1: usize = if TAIL { D - 64 } else { 64 };
    // `wgmma` groups a product over the head takes: one per tile.
    const GROUPS: u32 = if TAIL { 2 } else { 1 };
    // The threads that multiply: all, or all but the copy warpgroup.
    const TH: usize = THREADS - 128 * COPIER;
    type AccW<const N: usize> = rustile::Acc<BN, N, TH, true>;
    type Rows<const R: usize> = Head<T, R, 64, D1, TH>;
    // The queries' lse and delta come with each step's Q and dO through
    // shared memory, except at D = 128: there the two ran equal within the
    // runs' spread (dK/dV 3.00-3.02 ms staged, 3.05-3.09 read from global
    // memory) and the reads from global memory spill less (180 bytes
    // stored against 220; bench/RESULTS.md, 2026-11-23,
    // “Head dim 72 backward: a memory-bound delta kernel…”).
    const STAGED: bool = D < 128;
    // Steps' Q and dO in shared memory (the module doc says why two, and
    // why the warp-specialized program may take more).
    const STAGES: usize = QD;

    let (kb, hk, z) = (program_id(0), program_id(1), program_id(2));
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    let rows = if varlen { s.lk } else { kv_bs };
    let c0 = kb * BN;
    if c0 >= rows {
        return;
    }
    let (qp, dop) = (q.offset(s.q_at()), d_o.offset(s.q_at()));
    let c = scale * LOG2_E;
    let tokens = query_tokens(batch, q_bs, lse_h, varlen);
    // Where a step's queries' log-sum-exp and delta start.
    let stat_at = |h: usize, r0: usize| [s.lse0 + h * lse_h + r0, h * tokens + s.q0 + r0];

    // Shared memory: K, V, then `STAGES` stages of Q and dO (every tile on
    // a multiple of 1024 bytes, the swizzle period), then as many of the
    // queries' log-sum-exp and delta.
    let at = wgmma::pad(TH);
    let (sk_, sv_) = (Rows::<BN>::at(at, TAIL), Rows::<BN>::at(at + BN * D * 2, TAIL));
    let qd = |stage: usize, which: usize| Rows::<BM>::at(at + 2 * BN * D * 2 + (2 * stage + which) * BM * D * 2, TAIL);
    let stats = |stage: usize, which: usize| SharedVec::<BM, TH>::at(at + 2 * (BN + STAGES * BM) * D * 2 + (2 * stage + which) * BM * 4);
    if COPIER == 1 {
        let out = [rows, s.ldk, hk * d, d];
        // Warp-specialized (as the forward's `COPIER = 1`): the copy
        // warpgroup's first thread issues K and V, then each step's Q and
        // dO by TMA as soon as their stage is free; each multiplying
        // warpgroup runs the steps on its own 64 keys, never meeting the
        // other at a barrier of the program, and releases a step's Q
        // (`qd_read`, which 0) and dO (1) once its products are done with
        // them. The queries' log-sum-exp and delta come with Q and dO: the
        // copy warpgroup's first warp copies them beside the tiles, each
        // lane's copies one more arrival on the stage's barrier.
        // Barriers after the stages' statistics: K and V's, then each
        // stage's Q and dO landing (the issuer and the warp's 32 lanes),
        // then read.
        let walk = Walk::of(&s, c0, BM, hk, heads / kv_heads, causal);
        let bar = |i: usize| tma::Barrier::at::<TH>(at + 2 * (BN + STAGES * BM) * D * 2 + 2 * STAGES * BM * 4 + 8 * i);
        let qd_landed = |t: usize, which: usize| bar(1 + 2 * (t % STAGES) + which);
        // `DQ = 1`: two steps' dSᵀ (all 128 keys), then two steps' dQ sums
        // (each warpgroup's 64 rows, its half of the columns), past the
        // barriers on the next 1024 bytes.
        let dq_at = at + (2 * (BN + STAGES * BM) * D * 2 + 2 * STAGES * BM * 4 + 8 * (1 + 4 * STAGES)).next_multiple_of(1024);
        let ds_tile = |i: usize| rustile::Shared::<T, BN, 64, TH>::at(dq_at + i * BN * 64 * 2);
        let sum_tile = |i: usize| tma::SharedSum::<BN, TH>::at(dq_at + 2 * BN * 64 * 2 + i * BN * 128);
        // Each multiplying warpgroup's first thread issues its additions.
        let adder = wgmma::is_warpgroup_leader();
        let qd_read = |t: usize, which: usize| bar(1 + 2 * STAGES + 2 * (t % STAGES) + which);
        bar(0).init(1);
        for i in 1..1 + 2 * STAGES {
            bar(i).init(1 + 32);
        }
        for i in 0..2 * STAGES {
            bar(1 + 2 * STAGES + i).init(TH as u32);
        }
        tma::fence_init();
        sync();
        // The first warp of the copy warpgroup runs the copies' loop; its
        // first thread issues the TMA copies (the interpreter's, all).
        let issuer = cfg!(not(target_arch = "nvptx64")) || wgmma::is_copy_issuer::<TH>();
        let load_kv = || {
            if !issuer {
                return;
            }
            bar(0).expect_by_this_thread(2 * sk_.bytes());
            let tokens = [s.k0 + s.lk, s.ldk, hk, d];
            sk_.load_tma([map_k, map_k1], k, tokens, s.k0 + c0, &bar(0), true);
            sv_.load_tma([map_v, map_v1], v, tokens, s.k0 + c0, &bar(0), true);
        };
        let load_qd = |t: usize, which: usize| {
            if t >= walk.steps {
                return;
            }
            let (h, r0) = walk.at(t);
            let (stat, src) = (stat_at(h, r0)[which], if which == 0 { lse } else { delta });
            stats(t % STAGES, which).copy_from_warp(src, stat, s.lq.saturating_sub(r0));
            qd_landed(t, which).arrive_after_copies();
            if !issuer {
                return;
            }
            let tile = qd(t % STAGES, which);
            qd_landed(t, which).expect_by_this_thread(tile.bytes());
            let (maps, src) = if which == 0 { ([map_q, map_q1], q) } else { ([map_do, map_do1], d_o) };
            tile.load_tma(maps, src, [s.q0 + s.lq, s.ldq, h, d], s.q0 + r0, &qd_landed(t, which), true);
        };
        crate::attention::copy_warpgroup::<TH, true>(walk.steps, STAGES, load_kv, load_qd, qd_read);
        // No trap on the multiplying loop's path (the module doc says why).
        wgmma::check_periods_once();
        wgmma::raise_registers::<240>();
        // The interpreter's one thread copies each step's tiles right before it.
        let on_cpu = cfg!(not(target_arch = "nvptx64"));
        if on_cpu {
            load_kv();
        }
        bar(0).wait(0);
        // Keys past the end: the copy engine read the next tokens (or
        // anything); zeros, as `cp.async` leaves there, since P's zeros meet V's rows.
        if c0 + BN > s.lk {
            sk_.zero_rows_from(s.lk.saturating_sub(c0));
            sv_.zero_rows_from(s.lk.saturating_sub(c0));
            wgmma::fence_shared();
            sync_named(8, TH);
        }
        let (mut dk0, mut dk1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());
        let (mut dv0, mut dv1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());
        for t in 0..walk.steps {
            if on_cpu {
                load_qd(t, 0);
                load_qd(t, 1);
            }
            let r0 = walk.at(t).1;
            let (sq_, sd_) = (qd(t % STAGES, 0), qd(t % STAGES, 1));
            let (mut st, mut dpt) = (AccW::<BM>::zeros(), AccW::<BM>::zeros());
            qd_landed(t, 0).wait((t / STAGES) % 2);
            wgmma::dot_new_async(&sk_.main, &sq_.main, &mut st);
            if TAIL {
                wgmma::dot_async(&sk_.rest, &sq_.rest, &mut st);
            }
            qd_landed(t, 1).wait((t / STAGES) % 2);
            wgmma::dot_new_async(&sv_.main, &sd_.main, &mut dpt);
            if TAIL {
                wgmma::dot_async(&sv_.rest, &sd_.rest, &mut dpt);
            }
            let stage = t % STAGES;
            let lse2 = AccCols::<BM>::from_fn(|col| if r0 + col < s.lq { stats(stage, 0).read(col) * LOG2_E } else { f32::INFINITY });
            wgmma::wait::<GROUPS, BN, BM, TH>(&mut st);
            let mut pt = st.map_cols(&lse2, |x, l| math::exp2(x * c - l));
            if c0 + BN > s.lk || (causal && c0 + BN > r0 + 1) {
                pt = pt.map(|r, col, x| if c0 + r >= s.lk || (causal && c0 + r > r0 + col) { 0.0 } else { x });
            }
            let ppk = pt.pack::<T>();
            wgmma::dot_acc_async(&ppk, &sd_.main, &mut dv0);
            if TAIL {
                wgmma::dot_acc_async(&ppk, &sd_.rest, &mut dv1);
            }
            let dlt = AccCols::<BM>::from_fn(|col| if r0 + col < s.lq { stats(stage, 1).read(col) } else { 0.0 });
            if DQ == 0 {
                // dPᵀ and dV's product done: dO is free.
                wgmma::wait::<0, BN, BM, TH>(&mut dpt);
                qd_read(t, 1).arrive();
                let dspk = pt.zip(dpt.map_cols(&dlt, |x, dl| x - dl), |p, dp| p * dp).pack::<T>();
                wgmma::dot_acc_async(&dspk, &sq_.main, &mut dk0);
                if TAIL {
                    wgmma::dot_acc_async(&dspk, &sq_.rest, &mut dk1);
                }
                wgmma::wait::<0, BN, 64, TH>(&mut dk0);
                qd_read(t, 0).arrive();
                continue;
            }
            // dQ = dS·K here, not in a program of its own that makes S and
            // dP again. dSᵀ goes through shared memory to both its products,
            // so that dV's (whose packed Pᵀ is a register operand) runs while
            // dSᵀ is made and stored: both warpgroups' dSᵀ, then each
            // multiplies all 128 keys into its half of dQ's columns, and its
            // own 64 keys into dK. Its first thread has the copy engine add
            // the dQ block into `dq_sum` while dK's product runs.
            wgmma::wait::<1, BN, BM, TH>(&mut dpt);
            let dspk = pt.zip(dpt.map_cols(&dlt, |x, dl| x - dl), |p, dp| p * dp).pack::<T>();
            let ds = ds_tile(t % 2);
            ds.store_packed::<true>(&dspk);
            wgmma::fence_shared();
            sync_named(9, TH);
            let mut dq = AccW::<32>::zeros();
            wgmma::dot_t_split_new_async(&ds, &sk_.main, &mut dq);
            wgmma::dot_kn_async(&ds, &sq_.main, &mut dk0);
            // dV's and dQ's products done: dO is free.
            wgmma::wait::<1, BN, 32, TH>(&mut dq);
            qd_read(t, 1).arrive();
            // The sum tile of two steps ago is free once the copy engine read it.
            let wg = wgmma::warpgroup();
            if adder {
                tma::wait_adds_read::<1>();
            }
            sync_named(10 + wg as u32, 128);
            let sum = sum_tile(t % 2);
            sum.store_acc(&dq);
            wgmma::fence_shared();
            sync_named(10 + wg as u32, 128);
            if adder {
                let (h, r0) = walk.at(t);
                // The interpreter's one thread adds both warpgroups' halves.
                for w in if on_cpu { 0..TH / 128 } else { wg..wg + 1 } {
                    let dst = rustile::BlockPtr::<f32, 64, 32, TH>::new(dq_sum.offset(h * d), [s.q0 + s.lq, d], [s.ldq, 1], [s.q0 + r0, 32 * w]);
                    sum.add_tma_by_this_thread::<64>(64 * w, map_dq, &dst, h);
                }
                tma::commit_adds();
            }
            wgmma::wait::<0, BN, 64, TH>(&mut dk0);
            qd_read(t, 0).arrive();
        }
        if DQ == 1 && adder {
            tma::wait_adds::<0>();
        }
        wgmma::wait::<0, BN, 64, TH>(&mut dv0);
        wgmma::wait::<0, BN, D1, TH>(&mut dv1);
        wgmma::wait::<0, BN, D1, TH>(&mut dk1);
        store_head(dk.offset(s.k_at()), out, c0, &dk0, &dk1, TAIL, scale);
        store_head(dv.offset(s.k_at()), out, c0, &dv0, &dv1, TAIL, 1.0);
        return;
    }
    sk_.copy_from(k.offset(s.k_at()), [s.lk, s.ldk, hk * d, d], c0);
    sv_.copy_from(v.offset(s.k_at()), [s.lk, s.ldk, hk * d, d], c0);

    let walk = Walk::of(&s, c0, BM, hk, heads / kv_heads, causal);

    // Step t's Q, dO (and their stats) into stage t % STAGES, one commit
    // group a step (empty past the last), so that step t waits for group t.
    let copy_qd = |t: usize| {
        if t < walk.steps {
            let (h, r0) = walk.at(t);
            qd(t % STAGES, 0).copy_from(qp, [s.lq, s.ldq, h * d, d], r0);
            qd(t % STAGES, 1).copy_from(dop, [s.lq, s.ldq, h * d, d], r0);
            if STAGED {
                let ([l, dl], n) = (stat_at(h, r0), s.lq.saturating_sub(r0));
                stats(t % STAGES, 0).copy_from(lse, l, n);
                stats(t % STAGES, 1).copy_from(delta, dl, n);
            }
        }
        commit_copies();
    };
    for t in 0..STAGES - 1 {
        copy_qd(t);
    }

    let (mut dk0, mut dk1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());
    let (mut dv0, mut dv1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());
    for t in 0..walk.steps {
        // Step t's tiles have landed; step t−1's products, the last readers
        // of the stage step t+STAGES−1 copies into, finished at its end.
        wait_copies::<{ STAGES as u32 - 2 }>();
        wgmma::fence_shared();
        sync();
        let copies = || copy_qd(t + STAGES - 1);
        if LATE == 0 {
            copies();
        }
        let (h, r0) = walk.at(t);
        let [lse_at, delta_at] = stat_at(h, r0);
        let (sq_, sd_) = (qd(t % STAGES, 0), qd(t % STAGES, 1));
        let (mut st, mut dpt) = (AccW::<BM>::zeros(), AccW::<BM>::zeros());
        wgmma::dot_new_async(&sk_.main, &sq_.main, &mut st);
        if TAIL {
            wgmma::dot_async(&sk_.rest, &sq_.rest, &mut st);
        }
        wgmma::dot_new_async(&sv_.main, &sd_.main, &mut dpt);
        if TAIL {
            wgmma::dot_async(&sv_.rest, &sd_.rest, &mut dpt);
        }
        if LATE == 1 {
            copies();
        }
        // The queries' log-sum-exp (base 2) and delta, from the staged
        // copies (`STAGED`). Loaded from global memory in this step instead,
        // they were issued by ptxas after the products and the exponentials
        // waited on them (at D = 80 dK/dV 250 µs against 210).
        let stat = |which: usize, src: Ptr<f32>, at: usize, col: usize| if STAGED { stats(t % STAGES, which).read(col) } else { src.read(at + col) };
        let lse2 = AccCols::<BM>::from_fn(|col| if r0 + col < s.lq { stat(0, lse, lse_at, col) * LOG2_E } else { f32::INFINITY });
        // Sᵀ is done (dPᵀ may still run). A query past the end has lse = ∞,
        // so P = 0 there; only keys past the end and the diagonal need a mask.
        wgmma::wait::<GROUPS, BN, BM, TH>(&mut st);
        let mut pt = st.map_cols(&lse2, |x, l| math::exp2(x * c - l));
        if c0 + BN > s.lk || (causal && c0 + BN > r0 + 1) {
            pt = pt.map(|r, col, x| if c0 + r >= s.lk || (causal && c0 + r > r0 + col) { 0.0 } else { x });
        }
        let ppk = pt.pack::<T>();
        wgmma::dot_acc_async(&ppk, &sd_.main, &mut dv0);
        if TAIL {
            wgmma::dot_acc_async(&ppk, &sd_.rest, &mut dv1);
        }
        let dlt = AccCols::<BM>::from_fn(|col| if r0 + col < s.lq { stat(1, delta, delta_at, col) } else { 0.0 });
        // dSᵀ = Pᵀ ⊙ (dPᵀ − delta) waits for dV's product too, so that the
        // registers of Pᵀ's copy are free again (with them live, D = 128
        // spilled).
        wgmma::wait::<0, BN, BM, TH>(&mut dpt);
        let dspk = pt.zip(dpt.map_cols(&dlt, |x, dl| x - dl), |p, dp| p * dp).pack::<T>();
        wgmma::dot_acc_async(&dspk, &sq_.main, &mut dk0);
        if TAIL {
            wgmma::dot_acc_async(&dspk, &sq_.rest, &mut dk1);
        }
        wgmma::wait::<0, BN, 64, TH>(&mut dk0);
    }
    wgmma::wait::<0, BN, 64, TH>(&mut dv0);
    wgmma::wait::<0, BN, D1, TH>(&mut dv1);
    wgmma::wait::<0, BN, D1, TH>(&mut dk1);
    let out = [rows, s.ldk, hk * d, d];
    store_head(dk.offset(s.k_at()), out, c0, &dk0, &dk1, TAIL, scale);
    store_head(dv.offset(s.k_at()), out, c0, &dv0, &dv1, TAIL, 1.0);
}

/// [`super::attention_bwd_q_kernel`] on `wgmma` (the same arguments, then
/// `map_k`, `map_k1`, `map_v`, `map_v1`: K's and V's tensor maps, boxes of
/// `BN` rows, and `map_q`, `map_q1`, `map_do`, `map_do1`: Q's and dO's,
/// boxes of `BM` rows, as `host::head_maps` builds them): one block of `BM`
/// queries of one head, walking `BN` keys a step. At D = 128 64-key blocks:
/// with 128, S and dP alone would take 128 registers.
///
/// `TMA = 1` copies K and V by TMA, two blocks ahead from the start (D = 64
/// and 128: the backward 9 % and 5 % faster than with `cp.async`);
/// `TMA = 0` by every thread's `cp.async` (D = 80, where TMA made the dQ
/// kernel 117 → 128 µs at the vision shape; bench/RESULTS.md, 2026-11-23,
/// “Head dim 72: four K/V stages…”).
///
/// `COPIER = 1` (D = 64 and 128, the default) is the program
/// warp-specialized as the forward's: a copy warpgroup whose first thread
/// issues Q and dO, then each key block's K and V into `STAGES` stages as soon as both
/// multiplying warpgroups have released the stage, and two multiplying
/// warpgroups of 64 queries each that meet at a barrier only to zero the
/// last block's rows past the keys. Each step issues block j's `S` and `dP`
/// and then block j−1's `dQ += dS·K`, so that block j's exponentials run
/// beside two products, and the warpgroups take turns at issuing
/// (`wgmma::Turns`). K stays in its stage until its block's dQ product is
/// done, a step longer than V, so the ring is three stages deep (four at
/// D = 128, 1-2 % faster there): with two the backward was 4-9 % slower
/// than with the program without a copy warpgroup (`COPIER = 0`, kept for
/// comparison), with three or four 0.4-10 % faster, and without the turns
/// 3-4 % slower (bench/RESULTS.md, 2026-11-28, “The dQ program
/// warp-specialized…”).
/// Computing block j's dS while block j−1's dQ product runs made ptxas
/// serialize the products (C7513: both packed dS live at once).
#[kernel(
    configs = [
        (D = 64, BM = 128, BN = 128, WARPS = 12, OCC = 1, LATE = 0, TMA = 1, COPIER = 1, STAGES = 3, SMEM = 131176),
        (D = 64, BM = 128, BN = 128, WARPS = 8, OCC = 1, LATE = 0, TMA = 1, COPIER = 0, STAGES = 2, SMEM = 98336),
        (D = 80, BM = 64, BN = 64, WARPS = 4, OCC = 3, LATE = 0, TMA = 0, COPIER = 0, STAGES = 2, SMEM = 61984),
        (D = 128, BM = 128, BN = 64, WARPS = 12, OCC = 1, LATE = 0, TMA = 1, COPIER = 1, STAGES = 4, SMEM = 196744),
        (D = 128, BM = 128, BN = 64, WARPS = 8, OCC = 1, LATE = 1, TMA = 1, COPIER = 0, STAGES = 2, SMEM = 131104),
    ],
    grid = [cdiv(sq, BM), heads, batch],
    dtypes = [bf16, f16],
    arch = sm_90a,
)]
pub fn attention_bwd_q_wgmma_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, d_o: Ptr<T>, lse: Ptr<f32>, delta: Ptr<f32>, dq: PtrMut<T>,
    cu_q: Ptr<u32>, cu_k: Ptr<u32>,
    batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize,
    q_bs: usize, kv_bs: usize, lse_h: usize, scale: f32, flags: u32,
    map_k: u64, map_k1: u64, map_v: u64, map_v1: u64, map_q: u64, map_q1: u64, map_do: u64, map_do1: u64,
) {
    use crate::attention::{query_block, query_tokens, store_head, Head, Seq, CAUSAL, VARLEN};
    use core::f32::consts::LOG2_E;
    use rustile::{tma, wgmma};
    const TAIL: bool = D > 64;
    const D1: usize = if TAIL { D - 64 } else { 64 };
    const GROUPS: u32 = if TAIL { 2 } else { 1 };
    // The threads that multiply: all, or all but the copy warpgroup.
    const TH: usize = THREADS - 128 * COPIER;
    type AccW<const N: usize> = rustile::Acc<BM, N, TH, true>;
    type Rows<const R: usize> = Head<T, R, 64, D1, TH>;

    let (h, z) = (program_id(1), program_id(2));
    let (causal, varlen) = (flags & CAUSAL != 0, flags & VARLEN != 0);
    let qb = query_block(program_id(0), sq, BM, causal);
    let s = Seq::of(z, cu_q, cu_k, [sq, sk, q_bs, kv_bs, heads, kv_heads, d], varlen);
    let r0 = qb * BM;
    if r0 >= s.lq {
        return;
    }
    let hk = h / (heads / kv_heads);
    let c = scale * LOG2_E;
    let (lse_at, delta_at) = (s.lse0 + h * lse_h + r0, h * query_tokens(batch, q_bs, lse_h, varlen) + s.q0 + r0);

    // Shared memory: Q, dO, then `STAGES` stages of K and V (every tile on
    // a multiple of 1024 bytes, the swizzle period), then (`TMA`) the
    // barriers: without a copy warpgroup each stage's landing; with one,
    // Q and dO's landing, each stage's K and V landing, then each stage's
    // K and V released by every multiplying thread.
    let at = wgmma::pad(TH);
    let (sq_, sd_) = (Rows::<BM>::at(at, TAIL), Rows::<BM>::at(at + BM * D * 2, TAIL));
    let kv = |stage: usize, which: usize| Rows::<BN>::at(at + 2 * BM * D * 2 + (2 * stage + which) * BN * D * 2, TAIL);
    let bar = |i: usize| tma::Barrier::at::<TH>(at + 2 * (BM + STAGES * BN) * D * 2 + 8 * i);
    let blocks = s.key_blocks(r0, BM, BN, causal);
    // This block's queries' log-sum-exp (base 2; ∞ past the end, so that P
    // is 0 there) and delta, for every key block.
    let lse2 = AccRows::<BM, TH>::from_fn(|r| if r0 + r < s.lq { lse.read(lse_at + r) * LOG2_E } else { f32::INFINITY });
    let dlt = AccRows::<BM, TH>::from_fn(|r| if r0 + r < s.lq { delta.read(delta_at + r) } else { 0.0 });
    // Block j's probabilities from its finished S (keys past the end or,
    // causal, past the query: 0). Inlined by force: called twice, LLVM
    // kept it a function, its scores passed through local memory.
    let probs = #[inline(always)]
    |j: usize, sc: AccW<BN>| {
        let c0 = j * BN;
        let p = sc.map_rows(&lse2, |x, l| math::exp2(x * c - l));
        if c0 + BN > s.lk || (causal && c0 + BN > r0 + 1) {
            p.map(|r, col, x| if c0 + col >= s.lk || (causal && c0 + col > r0 + r) { 0.0 } else { x })
        } else {
            p
        }
    };
    // dS = P ⊙ (dP − delta), packed for the tensor cores.
    let ds_of = |p: AccW<BN>, dp: AccW<BN>| p.zip(dp.map_rows(&dlt, |x, dl| x - dl), |p, dp| p * dp).pack::<T>();
    // Block j's `S = Q·Kᵀ` and `dP = dO·Vᵀ`, issued (read them after a `wait`).
    let issue_scores = |j: usize| {
        let (sk_, sv_) = (kv(j % STAGES, 0), kv(j % STAGES, 1));
        let (mut sc, mut dp) = (AccW::<BN>::zeros(), AccW::<BN>::zeros());
        wgmma::dot_new_async(&sq_.main, &sk_.main, &mut sc);
        if TAIL {
            wgmma::dot_async(&sq_.rest, &sk_.rest, &mut sc);
        }
        wgmma::dot_new_async(&sd_.main, &sv_.main, &mut dp);
        if TAIL {
            wgmma::dot_async(&sd_.rest, &sv_.rest, &mut dp);
        }
        (sc, dp)
    };
    // `dQ += dS·K` with block j's K, issued.
    let add_dq = |ds: &rustile::Packed<T, BM, BN, TH>, j: usize, dq0: &mut AccW<64>, dq1: &mut AccW<D1>| {
        let sk_ = kv(j % STAGES, 0);
        wgmma::dot_acc_async(ds, &sk_.main, dq0);
        if TAIL {
            wgmma::dot_acc_async(ds, &sk_.rest, dq1);
        }
    };
    // Waits for every dQ product issued.
    let dq_done = |dq0: &mut AccW<64>, dq1: &mut AccW<D1>| {
        wgmma::wait::<0, BM, 64, TH>(dq0);
        if TAIL {
            wgmma::wait::<0, BM, D1, TH>(dq1);
        }
    };
    let (mut dq0, mut dq1) = (AccW::<64>::zeros(), AccW::<D1>::zeros());

    if COPIER == 1 {
        let kv_landed = |j: usize, which: usize| bar(1 + 2 * (j % STAGES) + which);
        let kv_read = |j: usize, which: usize| bar(1 + 2 * STAGES + 2 * (j % STAGES) + which);
        for i in 0..1 + 2 * STAGES {
            bar(i).init(1);
        }
        for i in 0..2 * STAGES {
            bar(1 + 2 * STAGES + i).init(TH as u32);
        }
        tma::fence_init();
        sync();
        let load_qdo = || {
            bar(0).expect_by_this_thread(2 * sq_.bytes());
            let tokens = [s.q0 + s.lq, s.ldq, h, d];
            sq_.load_tma([map_q, map_q1], q, tokens, s.q0 + r0, &bar(0), true);
            sd_.load_tma([map_do, map_do1], d_o, tokens, s.q0 + r0, &bar(0), true);
        };
        // Block j's K (which 0) or V (1) into stage j % STAGES. Rows are
        // tokens of the whole tensor: past this sequence's keys the copy
        // engine reads the next sequence's (zeroed below) or zeros.
        let load_kv = |j: usize, which: usize| {
            if j >= blocks {
                return;
            }
            let (tile, landing) = (kv(j % STAGES, which), kv_landed(j, which));
            landing.expect_by_this_thread(tile.bytes());
            let (maps, src) = if which == 0 { ([map_k, map_k1], k) } else { ([map_v, map_v1], v) };
            tile.load_tma(maps, src, [s.k0 + s.lk, s.ldk, hk, d], s.k0 + j * BN, &landing, true);
        };
        crate::attention::copy_warpgroup::<TH, false>(blocks, STAGES, load_qdo, load_kv, kv_read);
        // No trap on the multiplying loop's path (the module doc says why).
        wgmma::check_periods_once();
        wgmma::raise_registers::<240>();
        // The interpreter's one thread is the copier too: block j's copies
        // right before its products (its stage held block j − STAGES, whose
        // last product, dQ's, finished in step j − STAGES + 1).
        let on_cpu = cfg!(not(target_arch = "nvptx64"));
        if on_cpu {
            load_qdo();
        }
        // Block j's K and V have landed, and past the keys (only the last
        // block reaches there) their rows are zeros: P's zeros meet V's
        // rows, dS's K's, and 0·NaN is NaN. Both warpgroups zero, then meet
        // at named barrier 8 (the copy warpgroup is not there).
        let landed = |j: usize| {
            if on_cpu {
                load_kv(j, 0);
                load_kv(j, 1);
            }
            kv_landed(j, 0).wait((j / STAGES) % 2);
            kv_landed(j, 1).wait((j / STAGES) % 2);
            if j * BN + BN > s.lk {
                kv(j % STAGES, 0).zero_rows_from(s.lk - j * BN);
                kv(j % STAGES, 1).zero_rows_from(s.lk - j * BN);
                wgmma::fence_shared();
                sync_named(8, TH);
            }
        };
        bar(0).wait(0);
        if blocks > 0 {
            let turns = wgmma::Turns::<{ TH / 128 }>::new(true, 1);
            landed(0);
            turns.wait();
            let (mut sc, mut dp) = issue_scores(0);
            turns.pass(false);
            wgmma::wait::<GROUPS, BM, BN, TH>(&mut sc);
            let p = probs(0, sc);
            wgmma::wait::<0, BM, BN, TH>(&mut dp);
            kv_read(0, 1).arrive();
            let mut ds = ds_of(p, dp);
            for j in 1..blocks {
                landed(j);
                turns.wait();
                let (mut sc, mut dp) = issue_scores(j);
                add_dq(&ds, j - 1, &mut dq0, &mut dq1);
                turns.pass(false);
                // Block j's S done, its exponentials beside its dP and
                // block j−1's dQ.
                wgmma::wait::<{ 2 * GROUPS }, BM, BN, TH>(&mut sc);
                let p = probs(j, sc);
                wgmma::wait::<GROUPS, BM, BN, TH>(&mut dp);
                kv_read(j, 1).arrive();
                dq_done(&mut dq0, &mut dq1);
                kv_read(j - 1, 0).arrive();
                ds = ds_of(p, dp);
            }
            turns.wait();
            add_dq(&ds, blocks - 1, &mut dq0, &mut dq1);
            turns.pass(true);
            dq_done(&mut dq0, &mut dq1);
        }
    } else {
        if TMA == 1 {
            bar(0).init(1);
            bar(1).init(1);
            tma::fence_init();
            sync();
        }
        let (kp, vp) = (k.offset(s.k_at()), v.offset(s.k_at()));
        // Key block j's K and V into stage j % 2 (`STAGES = 2`: block j−2 was
        // there; the callers copy once every warp is done with it).
        let copy_kv = |j: usize| {
            if j >= blocks {
                return;
            }
            let stage = j % 2;
            if TMA == 1 {
                let tokens = [s.k0 + s.lk, s.ldk, hk, d];
                bar(stage).expect(2 * kv(stage, 0).bytes());
                kv(stage, 0).load_tma([map_k, map_k1], k, tokens, s.k0 + j * BN, &bar(stage), false);
                kv(stage, 1).load_tma([map_v, map_v1], v, tokens, s.k0 + j * BN, &bar(stage), false);
            } else {
                kv(stage, 0).copy_from(kp, [s.lk, s.ldk, hk * d, d], j * BN);
                kv(stage, 1).copy_from(vp, [s.lk, s.ldk, hk * d, d], j * BN);
            }
        };
        sq_.copy_from(q.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0);
        sd_.copy_from(d_o.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0);
        copy_kv(0);
        if TMA == 1 {
            copy_kv(1);
        }
        commit_copies();

        for j in 0..blocks {
            let c0 = j * BN;
            let (sk_, sv_) = (kv(j % 2, 0), kv(j % 2, 1));
            wait_copies::<0>();
            if TMA == 1 {
                bar(j % 2).wait((j / 2) % 2);
                // Past the keys the copy engine read the next tokens (or
                // anything): zeros, as `cp.async` leaves there, since P's zeros
                // would meet them (0·NaN is NaN).
                if c0 + BN > s.lk {
                    sk_.zero_rows_from(s.lk - c0);
                    sv_.zero_rows_from(s.lk - c0);
                }
            }
            wgmma::fence_shared();
            // Step j's tiles have landed; step j−1's products, the last readers
            // of the other stage, finished.
            sync();
            // Block j+1 (by TMA issued at the start for j = 0).
            let copies = || {
                if TMA == 0 || j >= 1 {
                    copy_kv(j + 1);
                }
                commit_copies();
            };
            if LATE == 0 {
                copies();
            }
            let (mut sc, mut dp) = issue_scores(j);
            if LATE == 1 {
                copies();
            }
            wgmma::wait::<GROUPS, BM, BN, TH>(&mut sc);
            let p = probs(j, sc);
            wgmma::wait::<0, BM, BN, TH>(&mut dp);
            add_dq(&ds_of(p, dp), j, &mut dq0, &mut dq1);
            // Waits for every group, dq1's too; its registers are read after the loop.
            wgmma::wait::<0, BM, 64, TH>(&mut dq0);
        }
        wgmma::wait::<0, BM, D1, TH>(&mut dq1);
    }
    store_head(dq.offset(s.q_at()), [s.lq, s.ldq, h * d, d], r0, &dq0, &dq1, TAIL, scale);
}
