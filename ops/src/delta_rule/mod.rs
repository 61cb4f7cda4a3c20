//! The delta rule: a linear attention whose state is corrected toward each
//! value instead of only added to (QuasarAttention's core op).
//!
//! Per sequence and head, with `K = V = 64` and a state `S ∈ R^{K×V}`
//! (`S₀ = 0` or given), token by token:
//!
//! ```text
//! λ_t = ‖k_t‖²,   α_t = (1 − e^{−β·λ_t}) / (λ_t + 1e-8)
//! S_t = S_{t−1} + α_t · k_t · (v_t − S_{t−1}ᵀ k_t)ᵀ
//! o_t = S_tᵀ q_t
//! ```
//!
//! Two forms compute it:
//!
//! * **Recurrent** ([`delta_rule_recurrent_kernel`]): the recurrence as
//!   written, a program per sequence, head and 16 state columns (columns of
//!   `S` never mix). For decoding, and a second reference.
//! * **Chunked** (the WY form, chunks of `C = 64` tokens): within a chunk,
//!   with `L = tril(diag(α)·K·Kᵀ, −1)` and `Tα = (I + L)⁻¹·diag(α)`,
//!   ```text
//!   U' = Tα·(V − K·S₀)                    the chunk's corrected values
//!   O  = (Q·Kᵀ ⊙ M_incl)·U' + Q·S₀
//!   S₁ = S₀ + Kᵀ·U'
//!   ```
//!   [`delta_rule_chunk_kernel`] makes every chunk's `Tα` at once (a
//!   triangular solve, the only part that is not a matrix product: f32,
//!   [`rustile::tri::invert_unit_lower_in_place`]); [`delta_rule_scan_kernel`] then
//!   walks each sequence's chunks, carrying `S` in registers (f32,
//!   transposed so that every product takes it, or `U'`, straight from
//!   registers as the left operand; `Shared::store_acc` where a product
//!   needs it from shared memory), and writes the outputs.
//! * **Sequence parallelism**: one sequence of a million tokens is 16,384
//!   chunks in a row, and a scan over them keeps 8 heads' worth of programs
//!   busy. So a long sequence is cut into segments: each segment's chunks
//!   map a start state affinely, `S ↦ M·S + B` ([`delta_rule_map_kernel`],
//!   all segments at once: the same recurrence run from `M = I` without
//!   values and from `B = 0` with them),
//!   [`delta_rule_combine_kernel`] walks the maps for each segment's start
//!   state (a few dozen small products), and the scan runs every segment at
//!   once from its start. The host picks the segment count from the SM
//!   count and the length.
//!
//! Inputs are bf16 `[batch, tokens, heads, 64]` (or packed variable-length
//! sequences); the state and every accumulation are f32; the products'
//! operands are bf16, `S`, `U'` and `Tα` included.
use rustile::prelude::*;
use rustile::AsRaw;

/// Key and value width (the head dim).
pub const D: usize = 64;
/// Tokens a chunk.
pub const CHUNK: usize = 64;

/// Kernel flags: an initial state is given, the final state is wanted, the
/// sequences are packed with offsets in `cu`.
pub const HAS_S0: u32 = 1;
pub const HAS_S_OUT: u32 = 2;
pub const VARLEN: u32 = 4;
/// The scan records each chunk's start state for the backward instead of writing outputs.
pub const STATES: u32 = 8;
/// The backward's flags: the final state's gradient is given; the initial state's is wanted.
pub const HAS_D_FINAL: u32 = HAS_S0;
pub const HAS_D_S0: u32 = HAS_S_OUT;

// ---- helpers ---------------------------------------------------------------------------

/// `1 − e^{−x}` for `x ≥ 0`, to f32's precision where `x` is tiny (λ = 1e-4
/// leaves nothing of `1 − exp(−x)` but rounding).
#[inline(always)]
pub fn neg_expm1(x: f32) -> f32 {
    let series = x * (1.0 - x * 0.5 * (1.0 - x * (1.0 / 3.0) * (1.0 - x * 0.25 * (1.0 - x * 0.2))));
    if x < 0.03125 { series } else { 1.0 - math::exp(-x) }
}

/// A token's step size `α = (1 − e^{−β·λ}) / (λ + 1e-8)` from its key's squared norm `λ`.
#[inline(always)]
pub fn alpha(beta: f32, lambda: f32) -> f32 {
    neg_expm1(beta * lambda) / (lambda + 1e-8)
}

/// Where the tokens of one sequence and head lie in `[.., tokens, heads, 64]`
/// rows, seen as a `[all tokens, heads·64]` matrix: rows `first ..
/// first + len`, columns `col .. col + 64`.
#[derive(Clone, Copy)]
struct Rows {
    first: usize,
    len: usize,
    col: usize,
    stride: usize,
}

