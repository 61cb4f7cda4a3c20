//! Matrix products on tensor cores: operand tiles in shared memory
//! ([`Shared`]), an f32 accumulator ([`Acc`]) and [`dot`].
//!
//! A GEMM main loop reads like this (C = A·Bᵀ with A `[M, K]` and B `[N, K]`,
//! both row-major: the layout of a linear layer's weight); `ops::gemm` adds
//! a pipeline `STAGES` deep around it:
//!
//! ```ignore
//! let mut acc = Acc::<BM, BN>::zeros();
//! for kt in 0..cdiv(k, BK) {
//!     let (sa, sb) = (Shared::<T, BM, BK>::at(0), Shared::<T, BN, BK>::at(BM * BK * 2));
//!     sa.copy_from(&pa(kt));          // global → shared with cp.async, masked edges
//!     sb.copy_from(&pb(kt));
//!     commit_copies();
//!     wait_copies::<0>();
//!     sync();
//!     acc = dot(&sa, &sb, acc);       // ldmatrix + mma.sync, per warp
//!     sync();
//! }
//! store_acc(&pc, &acc);
//! ```
//!
//! `Shared::store` writes a register tile instead (for operands computed in
//! registers, e.g. a normalized input).
//!
//! On the GPU the program's warps tile the `M×N` block in a `WM×WN` grid
//! (as square as the warp count allows, [`warp_grid`]); each warp owns an
//! `(M/WM)×(N/WN)` piece as 16×8 `mma.sync.m16n8k16` fragments, four f32 a
//! thread each. Operands are 16-bit (bf16 or f16). Shared tiles are stored
//! with an XOR swizzle of their 16-byte chunks so that the eight row
//! addresses of one `ldmatrix` hit eight different bank groups.
//!
//! On the CPU a shared tile is a plain row-major array, the accumulator holds
//! the whole `M×N` block, and `dot` multiplies in f32, as the tensor cores do.
use crate::backend as be;
use crate::layout::{self, SharedShape, V};
use crate::tile::len;
use crate::{BlockPtr, Elem, Ptr, Tile};

/// The warp grid `(WM, WN)` of a program of `warps` warps: `WM·WN = warps`,
/// `WN` the larger when they differ.
pub const fn warp_grid(warps: usize) -> (usize, usize) {
    let mut wm = 1;
    while wm * wm * 4 <= warps {
        wm *= 2;
    }
    (wm, warps / wm)
}

/// The warps down and across an accumulator on `th` threads: [`warp_grid`],
/// or with `wg` one column of warps (each warp whole rows: Hopper's `wgmma`
/// layout, and attention's, whose row statistics then stay in a warp).
pub const fn warps_of(th: usize, wg: bool) -> (usize, usize) {
    if wg { (th / 32, 1) } else { warp_grid(th / 32) }
}

/// Why an `M×N` accumulator over `K`-deep operands cannot run on `TH`
/// threads in layout `wg` (see [`warps_of`]), or `None`.
pub const fn check_mma(m: usize, n: usize, k: usize, th: usize, wg: bool) -> Option<&'static str> {
    let (wm, wn) = warps_of(th, wg);
    if m % (wm * 16) != 0 || n % (wn * 16) != 0 {
        return Some("dot: BM must be a multiple of 16·WM and BN of 16·WN (the warp grid of `rustile::mma::warps_of`)");
    }
    if k % 16 != 0 {
        return Some("dot: BK must be a multiple of 16 (one mma.sync k-step)");
    }
    if m / wm > 128 || n / wn > 128 {
        return Some("dot: a warp's piece of the block is at most 128×128 (use more WARPS)");
    }
    None
}

/// Compile-time check of an accumulator shape, as `layout::Shape` for tiles.
pub struct MmaShape<const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool = false>;
impl<const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool> MmaShape<M, N, K, TH, WG> {
    pub const OK: () = match check_mma(M, N, K, TH, WG) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

/// The warp tiling of an `M×N` accumulator on `TH` threads, as constants
/// (so that every fragment loop has a literal trip count and unrolls):
/// [`warp_grid`], or for `wgmma` (`WG`) a column of warps, 16 rows each.
#[cfg(target_arch = "nvptx64")]
struct Warps<const M: usize, const N: usize, const TH: usize, const WG: bool>;
#[cfg(target_arch = "nvptx64")]
impl<const M: usize, const N: usize, const TH: usize, const WG: bool> Warps<M, N, TH, WG> {
    const WM: usize = warps_of(TH, WG).0;
    const WN: usize = warps_of(TH, WG).1;
    /// Rows and columns of one warp's piece.
    const TM: usize = M / Self::WM;
    const TN: usize = N / Self::WN;
    /// 16×8 fragments in a warp's piece, down and across.
    const MI: usize = Self::TM / 16;
    const NI: usize = Self::TN / 8;

