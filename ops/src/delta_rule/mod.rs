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
//!   [`rustile::tri::invert_unit_lower`]); [`delta_rule_scan_kernel`] then
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
    /// Sequence and head `sh = s·heads + h`: tokens `cu[s] .. cu[s+1]` when packed, else `s·tokens ..`.
    #[inline(always)]
    fn of(cu: Ptr<u32>, sh: usize, heads: usize, tokens: usize, flags: u32) -> Rows {
        let (s, h) = (sh / heads, sh % heads);
        let (first, len) = if flags & VARLEN != 0 {
            let first = cu.read(s) as usize;
            (first, cu.read(s + 1) as usize - first)
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

    /// The tokens of segment `g` of `seg_chunks` chunks (empty past the sequence).
    #[inline(always)]
    fn segment(&self, g: usize, seg_chunks: usize) -> core::ops::Range<usize> {
        g * seg_chunks * CHUNK..((g + 1) * seg_chunks * CHUNK).min(self.len)
    }
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

// Two warps: the solve gives each of the 64 threads one column of T. SMEM:
// the chunk's keys (bf16, 8 KB), then K·Kᵀ (turned into L in place) and T,
// f32 (16 KB each).
#[kernel(
    configs = [(WARPS = 2, SMEM = 40960)],
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
    const KEYS: usize = CHUNK * D * 2;
    let ks = Shared::<T, CHUNK, D>::at(0);
    let (gs, ts) = (SharedF32::<CHUNK, CHUNK>::at(KEYS), SharedF32::<CHUNK, CHUNK>::at(KEYS + CHUNK * CHUNK * 4));
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
    rustile::tri::invert_unit_lower(&gs, &ts);
    sync();
    store(&rows.chunk(tri, t0), &(ts.load() * alpha_cols).cast::<T>());
}

// ---- the chunked form: the scan over chunks --------------------------------------------

// SMEM: six 64×64 bf16 tiles (K, Q, V, Tα, Sᵀ, U'ᵀ: 48 KB).
#[kernel(
    configs = [(WARPS = 4, SMEM = 49152)],
    grid = [segments, seqs * heads],
    dtypes = [bf16],
)]
/// Outputs of segment `program_id(0)` (chunks `seg_chunks·g ..`; one
/// segment: the whole sequence) of sequence and head `program_id(1)`, chunk
/// after chunk, from `Tα` ([`delta_rule_chunk_kernel`]) and the state the
/// segment starts from (`s0[sh, g]`, or zeros); with one segment, the final
/// state too.
pub fn delta_rule_scan_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, tri: Ptr<T>, cu: Ptr<u32>, s0: Ptr<f32>, o: PtrMut<T>, s_out: PtrMut<f32>,
    tokens: usize, segments: usize, seg_chunks: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (g, sh) = (program_id(0), program_id(1));
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    // Every operand is one 64×64 bf16 tile.
    type Block = rustile::Acc<64, 64, THREADS, true>;
    const TILE: usize = CHUNK * D * 2;
    let (ks, qs, vs) = (Shared::<T, CHUNK, D>::at(0), Shared::<T, CHUNK, D>::at(TILE), Shared::<T, CHUNK, D>::at(2 * TILE));
    let (ts, sts, uts) = (Shared::<T, CHUNK, CHUNK>::at(3 * TILE), Shared::<T, D, D>::at(4 * TILE), Shared::<T, D, CHUNK>::at(5 * TILE));

    // Sᵀ (rows: value columns, columns: key rows).
    let mut st = Block::zeros();
    if flags & HAS_S0 != 0 {
        let start = transposed::<THREADS>(s0, (sh * segments + g) * D * D, D);
        st = st.map(|r, c, _| start.get(r, c, 0.0));
    }
    for t0 in rows.segment(g, seg_chunks).step_by(CHUNK) {
        // The previous chunk's readers of every tile are done.
        sync();
        ks.copy_from(&rows.chunk(k, t0));
        qs.copy_from(&rows.chunk(q, t0));
        vs.copy_from(&rows.chunk(v, t0));
        ts.copy_from(&rows.chunk(tri, t0));
        commit_copies();
        sts.store_acc(&st);
        wait_copies::<0>();
        sync();

        // U'ᵀ = (V − K·S)ᵀ·Tαᵀ = Vᵀ·Tαᵀ − (Sᵀ·Kᵀ)·Tαᵀ.
        let sk = dot_packed(&st.pack::<T>(), &ks, Block::zeros());
        let ut = dot_packed(&sk.map(|_, _, x| -x).pack::<T>(), &ts, dot_ta(&vs, &ts, Block::zeros()));

        // O = (Q·Kᵀ ⊙ M_incl)·U' + Q·S.
        uts.store_acc(&ut);
        sync();
        let scores = dot(&qs, &ks, Block::zeros()).map(|r, c, x| if c <= r { x } else { 0.0 });
        let out = dot_packed(&scores.pack::<T>(), &uts, dot(&qs, &sts, Block::zeros()));
        store_acc(&rows.chunk(o, t0), &out);

        // S₁ᵀ = Sᵀ + U'ᵀ·K.
        st = dot_acc(&ut.pack::<T>(), &ks, st);
    }
    if flags & HAS_S_OUT != 0 {
        store_acc(&transposed(s_out, sh * D * D, D), &st);
    }
}