impl Rows {
    /// Sequence and head `sh = s·heads + h`: tokens `cu[s] .. cu[s+1]` when
    /// packed (`tokens` is then all of them, and the offsets, which may be
    /// the caller's, are cut to it), else `s·tokens ..`.
    #[inline(always)]
    fn of(cu: Ptr<u32>, sh: usize, heads: usize, tokens: usize, flags: u32) -> Rows {
        let (s, h) = (sh / heads, sh % heads);
        let (first, len) = if flags & VARLEN != 0 {
            let first = (cu.read(s) as usize).min(tokens);
            (first, (cu.read(s + 1) as usize).clamp(first, tokens) - first)
        } else {
            (s * tokens, tokens)
        };
        Rows { first, len, col: h * D, stride: heads * D }
    }

    /// Where token `t`'s 64 values start.
    #[inline(always)]
    fn at(&self, t: usize) -> usize {
        (self.first + t) * self.stride + self.col
    }

    /// Tokens `t0 .. t0 + 64` of `p` (`k`, `q`, `v`, `o` or `Tα`'s rows); rows past the sequence read as zeros.
    #[inline(always)]
    fn chunk<T: Elem, const TH: usize>(&self, p: impl AsRaw<T>, t0: usize) -> BlockPtr<T, CHUNK, D, TH> {
        BlockPtr::new(p, [self.first + self.len, self.stride], [self.stride, 1], [self.first + t0, self.col])
    }

    /// [`Rows::chunk`] then 64 columns of zeros (`[V | 0]`).
    #[inline(always)]
    fn chunk_then_zeros<T: Elem, const TH: usize>(&self, p: impl AsRaw<T>, t0: usize) -> BlockPtr<T, CHUNK, 128, TH> {
        BlockPtr::new(p, [self.first + self.len, self.col + D], [self.stride, 1], [self.first + t0, self.col])
    }

    /// The tokens of segment `g` of `seg_chunks` chunks (empty past the sequence).
    #[inline(always)]
    fn segment(&self, g: usize, seg_chunks: usize) -> core::ops::Range<usize> {
        g * seg_chunks * CHUNK..((g + 1) * seg_chunks * CHUNK).min(self.len)
    }
}

/// Block `i` of a run of row-major `[64, 64]` blocks (the recorded states,
/// the gradients of segment ends).
#[inline(always)]
fn state_block<E: Elem, const TH: usize>(p: impl AsRaw<E>, i: usize) -> BlockPtr<E, D, D, TH> {
    BlockPtr::new(p, [(i + 1) * D, D], [D, 1], [i * D, 0])
}

/// The `[64, 64]` block at element `at` of a row-major f32 matrix with rows
/// of `row_len`, transposed: an accumulator of `Sᵀ` stores `S` there, and
/// `get(r, c)` reads `Sᵀ[r, c]` (state tensors hold `S`, `[K, V]`).
#[inline(always)]
fn transposed<const TH: usize>(p: impl AsRaw<f32>, at: usize, row_len: usize) -> BlockPtr<f32, D, D, TH> {
    BlockPtr::new(p, [at + D, D], [1, row_len], [at, 0])
}

// ---- the recurrence ----------------------------------------------------------------------

// One warp a program: the state slice `[64, BV]` is 32 values a thread, and
// the three column sums a token are shuffles only.
#[kernel(
    configs = [(BV = 16, WARPS = 1)],
    grid = [D / BV, seqs * heads],
    dtypes = [bf16],
)]
/// The recurrence for columns `BV·program_id(0) ..` of the state of
/// sequence and head `program_id(1)`.
pub fn delta_rule_recurrent_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, beta: Ptr<f32>, cu: Ptr<u32>, s0: Ptr<f32>, o: PtrMut<T>, s_out: PtrMut<f32>,
    tokens: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (v0, sh) = (program_id(0) * BV, program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    let (len, end) = (rows.len, rows.at(rows.len));
    let b = beta.read(sh % heads);
    let mut st = if flags & HAS_S0 != 0 {
        load(&BlockPtr::<f32, D, BV>::new(s0.offset(sh * D * D), [D, D], [D, 1], [0, v0]))
    } else {
        Tile::zeros()
    };
    // Token t's key and query (down the rows) and values (along the columns).
    let fetch = |t: usize| {
        let at = rows.at(t);
        (Col::<T, D, BV>::load(k, at, end), Col::<T, D, BV>::load(q, at, end), Row::<T, D, BV>::load(v, at + v0, end))
    };
    let mut next = fetch(0);
    for t in 0..len {
        let (kc, qc, vr) = next;
        if t + 1 < len {
            next = fetch(t + 1);
        }
        let (kc, qc) = (kc.cast::<f32>(), qc.cast::<f32>());
        let kt = Tile::<f32, D, BV>::zeros() + kc;
        let lambda = (kt * kt).col_sum();
        let predicted = (st * kc).col_sum();
        let step = (vr.cast::<f32>() - predicted) * lambda.map(|l| alpha(b, l));
        st = st + kt * step;
        let at = rows.at(t) + v0;
        (st * qc).col_sum().cast::<T>().store(o, at, at + BV);
    }
    if flags & HAS_S_OUT != 0 {
        store(&BlockPtr::<f32, D, BV>::new(s_out.offset(sh * D * D), [D, D], [D, 1], [0, v0]), &st);
    }
}