    /// (first block row, first block column) of this thread's warp piece, and its lane.
    #[inline(always)]
    fn origin() -> (usize, usize, usize) {
        let t = rustile_device::thread_idx() as usize;
        let (warp, lane) = (t / 32, t % 32);
        ((warp / Self::WN) * Self::TM, (warp % Self::WN) * Self::TN, lane)
    }
}

/// f32 values an accumulator holds per thread.
pub const fn acc_len(m: usize, n: usize, th: usize) -> usize {
    if cfg!(target_arch = "nvptx64") { m * n / th } else { m * n }
}

// ---- shared tiles ------------------------------------------------------------------------

/// An `R×C` tile of 16-bit elements in the program's shared memory: an
/// address, so handles are cheap to make (one per pipeline stage and step).
/// Tiles of 8-bit elements (FP8) exist for the copy engine and `wgmma`
/// only (`load_tma`, `wgmma::dot_async`): threads' copies, stores and
/// `ldmatrix` fragments move 16-bit elements, which is checked at compile time.
#[derive(Clone, Copy)]
pub struct Shared<T, const R: usize, const C: usize, const TH: usize> {
    #[cfg(target_arch = "nvptx64")]
    pub(crate) base: u32,
    #[cfg(not(target_arch = "nvptx64"))]
    base: *mut T,
    _t: core::marker::PhantomData<T>,
}

/// Compile-time checks of a shared tile's element size.
struct Bits<T>(core::marker::PhantomData<T>);
impl<T> Bits<T> {
    const SHARED: () = assert!(
        core::mem::size_of::<T>() == 1 || core::mem::size_of::<T>() == 2,
        "Shared tiles hold 16-bit (bf16, f16) or 8-bit (e4m3, e5m2) elements"
    );
    const SIXTEEN: () = assert!(
        core::mem::size_of::<T>() == 2,
        "threads copy, store and ldmatrix 16-bit shared tiles only; 8-bit tiles come in by load_tma and feed wgmma"
    );
}

/// Element offset of chunk `chunk` of row `row` in a swizzled shared tile of
/// `c` columns: the chunk index is XORed with a function of the row so that
/// 8 consecutive rows at one logical chunk land in 8 different 16-byte bank
/// groups (a 128-byte line holds 8 chunks).
#[inline(always)]
pub const fn swizzled(row: usize, chunk: usize, c: usize) -> usize {
    let w = c / V; // chunks a row
    let phase = if w >= 8 { row % 8 } else { (row / (8 / w)) % w };
    row * c + (chunk ^ phase) * V
}

/// [`swizzled`] in bytes, for a tile of any element size: the byte offset
/// of byte `byte` of row `row` in a tile of `row_bytes` (32, 64 or 128) a
/// row, as the copy engine and the tensor cores place it.
#[inline(always)]
pub const fn swizzled_byte(row: usize, byte: usize, row_bytes: usize) -> usize {
    let w = row_bytes / 16;
    let phase = if w >= 8 { row % 8 } else { (row / (8 / w)) % w };
    row * row_bytes + ((byte / 16) ^ phase) * 16 + byte % 16
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Shared<T, R, C, TH> {
    /// The tile at `byte_offset` of the program's shared memory (after the
    /// reduction scratch; the config's `SMEM` must cover every tile).
    #[inline(always)]
    pub fn at(byte_offset: usize) -> Self {
        let () = SharedShape::<R, C, TH>::OK;
        let () = Bits::<T>::SHARED;
        #[cfg(target_arch = "nvptx64")]
        let base = rustile_device::smem_addr(rustile_device::dyn_smem::<u8>()) + (TH * 4 + byte_offset) as u32;
        #[cfg(not(target_arch = "nvptx64"))]
        let base = be::smem_at(TH * 4 + byte_offset, R * C * core::mem::size_of::<T>()) as *mut T;
        Shared { base, _t: core::marker::PhantomData }
    }

    /// The tile's shared-memory address (in the interpreter: its offset
    /// from the program's first byte, the same number).
    #[inline(always)]
    pub(crate) fn address(&self) -> usize {
        #[cfg(target_arch = "nvptx64")]
        return self.base as usize;
        #[cfg(not(target_arch = "nvptx64"))]
        return be::smem_offset(self.base as *const u8);
    }

    /// Writes a register tile (in the standard layout) into this shared tile.
    /// Call `sync()` before other threads read it.
    #[inline(always)]
    pub fn store(&self, t: &Tile<T, R, C, TH>)
    where
        [(); len(R, C, TH)]:,
    {
        let () = Bits::<T>::SIXTEEN;
        let w = be::held_cols(C, TH);
        self.each_chunk(|i, row, j, col| {
            let mut x = [T::default(); V];
            x.copy_from_slice(&t.v[i * w + j * V..i * w + j * V + V]);
            self.put_chunk(row, col, x);
        });
    }

    /// Writes an accumulator of this program, rounded to `T`, into this
    /// shared tile (each thread its own pairs of neighbouring columns, one
    /// 32-bit store each): an accumulator that becomes the operand of the
    /// next product. Call `sync()` before other threads read it.
    #[inline(always)]
    pub fn store_acc<const WG: bool>(&self, acc: &Acc<R, C, TH, WG>)
    where
        [(); acc_len(R, C, TH)]:,
    {
        let () = Bits::<T>::SIXTEEN;
        for e in (0..acc.v.len()).step_by(2) {
            let (r, c) = acc_pos::<R, C, TH, WG>(e);
            let pair = T::from_f32_pair(acc.v[e], acc.v[e + 1]);
            #[cfg(target_arch = "nvptx64")]
            unsafe {
                rustile_device::st_shared_b32(self.chunk_addr(r, c) + ((c % V) * 2) as u32, core::mem::transmute_copy(&pair))
            };
            #[cfg(not(target_arch = "nvptx64"))]
            unsafe {
                (*self.base.add(r * C + c), *self.base.add(r * C + c + 1)) = (pair[0], pair[1]);
            }
        }
    }

    /// [`Shared::store_acc`] of an accumulator already packed to `T`: each
    /// thread its own pairs, one 32-bit store each (attention's `dSᵀ`,
    /// packed for one product and read from here by another).
    #[inline(always)]
    pub fn store_packed<const WG: bool>(&self, p: &Packed<T, R, C, TH>)
    where
        [(); acc_len(R, C, TH) / 2]:,
    {
        let () = Bits::<T>::SIXTEEN;
        for (i, &pair) in p.v.iter().enumerate() {
            let (r, c) = acc_pos::<R, C, TH, WG>(2 * i);
            #[cfg(target_arch = "nvptx64")]
            unsafe {
                rustile_device::st_shared_b32(self.chunk_addr(r, c) + ((c % V) * 2) as u32, pair)
            };
            #[cfg(not(target_arch = "nvptx64"))]
            unsafe {
                let pair: [T; 2] = core::mem::transmute_copy(&pair);
                (*self.base.add(r * C + c), *self.base.add(r * C + c + 1)) = (pair[0], pair[1]);
            }
        }
    }

    /// The tile as an accumulator of this program ([`Shared::store_acc`]
    /// the other way: each thread reads its own pairs of neighbouring
    /// columns, one 32-bit load each), for an operand that is also summed
    /// into a product's result. Call after the `sync()` that follows its writes.
    #[inline(always)]
    pub fn load_acc<const WG: bool>(&self) -> Acc<R, C, TH, WG>
    where
        [(); acc_len(R, C, TH)]:,
    {
        let () = Bits::<T>::SIXTEEN;
        let mut acc = Acc::<R, C, TH, WG>::zeros();
        for e in (0..acc.v.len()).step_by(2) {
            let (r, c) = acc_pos::<R, C, TH, WG>(e);
            #[cfg(target_arch = "nvptx64")]
            let pair: [T; 2] = unsafe { core::mem::transmute_copy(&rustile_device::ld_shared_b32(self.chunk_addr(r, c) + ((c % V) * 2) as u32)) };
            #[cfg(not(target_arch = "nvptx64"))]
            let pair = [self.get(r, c), self.get(r, c + 1)];
            (acc.v[e], acc.v[e + 1]) = (pair[0].to_f32(), pair[1].to_f32());
        }
        acc
    }

    /// Starts copying the block pointer's window into this tile, straight
    /// from global memory (`cp.async`; elements outside the tensor are zero).
    /// The copies join the current group: `commit_copies()` closes it,
    /// `wait_copies::<N>()` then `sync()` make it visible. A chunk that is not
    /// 16-byte aligned in global memory (a row length that is not a multiple
    /// of 8) is copied through registers instead, at once.
    #[inline(always)]
    pub fn copy_from(&self, src: &BlockPtr<T, R, C, TH>) {
        let () = Bits::<T>::SIXTEEN;
        self.copy_window(src);
    }

    /// Zeroes rows `first..R` (each thread its own chunks of them): for a
    /// tile the copy engine filled past the rows that count, whose values
    /// must not reach a product even times zero (they may be NaN). `sync()`
    /// next (after `wgmma::fence_shared()` when `wgmma` reads the tile).
    #[inline(always)]
    pub fn zero_rows_from(&self, first: usize) {
        let () = Bits::<T>::SIXTEEN;
        self.each_chunk(|_, row, _, col| {
            if row >= first {
                self.put_chunk(row, col, [T::default(); V]);
            }
        });
    }

    /// [`Shared::copy_from`] for any element size: on the CPU it is also
    /// what the copy engine does (`load_tma`).
    #[inline(always)]
    pub(crate) fn copy_window(&self, src: &BlockPtr<T, R, C, TH>) {
        let [rs, cs] = src.strides;
        // Most windows of a large GEMM lie wholly inside an aligned tensor:
        // one uniform test then spares every chunk its mask and alignment
        // check (they cost more issue slots than the tensor cores' work).
        if src.inside_aligned() {
            let first = src.offsets[0] * rs + src.offsets[1];
            self.each_chunk(|_, row, _, col| {
                src.base.check("Shared::copy_from", first + row * rs + col, 1, V, false);
                let p = src.base.at(first).wrapping_add(row * rs + col);
                #[cfg(target_arch = "nvptx64")]
                unsafe {
                    rustile_device::cp_async_16(self.chunk_addr(row, col), p as *const u8)
                };
                #[cfg(not(target_arch = "nvptx64"))]
                self.put_chunk(row, col, unsafe { be::read_chunk(p, 1, V, T::default()) });
            });
            return;
        }
        // Edge windows only. Hoisted out of the K loop, the per-chunk row
        // offsets below would pin a 64-bit register per chunk for the whole
        // loop, next to the accumulators; `opaque` keeps them in here.
        let (rs, r0) = (be::opaque(rs), be::opaque(src.offsets[0]));
        self.each_chunk(|_, row, _, col| {
            let (grow, gcol) = (r0 + row, src.offsets[1] + col);
            let valid = if grow < src.shape[0] { src.valid_cols(gcol).min(V) } else { 0 };
            let first = grow * rs + gcol * cs;
            src.base.check("Shared::copy_from", first, cs, valid, false);
            let p = src.base.at(first);
            // A whole aligned chunk is one copy, and so is a chunk wholly
            // outside (a copy of no bytes, which zero-fills and reads nothing).
            // A chunk partly outside is read through registers: a zero-filling
            // `cp.async` of its valid bytes counts as a 16-byte read for
            // compute-sanitizer, past the tensor when the chunk ends it
            // (`bench/probes/cp_async_memcheck.cu`).
            #[cfg(target_arch = "nvptx64")]
            if (cs == 1 && valid == V && (p as usize) % 16 == 0) || valid == 0 {
                unsafe { rustile_device::cp_async_16_zfill(self.chunk_addr(row, col), p as *const u8, (valid * 2) as u32) };
                return;
            }
            self.put_chunk(row, col, unsafe { be::read_chunk(p, cs, valid, T::default()) });
        });
    }

    /// Calls `f(i, row, j, col)` for each chunk this thread holds in the
    /// standard tile layout: its `i`-th row and that row's `j`-th chunk. A
    /// tile with fewer chunks than threads (`layout::copy_threads`) is
    /// copied by its first threads, one chunk each (`i = j = 0`; no
    /// register tile has that shape, so `store` never sees it).
    #[inline(always)]
    fn each_chunk(&self, mut f: impl FnMut(usize, usize, usize, usize)) {
        if layout::copy_threads(R, C, TH) < TH {
            be::lone_chunk(R, C, |row, col| f(0, row, 0, col));
            return;
        }
        for i in 0..be::held_rows(R, C, TH) {
            let row = be::tile_row::<C, TH>(i);
            for j in 0..be::held_cols(C, TH) / V {
                f(i, row, j, be::tile_col::<C, TH>(j * V));
            }
        }
    }

    /// Shared address of the chunk at `row`, columns `col..col+8`.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    fn chunk_addr(&self, row: usize, col: usize) -> u32 {
        self.base + (swizzled(row, col / V, C) * 2) as u32
    }

    /// Chunk (8 elements) at `row`, columns `col..col+8`.
    #[inline(always)]
    fn put_chunk(&self, row: usize, col: usize, x: [T; V]) {
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            rustile_device::st_shared_v4(self.chunk_addr(row, col), core::mem::transmute_copy(&x));
        }
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            core::ptr::copy_nonoverlapping(x.as_ptr(), self.base.add(row * C + col), V);
        }
    }

    /// `N` (1 or 2) 32-bit words of row `row` from byte `byte` (a multiple
    /// of `4·N`) of the row: a thread's own bits of a tile the copy engine
    /// filled, whatever its element type (packed FP4 values, their scales).
    #[inline(always)]
    pub fn words<const N: usize>(&self, row: usize, byte: usize) -> [u32; N] {
        let row_bytes = C * core::mem::size_of::<T>();
        debug_assert!(row < R && byte + 4 * N <= row_bytes && byte % (4 * N) == 0 && (N == 1 || N == 2));
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            let at = self.base + swizzled_byte(row, byte, row_bytes) as u32;
            let mut x = [0u32; N];
            if N == 2 {
                let v = rustile_device::ld_shared_v2(at);
                x[0] = v[0];
                x[N - 1] = v[1];
            } else {
                x[0] = rustile_device::ld_shared_b32(at);
            }
            x
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            assert!(row < R && byte + 4 * N <= row_bytes, "Shared::words: row {row}, byte {byte} of a {R}×{row_bytes}-byte tile");
            unsafe { core::ptr::read_unaligned((self.base as *const u8).add(row * row_bytes + byte) as *const [u32; N]) }
        }
    }

    /// Writes 16 bytes (`x`, the first word lowest) at byte `byte` (a
    /// multiple of 16) of row `row`: values a thread made for the tensor
    /// cores ([`crate::wgmma::fence_shared`] before they read them).
    #[inline(always)]
    pub fn put_words(&self, row: usize, byte: usize, x: [u32; 4]) {
        let row_bytes = C * core::mem::size_of::<T>();
        debug_assert!(row < R && byte + 16 <= row_bytes && byte % 16 == 0);
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            rustile_device::st_shared_v4(self.base + swizzled_byte(row, byte, row_bytes) as u32, x)
        };
        #[cfg(not(target_arch = "nvptx64"))]
        {
            assert!(row < R && byte + 16 <= row_bytes, "Shared::put_words: row {row}, byte {byte} of a {R}×{row_bytes}-byte tile");
            unsafe { core::ptr::write_unaligned((self.base as *mut u8).add(row * row_bytes + byte) as *mut [u32; 4], x) }
        }
    }

    /// Element `[row, col]` (interpreter only).
    #[cfg(not(target_arch = "nvptx64"))]
    pub(crate) fn get(&self, row: usize, col: usize) -> T {
        unsafe { *self.base.add(row * C + col) }
    }

    /// Sets element `[row, col]` (the interpreter's tests).
    #[cfg(all(test, not(target_arch = "nvptx64")))]
    pub(crate) fn set(&self, row: usize, col: usize, x: T) {
        unsafe { *self.base.add(row * C + col) = x }
    }
}

