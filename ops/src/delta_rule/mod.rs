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
//!   row by row with [`Tile::row`]); [`delta_rule_scan_kernel`] then walks
//!   each sequence's chunks, carrying `S` in registers (f32, transposed so
//!   that every product takes it, or `U'`, straight from registers as the
//!   left operand), and writes the outputs.
//!
//! Inputs are bf16 `[batch, tokens, heads, 64]` (or packed variable-length
//! sequences); the state and every accumulation are f32; the products'
//! operands are bf16, `S`, `U'` and `Tα` included.
use rustile::prelude::*;

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

/// First token and length of sequence `s`: `cu[s] .. cu[s+1]` when packed, else `s·tokens ..`.
#[inline(always)]
fn span(cu: Ptr<u32>, s: usize, tokens: usize, flags: u32) -> (usize, usize) {
    if flags & VARLEN != 0 {
        let first = cu.read(s) as usize;
        (first, cu.read(s + 1) as usize - first)
    } else {
        (s * tokens, tokens)
    }
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
    let (s, h) = (sh / heads, sh % heads);
    let (first, len) = span(cu, s, tokens, flags);
    let stride = heads * D;
    let head = first * stride + h * D;
    let end = (first + len) * stride;
    let b = beta.read(h);
    let mut st = if flags & HAS_S0 != 0 {
        load(&BlockPtr::<f32, D, BV>::new(s0.offset(sh * D * D), [D, D], [D, 1], [0, v0]))
    } else {
        Tile::zeros()
    };
    // Token t's key and query (down the rows) and values (along the columns).
    let fetch = |t: usize| {
        let at = head + t * stride;
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
        let at = head + t * stride + v0;
        (st * qc).col_sum().cast::<T>().store(o, at, at + BV);
    }
    if flags & HAS_S_OUT != 0 {
        store(&BlockPtr::<f32, D, BV>::new(s_out.offset(sh * D * D), [D, D], [D, 1], [0, v0]), &st);
    }
}

// ---- the chunked form: Tα per chunk ---------------------------------------------------------

// SMEM: the chunk's keys (bf16, 8 KB) and the f32 scratch that turns K·Kᵀ
// into a register tile (16 KB).
#[kernel(
    configs = [(WARPS = 4, SMEM = 24576)],
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
    let (s, h) = (sh / heads, sh % heads);
    let (first, len) = span(cu, s, tokens, flags);
    if t0 >= len {
        return;
    }
    let stride = heads * D;
    let ks = Shared::<T, CHUNK, D>::at(0);
    // Rows past the sequence are zeros: their α is 0, so they change nothing.
    ks.copy_from(&BlockPtr::new(k.offset(first * stride + h * D), [len, D], [stride, 1], [t0, 0]));
    commit_copies();
    wait_copies::<0>();
    sync();
    let g = dot(&ks, &ks, Acc::<CHUNK, CHUNK>::zeros()).to_tile(CHUNK * D * 2);

    // λ is K·Kᵀ's diagonal; α per row (to scale L) and per column (to scale T).
    let b = beta.read(h);
    let eye = Tile::<bool, CHUNK, CHUNK>::from_fn(|r, c| r == c);
    let diag = eye.select(g, Tile::zeros());
    let (alpha_rows, alpha_cols) = (diag.row_sum().map(|l| alpha(b, l)), diag.col_sum().map(|l| alpha(b, l)));
    let l = Tile::<bool, CHUNK, CHUNK>::from_fn(|r, c| c < r).select(g * alpha_rows, Tile::zeros());

    // T = (I + L)⁻¹ by elimination: once row j of T is final, every later
    // row i takes away L[i, j] times it (L is 0 on and above the diagonal,
    // so the earlier rows are left alone).
    let mut t = eye.select(Tile::splat(1.0), Tile::zeros());
    for j in 0..CHUNK - 1 {
        t = t - (Tile::zeros() + l.col(j)) * t.row(j);
    }
    let dst = BlockPtr::<T, CHUNK, CHUNK>::new(tri.offset(first * stride + h * D), [len, CHUNK], [stride, 1], [t0, 0]);
    store(&dst, &(t * alpha_cols).cast::<T>());
}

// ---- the chunked form: the scan over chunks --------------------------------------------