// ---- the chunked form: Tα per chunk ---------------------------------------------------------

// Two warps: the solve gives each of the 64 threads one column of T, and
// waits on its chains of multiply-adds, so eight programs share an SM (OCC:
// 128 registers; ptxas keeps 8 bytes in memory once a program, before the
// solve, none in its loops). SMEM: the chunk's
// keys (bf16, 8 KB), then K·Kᵀ (f32, 16 KB), turned into Lᵀ and then T in place.
#[kernel(
    configs = [(WARPS = 2, OCC = 8, SMEM = 24576)],
    grid = [cdiv(longest, CHUNK), seqs * heads],
    dtypes = [bf16],
)]
/// `Tα = (I + tril(diag(α)·K·Kᵀ, −1))⁻¹·diag(α)` of chunk `program_id(0)` of
/// sequence and head `program_id(1)`, written as the chunk's rows of `tri`
/// (`[.., tokens, heads, 64]`, like `k`; row `i` holds `Tα[i, 0..64]`).
pub fn delta_rule_chunk_kernel<T: Elem>(
    k: Ptr<T>, beta: Ptr<f32>, cu: Ptr<u32>, tri: PtrMut<T>,
    tokens: usize, longest: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = (longest, seqs); // the grid
    let (t0, sh) = (program_id(0) * CHUNK, program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    if t0 >= rows.len {
        return;
    }
    let ks = Shared::<T, CHUNK, D>::at(0);
    let gs = SharedF32::<CHUNK, CHUNK>::at(CHUNK * D * 2);
    // Rows past the sequence are zeros: their α is 0, so they change nothing.
    ks.copy_from(&rows.chunk(k, t0));
    commit_copies();
    wait_copies::<0>();
    sync();
    gs.store_acc(&dot(&ks, &ks, Acc::<CHUNK, CHUNK>::zeros()));
    sync();
    let g = gs.load();

    // λ is K·Kᵀ's diagonal; α per column (to scale Lᵀ and T).
    let b = beta.read(sh % heads);
    let diag = Tile::<bool, CHUNK, CHUNK>::from_fn(|r, c| r == c).select(g, Tile::zeros());
    let alpha_cols = diag.col_sum().map(|l| alpha(b, l));
    // Lᵀ in place, which the solve reads a row at a time: L = diag(α)·K·Kᵀ,
    // and K·Kᵀ is symmetric, so Lᵀ is K·Kᵀ with column i scaled by α_i.
    sync();
    gs.store(&(g * alpha_cols));
    sync();
    rustile::tri::invert_unit_lower_in_place(&gs);
    sync();
    store(&rows.chunk(tri, t0), &(gs.load() * alpha_cols).cast::<T>());
}

// ---- the chunked form: the scan over chunks --------------------------------------------

// SMEM: two stages of K, Q, V and Tα (32 KB each: the next chunk's copies
// fly while this one's products run), then Sᵀ and U'ᵀ (16 KB).
#[kernel(
    configs = [(WARPS = 4, SMEM = 81920)],
    grid = [segments, seqs * heads],
    dtypes = [bf16],
)]
/// Outputs of segment `program_id(0)` (chunks `seg_chunks·g ..`; one
/// segment: the whole sequence) of sequence and head `program_id(1)`, chunk
/// after chunk, from `Tα` ([`delta_rule_chunk_kernel`]) and the state the
/// segment starts from (`s0[sh, g]`, or zeros); with one segment, the final
/// state too. With [`STATES`], no outputs: `Sᵀ` at each chunk's start, in
/// `T`, goes to `states[sh·segments·seg_chunks + chunk]` for the backward.
pub fn delta_rule_scan_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, tri: Ptr<T>, cu: Ptr<u32>, s0: Ptr<f32>, o: PtrMut<T>, s_out: PtrMut<f32>, states: PtrMut<T>,
    tokens: usize, segments: usize, seg_chunks: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (g, sh) = (program_id(0), program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    // Every operand is one 64×64 bf16 tile.
    type Block = rustile::Acc<64, 64, THREADS, true>;
    const TILE: usize = CHUNK * D * 2;
    let tile = |i: usize| Shared::<T, CHUNK, D>::at(i * TILE);
    // Stage s: K, Q, V, Tα.
    let stage = |s: usize| (tile(4 * s), tile(4 * s + 1), tile(4 * s + 2), tile(4 * s + 3));
    let fetch = |t0: usize, s: usize| {
        let (ks, qs, vs, ts) = stage(s);
        ks.copy_from(&rows.chunk(k, t0));
        qs.copy_from(&rows.chunk(q, t0));
        vs.copy_from(&rows.chunk(v, t0));
        ts.copy_from(&rows.chunk(tri, t0));
        commit_copies();
    };
    let (sts, uts) = (tile(8), tile(9));

    // Sᵀ (rows: value columns, columns: key rows).
    let mut st = Block::zeros();
    if flags & HAS_S0 != 0 {
        let start = transposed::<THREADS>(s0, (sh * segments + g) * D * D, D);
        st = st.map(|r, c, _| start.get(r, c, 0.0));
    }
    let seg = rows.segment(g, seg_chunks);
    if !seg.is_empty() {
        fetch(seg.start, 0);
    }
    for (i, t0) in seg.clone().step_by(CHUNK).enumerate() {
        // The previous chunk's readers of every tile refilled here are done.
        sync();
        let more = t0 + CHUNK < seg.end;
        if more {
            fetch(t0 + CHUNK, (i + 1) % 2);
        }
        sts.store_acc(&st);
        if flags & STATES != 0 {
            store_acc(&state_block(states, sh * segments * seg_chunks + t0 / CHUNK), &st);
        }
        if more {
            wait_copies::<1>();
        } else {
            wait_copies::<0>();
        }
        sync();
        let (ks, qs, vs, ts) = stage(i % 2);

        // U'ᵀ = (V − K·S)ᵀ·Tαᵀ = Vᵀ·Tαᵀ − (Sᵀ·Kᵀ)·Tαᵀ.
        let sk = dot_packed(&st.pack::<T>(), &ks, Block::zeros());
        let ut = dot_packed(&sk.map(|_, _, x| -x).pack::<T>(), &ts, dot_ta(&vs, &ts, Block::zeros()));

        // O = (Q·Kᵀ ⊙ M_incl)·U' + Q·S.
        if flags & STATES == 0 {
            uts.store_acc(&ut);
            sync();
            let scores = dot(&qs, &ks, Block::zeros()).map(|r, c, x| if c <= r { x } else { 0.0 });
            let out = dot_packed(&scores.pack::<T>(), &uts, dot(&qs, &sts, Block::zeros()));
            store_acc(&rows.chunk(o, t0), &out);
        }

        // S₁ᵀ = Sᵀ + U'ᵀ·K.
        st = dot_acc(&ut.pack::<T>(), &ks, st);
    }
    if flags & HAS_S_OUT != 0 {
        store_acc(&transposed(s_out, sh * D * D, D), &st);
    }
}