/// `N` f32 values in the program's shared memory: a statistic per row of a
/// tile that every thread reads a few of (a log-sum-exp, a softmax
/// correction), copied in with the tiles of the same pipeline stage so that
/// its loads wait on nothing once the stage has landed.
#[derive(Clone, Copy)]
pub struct SharedVec<const N: usize, const TH: usize> {
    #[cfg(target_arch = "nvptx64")]
    base: u32,
    #[cfg(not(target_arch = "nvptx64"))]
    base: *mut f32,
}

impl<const N: usize, const TH: usize> SharedVec<N, TH> {
    /// The vector at `byte_offset` of the program's shared memory (4-byte
    /// aligned; the config's `SMEM` must cover it).
    #[inline(always)]
    pub fn at(byte_offset: usize) -> Self {
        #[cfg(target_arch = "nvptx64")]
        let base = rustile_device::smem_addr(rustile_device::dyn_smem::<u8>()) + (TH * 4 + byte_offset) as u32;
        #[cfg(not(target_arch = "nvptx64"))]
        let base = be::smem_at(TH * 4 + byte_offset, N * 4) as *mut f32;
        SharedVec { base }
    }

    /// Starts copying `src[start..start + m]`, `m = min(n, N)`, into the
    /// first `m` values (`cp.async`, 4 bytes a thread, so any start will
    /// do); the rest keep what they held. `n` may be what is left of the
    /// tensor: a block's rows past the vector are not copied. Joins the
    /// current copy group, as [`Shared::copy_from`] does.
    #[inline(always)]
    pub fn copy_from(&self, src: Ptr<f32>, start: usize, n: usize) {
        #[cfg(target_arch = "nvptx64")]
        let lane = rustile_device::thread_idx() as usize;
        #[cfg(not(target_arch = "nvptx64"))]
        let lane = 0;
        self.copy_by(src, start, n, lane, TH, "SharedVec::copy_from");
    }

    /// [`SharedVec::copy_from`] by the 32 lanes of the calling warp alone
    /// (a copy warpgroup's), outside any copy group: each lane then makes
    /// its copies' landing an arrival on a barrier
    /// ([`crate::tma::Barrier::arrive_after_copies`]).
    #[inline(always)]
    pub fn copy_from_warp(&self, src: Ptr<f32>, start: usize, n: usize) {
        #[cfg(target_arch = "nvptx64")]
        let lane = rustile_device::thread_idx() as usize % 32;
        #[cfg(not(target_arch = "nvptx64"))]
        let lane = 0;
        self.copy_by(src, start, n, lane, 32, "SharedVec::copy_from_warp");
    }

    /// The copy of `min(n, N)` values, value `lane` and every `lanes`-th
    /// after it by this thread (the interpreter's one thread copies all).
    #[inline(always)]
    fn copy_by(&self, src: Ptr<f32>, start: usize, n: usize, lane: usize, lanes: usize, what: &str) {
        let n = n.min(N);
        src.0.check(what, start, 1, n, false);
        #[cfg(target_arch = "nvptx64")]
        {
            let mut i = lane;
            while i < n {
                unsafe { rustile_device::cp_async_4(self.base + (4 * i) as u32, src.0.at(start + i) as *const u8) };
                i += lanes;
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            let _ = (lane, lanes);
            core::ptr::copy_nonoverlapping(src.0.at(start) as *const f32, self.base, n)
        };
    }

    /// Value `i` (after `wait_copies` and `sync()` for the copy that wrote it).
    #[inline(always)]
    pub fn read(&self, i: usize) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return f32::from_bits(unsafe { rustile_device::ld_shared_b32(self.base + (4 * i) as u32) });
        #[cfg(not(target_arch = "nvptx64"))]
        {
            assert!(i < N, "rustile interpreter: SharedVec::read of value {i} of {N}");
            unsafe { *self.base.add(i) }
        }
    }
}

/// Closes the group of `Shared::copy_from` copies issued since the last call.
#[inline(always)]
pub fn commit_copies() {
    #[cfg(target_arch = "nvptx64")]
    rustile_device::cp_async_commit();
}

/// Waits until at most `N` groups of this thread's copies are still in
/// flight (then `sync()` before reading what other threads copied).
#[inline(always)]
pub fn wait_copies<const N: u32>() {
    #[cfg(target_arch = "nvptx64")]
    rustile_device::cp_async_wait::<N>();
}

/// Every thread of the program waits here: shared memory written before is
/// visible to all after.
#[inline(always)]
pub fn sync() {
    #[cfg(target_arch = "nvptx64")]
    rustile_device::sync_threads();
}

/// The first `threads` threads of the program (whole warps, the same set at
/// every call with this `id`) wait here for each other: named barrier `id`,
/// 1 to 15 (0 is [`sync()`]'s). For a warp-specialized program, whose copy
/// warpgroup is not at the barrier: its other warpgroups meet without it.
/// Shared memory written before is visible to them after.
#[inline(always)]
pub fn sync_named(id: u32, threads: usize) {
    debug_assert!((1..16).contains(&id) && threads % 32 == 0, "sync_named: ids 1..=15, whole warps");
    #[cfg(target_arch = "nvptx64")]
    rustile_device::bar_sync(id, threads as u32);
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = (id, threads);
}

// ---- the accumulator ---------------------------------------------------------------------

/// An `M×N` block of f32 partial products (see the module docs for its
/// layout). `WG` marks the layout of Hopper's `wgmma` ([`crate::wgmma`]):
/// warp `w` holds rows `16w..16w+16`, the same 16×8 fragments across them.
#[derive(Clone, Copy)]
pub struct Acc<const M: usize, const N: usize, const TH: usize, const WG: bool = false>
where
    [(); acc_len(M, N, TH)]:,
{
    pub(crate) v: [f32; acc_len(M, N, TH)],
}

impl<const M: usize, const N: usize, const TH: usize, const WG: bool> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    #[inline(always)]
    pub fn zeros() -> Self {
        Acc { v: [0.0; acc_len(M, N, TH)] }
    }

    /// Every value rounded to `T` (and back to f32): what a 16-bit store
    /// would keep, for an epilogue that reads its own output. Two values a
    /// conversion and no branch, so the `wgmma`s before it are not
    /// serialized (a branch on accumulator registers would be).
    #[inline(always)]
    pub fn rounded<T: Elem>(self) -> Self {
        let mut v = self.v;
        for e in (0..v.len()).step_by(2) {
            let [a, b] = T::from_f32_pair(v[e], v[e + 1]);
            (v[e], v[e + 1]) = (a.to_f32(), b.to_f32());
        }
        Acc { v }
    }

    /// Applies `f(row, col, x)` to every element (`row`, `col` within the block).
    #[inline(always)]
    pub fn map(self, f: impl Fn(usize, usize, f32) -> f32) -> Self {
        let mut v = self.v;
        for (e, x) in v.iter_mut().enumerate() {
            let (r, c) = acc_pos::<M, N, TH, WG>(e);
            *x = f(r, c, *x);
        }
        Acc { v }
    }

    /// `f(x, y)` of the elements at the same position of two accumulators
    /// (e.g. `silu(gate) · up`).
    #[inline(always)]
    pub fn zip(self, other: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        // Indexed, not `iter_mut().zip(other.v)`: the by-value array iterator
        // kept both accumulators in local memory on the GPU.
        let mut v = self.v;
        for e in 0..v.len() {
            v[e] = f(v[e], other.v[e]);
        }
        Acc { v }
    }
}