// ---- sequence parallelism: each segment's state map, then their scan ----------------------

// SMEM: K, V and Tα of a chunk (24 KB). `M` and `B` are two programs
// (`program_id(2)`): one accumulator each, as the scan holds (both in one
// program spilled).
#[kernel(
    configs = [(WARPS = 4, SMEM = 24576)],
    grid = [segments, seqs * heads, 2],
    dtypes = [bf16],
)]
/// The affine map `S ↦ M·S + B` that segment `program_id(0)` (chunks
/// `seg_chunks·g ..` of its sequence) applies to the state of sequence and
/// head `program_id(1)`: the chunk recurrence run from `M = I` on values 0
/// (`program_id(2) = 0`), and from `B = 0` on the values (`= 1`). Written
/// as `maps[sh, g]` = `[M | B]`, `[64, 128]` f32.
pub fn delta_rule_map_kernel<T: Elem>(
    k: Ptr<T>, v: Ptr<T>, tri: Ptr<T>, cu: Ptr<u32>, maps: PtrMut<f32>,
    tokens: usize, segments: usize, seg_chunks: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let (g, sh, values) = (program_id(0), program_id(1), program_id(2) == 1);
    let rows = Rows::of(cu, sh, heads, tokens, flags);
    type Block = rustile::Acc<64, 64, THREADS, true>;
    const TILE: usize = CHUNK * D * 2;
    let (ks, vs, ts) = (Shared::<T, CHUNK, D>::at(0), Shared::<T, CHUNK, D>::at(TILE), Shared::<T, CHUNK, CHUNK>::at(2 * TILE));
    // Mᵀ or Bᵀ, as the scan keeps Sᵀ.
    let mut xt = if values { Block::zeros() } else { Block::zeros().map(|r, c, _| if r == c { 1.0 } else { 0.0 }) };
    for t0 in rows.segment(g, seg_chunks).step_by(CHUNK) {
        sync();
        ks.copy_from(&rows.chunk(k, t0));
        if values {
            vs.copy_from(&rows.chunk(v, t0));
        }
        ts.copy_from(&rows.chunk(tri, t0));
        commit_copies();
        wait_copies::<0>();
        sync();
        // As the scan: U'ᵀ = (V − K·X)ᵀ·Tαᵀ, V = 0 for M.
        let vt = if values { dot_ta(&vs, &ts, Block::zeros()) } else { Block::zeros() };
        let ut = dot_packed(&dot_packed(&xt.pack::<T>(), &ks, Block::zeros()).map(|_, _, x| -x).pack::<T>(), &ts, vt);
        xt = dot_acc(&ut.pack::<T>(), &ks, xt);
    }
    // [M | B] row-major.
    store_acc(&transposed(maps, (sh * segments + g) * D * 2 * D + if values { D } else { 0 }, 2 * D), &xt);
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
        m.store(&load(&BlockPtr::<f32, D, D>::new(maps.offset(at), [D, 2 * D], [2 * D, 1], [0, 0])).cast::<T>());
        sync();
        // Sᵀ ← Sᵀ·Mᵀ + Bᵀ.
        let b = transposed::<THREADS>(maps, at + D, 2 * D);
        st = dot_packed(&st.pack::<T>(), &m, Block::zeros().map(|r, c, _| b.get(r, c, 0.0)));
    }
    if flags & HAS_S_OUT != 0 {
        store_acc(&transposed(s_out, sh * D * D, D), &st);
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