// ---- sequence parallelism: each segment's state map, then their scan ----------------------

// Both maps in one program, stacked as one accumulator `Xᵀ = [Bᵀ; Mᵀ]`
// (`[128, 64]`, 16 rows a warp): each chunk's K and Tα are read once for
// both (two programs read them twice). The values come as `[V | 0]`, so the
// same products give `M` no values. SMEM: two stages of K, `[V | 0]` and Tα
// (32 KB each): the next chunk's copies fly while this one's products run.
#[kernel(
    configs = [(WARPS = 8, SMEM = 65536)],
    grid = [segments, seqs * heads],
    dtypes = [bf16],
)]
/// The affine map `S ↦ M·S + B` that segment `program_id(0)` (chunks
/// `seg_chunks·g ..` of its sequence) applies to the state of sequence and
/// head `program_id(1)`: the chunk recurrence run from `M = I` on values 0,
/// and from `B = 0` on the values. Written as `maps[sh, g]` = `[B | M]`,
/// `[64, 128]` f32.
pub fn delta_rule_map_kernel<T: Elem>(
    k: Ptr<T>, v: Ptr<T>, tri: Ptr<T>, cu: Ptr<u32>, maps: PtrMut<f32>,
    tokens: usize, segments: usize, seg_chunks: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (g, sh) = (program_id(0), program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    type Stack = rustile::Acc<128, 64, THREADS, true>;
    const TILE: usize = CHUNK * D * 2;
    let stage = |s: usize| {
        let at = s * 4 * TILE;
        (Shared::<T, CHUNK, D>::at(at), Shared::<T, CHUNK, 128>::at(at + TILE), Shared::<T, CHUNK, CHUNK>::at(at + 3 * TILE))
    };
    let fetch = |t0: usize, s: usize| {
        let (ks, vs, ts) = stage(s);
        ks.copy_from(&rows.chunk(k, t0));
        vs.copy_from(&rows.chunk_then_zeros(v, t0));
        ts.copy_from(&rows.chunk(tri, t0));
        commit_copies();
    };
    // Bᵀ from zeros, Mᵀ from the identity.
    let mut xt = Stack::zeros().map(|r, c, _| if r == c + D { 1.0 } else { 0.0 });
    let seg = rows.segment(g, seg_chunks);
    if !seg.is_empty() {
        fetch(seg.start, 0);
    }
    for (i, t0) in seg.clone().step_by(CHUNK).enumerate() {
        // The previous chunk's readers of the stage refilled next are done.
        sync();
        if t0 + CHUNK < seg.end {
            fetch(t0 + CHUNK, (i + 1) % 2);
            wait_copies::<1>();
        } else {
            wait_copies::<0>();
        }
        sync();
        let (ks, vs, ts) = stage(i % 2);
        // As the scan: U'ᵀ = (V − K·X)ᵀ·Tαᵀ.
        let xk = dot_packed(&xt.pack::<T>(), &ks, Stack::zeros()).map(|_, _, x| -x);
        let ut = dot_packed(&xk.pack::<T>(), &ts, dot_ta(&vs, &ts, Stack::zeros()));
        xt = dot_acc(&ut.pack::<T>(), &ks, xt);
    }
    // [B | M] row-major: Xᵀ stored transposed.
    let at = (sh * segments + g) * D * 2 * D;
    store_acc(&BlockPtr::<f32, 128, D>::new(maps, [at + 2 * D, D], [1, 2 * D], [at, 0]), &xt);
}

// SMEM: M in bf16 (8 KB).
#[kernel(
    configs = [(WARPS = 4, SMEM = 8192)],
    grid = [seqs * heads],
    dtypes = [bf16],
)]
/// Walks the segments' maps of sequence and head `program_id(0)`: the state
/// each segment starts from (`starts[sh, g]`, `[64, 64]` f32, from `s0` or
/// zeros), and the final one.
pub fn delta_rule_combine_kernel<T: Elem>(
    maps: Ptr<f32>, s0: Ptr<f32>, starts: PtrMut<f32>, s_out: PtrMut<f32>, segments: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = (seqs, heads); // the grid
    let sh = program_id(0);
    type Block = rustile::Acc<64, 64, THREADS, true>;
    let m = Shared::<T, D, D>::at(0);
    let mut st = Block::zeros();
    if flags & HAS_S0 != 0 {
        let start = transposed::<THREADS>(s0, sh * D * D, D);
        st = st.map(|r, c, _| start.get(r, c, 0.0));
    }
    for g in 0..segments {
        store_acc(&transposed(starts, (sh * segments + g) * D * D, D), &st);
        let at = (sh * segments + g) * D * 2 * D;
        sync();
        m.store(&load(&BlockPtr::<f32, D, D>::new(maps.offset(at + D), [D, 2 * D], [2 * D, 1], [0, 0])).cast::<T>());
        sync();
        // Sᵀ ← Sᵀ·Mᵀ + Bᵀ.
        let b = transposed::<THREADS>(maps, at, 2 * D);
        st = dot_packed(&st.pack::<T>(), &m, Block::zeros().map(|r, c, _| b.get(r, c, 0.0)));
    }
    if flags & HAS_S_OUT != 0 {
        store_acc(&transposed(s_out, sh * D * D, D), &st);
    }
}