/// Block row and column of this thread's accumulator element `e`.
#[inline(always)]
pub(crate) fn acc_pos<const M: usize, const N: usize, const TH: usize, const WG: bool>(e: usize) -> (usize, usize) {
    #[cfg(target_arch = "nvptx64")]
    {
        let ni_n = Warps::<M, N, TH, WG>::NI;
        let (row0, col0, lane) = Warps::<M, N, TH, WG>::origin();
        let (frag, k) = (e / 4, e % 4);
        let (mi, ni) = (frag / ni_n, frag % ni_n);
        (row0 + mi * 16 + lane / 4 + (k / 2) * 8, col0 + ni * 8 + (lane % 4) * 2 + k % 2)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    (e / N, e % N)
}

// ---- fragments and dot -------------------------------------------------------------------

/// A warp's share of an `M`-row operand for one 16-deep k-slice, read from
/// shared memory into registers (on the CPU: the slice's values). `dot`
/// is a loop of `FragA::load`, `FragB::load` and [`mma`]; a main loop that
/// loads the next slice's fragments before multiplying this one's hides the
/// `ldmatrix` latency, also across a pipeline stage's barrier.
pub struct FragA<T, const M: usize, const TH: usize, const WG: bool = false> {
    // Sized for the largest warp piece (128 rows); only the first
    // `M / WM / 16` are used, and unrolled loops keep them in registers.
    #[cfg(target_arch = "nvptx64")]
    v: [[u32; 4]; 8],
    #[cfg(not(target_arch = "nvptx64"))]
    v: Vec<f32>,
    _t: core::marker::PhantomData<T>,
}

/// The B (`N`-row) operand's [`FragA`].
pub struct FragB<T, const N: usize, const TH: usize, const WG: bool = false> {
    #[cfg(target_arch = "nvptx64")]
    v: [[u32; 2]; 16],
    #[cfg(not(target_arch = "nvptx64"))]
    v: Vec<f32>,
    _t: core::marker::PhantomData<T>,
}

// Moving a 16-row piece down keeps the swizzle phase, and a k-slice (two
// chunks, 32 bytes) only flips offset bits below the row pitch that the
// swizzle XOR also acts on: so offset(piece, ks) = (offset(0, 0) ^ 32·ks) +
// piece·16·K·2, one XOR a slice instead of a swizzle per ldmatrix.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn ldmatrix_base(base: u32, lane_row: usize, lane_chunk: usize, k: usize, ks: usize) -> u32 {
    base + ((swizzled(lane_row, lane_chunk, k) * 2) as u32 ^ (32 * ks) as u32)
}

impl<T: Elem, const M: usize, const TH: usize, const WG: bool> FragA<T, M, TH, WG> {
    /// This warp's A fragments of k-slice `ks` of `a`.
    #[inline(always)]
    pub fn load<const K: usize>(a: &Shared<T, M, K, TH>, ks: usize) -> Self {
        let () = Bits::<T>::SIXTEEN;
        #[cfg(target_arch = "nvptx64")]
        {
            let (wm, wn) = warps_of(TH, WG);
            let (warp, lane) = warp_lane();
            // The four 8×8 matrices of one x4 are (rows 0-7, 8-15) × (k 0-7, 8-15).
            let row = (warp / wn) * (M / wm) + lane % 8 + 8 * ((lane / 8) % 2);
            let at = ldmatrix_base(a.base, row, lane / 16, K, ks);
            let mut v = [[0u32; 4]; 8];
            for mi in 0..M / wm / 16 {
                v[mi] = unsafe { rustile_device::ldmatrix_x4(at + (mi * 16 * K * 2) as u32) };
            }
            FragA { v, _t: core::marker::PhantomData }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        FragA { v: (0..M * 16).map(|i| a.get(i / 16, ks * 16 + i % 16).to_f32()).collect(), _t: core::marker::PhantomData }
    }

    /// [`FragA::load`] from A stored `[k, m]` (`a` holds `K` rows of `M`):
    /// `ldmatrix.trans` transposes each 8×8 matrix on the way.
    #[inline(always)]
    pub fn load_t<const K: usize>(a: &Shared<T, K, M, TH>, ks: usize) -> Self {
        let () = Bits::<T>::SIXTEEN;
        #[cfg(target_arch = "nvptx64")]
        {
            let (wm, wn) = warps_of(TH, WG);
            let (warp, lane) = warp_lane();
            // Matrix i of one x4: k rows 8·(i/2)..+8, m columns 8·(i%2)..+8
            // of the 16×16 piece. A k-slice moves 16 whole rows, which keeps
            // the swizzle phase.
            let (i, r) = (lane / 8, lane % 8);
            let chunk = ((warp / wn) * (M / wm)) / 8 + i % 2;
            let row = ks * 16 + r + 8 * (i / 2);
            let mut v = [[0u32; 4]; 8];
            for mi in 0..M / wm / 16 {
                let at = a.base + (swizzled(row, chunk + 2 * mi, M) * 2) as u32;
                v[mi] = unsafe { rustile_device::ldmatrix_x4_trans(at) };
            }
            FragA { v, _t: core::marker::PhantomData }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        FragA { v: (0..M * 16).map(|i| a.get(ks * 16 + i % 16, i / 16).to_f32()).collect(), _t: core::marker::PhantomData }
    }
}

impl<T: Elem, const N: usize, const TH: usize, const WG: bool> FragB<T, N, TH, WG> {
    /// This warp's B fragments of k-slice `ks` of `b`.
    #[inline(always)]
    pub fn load<const K: usize>(b: &Shared<T, N, K, TH>, ks: usize) -> Self {
        let () = Bits::<T>::SIXTEEN;
        #[cfg(target_arch = "nvptx64")]
        {
            let (_, wn) = warps_of(TH, WG);
            let (warp, lane) = warp_lane();
            // One x4 holds two 8-column fragments: (k 0-7, 8-15) × (rows 0-7, 8-15).
            let row = (warp % wn) * (N / wn) + lane % 8 + 8 * (lane / 16);
            let at = ldmatrix_base(b.base, row, (lane / 8) % 2, K, ks);
            let mut v = [[0u32; 2]; 16];
            for p in 0..N / wn / 16 {
                let r = unsafe { rustile_device::ldmatrix_x4(at + (p * 16 * K * 2) as u32) };
                (v[2 * p], v[2 * p + 1]) = ([r[0], r[1]], [r[2], r[3]]);
            }
            FragB { v, _t: core::marker::PhantomData }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        FragB { v: (0..N * 16).map(|i| b.get(i / 16, ks * 16 + i % 16).to_f32()).collect(), _t: core::marker::PhantomData }
    }

    /// [`FragB::load`] from B stored `[k, n]` (`b` holds `K` rows of `N`).
    #[inline(always)]
    pub fn load_t<const K: usize>(b: &Shared<T, K, N, TH>, ks: usize) -> Self {
        let () = Bits::<T>::SIXTEEN;
        #[cfg(target_arch = "nvptx64")]
        {
            let (_, wn) = warps_of(TH, WG);
            let (warp, lane) = warp_lane();
            // Matrix i of one x4: k rows 8·(i%2)..+8, n columns 8·(i/2)..+8.
            let (i, r) = (lane / 8, lane % 8);
            let chunk = ((warp % wn) * (N / wn)) / 8 + i / 2;
            let row = ks * 16 + r + 8 * (i % 2);
            let mut v = [[0u32; 2]; 16];
            for p in 0..N / wn / 16 {
                let at = b.base + (swizzled(row, chunk + 2 * p, N) * 2) as u32;
                let r = unsafe { rustile_device::ldmatrix_x4_trans(at) };
                (v[2 * p], v[2 * p + 1]) = ([r[0], r[1]], [r[2], r[3]]);
            }
            FragB { v, _t: core::marker::PhantomData }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        FragB { v: (0..N * 16).map(|i| b.get(ks * 16 + i % 16, i / 16).to_f32()).collect(), _t: core::marker::PhantomData }
    }
}

/// This thread's warp and lane.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn warp_lane() -> (usize, usize) {
    let t = rustile_device::thread_idx() as usize;
    (t / 32, t % 32)
}

/// `acc + a·bᵀ` over one k-slice: the tensor cores' `mma.sync` on the
/// GPU, f32 products summed in k order on the CPU.
#[inline(always)]
pub fn mma<T: Elem, const M: usize, const N: usize, const TH: usize, const WG: bool>(
    a: &FragA<T, M, TH, WG>,
    b: &FragB<T, N, TH, WG>,
    acc: Acc<M, N, TH, WG>,
) -> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    let () = MmaShape::<M, N, 16, TH, WG>::OK;
    let mut v = acc.v;
    #[cfg(target_arch = "nvptx64")]
    {
        let (mi_n, ni_n) = (Warps::<M, N, TH, WG>::MI, Warps::<M, N, TH, WG>::NI);
        let bf16 = T::KIND == crate::Kind::Bf16;
        for mi in 0..mi_n {
            for ni in 0..ni_n {
                let at = (mi * ni_n + ni) * 4;
                let c = [v[at], v[at + 1], v[at + 2], v[at + 3]];
                let d = if bf16 {
                    rustile_device::mma_bf16_16816(a.v[mi], b.v[ni], c)
                } else {
                    rustile_device::mma_f16_16816(a.v[mi], b.v[ni], c)
                };
                (v[at], v[at + 1], v[at + 2], v[at + 3]) = (d[0], d[1], d[2], d[3]);
            }
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        for n in 0..N {
            let mut s = v[m * N + n];
            for k in 0..16 {
                s += a.v[m * 16 + k] * b.v[n * 16 + k];
            }
            v[m * N + n] = s;
        }
    }
    Acc { v }
}

/// `acc + a·bᵀ` for `a` `M×K` and `b` `N×K` (both row-major in shared
/// memory), in the accumulator's layout (the warp grid, or with `WG` one
/// column of warps).
#[inline(always)]
pub fn dot<T: Elem, const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool>(
    a: &Shared<T, M, K, TH>,
    b: &Shared<T, N, K, TH>,
    acc: Acc<M, N, TH, WG>,
) -> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    shared_times::<T, M, N, K, TH, WG>(acc, |ks| FragA::load(a, ks), |ks| FragB::load(b, ks))
}

/// An accumulator rounded to the 16-bit type `T`, two values a 32-bit
/// register (half an [`Acc`]'s registers): the left operand of [`dot_acc`].
/// Attention packs `P` as soon as the softmax made it, so that `P·V` runs
/// with the output accumulator, `P` and one k-slice of `V` in registers.
#[derive(Clone, Copy)]
pub struct Packed<T, const M: usize, const N: usize, const TH: usize>
where
    [(); acc_len(M, N, TH) / 2]:,
{
    pub(crate) v: [u32; acc_len(M, N, TH) / 2],
    _t: core::marker::PhantomData<T>,
}

impl<const M: usize, const N: usize, const TH: usize, const WG: bool> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    /// The accumulator rounded to `T` (bf16 or f16).
    #[inline(always)]
    pub fn pack<T: Elem>(&self) -> Packed<T, M, N, TH>
    where
        [(); acc_len(M, N, TH) / 2]:,
    {
        let () = Bits::<T>::SIXTEEN;
        let mut v = [0u32; acc_len(M, N, TH) / 2];
        for i in 0..v.len() {
            // Elements 2i and 2i+1 are neighbours in a row in every layout.
            v[i] = unsafe { core::mem::transmute_copy(&T::from_f32_pair(self.v[2 * i], self.v[2 * i + 1])) };
        }
        Packed { v, _t: core::marker::PhantomData }
    }
}

/// `acc + p·v` with `p` a packed accumulator of this program (the left
/// operand straight from registers) and `v` stored `[K, N]` in shared
/// memory: attention's `P·V`, the probabilities never leaving the
/// registers. Both are in the one-column-of-warps layout (`WG`), where the
/// `mma.sync` result of a 16×16 piece is already the left operand of the
/// next product.
#[inline(always)]
pub fn dot_acc<T: Elem, const M: usize, const K: usize, const N: usize, const TH: usize>(
    p: &Packed<T, M, K, TH>,
    v: &Shared<T, K, N, TH>,
    acc: Acc<M, N, TH, true>,
) -> Acc<M, N, TH, true>
where
    [(); acc_len(M, K, TH) / 2]:,
    [(); acc_len(M, N, TH)]:,
{
    packed_times(p, acc, |ks| FragB::load_t(v, ks))
}

/// `acc + p·bᵀ`: [`dot`] with the left operand a packed accumulator of
/// this program (from registers) and `b` stored `[N, K]`.
#[inline(always)]
pub fn dot_packed<T: Elem, const M: usize, const K: usize, const N: usize, const TH: usize>(
    p: &Packed<T, M, K, TH>,
    b: &Shared<T, N, K, TH>,
    acc: Acc<M, N, TH, true>,
) -> Acc<M, N, TH, true>
where
    [(); acc_len(M, K, TH) / 2]:,
    [(); acc_len(M, N, TH)]:,
{
    packed_times(p, acc, |ks| FragB::load(b, ks))
}

/// The loop of [`dot_acc`] and [`dot_packed`]: `acc + p·B` for the right
/// operand's k-slice `ks` as `b(ks)`.
#[inline(always)]
fn packed_times<T: Elem, const M: usize, const K: usize, const N: usize, const TH: usize>(
    p: &Packed<T, M, K, TH>,
    acc: Acc<M, N, TH, true>,
    b: impl Fn(usize) -> FragB<T, N, TH, true>,
) -> Acc<M, N, TH, true>
where
    [(); acc_len(M, K, TH) / 2]:,
    [(); acc_len(M, N, TH)]:,
{
    let () = MmaShape::<M, N, K, TH, true>::OK;
    let mut acc = acc;
    for ks in 0..K / 16 {
        acc = mma(&FragA::from_packed(p, ks), &b(ks), acc);
    }
    acc
}

/// `acc + aᵀ·bᵀ`: [`dot`] with `a` stored `[K, M]` (read with `ldmatrix.trans`).
#[inline(always)]
pub fn dot_ta<T: Elem, const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool>(
    a: &Shared<T, K, M, TH>,
    b: &Shared<T, N, K, TH>,
    acc: Acc<M, N, TH, WG>,
) -> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    shared_times::<T, M, N, K, TH, WG>(acc, |ks| FragA::load_t(a, ks), |ks| FragB::load(b, ks))
}