// SMEM: six 64×64 bf16 tiles (K, Q, V, Tα, Sᵀ, U'ᵀ: 48 KB) and the 16 KB
// f32 scratch that turns an accumulator into a register tile.
#[kernel(
    configs = [(WARPS = 4, SMEM = 65536)],
    grid = [seqs * heads],
    dtypes = [bf16],
)]
/// Outputs and final state of sequence and head `program_id(0)`, chunk
/// after chunk, from `Tα` ([`delta_rule_chunk_kernel`]).
pub fn delta_rule_scan_kernel<T: Elem>(
    q: Ptr<T>, k: Ptr<T>, v: Ptr<T>, tri: Ptr<T>, cu: Ptr<u32>, s0: Ptr<f32>, o: PtrMut<T>, s_out: PtrMut<f32>,
    tokens: usize, seqs: usize, heads: usize, flags: u32,
) {
    let _ = seqs; // the grid
    let sh = program_id(0);
    let (s, h) = (sh / heads, sh % heads);
    let (first, len) = span(cu, s, tokens, flags);
    let stride = heads * D;
    let head = first * stride + h * D;
    // Every operand is one 64×64 bf16 tile.
    type Block = rustile::Acc<64, 64, THREADS, true>;
    const TILE: usize = CHUNK * D * 2;
    const SCRATCH: usize = 6 * TILE;
    let (ks, qs, vs) = (Shared::<T, CHUNK, D>::at(0), Shared::<T, CHUNK, D>::at(TILE), Shared::<T, CHUNK, D>::at(2 * TILE));
    let (ts, sts, uts) = (Shared::<T, CHUNK, CHUNK>::at(3 * TILE), Shared::<T, D, D>::at(4 * TILE), Shared::<T, D, CHUNK>::at(5 * TILE));
    let rows = |t0: usize| [t0, 0];
    let chunk = |p: Ptr<T>, t0: usize| BlockPtr::<T, CHUNK, D>::new(p.offset(head), [len, D], [stride, 1], rows(t0));

    // Sᵀ (rows: value columns, columns: key rows); a state tensor is S, `[K, V]`.
    let mut st = Block::zeros();
    if flags & HAS_S0 != 0 {
        let from = BlockPtr::<f32, D, D>::new(s0.offset(sh * D * D), [D, D], [1, D], [0, 0]);
        st = st.map(|r, c, _| from.get(r, c, 0.0));
    }
    let mut t0 = 0;
    while t0 < len {
        // The previous chunk's readers of every tile are done.
        sync();
        ks.copy_from(&chunk(k, t0));
        qs.copy_from(&chunk(q, t0));
        vs.copy_from(&chunk(v, t0));
        ts.copy_from(&BlockPtr::new(tri.offset(head), [len, CHUNK], [stride, 1], rows(t0)));
        commit_copies();
        sts.store(&st.to_tile(SCRATCH).cast::<T>());
        wait_copies::<0>();
        sync();

        // U'ᵀ = (V − K·S)ᵀ·Tαᵀ = Vᵀ·Tαᵀ − (Sᵀ·Kᵀ)·Tαᵀ.
        let sk = dot_packed(&st.pack::<T>(), &ks, Block::zeros());
        let ut = dot_packed(&sk.map(|_, _, x| -x).pack::<T>(), &ts, dot_ta(&vs, &ts, Block::zeros()));

        // O = (Q·Kᵀ ⊙ M_incl)·U' + Q·S.
        uts.store(&ut.to_tile(SCRATCH).cast::<T>());
        sync();
        let scores = dot(&qs, &ks, Block::zeros()).map(|r, c, x| if c <= r { x } else { 0.0 });
        let out = dot_packed(&scores.pack::<T>(), &uts, dot(&qs, &sts, Block::zeros()));
        store_acc(&BlockPtr::<T, CHUNK, D>::new(o.offset(head), [len, D], [stride, 1], rows(t0)), &out);

        // S₁ᵀ = Sᵀ + U'ᵀ·K.
        st = dot_acc(&ut.pack::<T>(), &ks, st);
        t0 += CHUNK;
    }
    if flags & HAS_S_OUT != 0 {
        store_acc(&BlockPtr::<f32, D, D>::new(s_out.offset(sh * D * D), [D, D], [1, D], [0, 0]), &st);
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