// ---- the backward -----------------------------------------------------------------------------
//
// Backwards through one chunk, with `dS` the gradient of the state after it,
// `S` the state before it (recorded by the scan with STATES), `A = Tα` and
// `M_incl` the causal mask:
//
//   Wv = V − K·S,  U' = A·Wv,  P = Q·Kᵀ ⊙ M_incl             (the forward again)
//   dU' = Pᵀ·dO + K·dS,  dV = Aᵀ·dU',  dS ← dS + Qᵀ·dO − Kᵀ·dV
//   dP = dO·U'ᵀ ⊙ M_incl,  dQ = dP·K + dO·Sᵀ
//   dK = dPᵀ·Q + U'·dSᵀ − dV·Sᵀ + (Ḡ + Ḡᵀ)·K + 2·dλ·K
//
// The last two terms reach K through G = K·Kᵀ, which made A (L is G's strict
// lower triangle scaled by α) and λ = diag(G), which made α. With Ā = dU'·Wvᵀ
// the gradient of A: since A = (I + L)⁻¹·diag(α),
//
//   Y = Aᵀ·Ā,  Ḡ = −strict_lower(Y·Aᵀ),  ρ_i = α_i·dα_i = Y_ii + Σ_j Ḡ_ij·G_ij
//   dλ_i = ρ_i·(∂α/∂λ)/α,  dβ = Σ_i ρ_i·(∂α/∂β)/α
//
// (ρ is α·dα, so that no step divides by an α, which is 0 on a zero key.)
// dS's recursion is affine like S's, with the forward map's transpose as its
// linear part: a segment's gradient at its start is Mᵀ·dS_end + B', so the
// segments run at once here too ([`delta_rule_back_scan_kernel`] from zeros
// for B', [`delta_rule_back_combine_kernel`] for each segment's dS_end, the
// back scan again from there recording every chunk's dS); then every
// chunk's gradients at once ([`delta_rule_grads_kernel`]).

