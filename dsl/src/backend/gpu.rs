//! GPU backend: a tile is each thread's fragment (see `layout`); reductions
//! cross threads with warp shuffles and, past one warp, shared memory.
use crate::layout::{self, V};
use crate::Elem;
use rustile_device as dev;

pub const fn held_rows(r: usize, c: usize, th: usize) -> usize {
    layout::rpt(r, c, th)
}
pub const fn held_cols(c: usize, th: usize) -> usize {
    layout::cols_held(c, th)
}

/// (row group, lane within the row) of this thread.
#[inline(always)]
fn group_lane<const C: usize, const TH: usize>() -> (usize, usize) {
    let t = dev::thread_idx() as usize;
    (t / layout::tc(C, TH), t % layout::tc(C, TH))
}

/// Tile row of this thread's `i`-th held row.
#[inline(always)]
pub fn tile_row<const C: usize, const TH: usize>(i: usize) -> usize {
    group_lane::<C, TH>().0 + i * layout::tr(C, TH)
}

/// Tile column of this thread's `k`-th held column.
#[inline(always)]
pub fn tile_col<const C: usize, const TH: usize>(k: usize) -> usize {
    let tc = layout::tc(C, TH);
    group_lane::<C, TH>().1 * V + (k / V) * tc * V + k % V
}

/// Calls `f(row, col)` for the chunk this thread copies of an `r×c` tile
/// with fewer chunks than the program's threads: thread `t` takes chunk `t`
/// in row-major order, and threads past the last chunk take none.
#[inline(always)]
pub fn lone_chunk(r: usize, c: usize, mut f: impl FnMut(usize, usize)) {
    let (t, w) = (dev::thread_idx() as usize, c / V);
    if t < r * w {
        f(t / w, (t % w) * V);
    }
}

/// Whether this thread is the one that writes a per-row value (lane 0 of its row).
#[inline(always)]
pub fn owns_row<const C: usize, const TH: usize>() -> bool {
    group_lane::<C, TH>().1 == 0
}

/// Whether this thread is one that writes a per-column value (its row
/// group is the first: after a column reduction every group holds the sums).
#[inline(always)]
pub fn owns_col<const C: usize, const TH: usize>() -> bool {
    group_lane::<C, TH>().0 == 0
}

/// Combines each row's partials over the `TC` threads that share the row:
/// `K` sets of `N` partials in one round (one pair of barriers for all).
#[inline(always)]
pub fn row_allreduce<const C: usize, const TH: usize, const N: usize, const K: usize>(
    parts: &mut [[f32; N]; K],
    op: impl Fn(f32, f32) -> f32,
) {
    let tc = layout::tc(C, TH);
    let mut off = if tc < 32 { tc } else { 32 } / 2;
    while off > 0 {
        for set in parts.iter_mut() {
            for p in set.iter_mut() {
                *p = op(*p, dev::shfl_xor(*p, off as u32));
            }
        }
        off /= 2;
    }
    if tc <= 32 {
        return;
    }
    // Past one warp: lane 0 of each warp posts its row partials, then every
    // thread folds the warps of its own row group (measured: a shuffle fold
    // of the posts instead was 2-6 % slower at 16 warps). 32 values per round
    // keeps the scratch at one float per thread.
    let smem = dev::dyn_smem::<f32>();
    let t = dev::thread_idx() as usize;
    let (warp, lane) = (t / 32, t % 32);
    let warps_per_row = tc / 32;
    let first_warp = (t / tc) * warps_per_row;
    // Partial (k, i) is value k·N + i, posted in round (k·N + i) / 32; the
    // indices into `parts` stay constants (a run-time index would put it in
    // local memory), and one round is the common case.
    for round in 0..(N * K).div_ceil(32) {
        if lane == 0 {
            for (k, set) in parts.iter().enumerate() {
                for (i, p) in set.iter().enumerate() {
                    let at = k * N + i;
                    if at / 32 == round {
                        unsafe { *smem.add(warp * 32 + at % 32) = *p };
                    }
                }
            }
        }
        dev::sync_threads();
        for (k, set) in parts.iter_mut().enumerate() {
            for (i, p) in set.iter_mut().enumerate() {
                let at = k * N + i;
                if at / 32 == round {
                    let mut acc = unsafe { *smem.add(first_warp * 32 + at % 32) };
                    for w in 1..warps_per_row {
                        acc = op(acc, unsafe { *smem.add((first_warp + w) * 32 + at % 32) });
                    }
                    *p = acc;
                }
            }
        }
        dev::sync_threads();
    }
}