/// `acc + a·b`: [`dot`] with `b` stored `[K, N]` (read with `ldmatrix.trans`).
#[inline(always)]
pub fn dot_tb<T: Elem, const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool>(
    a: &Shared<T, M, K, TH>,
    b: &Shared<T, K, N, TH>,
    acc: Acc<M, N, TH, WG>,
) -> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    shared_times::<T, M, N, K, TH, WG>(acc, |ks| FragA::load(a, ks), |ks| FragB::load_t(b, ks))
}

/// `acc + aᵀ·b`: [`dot`] with `a` stored `[K, M]` and `b` stored `[K, N]`
/// (both tiles token-major where the product sums over tokens).
#[inline(always)]
pub fn dot_tab<T: Elem, const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool>(
    a: &Shared<T, K, M, TH>,
    b: &Shared<T, K, N, TH>,
    acc: Acc<M, N, TH, WG>,
) -> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    shared_times::<T, M, N, K, TH, WG>(acc, |ks| FragA::load_t(a, ks), |ks| FragB::load_t(b, ks))
}

/// The loop of [`dot`], [`dot_ta`], [`dot_tb`] and [`dot_tab`]: `acc + A·B`
/// for the operands' k-slice `ks` as `a(ks)` and `b(ks)`.
#[inline(always)]
fn shared_times<T: Elem, const M: usize, const N: usize, const K: usize, const TH: usize, const WG: bool>(
    acc: Acc<M, N, TH, WG>,
    a: impl Fn(usize) -> FragA<T, M, TH, WG>,
    b: impl Fn(usize) -> FragB<T, N, TH, WG>,
) -> Acc<M, N, TH, WG>
where
    [(); acc_len(M, N, TH)]:,
{
    let () = MmaShape::<M, N, K, TH, WG>::OK;
    let mut acc = acc;
    for ks in 0..K / 16 {
        acc = mma(&a(ks), &b(ks), acc);
    }
    acc
}