/// `(∂α/∂λ)/α` at a key's squared norm `λ` (0 where `λ = 0`: then `ρ = 0`).
#[inline(always)]
pub fn dalpha_dlambda_over_alpha(beta: f32, lambda: f32) -> f32 {
    if lambda <= 0.0 {
        return 0.0;
    }
    // β/(eˣ − 1) − 1/λ with x = βλ, as a series where the two nearly cancel,
    // then 1/λ − 1/(λ + 1e-8).
    let x = beta * lambda;
    let near = if x < 0.03125 { beta * (x * (1.0 / 12.0) * (1.0 - x * x * (1.0 / 60.0)) - 0.5) } else { beta * math::exp(-x) / neg_expm1(x) - 1.0 / lambda };
    near + 1e-8 / (lambda * (lambda + 1e-8))
}

/// `(∂α/∂β)/α = λ/(e^{βλ} − 1)` (0 where `λ = 0`).
#[inline(always)]
pub fn dalpha_dbeta_over_alpha(beta: f32, lambda: f32) -> f32 {
    if lambda <= 0.0 { 0.0 } else { lambda * math::exp(-beta * lambda) / neg_expm1(beta * lambda) }
}

// SMEM: Q, K, dO, Tα, dS, P, dU' and −dV (64 KB).
#[kernel(
    configs = [(WARPS = 4, SMEM = 65536)],
    grid = [segments, seqs * heads],
    dtypes = [bf16],
)]
/// `dS`'s recursion through segment `program_id(0)` of sequence and head
/// `program_id(1)`, from its last chunk: from the gradient of the state the
/// segment ends in (`ds_end[sh, g]` with [`HAS_D_FINAL`], else zeros) to
/// that of the state it starts from (`ds_start[sh, g]`, with [`HAS_D_S0`]).
/// From zeros that is the segment's `B'`; with [`STATES`], each chunk's
/// `dS` (of the state after it) also goes to `dstates` (in `T`, where the
/// scan put `states`), for [`delta_rule_grads_kernel`].
pub fn delta_rule_back_scan_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, d_o: Ptr<T>, tri: Ptr<T>, cu: Ptr<u32>, ds_end: Ptr<f32>, ds_start: PtrMut<f32>, dstates: PtrMut<T>,
    tokens: usize, segments: usize, seg_chunks: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (g, sh) = (program_id(0), program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    type Block = rustile::Acc<64, 64, THREADS, true>;
    let tile = |i: usize| Shared::<T, CHUNK, D>::at(i * CHUNK * D * 2);
    let (qs, ks, dos, ts, dss, ps, dus, ndvs) = (tile(0), tile(1), tile(2), tile(3), tile(4), tile(5), tile(6), tile(7));
    // dS as the state is stored (rows: key dims).
    let mut ds = Block::zeros();
    if flags & HAS_D_FINAL != 0 {
        let end = state_block::<f32, THREADS>(ds_end, sh * segments + g);
        ds = ds.map(|r, c, _| end.get(r, c, 0.0));
    }
    let seg = rows.segment(g, seg_chunks);
    for i in (0..seg.len().div_ceil(CHUNK)).rev() {
        let t0 = seg.start + i * CHUNK;
        sync();
        qs.copy_from(&rows.chunk(q, t0));
        ks.copy_from(&rows.chunk(k, t0));
        dos.copy_from(&rows.chunk(d_o, t0));
        ts.copy_from(&rows.chunk(tri, t0));
        commit_copies();
        dss.store_acc(&ds);
        if flags & STATES != 0 {
            store_acc(&state_block(dstates, sh * segments * seg_chunks + t0 / CHUNK), &ds);
        }
        wait_copies::<0>();
        sync();
        // dU' = Pᵀ·dO + K·dS, dV = Aᵀ·dU', dS ← dS + Qᵀ·dO − Kᵀ·dV.
        ps.store_acc(&dot(&qs, &ks, Block::zeros()).map(|r, c, x| if c <= r { x } else { 0.0 }));
        sync();
        dus.store_acc(&dot_tab(&ps, &dos, dot_tb(&ks, &dss, Block::zeros())));
        sync();
        ndvs.store_acc(&dot_tab(&ts, &dus, Block::zeros()).map(|_, _, x| -x));
        sync();
        ds = dot_tab(&ks, &ndvs, dot_tab(&qs, &dos, ds));
    }
    if flags & HAS_D_S0 != 0 {
        store_acc(&state_block(ds_start, sh * segments + g), &ds);
    }
}