/// Combines each column's partials over the `TR` row groups: first the
/// groups within a warp with shuffles (lanes `tc` apart hold the same
/// columns), then the warps through shared memory, one value per column
/// and warp. (Folding all `TR` groups through shared memory, as this once
/// did, unrolled `TR × N` loads: a 64-row tile spilled.)
#[inline(always)]
pub fn col_allreduce<const C: usize, const TH: usize, const N: usize>(parts: &mut [f32; N], op: impl Fn(f32, f32) -> f32) {
    let (tc, tr) = (layout::tc(C, TH), layout::tr(C, TH));
    if tr == 1 {
        return;
    }
    let mut off = tc;
    while off < 32 {
        for p in parts.iter_mut() {
            *p = op(*p, dev::shfl_xor(*p, off as u32));
        }
        off *= 2;
    }
    // Row groups per warp (1 when a row spans a warp or more), and the
    // groups of warps left to fold.
    let per_warp = if tc < 32 { 32 / tc } else { 1 };
    let groups = tr / per_warp;
    if groups == 1 {
        return;
    }
    // Group g's threads (a warp's first `tc` lanes, or the g-th set of whole
    // warps) post their values; each thread folds its column over the groups.
    let smem = dev::dyn_smem::<f32>();
    let t = dev::thread_idx() as usize;
    let (group, col) = if tc < 32 { (t / 32, t % tc) } else { (t / tc, t % tc) };
    let posts = tc >= 32 || t % 32 < tc;
    for p in parts.iter_mut() {
        if posts {
            unsafe { *smem.add(group * tc + col) = *p };
        }
        dev::sync_threads();
        let mut acc = unsafe { *smem.add(col) };
        for g in 1..groups {
            acc = op(acc, unsafe { *smem.add(g * tc + col) });
        }
        *p = acc;
        dev::sync_threads();
    }
}

/// Loads the 8 elements of a chunk starting at `p`, of which the first
/// `valid` exist; the others get `fill`.
///
/// The whole-chunk case is one predicated vector load with no branch, so a
/// kernel's loads all issue before the first is used. Only an edge chunk
/// (partial, strided or unaligned) takes the branch to scalar loads, and it
/// hands back the same packed words, so nothing unpacks the vector load
/// before the merge (which would make the thread wait for it there), and the
/// edge path's addresses cost registers only on that path.
#[inline(always)]
pub unsafe fn read_chunk<T: Elem>(p: *const T, stride: usize, valid: usize, fill: T) -> [T; V] {
    unpack(unsafe { fetch_chunk(p, stride, valid, fill) })
}

/// One element at `p` if `on`, else `fill`, without a branch (see `read_chunk`).
#[inline(always)]
pub unsafe fn read_one<T: Elem>(p: *const T, on: bool, fill: T) -> T {
    unsafe {
        match core::mem::size_of::<T>() {
            4 => core::mem::transmute_copy(&dev::ld_b32_if(p as *const u32, on, core::mem::transmute_copy(&fill))),
            2 => core::mem::transmute_copy(&dev::ld_b16_if(p as *const u16, on, core::mem::transmute_copy(&fill))),
            _ => core::mem::transmute_copy(&dev::ld_b8_if(p as *const u8, on, core::mem::transmute_copy(&fill))),
        }
    }
}

/// A chunk as it arrives: packed 32-bit words (the first `2·size_of::<T>()`
/// are used). Keeping chunks packed until every one of a tile is in flight
/// stops the compiler from unpacking one (and so waiting for it) before it
/// issues the next load.
pub type Chunk = [u32; 8];

/// The first half of `read_chunk`: issue the access, keep the words packed.
#[inline(always)]
pub unsafe fn fetch_chunk<T: Elem>(p: *const T, stride: usize, valid: usize, fill: T) -> Chunk {
    let full = valid >= V && stride == 1 && (p as usize) % T::CHUNK_ALIGN == 0;
    let mut out = unsafe { fetch_whole_chunk(p, full) };
    if !full {
        let mut vals = [fill; V];
        for (v, x) in vals.iter_mut().enumerate() {
            if v < valid {
                *x = unsafe { *p.wrapping_add(v * stride) };
            }
        }
        // The chunk's 8 elements fill its first words, as the vector load's would.
        unsafe { core::ptr::copy_nonoverlapping(vals.as_ptr() as *const u8, out.as_mut_ptr() as *mut u8, core::mem::size_of::<[T; V]>()) };
    }
    out
}

