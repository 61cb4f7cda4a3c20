//! CPU backend (the interpreter): a tile holds all its elements, so every
//! thread-crossing step of the GPU backend is the identity here. Memory
//! accesses are checked against the buffers the kernel was given.
use crate::layout::V;
use crate::Elem;
use std::cell::Cell;

pub const fn held_rows(r: usize, _c: usize, _th: usize) -> usize {
    r
}
pub const fn held_cols(c: usize, _th: usize) -> usize {
    c
}
#[inline(always)]
pub fn tile_row<const C: usize, const TH: usize>(i: usize) -> usize {
    i
}
#[inline(always)]
pub fn tile_col<const C: usize, const TH: usize>(k: usize) -> usize {
    k
}
/// Every chunk of the tile, as `backend::gpu::lone_chunk` spreads them over threads.
#[inline(always)]
pub fn lone_chunk(r: usize, c: usize, mut f: impl FnMut(usize, usize)) {
    for row in 0..r {
        for col in (0..c).step_by(V) {
            f(row, col);
        }
    }
}
#[inline(always)]
pub fn owns_row<const C: usize, const TH: usize>() -> bool {
    true
}
#[inline(always)]
pub fn owns_col<const C: usize, const TH: usize>() -> bool {
    true
}
#[inline(always)]
pub fn row_allreduce<const C: usize, const TH: usize, const N: usize, const K: usize>(_: &mut [[f32; N]; K], _: impl Fn(f32, f32) -> f32) {}
#[inline(always)]
pub fn col_allreduce<const C: usize, const TH: usize, const N: usize>(_: &mut [f32; N], _: impl Fn(f32, f32) -> f32) {}

/// One element at `p` if `on`, else `fill`.
#[inline(always)]
pub unsafe fn read_one<T: Elem>(p: *const T, on: bool, fill: T) -> T {
    if on { unsafe { *p } } else { fill }
}

/// Reads a chunk: the bounds of `valid` came from the block pointer's shape;
/// the buffer check (in `Raw::check`) catches a shape larger than the data.
#[inline(always)]
pub unsafe fn read_chunk<T: Elem>(p: *const T, stride: usize, valid: usize, fill: T) -> [T; V] {
    let mut out = [fill; V];
    for (v, o) in out.iter_mut().enumerate() {
        if v < valid {
            *o = unsafe { *p.wrapping_add(v * stride) };
        }
    }
    out
}

#[inline(always)]
pub unsafe fn write_chunk<T: Elem>(p: *mut T, stride: usize, valid: usize, x: [T; V]) {
    for (v, x) in x.iter().enumerate() {
        if v < valid {
            unsafe { *p.wrapping_add(v * stride) = *x };
        }
    }
}

thread_local! {
    static PROGRAM: Cell<([usize; 3], [usize; 3])> = const { Cell::new(([0; 3], [1; 3])) };
    /// The running program's shared memory (the interpreter's stand-in for the
    /// GPU's): allocated once per thread at the most a program can have, so
    /// addresses handed out stay valid; `.1` is what the launch gave it.
    static SMEM: (std::cell::UnsafeCell<Box<[u128]>>, Cell<usize>) =
        (std::cell::UnsafeCell::new(vec![0u128; SMEM_LIMIT / 16].into_boxed_slice()), Cell::new(0));
}

/// Shared memory a program may use (Hopper: 227 KiB).
const SMEM_LIMIT: usize = 227 * 1024;

/// `*p = max(*p, x)` for `x ≥ 0`, atomically: the interpreter runs programs in
/// parallel, and in each one a single thread, so its value is the program's.
pub unsafe fn max_into(p: *mut f32, x: f32) {
    let cell = unsafe { &*(p as *const std::sync::atomic::AtomicU32) };
    if x > 0.0 {
        cell.fetch_max(x.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// The GPU backend's barrier to hoisting; nothing to do here.
#[inline(always)]
pub fn opaque(x: usize) -> usize {
    x
}

/// A pointer to `bytes` bytes at `offset` of this program's shared memory
/// (16-byte aligned; valid while this thread runs the program). Past what the
/// launch gave the program (the config's `SMEM` plus the reduction scratch)
/// is an error here, as it is a fault on the GPU.
pub fn smem_at(offset: usize, bytes: usize) -> *mut u8 {
    SMEM.with(|(m, launched)| {
        assert!(
            offset + bytes <= launched.get(),
            "rustile interpreter: shared memory [{offset}, {}) is past the {} bytes this launch gives a program \
             (raise the config's SMEM)",
            offset + bytes,
            launched.get()
        );
        unsafe { ((*m.get()).as_mut_ptr() as *mut u8).add(offset) }
    })
}

/// Byte offset of `p` from the start of this program's shared memory (what
/// the GPU's shared address of the same tile is, the window starting on a
/// 1024-byte boundary there).
pub fn smem_offset(p: *const u8) -> usize {
    SMEM.with(|(m, _)| p as usize - unsafe { (*m.get()).as_ptr() } as usize)
}

/// The program's index along `axis`.
pub fn program_id(axis: u32) -> usize {
    PROGRAM.with(|p| p.get().0[axis as usize])
}

/// The number of programs along `axis`.
pub fn num_programs(axis: u32) -> usize {
    PROGRAM.with(|p| p.get().1[axis as usize])
}

/// Runs `program` once for every program of `grid`, in parallel, each with
/// `smem_bytes` of shared memory (what the launch would give it on the GPU).
///
/// Programs of one launch must write disjoint memory, as on the GPU, where
/// they run in no fixed order. Kernels keep whole tiles on the stack here, so
/// the pool's threads get large stacks.
pub fn run_grid(grid: [usize; 3], smem_bytes: usize, program: impl Fn() + Sync) {
    run_grid_dyn(grid, smem_bytes, &program)
}

/// [`run_grid`]'s work, compiled once: every `launch` of every kernel has a
/// closure for each config and element type, and a generic body would put a
/// copy of rayon's scheduling into each crate that launches (76 thousand
/// functions in the bench crate alone, most of its debug build time).
#[inline(never)]
fn run_grid_dyn(grid: [usize; 3], smem_bytes: usize, program: &(dyn Fn() + Sync)) {
    assert!(smem_bytes <= SMEM_LIMIT, "rustile interpreter: a program may have at most {SMEM_LIMIT} bytes of shared memory, not {smem_bytes}");
    use rayon::prelude::*;
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .stack_size(64 << 20)
            .thread_name(|i| format!("rustile-cpu-{i}"))
            .build()
            .expect("rustile: could not start the CPU interpreter's thread pool")
    });
    let total = grid[0] * grid[1] * grid[2];
    pool.install(|| {
        (0..total).into_par_iter().for_each(|n| {
            let id = [n % grid[0], (n / grid[0]) % grid[1], n / (grid[0] * grid[1])];
            PROGRAM.with(|p| p.set((id, grid)));
            SMEM.with(|(_, launched)| launched.set(smem_bytes));
            program();
        })
    });
}