// SMEM: thirteen 64×64 bf16 tiles (104 KB, two programs an SM): the
// chunk's Q, K, V, dO, Tα, Sᵀ and dS, and the products that later ones
// take as operands.
#[kernel(
    configs = [(WARPS = 4, SMEM = 106496)],
    grid = [chunks, seqs * heads],
    dtypes = [bf16],
)]
/// The gradients of chunk `program_id(0)` (of `chunks` a sequence, as the
/// scan numbered them) of sequence and head `program_id(1)`: `dq`, `dk`,
/// `dv` (like `q`) and the chunk's share of `dβ` (`dbeta_parts[sh, chunk,
/// ..64]`, per token slot), from the state before it (`states`, by
/// [`delta_rule_scan_kernel`]) and the gradient of the state after it
/// (`dstates`, by [`delta_rule_back_scan_kernel`]). Every chunk at once.
pub fn delta_rule_grads_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, d_o: Ptr<T>, tri: Ptr<T>, states: Ptr<T>, dstates: Ptr<T>, beta: Ptr<f32>, cu: Ptr<u32>,
    dq: PtrMut<T>, dk: PtrMut<T>, dv: PtrMut<T>, dbeta_parts: PtrMut<f32>,
    tokens: usize, chunks: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (c, sh) = (program_id(0), program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    let t0 = c * CHUNK;
    let parts = (sh * chunks + c) * CHUNK;
    if t0 >= rows.len {
        rustile::AccRows::<64, THREADS>::splat(0.0).store(dbeta_parts, parts, parts + CHUNK);
        return;
    }
    let b = beta.read(sh % heads);
    type Block = rustile::Acc<64, 64, THREADS, true>;
    let tile = |i: usize| Shared::<T, CHUNK, D>::at(i * CHUNK * D * 2);
    let (qs, ks, vs, dos, ts, sts, dss) = (tile(0), tile(1), tile(2), tile(3), tile(4), tile(5), tile(6));
    let (wvs, ps, us, dus, dps, abars) = (tile(7), tile(8), tile(9), tile(10), tile(11), tile(12));
    // Slots free again: V's once Wv is made, P's once dU' is.
    let (ndvs, gbars) = (vs, ps);
    let lower_incl = |r: usize, c: usize, x: f32| if c <= r { x } else { 0.0 };

    qs.copy_from(&rows.chunk(q, t0));
    ks.copy_from(&rows.chunk(k, t0));
    vs.copy_from(&rows.chunk(v, t0));
    dos.copy_from(&rows.chunk(d_o, t0));
    ts.copy_from(&rows.chunk(tri, t0));
    let slot = sh * chunks + c;
    sts.copy_from(&state_block(states, slot));
    dss.copy_from(&state_block(dstates, slot));
    commit_copies();
    wait_copies::<0>();
    sync();

    // The forward again: Wv = V − K·S and P.
    wvs.store_acc(&vs.load_acc::<true>().zip(dot(&ks, &sts, Block::zeros()), |v, ks| v - ks));
    ps.store_acc(&dot(&qs, &ks, Block::zeros()).map(lower_incl));
    sync();

    // U' = A·Wv, dU' = Pᵀ·dO + K·dS.
    us.store_acc(&dot_tb(&ts, &wvs, Block::zeros()));
    dus.store_acc(&dot_tab(&ps, &dos, dot_tb(&ks, &dss, Block::zeros())));
    sync();

    // dV = Aᵀ·dU', Ā = dU'·Wvᵀ, dP, dQ = dP·K + dO·Sᵀ.
    let dvv = dot_tab(&ts, &dus, Block::zeros());
    store_acc(&rows.chunk(dv, t0), &dvv);
    ndvs.store_acc(&dvv.map(|_, _, x| -x));
    abars.store_acc(&dot(&dus, &wvs, Block::zeros()));
    let dp = dot(&dos, &us, Block::zeros()).map(lower_incl);
    dps.store_acc(&dp);
    store_acc(&rows.chunk(dq, t0), &dot_acc(&dp.pack::<T>(), &ks, dot_tb(&dos, &sts, Block::zeros())));
    sync();

    // Through A and α: Y = Aᵀ·Ā, Ḡ = −strict_lower(Y·Aᵀ); Σ_j Ḡ_ij·G_ij is
    // row i of (Ḡ·K) ⊙ K, and Ḡ·K is also dK's term.
    let y = dot_tab(&ts, &abars, Block::zeros());
    let y_diag = y.map(|r, c, x| if c == r { x } else { 0.0 }).row_sum();
    let gbar = dot_packed(&y.pack::<T>(), &ts, Block::zeros()).map(|r, c, x| if c < r { -x } else { 0.0 });
    gbars.store_acc(&gbar);
    let gk = dot_acc(&gbar.pack::<T>(), &ks, Block::zeros());
    let kacc = ks.load_acc::<true>();
    let lambda = kacc.map(|_, _, x| x * x).row_sum();
    let rho = y_diag.zip(gk.zip(kacc, |a, b| a * b).row_sum(), |a, b| a + b);
    rho.zip(lambda, |r, l| r * dalpha_dbeta_over_alpha(b, l)).store(dbeta_parts, parts, parts + CHUNK);
    let dlambda2 = rho.zip(lambda, |r, l| 2.0 * r * dalpha_dlambda_over_alpha(b, l));
    let dk_through_a = gk.zip(kacc.map_rows(&dlambda2, |x, d| x * d), |a, x| a + x);
    sync();

    // dK = dPᵀ·Q + U'·dSᵀ − dV·Sᵀ + Ḡ·K + Ḡᵀ·K + 2·dλ·K.
    let dkk = dot_tb(&ndvs, &sts, dot(&us, &dss, dot_tab(&dps, &qs, dk_through_a)));
    store_acc(&rows.chunk(dk, t0), &dot_tab(&gbars, &ks, dkk));
}