/// A fetched chunk whose words may be used only after this point (see
/// `rustile_device::settle4`): called once every chunk of a tile is in flight.
#[inline(always)]
pub fn settle<T: Elem>(c: Chunk) -> Chunk {
    let mut out = c;
    match core::mem::size_of::<T>() {
        4 => {
            out[..4].copy_from_slice(&dev::settle4([c[0], c[1], c[2], c[3]]));
            out[4..].copy_from_slice(&dev::settle4([c[4], c[5], c[6], c[7]]));
        }
        2 => out[..4].copy_from_slice(&dev::settle4([c[0], c[1], c[2], c[3]])),
        _ => out[..2].copy_from_slice(&dev::settle2([c[0], c[1]])),
    }
    out
}

/// `*p = max(*p, x)` over every thread's `x ≥ 0`, called by the whole
/// program together: a warp-wide maximum (shuffles), then one atomic a warp
/// (no result comes back). Non-negative floats order as their bits, so the
/// atomic is an integer maximum.
#[inline(always)]
pub unsafe fn max_into(p: *mut f32, x: f32) {
    let mut m = x;
    let mut off = 16;
    while off > 0 {
        m = m.max(dev::shfl_xor(m, off));
        off /= 2;
    }
    if m > 0.0 && dev::thread_idx() % 32 == 0 {
        unsafe { dev::red_max_u32(p as *mut u32, m.to_bits()) };
    }
}

/// `x`, computed here: see `rustile_device::opaque`.
#[inline(always)]
pub fn opaque(x: usize) -> usize {
    dev::opaque(x as u64) as usize
}

/// The second half of `read_chunk`: the 8 elements of a fetched chunk.
#[inline(always)]
pub fn unpack<T: Elem>(c: Chunk) -> [T; V] {
    unsafe { core::mem::transmute_copy(&c) }
}

/// The `N` words at `q` (16-byte aligned) if `on`, else zeros: one or two
/// predicated vector loads.
#[inline(always)]
unsafe fn vector_words<const N: usize>(q: *const u32, on: bool) -> [u32; N] {
    let mut words = [0u32; N];
    unsafe {
        match N {
            8 => {
                let (a, b) = (dev::ld_v4_if(q, on, 0), dev::ld_v4_if(q.wrapping_add(4), on, 0));
                words[..4].copy_from_slice(&a);
                words[4..].copy_from_slice(&b);
            }
            4 => words.copy_from_slice(&dev::ld_v4_if(q, on, 0)),
            _ => words.copy_from_slice(&dev::ld_v2_if(q, on, 0)),
        }
    }
    words
}

/// A whole, aligned chunk at `p` if `on`, else zeros (see `fetch_chunk`):
/// no per-element path.
#[inline(always)]
pub unsafe fn fetch_whole_chunk<T: Elem>(p: *const T, on: bool) -> Chunk {
    let mut out = [0u32; 8];
    let q = p as *const u32;
    match core::mem::size_of::<T>() {
        4 => out = unsafe { vector_words::<8>(q, on) },
        2 => out[..4].copy_from_slice(&unsafe { vector_words::<4>(q, on) }),
        _ => out[..2].copy_from_slice(&unsafe { vector_words::<2>(q, on) }),
    }
    out
}

/// Stores the first `valid` elements of a chunk (see `read_chunk`).
#[inline(always)]
pub unsafe fn write_chunk<T: Elem>(p: *mut T, stride: usize, valid: usize, x: [T; V]) {
    let full = valid >= V && stride == 1 && (p as usize) % T::CHUNK_ALIGN == 0;
    unsafe {
        write_whole_chunk(p, full, x);
        if !full {
            for (v, x) in x.iter().enumerate() {
                if v < valid {
                    *p.wrapping_add(v * stride) = *x;
                }
            }
        }
    }
}

/// A whole chunk to `p` (aligned) if `on`: one or two predicated vector stores.
#[inline(always)]
pub unsafe fn write_whole_chunk<T: Elem>(p: *mut T, on: bool, x: [T; V]) {
    unsafe {
        match core::mem::size_of::<T>() {
            4 => {
                let w: [[u32; 4]; 2] = core::mem::transmute_copy(&x);
                dev::st_v4_if(p as *mut u32, on, w[0]);
                dev::st_v4_if((p as *mut u32).wrapping_add(4), on, w[1]);
            }
            2 => dev::st_v4_if(p as *mut u32, on, core::mem::transmute_copy(&x)),
            _ => dev::st_v2_if(p as *mut u32, on, core::mem::transmute_copy(&x)),
        }
    }
}

/// The program's index along `axis`.
#[inline(always)]
pub fn program_id(axis: u32) -> usize {
    dev::block_idx(axis) as usize
}

/// The number of programs along `axis`.
#[inline(always)]
pub fn num_programs(axis: u32) -> usize {
    dev::grid_dim(axis) as usize
}