impl<T: Elem, const M: usize, const TH: usize> FragA<T, M, TH, true> {
    /// Columns `16·ks..16·ks+16` of a packed accumulator as this warp's left
    /// operand fragments. On the GPU no data moves: a thread's C values of
    /// two neighbouring 16×8 pieces are, pair by pair, its A values of the
    /// 16×16 piece (rows `g`, `g+8`; columns `2t`, `2t+1` and 8 further on).
    #[inline(always)]
    pub fn from_packed<const K: usize>(p: &Packed<T, M, K, TH>, ks: usize) -> Self
    where
        [(); acc_len(M, K, TH) / 2]:,
    {
        #[cfg(target_arch = "nvptx64")]
        {
            let ni_n = Warps::<M, K, TH, true>::NI;
            let mut v = [[0u32; 4]; 8];
            for mi in 0..Warps::<M, K, TH, true>::MI {
                // Pairs of the two 16×8 pieces: (row g, row g+8) each.
                let (lo, hi) = ((mi * ni_n + 2 * ks) * 2, (mi * ni_n + 2 * ks + 1) * 2);
                v[mi] = [p.v[lo], p.v[lo + 1], p.v[hi], p.v[hi + 1]];
            }
            FragA { v, _t: core::marker::PhantomData }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        FragA {
            v: (0..M * 16)
                .map(|i| {
                    let at = (i / 16) * K + ks * 16 + i % 16;
                    let pair: [T; 2] = unsafe { core::mem::transmute_copy(&p.v[at / 2]) };
                    pair[at % 2].to_f32()
                })
                .collect(),
            _t: core::marker::PhantomData,
        }
    }
}

// ---- per-row values of an accumulator ------------------------------------------------------

/// f32 values per thread of an [`AccRows`]: on the GPU a thread of the
/// one-column-of-warps layout holds two rows of each 16-row piece.
pub const fn acc_rows_len(m: usize, th: usize) -> usize {
    if cfg!(target_arch = "nvptx64") { 4 * m / th } else { m }
}

/// One f32 per row of an `M`-row accumulator in the `WG` layout (a row
/// maximum, a row sum, a rescaling factor), held by the threads that hold
/// the row, so that combining it with the accumulator costs nothing.
#[derive(Clone, Copy)]
pub struct AccRows<const M: usize, const TH: usize>
where
    [(); acc_rows_len(M, TH)]:,
{
    pub(crate) v: [f32; acc_rows_len(M, TH)],
}

impl<const M: usize, const TH: usize> AccRows<M, TH>
where
    [(); acc_rows_len(M, TH)]:,
{
    #[inline(always)]
    pub fn splat(x: f32) -> Self {
        AccRows { v: [x; acc_rows_len(M, TH)] }
    }

    /// `f(row)` for each block row this thread holds (every row in the
    /// interpreter): per-row values read from memory once, e.g. the
    /// log-sum-exp of each query of a block.
    #[inline(always)]
    pub fn from_fn(f: impl Fn(usize) -> f32) -> Self {
        let mut v = [0.0; acc_rows_len(M, TH)];
        for i in 0..v.len() {
            v[i] = f(rows_pos::<M, TH>(i));
        }
        AccRows { v }
    }

    #[inline(always)]
    pub fn map(self, f: impl Fn(f32) -> f32) -> Self {
        let mut v = self.v;
        for i in 0..v.len() {
            v[i] = f(v[i]);
        }
        AccRows { v }
    }

    #[inline(always)]
    pub fn zip(self, other: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        let mut v = self.v;
        for i in 0..v.len() {
            v[i] = f(v[i], other.v[i]);
        }
        AccRows { v }
    }

    /// Writes rows `start..start+M` that are below `n` to `dst[row]` (one
    /// thread per row writes).
    #[inline(always)]
    pub fn store(self, dst: crate::PtrMut<f32>, start: usize, n: usize) {
        #[cfg(target_arch = "nvptx64")]
        if rustile_device::thread_idx() % 4 != 0 {
            return;
        }
        for i in 0..self.v.len() {
            let row = start + rows_pos::<M, TH>(i);
            if row < n {
                dst.0.check("AccRows::store", row, 1, 1, true);
                unsafe { *dst.0.at(row) = self.v[i] };
            }
        }
    }
}

/// Block row of this thread's row value `i`.
#[inline(always)]
fn rows_pos<const M: usize, const TH: usize>(i: usize) -> usize {
    #[cfg(target_arch = "nvptx64")]
    {
        let (row0, _, lane) = Warps::<M, 16, TH, true>::origin();
        row0 + (i / 2) * 16 + lane / 4 + (i % 2) * 8
    }
    #[cfg(not(target_arch = "nvptx64"))]
    i
}

impl<const M: usize, const N: usize, const TH: usize> Acc<M, N, TH, true>
where
    [(); acc_len(M, N, TH)]:,
    [(); acc_rows_len(M, TH)]:,
{
    /// Index of element `e`'s row among this thread's [`AccRows`] values.
    #[inline(always)]
    fn row_slot(e: usize) -> usize {
        #[cfg(target_arch = "nvptx64")]
        return (e / 4 / Warps::<M, N, TH, true>::NI) * 2 + (e % 4) / 2;
        #[cfg(not(target_arch = "nvptx64"))]
        return e / N;
    }

    /// `f` folded over each row, starting from `init` (on the GPU over the
    /// thread's values, then across the four lanes that share a row).
    #[inline(always)]
    fn row_fold(&self, init: f32, f: impl Fn(f32, f32) -> f32) -> AccRows<M, TH> {
        let mut r = AccRows::<M, TH>::splat(init);
        for e in 0..self.v.len() {
            let s = Self::row_slot(e);
            r.v[s] = f(r.v[s], self.v[e]);
        }
        #[cfg(target_arch = "nvptx64")]
        for i in 0..r.v.len() {
            let x = f(r.v[i], rustile_device::shfl_xor(r.v[i], 1));
            r.v[i] = f(x, rustile_device::shfl_xor(x, 2));
        }
        r
    }

    /// The largest value of each row.
    #[inline(always)]
    pub fn row_max(&self) -> AccRows<M, TH> {
        self.row_fold(f32::NEG_INFINITY, crate::math::max)
    }

    /// The sum of each row.
    #[inline(always)]
    pub fn row_sum(&self) -> AccRows<M, TH> {
        self.row_fold(0.0, |a, b| a + b)
    }

    /// `f(x, r)` of each element `x` and its row's value `r`.
    #[inline(always)]
    pub fn map_rows(self, rows: &AccRows<M, TH>, f: impl Fn(f32, f32) -> f32) -> Self {
        let mut v = self.v;
        for e in 0..v.len() {
            v[e] = f(v[e], rows.v[Self::row_slot(e)]);
        }
        Acc { v }
    }
}

// ---- per-column values of an accumulator ---------------------------------------------------

/// f32 values per thread of an [`AccCols`]: on the GPU a thread of the
/// one-column-of-warps layout holds two columns of each 8-column piece.
pub const fn acc_cols_len(n: usize) -> usize {
    if cfg!(target_arch = "nvptx64") { n / 4 } else { n }
}

/// One f32 per column of an `N`-column accumulator in the `WG` layout, held
/// by the threads that hold the column: [`AccRows`] for a product whose
/// columns are the tokens a statistic belongs to (attention's backward with
/// keys as rows: each query's log-sum-exp). Every warp holds every column.
#[derive(Clone, Copy)]
pub struct AccCols<const N: usize>
where
    [(); acc_cols_len(N)]:,
{
    pub(crate) v: [f32; acc_cols_len(N)],
}

impl<const N: usize> AccCols<N>
where
    [(); acc_cols_len(N)]:,
{
    /// `f(col)` for each block column this thread holds (every column in
    /// the interpreter). Loads made here, before the `wgmma` product they
    /// combine with is waited for, run under it.
    #[inline(always)]
    pub fn from_fn(f: impl Fn(usize) -> f32) -> Self {
        let mut v = [0.0; acc_cols_len(N)];
        for i in 0..v.len() {
            v[i] = f(cols_pos::<N>(i));
        }
        AccCols { v }
    }
}

/// Block column of this thread's column value `i`.
#[inline(always)]
fn cols_pos<const N: usize>(i: usize) -> usize {
    #[cfg(target_arch = "nvptx64")]
    return (i / 2) * 8 + (rustile_device::thread_idx() as usize % 4) * 2 + i % 2;
    #[cfg(not(target_arch = "nvptx64"))]
    i
}

impl<const M: usize, const N: usize, const TH: usize> Acc<M, N, TH, true>
where
    [(); acc_len(M, N, TH)]:,
    [(); acc_cols_len(N)]:,
{
    /// `f(x, c)` of each element `x` and its column's value `c`.
    #[inline(always)]
    pub fn map_cols(self, cols: &AccCols<N>, f: impl Fn(f32, f32) -> f32) -> Self {
        let mut v = self.v;
        for e in 0..v.len() {
            // Element e is column (e/4 mod N/8)·8 + 2·(lane mod 4) + e mod 2 (see `acc_pos`).
            #[cfg(target_arch = "nvptx64")]
            let slot = ((e / 4) % (N / 8)) * 2 + e % 2;
            #[cfg(not(target_arch = "nvptx64"))]
            let slot = e % N;
            v[e] = f(v[e], cols.v[slot]);
        }
        Acc { v }
    }
}

/// Stores the accumulator, converted to `T`, into the block pointer's
/// window; elements outside the tensor are skipped.
#[inline(always)]
pub fn store_acc<T: Elem, const M: usize, const N: usize, const TH: usize, const WG: bool>(dst: &BlockPtr<T, M, N, TH>, acc: &Acc<M, N, TH, WG>)
where
    [(); acc_len(M, N, TH)]:,
{
    store_acc_with(dst, acc, |_, _, x| x);
}

/// `store_acc` of `f(row, col, x)` for each accumulator value `x` (`row`,
/// `col` within the block). Unlike `Acc::map` then `store_acc`, each value
/// is computed just before its store, so an `f` that reads other tensors (a
/// bias, a residual) never holds a whole block of them in registers.
#[inline(always)]
pub fn store_acc_with<T: Elem, const M: usize, const N: usize, const TH: usize, const WG: bool>(
    dst: &BlockPtr<T, M, N, TH>,
    acc: &Acc<M, N, TH, WG>,
    f: impl Fn(usize, usize, f32) -> f32,
) where
    [(); acc_len(M, N, TH)]:,
{
    let [rs, cs] = dst.strides;
    // On the GPU a thread's accumulator holds column pairs (elements 2i and
    // 2i+1 are neighbours in a row): where the tensor allows, each pair is
    // one 32-bit store (half the store instructions, twice the bytes per
    // sector); otherwise element by element.
    #[cfg(target_arch = "nvptx64")]
    if cs == 1 && rs % 2 == 0 && (dst.base.at(0) as usize) % 4 == 0 && core::mem::size_of::<T>() == 2 {
        for e in (0..acc.v.len()).step_by(2) {
            let (r, c) = acc_pos::<M, N, TH, WG>(e);
            let (row, col) = (dst.offsets[0] + r, dst.offsets[1] + c);
            if row < dst.shape[0] && col + 1 < dst.shape[1] {
                let pair = T::from_f32_pair(f(r, c, acc.v[e]), f(r, c + 1, acc.v[e + 1]));
                unsafe { *(dst.base.at(row * rs + col) as *mut [T; 2]) = pair };
            } else if row < dst.shape[0] && col < dst.shape[1] {
                unsafe { *dst.base.at(row * rs + col) = T::from_f32(f(r, c, acc.v[e])) };
            }
        }
        return;
    }
    for (e, x) in acc.v.iter().enumerate() {
        let (r, c) = acc_pos::<M, N, TH, WG>(e);
        let (row, col) = (dst.offsets[0] + r, dst.offsets[1] + c);
        if row < dst.shape[0] && col < dst.shape[1] {
            let at = row * rs + col * cs;
            dst.base.check("store_acc", at, 1, 1, true);
            unsafe { *dst.base.at(at) = T::from_f32(f(r, c, *x)) };
        }
    }
}

/// [`store_acc_with`] through shared memory, a chunk (8 columns) at a time:
/// the accumulator goes to an `M×N` f32 scratch at `scratch` (a byte offset
/// of the program's shared memory, as for [`Shared::at`]; `4·M·N` bytes,
/// free at the call, e.g. a finished main loop's stages), then each thread
/// takes whole chunks of consecutive columns, `f(row, col, values)` turns
/// one into output values (`col` the chunk's first column, a multiple of
/// 8), and it leaves in one 16-byte store.
///
/// Whichever layout the accumulator has, the stores of a warp then cover
/// whole rows (coalesced). Both barriers are inside; call `sync()` after it
/// before the scratch is written again. `N` is 16 or a multiple of 32. Mark `f`
/// `#[inline(always)]` if it is long: called out of line, its captures go
/// through local memory.
#[inline(always)]
pub fn store_acc_staged<T: Elem, const M: usize, const N: usize, const TH: usize, const WG: bool>(
    dst: &BlockPtr<T, M, N, TH>,
    acc: &Acc<M, N, TH, WG>,
    scratch: usize,
    f: impl Fn(usize, usize, [f32; V]) -> [f32; V],
) where
    [(); acc_len(M, N, TH)]:,
{
    store_acc_staged_with(dst, acc, scratch, |_, _| (), |r, c, x, ()| f(r, c, x));
}

/// [`store_acc_staged`] for an epilogue that reads other tensors: `fetch(row,
/// col)` issues a chunk's loads and returns them in flight (e.g.
/// [`BlockPtr::fetch_chunk`]s), `finish(row, col, values, fetched)` waits
/// for them and computes the output. Each thread fetches four chunks before
/// it finishes the first, so their loads overlap instead of each waiting
/// behind the previous chunk's store.
#[inline(always)]
pub fn store_acc_staged_with<T: Elem, const M: usize, const N: usize, const TH: usize, const WG: bool, L: Copy>(
    dst: &BlockPtr<T, M, N, TH>,
    acc: &Acc<M, N, TH, WG>,
    scratch: usize,
    fetch: impl Fn(usize, usize) -> L,
    finish: impl Fn(usize, usize, [f32; V], L) -> [f32; V],
) where
    [(); acc_len(M, N, TH)]:,
{
    let () = Staged::<M, N, TH>::OK;
    let staged = StagedAcc::<M, N>::new(acc, scratch);
    #[cfg(target_arch = "nvptx64")]
    let (first, step) = (rustile_device::thread_idx() as usize, TH);
    #[cfg(not(target_arch = "nvptx64"))]
    let (first, step) = (0, 1);
    let total = M * N / V;
    // (row, first column) of chunk `i`; past the end, the last chunk (fetched, never stored).
    let pos = |i: usize| {
        let i = i.min(total - 1);
        (i / (N / V), i % (N / V) * V)
    };
    let mut chunk = first;
    while chunk < total {
        let ids = [chunk, chunk + step, chunk + 2 * step, chunk + 3 * step];
        let (p0, p1, p2, p3) = (pos(ids[0]), pos(ids[1]), pos(ids[2]), pos(ids[3]));
        let fetched = [fetch(p0.0, p0.1), fetch(p1.0, p1.1), fetch(p2.0, p2.1), fetch(p3.0, p3.1)];
        for j in 0..4 {
            if ids[j] < total {
                let (r, c) = pos(ids[j]);
                dst.put_chunk(r, c, finish(r, c, staged.chunk(r, c), fetched[j]));
            }
        }
        chunk += 4 * step;
    }
}

/// An `R×C` tile of f32 values in the program's shared memory: where an
/// accumulator becomes a register tile (`store_acc`, `sync()`, `load`), and
/// what a triangular solve works on ([`crate::tri`]). Rows are permuted as
/// `store_acc_staged`'s scratch (no bank conflicts for either layout); `C`
/// is 16 or a multiple of 32. Writes need a `sync()` before other threads read.
#[derive(Clone, Copy)]
pub struct SharedF32<const R: usize, const C: usize, const TH: usize> {
    base: *mut f32,
}

impl<const R: usize, const C: usize, const TH: usize> SharedF32<R, C, TH> {
    /// The tile at `byte_offset` of the program's shared memory (after the
    /// reduction scratch; 16-byte aligned; the config's `SMEM` must cover it).
    #[inline(always)]
    pub fn at(byte_offset: usize) -> Self {
        let () = Staged::<R, C, TH>::OK;
        #[cfg(target_arch = "nvptx64")]
        let base = unsafe { rustile_device::dyn_smem::<f32>().add((TH * 4 + byte_offset) / 4) };
        #[cfg(not(target_arch = "nvptx64"))]
        let base = be::smem_at(TH * 4 + byte_offset, R * C * 4) as *mut f32;
        SharedF32 { base }
    }