// SMEM: M in bf16 (8 KB).
#[kernel(
    configs = [(WARPS = 4, SMEM = 8192)],
    grid = [seqs * heads],
    dtypes = [bf16],
)]
/// Walks the segments of sequence and head `program_id(0)` from the last:
/// the gradient of the state each ends in (`ends[sh, g]`, from `d_final` or
/// zeros) and, with [`HAS_D_S0`], of the state the first starts from. The
/// gradient at a segment's start is `Mᵀ·dS_end + B'` (`M` of the forward's
/// `maps`, `B'` of `back_maps`).
pub fn delta_rule_back_combine_kernel<T: Elem>(
    maps: Ptr<f32>, back_maps: Ptr<f32>, d_final: Ptr<f32>, ends: PtrMut<f32>, d_s0: PtrMut<f32>, segments: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = (seqs, heads); // the grid
    let sh = program_id(0);
    type Block = rustile::Acc<64, 64, THREADS, true>;
    let m = Shared::<T, D, D>::at(0);
    // dSᵀ, as the forward's combine keeps Sᵀ.
    let mut dst = Block::zeros();
    if flags & HAS_D_FINAL != 0 {
        let end = transposed::<THREADS>(d_final, sh * D * D, D);
        dst = dst.map(|r, c, _| end.get(r, c, 0.0));
    }
    for g in (0..segments).rev() {
        store_acc(&transposed(ends, (sh * segments + g) * D * D, D), &dst);
        let at = (sh * segments + g) * D * 2 * D;
        sync();
        m.store(&load(&BlockPtr::<f32, D, D>::new(maps.offset(at + D), [D, 2 * D], [2 * D, 1], [0, 0])).cast::<T>());
        sync();
        // dSᵀ ← dSᵀ·M + B'ᵀ.
        let b = transposed::<THREADS>(back_maps, (sh * segments + g) * D * D, D);
        dst = dot_acc(&dst.pack::<T>(), &m, Block::zeros().map(|r, c, _| b.get(r, c, 0.0)));
    }
    if flags & HAS_D_S0 != 0 {
        store_acc(&transposed(d_s0, sh * D * D, D), &dst);
    }
}

// A program a head walks a million tokens' values (64 MB at 8 heads): eight
// warps and 32 KB a step keep enough loads in flight (one warp took 0.54 ms).
#[kernel(
    configs = [(RB = 128, WARPS = 8)],
    grid = [heads],
    dtypes = [f32],
)]
/// `dbeta[h]`: the sum of every sequence's `dbeta_parts[s, h, ..]` (`n`
/// values a sequence and head, `n` a multiple of 64), in a fixed order.
pub fn delta_rule_dbeta_kernel<T: Elem>(dbeta_parts: Ptr<f32>, dbeta: PtrMut<T>, n: usize, seqs: usize, heads: usize) {
    let h = program_id(0);
    let mut acc = Tile::<f32, RB, CHUNK>::zeros();
    for s in 0..seqs {
        let at = (s * heads + h) * n;
        let mut r0 = 0;
        while r0 < n / CHUNK {
            acc = acc + load(&BlockPtr::<f32, RB, CHUNK>::new(dbeta_parts.offset(at), [n / CHUNK, CHUNK], [CHUNK, 1], [r0, 0]));
            r0 += RB;
        }
    }
    (Tile::<f32, RB, CHUNK>::zeros() + acc.row_sum()).col_sum().cast::<T>().store(dbeta, h, h + 1);
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
