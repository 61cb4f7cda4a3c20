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

/// Whether this thread is the one that writes a per-row value (lane 0 of its row).
#[inline(always)]
pub fn owns_row<const C: usize, const TH: usize>() -> bool {
    group_lane::<C, TH>().1 == 0
}

/// Combines each row's partials over the `TC` threads that share the row.
#[inline(always)]
pub fn row_allreduce<const C: usize, const TH: usize, const N: usize>(parts: &mut [f32; N], op: impl Fn(f32, f32) -> f32) {
    let tc = layout::tc(C, TH);
    let mut off = if tc < 32 { tc } else { 32 } / 2;
    while off > 0 {
        for p in parts.iter_mut() {
            *p = op(*p, dev::shfl_xor(*p, off as u32));
        }
        off /= 2;
    }
    if tc <= 32 {
        return;
    }
    // Past one warp: lane 0 of each warp posts its row partials, then every
    // thread folds the warps of its own row group. 32 rows per round keeps the
    // scratch at one float per thread.
    let smem = dev::dyn_smem::<f32>();
    let t = dev::thread_idx() as usize;
    let (warp, lane) = (t / 32, t % 32);
    let warps_per_row = tc / 32;
    let first_warp = (t / tc) * warps_per_row;
    let mut base = 0;
    while base < N {
        let n = if N - base < 32 { N - base } else { 32 };
        if lane == 0 {
            for i in 0..n {
                unsafe { *smem.add(warp * 32 + i) = parts[base + i] };
            }
        }
        dev::sync_threads();
        for i in 0..n {
            let mut acc = unsafe { *smem.add(first_warp * 32 + i) };
            for w in 1..warps_per_row {
                acc = op(acc, unsafe { *smem.add((first_warp + w) * 32 + i) });
            }
            parts[base + i] = acc;
        }
        dev::sync_threads();
        base += 32;
    }
}

/// Combines each column's partials over the `TR` row groups.
#[inline(always)]
pub fn col_allreduce<const C: usize, const TH: usize, const N: usize>(parts: &mut [f32; N], op: impl Fn(f32, f32) -> f32) {
    let (tc, tr) = (layout::tc(C, TH), layout::tr(C, TH));
    if tr == 1 {
        return;
    }
    let smem = dev::dyn_smem::<f32>();
    let t = dev::thread_idx() as usize;
    let lane = t % tc;
    for p in parts.iter_mut() {
        unsafe { *smem.add(t) = *p };
        dev::sync_threads();
        let mut acc = unsafe { *smem.add(lane) };
        for g in 1..tr {
            acc = op(acc, unsafe { *smem.add(g * tc + lane) });
        }
        *p = acc;
        dev::sync_threads();
    }
}

/// Loads the 8 elements of a chunk starting at `p`, of which the first
/// `valid` exist; the others get `fill`. Branch-free: one predicated vector
/// load for a whole, contiguous, aligned chunk, predicated scalar loads for
/// an edge chunk, then a select, so the compiler can issue every load of a
/// kernel before it waits for the first.
#[inline(always)]
pub unsafe fn read_chunk<T: Elem>(p: *const T, stride: usize, valid: usize, fill: T) -> [T; V] {
    let full = valid >= V && stride == 1 && (p as usize) % T::CHUNK_ALIGN == 0;
    let vector: [T; V] = unsafe {
        match core::mem::size_of::<T>() {
            4 => {
                let f = bits::<T, u32>(fill);
                let q = p as *const u32;
                core::mem::transmute_copy(&[dev::ld_v4_if(q, full, f), dev::ld_v4_if(q.wrapping_add(4), full, f)])
            }
            2 => {
                let f = bits::<T, u16>(fill) as u32;
                core::mem::transmute_copy(&dev::ld_v4_if(p as *const u32, full, f | f << 16))
            }
            _ => {
                let f = bits::<T, u8>(fill) as u32;
                core::mem::transmute_copy(&dev::ld_v2_if(p as *const u32, full, f * 0x0101_0101))
            }
        }
    };
    let mut out = vector;
    for (v, o) in out.iter_mut().enumerate() {
        let on = !full && v < valid;
        let s = unsafe { scalar_load_if(p.wrapping_add(v * stride), on, fill) };
        if !full {
            *o = s;
        }
    }
    out
}

/// Stores the first `valid` elements of a chunk (see `read_chunk`).
#[inline(always)]
pub unsafe fn write_chunk<T: Elem>(p: *mut T, stride: usize, valid: usize, x: [T; V]) {
    let full = valid >= V && stride == 1 && (p as usize) % T::CHUNK_ALIGN == 0;
    unsafe {
        match core::mem::size_of::<T>() {
            4 => {
                let w: [[u32; 4]; 2] = core::mem::transmute_copy(&x);
                dev::st_v4_if(p as *mut u32, full, w[0]);
                dev::st_v4_if((p as *mut u32).wrapping_add(4), full, w[1]);
            }
            2 => dev::st_v4_if(p as *mut u32, full, core::mem::transmute_copy(&x)),
            _ => dev::st_v2_if(p as *mut u32, full, core::mem::transmute_copy(&x)),
        }
        for (v, x) in x.iter().enumerate() {
            scalar_store_if(p.wrapping_add(v * stride), !full && v < valid, *x);
        }
    }
}

/// The bits of a value as the unsigned integer of its size.
#[inline(always)]
unsafe fn bits<T: Copy, U: Copy>(x: T) -> U {
    unsafe { core::mem::transmute_copy(&x) }
}

#[inline(always)]
unsafe fn scalar_load_if<T: Elem>(p: *const T, on: bool, fill: T) -> T {
    unsafe {
        match core::mem::size_of::<T>() {
            4 => bits(dev::ld_b32_if(p as *const u32, on, bits(fill))),
            2 => bits(dev::ld_b16_if(p as *const u16, on, bits(fill))),
            _ => bits(dev::ld_b8_if(p as *const u8, on, bits(fill))),
        }
    }
}

#[inline(always)]
unsafe fn scalar_store_if<T: Elem>(p: *mut T, on: bool, x: T) {
    unsafe {
        match core::mem::size_of::<T>() {
            4 => dev::st_b32_if(p as *mut u32, on, bits(x)),
            2 => dev::st_b16_if(p as *mut u16, on, bits(x)),
            _ => dev::st_b8_if(p as *mut u8, on, bits(x)),
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