    #[inline(always)]
    fn slot(&self, r: usize, c: usize) -> *mut f32 {
        debug_assert!(r < R && c < C);
        unsafe { self.base.add(staged_at(r, c, C)) }
    }

    /// Element `[r, c]`.
    #[inline(always)]
    pub fn get(&self, r: usize, c: usize) -> f32 {
        unsafe { *self.slot(r, c) }
    }

    /// Elements `[r, c..c+4]` (`c` a multiple of 4): one 16-byte read.
    #[inline(always)]
    pub fn get4(&self, r: usize, c: usize) -> [f32; 4] {
        debug_assert!(c % 4 == 0);
        unsafe { *(self.slot(r, c) as *const [f32; 4]) }
    }

    /// Writes element `[r, c]` (this thread's write; `sync()` before others read it).
    #[inline(always)]
    pub fn set(&self, r: usize, c: usize, x: f32) {
        unsafe { *self.slot(r, c) = x }
    }

    /// Writes an accumulator's elements (each thread its own).
    #[inline(always)]
    pub fn store_acc<const WG: bool>(&self, acc: &Acc<R, C, TH, WG>)
    where
        [(); acc_len(R, C, TH)]:,
    {
        // Neighbouring columns (2i, 2i+1) are neighbours in every layout and in the scratch: one 8-byte store.
        for e in (0..acc.v.len()).step_by(2) {
            let (r, c) = acc_pos::<R, C, TH, WG>(e);
            unsafe { *(self.slot(r, c) as *mut [f32; 2]) = [acc.v[e], acc.v[e + 1]] };
        }
    }

    /// Writes a register tile's elements (each thread its own).
    #[inline(always)]
    pub fn store(&self, t: &Tile<f32, R, C, TH>)
    where
        [(); len(R, C, TH)]:,
    {
        let w = be::held_cols(C, TH);
        for e in (0..t.v.len()).step_by(4) {
            let (r, c) = (be::tile_row::<C, TH>(e / w), be::tile_col::<C, TH>(e % w));
            unsafe { *(self.slot(r, c) as *mut [f32; 4]) = [t.v[e], t.v[e + 1], t.v[e + 2], t.v[e + 3]] };
        }
    }

    /// The tile as a register tile.
    #[inline(always)]
    pub fn load(&self) -> Tile<f32, R, C, TH>
    where
        [(); len(R, C, TH)]:,
    {
        // A tile holds whole chunks: 16-byte reads of four consecutive columns.
        let w = be::held_cols(C, TH);
        let mut v = [0.0f32; len(R, C, TH)];
        for e in (0..v.len()).step_by(4) {
            let (r, c) = (be::tile_row::<C, TH>(e / w), be::tile_col::<C, TH>(e % w));
            v[e..e + 4].copy_from_slice(unsafe { &*(self.slot(r, c) as *const [f32; 4]) });
        }
        Tile { v }
    }
}

/// [`store_acc_staged`] for an epilogue that reads the `K − 1` rows above
/// each row: a causal stencil down the block (a short convolution along
/// the rows). Each thread walks one chunk of 8 columns down a strip of
/// rows with the last `K` rows' values in registers, so each value leaves
/// shared memory about once. `cols(col)` runs once a strip (the column
/// chunk's weights, say); `f(row, col, window, &cols)` gets rows
/// `row + 1 − K ..= row` of the accumulator, oldest first (rows before the
/// block's first are zeros), and returns the output chunk. Only rows
/// `first..M` are written: the rows before are read as the stencil's
/// halo (another program writes them). Neighbouring lanes take
/// neighbouring chunks of a row, so a warp's stores cover whole rows (two
/// strips' rows where a row has 16 chunks). `N / 8` divides `TH` and
/// `TH / (N / 8)` divides `M`; the scratch and barriers are as for
/// [`store_acc_staged`].
#[inline(always)]
pub fn store_acc_stencil<T: Elem, const M: usize, const N: usize, const TH: usize, const WG: bool, const K: usize, L: Copy>(
    dst: &BlockPtr<T, M, N, TH>,
    acc: &Acc<M, N, TH, WG>,
    scratch: usize,
    first: usize,
    cols: impl Fn(usize) -> L,
    f: impl Fn(usize, usize, [[f32; V]; K], &L) -> [f32; V],
) where
    [(); acc_len(M, N, TH)]:,
{
    let () = Stencil::<M, N, TH, K>::OK;
    let staged = StagedAcc::<M, N>::new(acc, scratch);
    let (chunks, height) = (N / V, M * (N / V) / TH);
    #[cfg(target_arch = "nvptx64")]
    let (mut t, step) = (rustile_device::thread_idx() as usize, TH);
    #[cfg(not(target_arch = "nvptx64"))]
    let (mut t, step) = (0, 1);
    while t < TH {
        let (c, r0) = (t % chunks * V, t / chunks * height);
        let l = cols(c);
        // Rows r0 + 1 − K .. r0 in slots 1..K; the loop shifts each row in.
        let mut window = [[0.0f32; V]; K];
        for (i, w) in window.iter_mut().enumerate().skip(1) {
            if r0 + i >= K {
                *w = staged.chunk(r0 + i - K, c);
            }
        }
        for r in r0..r0 + height {
            for i in 1..K {
                window[i - 1] = window[i];
            }
            window[K - 1] = staged.chunk(r, c);
            if r >= first {
                dst.put_chunk(r, c, f(r, c, window, &l));
            }
        }
        t += step;
    }
}

/// An accumulator staged in an `M×N` f32 scratch of shared memory
/// ([`staged_at`]'s layout), read back by chunks of 8 columns.
#[derive(Clone, Copy)]
struct StagedAcc<const M: usize, const N: usize> {
    #[cfg(target_arch = "nvptx64")]
    base: u32,
    #[cfg(not(target_arch = "nvptx64"))]
    base: *mut f32,
}

impl<const M: usize, const N: usize> StagedAcc<M, N> {
    /// Writes `acc` into the scratch at byte `scratch` of the program's
    /// shared memory, between two barriers: whoever used the scratch last
    /// (a main loop's tensor cores) is done before, and every thread's
    /// values are there after.
    #[inline(always)]
    fn new<const TH: usize, const WG: bool>(acc: &Acc<M, N, TH, WG>, scratch: usize) -> Self
    where
        [(); acc_len(M, N, TH)]:,
    {
        sync();
        #[cfg(target_arch = "nvptx64")]
        let base = rustile_device::smem_addr(rustile_device::dyn_smem::<u8>()) + (TH * 4 + scratch) as u32;
        #[cfg(not(target_arch = "nvptx64"))]
        let base = be::smem_at(TH * 4 + scratch, M * N * 4) as *mut f32;
        // Neighbouring columns (2i, 2i+1) are neighbours in every layout: one 8-byte store.
        for e in (0..acc.v.len()).step_by(2) {
            let (r, c) = acc_pos::<M, N, TH, WG>(e);
            #[cfg(target_arch = "nvptx64")]
            unsafe {
                rustile_device::st_shared_v2(base + (4 * staged_at(r, c, N)) as u32, [acc.v[e].to_bits(), acc.v[e + 1].to_bits()])
            };
            #[cfg(not(target_arch = "nvptx64"))]
            unsafe {
                (*base.add(staged_at(r, c, N)), *base.add(staged_at(r, c + 1, N))) = (acc.v[e], acc.v[e + 1]);
            }
        }
        sync();
        StagedAcc { base }
    }

    /// Values `[r, c..c+4]` (`c` a multiple of 4): one 16-byte read.
    #[inline(always)]
    fn read4(&self, r: usize, c: usize) -> [f32; 4] {
        #[cfg(target_arch = "nvptx64")]
        return unsafe { rustile_device::ld_shared_v4(self.base + (4 * staged_at(r, c, N)) as u32) }.map(f32::from_bits);
        #[cfg(not(target_arch = "nvptx64"))]
        return core::array::from_fn(|i| unsafe { *self.base.add(staged_at(r, c + i, N)) });
    }

    /// Values `[r, c..c+8]` (`c` a multiple of 8).
    #[inline(always)]
    fn chunk(&self, r: usize, c: usize) -> [f32; V] {
        let (lo, hi) = (self.read4(r, c), self.read4(r, c + 4));
        [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]]
    }
}

/// Float index of `[r, c]` in `store_acc_staged`'s `M×N` scratch. Row `r`'s
/// chunks are permuted by `r % 4` and a chunk's two 16-byte halves swapped
/// in every other group of four chunks, so that neither the accumulator's
/// 8-byte writes (4 rows × 32 bytes a half-warp) nor the 16-byte chunk
/// reads (8 consecutive chunks a quarter-warp) meet in a bank. A row of two
/// chunks (N = 16) is permuted by `r % 2` only.
#[inline(always)]
const fn staged_at(r: usize, c: usize, n: usize) -> usize {
    let chunk = (c / V) ^ (r % if n >= 4 * V { 4 } else { 2 });
    let half = ((c / 4) % 2) ^ ((chunk / 4) % 2);
    r * n + chunk * V + half * 4 + c % 4
}

/// Compile-time check of `store_acc_staged`'s shape.
struct Staged<const M: usize, const N: usize, const TH: usize>;
impl<const M: usize, const N: usize, const TH: usize> Staged<M, N, TH> {
    const OK: () = assert!(
        (N == 16 || N % 32 == 0) && (M * N / V) % TH == 0,
        "store_acc_staged: N must be 16 or a multiple of 32, and the block's 8-column chunks a multiple of the thread count"
    );
}

/// Compile-time check of `store_acc_stencil`'s shape: whole strips of rows a thread.
struct Stencil<const M: usize, const N: usize, const TH: usize, const K: usize>;
impl<const M: usize, const N: usize, const TH: usize, const K: usize> Stencil<M, N, TH, K> {
    const OK: () = assert!(
        (N == 16 || N % 32 == 0) && TH % (N / V) == 0 && M % (TH / (N / V)) == 0 && K >= 1,
        "store_acc_stencil: N must be 16 or a multiple of 32, its 8-column chunks divide the thread count, and the strips divide M"
    );
}

#[cfg(test)]
mod tests {
    use super::swizzled;

    /// A vector copies the window it is given from any start and keeps what
    /// it held past it; a copy past the tensor's end stops the interpreter.
    #[test]
    fn a_shared_vector_copies_its_window() {
        use crate::{backend::run_grid, Ptr, SharedVec};
        let src: Vec<f32> = (0..100).map(|i| i as f32 * 0.5 - 7.0).collect();
        run_grid([1, 1, 1], 128 * 4 + 64 * 4, || {
            let v = SharedVec::<64, 128>::at(0);
            v.copy_from(Ptr::from_slice(&src), 0, 64);
            v.copy_from(Ptr::from_slice(&src), 61, 39);
            for i in 0..64 {
                assert_eq!(v.read(i), if i < 39 { src[61 + i] } else { src[i] }, "value {i}");
            }
            let past = std::panic::catch_unwind(|| v.copy_from(Ptr::from_slice(&src), 62, 39));
            assert!(past.is_err(), "a copy past the end ran");
        });
    }

    /// `dot` on the GPU finds every ldmatrix row from the k-step-0 offset by
    /// one XOR and one add; this is the identity it relies on, for every row
    /// a 16-row piece can start at and every tile width `Shared` allows.
    /// The staged epilogue's scratch layout is a permutation of each row,
    /// and keeps 4-column halves contiguous (the 16-byte reads).
    #[test]
    fn staged_scratch_permutes_each_row() {
        for n in [16, 32, 64, 128, 256] {
            for r in 0..16 {
                let mut seen = vec![false; n];
                for c in 0..n {
                    let at = super::staged_at(r, c, n);
                    assert!(at / n == r && !seen[at % n], "n {n}, [{r}, {c}] → {at}");
                    seen[at % n] = true;
                    if c % 4 != 0 {
                        assert_eq!(at, super::staged_at(r, c - 1, n) + 1, "n {n}, [{r}, {c}]: half not contiguous");
                    }
                }
            }
        }
    }

    #[test]
    fn ldmatrix_offsets_follow_the_swizzle() {
        for k in [16, 32, 64, 128, 256] {
            for row in (0..128).step_by(16).flat_map(|r0| (0..16).map(move |l| r0 + l)) {
                for half in 0..2 {
                    for ks in 0..k / 16 {
                        for piece in 0..8 {
                            let want = swizzled(row + 16 * piece, half + 2 * ks, k) * 2;
                            let got = ((swizzled(row, half, k) * 2) ^ (32 * ks)) + piece * 16 * k * 2;
                            assert_eq!(got, want, "K {k}, row {row}, half {half}, ks {ks}, piece {piece}");
                        }
                    }
                }
            }
        }
    }

    /// The byte swizzle is the chunk swizzle for 16-bit tiles, and a
    /// permutation of each 8-row period's bytes for every row width.
    #[test]
    fn the_byte_swizzle_is_the_chunk_swizzle() {
        use super::swizzled_byte;
        for c in [16, 32, 64] {
            for row in 0..24 {
                for chunk in 0..c / 8 {
                    assert_eq!(swizzled_byte(row, 16 * chunk + 6, 2 * c), swizzled(row, chunk, c) * 2 + 6);
                }
            }
        }
        for row_bytes in [32, 64, 128] {
            let mut seen: Vec<usize> = (0..8).flat_map(|r| (0..row_bytes).map(move |b| swizzled_byte(r, b, row_bytes))).collect();
            seen.sort();
            assert_eq!(seen, (0..8 * row_bytes).collect::<Vec<_>>(), "{row_bytes}-byte rows");
        }
    }

    /// A thread's words land where the tile's elements are, and read back.
    #[test]
    fn words_written_are_the_elements_read() {
        crate::backend::run_grid([1, 1, 1], 128 * 4 + 8 * 128, || {
            let t = super::Shared::<crate::f16, 8, 64, 128>::at(0);
            t.put_words(3, 32, [0x3c00_0000, 0x4000_3800, 7, 8]);
            assert_eq!(t.get(3, 16), crate::f16::from_f32(0.0));
            assert_eq!(t.get(3, 17), crate::f16::from_f32(1.0));
            assert_eq!(t.get(3, 18), crate::f16::from_f32(0.5));
            assert_eq!(t.get(3, 19), crate::f16::from_f32(2.0));
            assert_eq!(t.words::<2>(3, 40), [7, 8]);
            assert_eq!(t.words::<1>(3, 36), [0x4000_3800]);
        });
    }
}
