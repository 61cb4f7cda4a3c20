//! Pointers a kernel receives, and block pointers over them.
//!
//! On the GPU a kernel argument is a bare device address. In the CPU
//! interpreter it also carries its buffer's length and whether it may be
//! written, so that a block pointer whose shape claims more than the data, or
//! a store through an input, stops with a message instead of corrupting memory.
use crate::backend as be;
use crate::layout::V;
use crate::Elem;
use core::marker::PhantomData;

/// A read-only tensor argument (`&Tensor<T>` at the host launcher).
#[repr(transparent)]
pub struct Ptr<T>(pub(crate) Raw<T>);

/// A writable tensor argument (`&mut Tensor<T>` at the host launcher).
#[repr(transparent)]
pub struct PtrMut<T>(pub(crate) Raw<T>);

impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ptr<T> {}
impl<T> Clone for PtrMut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PtrMut<T> {}

#[cfg(target_arch = "nvptx64")]
#[repr(transparent)]
#[doc(hidden)]
pub struct Raw<T> {
    p: *mut T,
}

#[cfg(not(target_arch = "nvptx64"))]
#[doc(hidden)]
pub struct Raw<T> {
    p: *mut T,
    len: usize,
    writable: bool,
}

impl<T> Clone for Raw<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Raw<T> {}

// SAFETY (CPU interpreter): programs of one launch write disjoint elements,
// exactly the contract kernels already have on the GPU.
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl<T: Send> Send for Raw<T> {}
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl<T: Sync> Sync for Raw<T> {}

#[cfg(not(target_arch = "nvptx64"))]
impl<T> Ptr<T> {
    /// The interpreter's view of a host slice (used by generated CPU entries).
    pub fn from_slice(s: &[T]) -> Self {
        Ptr(Raw { p: s.as_ptr() as *mut T, len: s.len(), writable: false })
    }
}
#[cfg(not(target_arch = "nvptx64"))]
impl<T> PtrMut<T> {
    pub fn from_slice(s: &mut [T]) -> Self {
        PtrMut(Raw { p: s.as_mut_ptr(), len: s.len(), writable: true })
    }
    /// The interpreter's view of `len` elements at `p` (a tensor of
    /// `Gpu::interpreter`, used by generated launchers).
    ///
    /// # Safety
    /// `p` holds `len` elements for as long as the kernel runs.
    pub unsafe fn from_raw(p: *mut T, len: usize) -> Self {
        PtrMut(Raw { p: if len == 0 { core::ptr::NonNull::dangling().as_ptr() } else { p }, len, writable: true })
    }
}
#[cfg(not(target_arch = "nvptx64"))]
impl<T> Ptr<T> {
    /// [`PtrMut::from_raw`], read-only.
    ///
    /// # Safety
    /// `p` holds `len` elements for as long as the kernel runs.
    pub unsafe fn from_raw(p: *const T, len: usize) -> Self {
        Ptr(Raw { p: if len == 0 { core::ptr::NonNull::dangling().as_ptr() } else { p as *mut T }, len, writable: false })
    }
}

impl<T> Ptr<T> {
    /// The tensor from element `elems` on: one matrix of a batch (`b · stride`).
    #[inline(always)]
    pub fn offset(self, elems: usize) -> Self {
        Ptr(self.0.offset(elems))
    }
}
impl<T> PtrMut<T> {
    /// The tensor from element `elems` on: one matrix of a batch (`b · stride`).
    #[inline(always)]
    pub fn offset(self, elems: usize) -> Self {
        PtrMut(self.0.offset(elems))
    }
}

impl<T: crate::Elem> Ptr<T> {
    /// Element `idx`, as stored (no conversion): one scalar load, for a
    /// table a kernel looks things up in (`Ptr<u32>` of sizes or offsets).
    #[inline(always)]
    pub fn read(self, idx: usize) -> T {
        self.0.check("Ptr::read", idx, 1, 1, false);
        unsafe { *self.0.at(idx) }
    }
}

impl PtrMut<f32> {
    /// Raises element 0 to the largest `x` that any thread of the program
    /// passes (`x ≥ 0`; NaN counts as missing, as in `math::max`). Every
    /// thread of the program calls it together; programs race through an
    /// atomic maximum, so the element ends as the largest over the launch
    /// (an FP8 output's amax). Start it at 0.
    #[inline(always)]
    pub fn max_into(self, x: f32) {
        self.0.check("PtrMut::max_into", 0, 1, 1, true);
        unsafe { be::max_into(self.0.at(0), x) }
    }
}

impl<T> Raw<T> {
    /// Address of element `idx` (not dereferenced here).
    #[inline(always)]
    pub(crate) fn at(self, idx: usize) -> *mut T {
        self.p.wrapping_add(idx)
    }

    #[inline(always)]
    fn offset(self, elems: usize) -> Self {
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // A window past the end would make every later bounds check
            // underflow; an offset to the end itself is an empty tensor.
            assert!(elems <= self.len, "rustile interpreter: offset {elems} past the end of a buffer of {} elements", self.len);
            Raw { p: self.p.wrapping_add(elems), len: self.len - elems, writable: self.writable }
        }
        #[cfg(target_arch = "nvptx64")]
        Raw { p: self.p.wrapping_add(elems) }
    }

    /// Interpreter only: every element a masked access will touch must lie in
    /// the buffer. `first`, `stride` and `count` describe the access.
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn check(self, what: &str, first: usize, stride: usize, count: usize, write: bool) {
        #[cfg(not(target_arch = "nvptx64"))]
        {
            if count == 0 {
                return;
            }
            let last = first + (count - 1) * stride;
            if last >= self.len {
                panic!(
                    "rustile interpreter: out-of-bounds {what}: element {last} of a buffer of {} elements \
                     (the block pointer's shape or strides describe more than the tensor holds)",
                    self.len
                );
            }
            if write && !self.writable {
                panic!("rustile interpreter: {what} through a read-only pointer (declare the argument as PtrMut<T>)");
            }
        }
    }
}

/// Conversion of kernel arguments into the untyped base of a block pointer.
pub trait AsRaw<T> {
    #[doc(hidden)]
    fn raw(self) -> Raw<T>;
}
impl<T> AsRaw<T> for Ptr<T> {
    fn raw(self) -> Raw<T> {
        self.0
    }
}
impl<T> AsRaw<T> for PtrMut<T> {
    fn raw(self) -> Raw<T> {
        self.0
    }
}

/// A window of `R×C` elements onto a 2-D tensor: base pointer, the tensor's
/// `shape` and `strides` (in elements), and the window's `offsets`.
/// Loads and stores through it are masked at the tensor's edges.
///
/// `TH` is the program's thread count; inside a `#[kernel]` the alias
/// `BlockPtr<T, R, C>` fills it in.
pub struct BlockPtr<T, const R: usize, const C: usize, const TH: usize> {
    pub(crate) base: Raw<T>,
    pub(crate) shape: [usize; 2],
    pub(crate) strides: [usize; 2],
    pub(crate) offsets: [usize; 2],
    _t: PhantomData<T>,
}

impl<T, const R: usize, const C: usize, const TH: usize> Clone for BlockPtr<T, R, C, TH> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, const R: usize, const C: usize, const TH: usize> Copy for BlockPtr<T, R, C, TH> {}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> BlockPtr<T, R, C, TH> {
    /// A window at `offsets` onto a tensor of `shape` with `strides`.
    #[inline(always)]
    pub fn new(base: impl AsRaw<T>, shape: [usize; 2], strides: [usize; 2], offsets: [usize; 2]) -> Self {
        BlockPtr { base: base.raw(), shape, strides, offsets, _t: PhantomData }
    }

    /// The `R×C` window at `[row, col]` of a row-major `rows×cols` matrix.
    #[inline(always)]
    pub fn rows(base: impl AsRaw<T>, rows: usize, cols: usize, at: [usize; 2]) -> Self {
        Self::new(base, [rows, cols], [cols, 1], at)
    }

    /// The window moved by `by` = [rows, cols].
    #[inline(always)]
    pub fn advance(self, by: [usize; 2]) -> Self {
        BlockPtr { offsets: [self.offsets[0] + by[0], self.offsets[1] + by[1]], ..self }
    }

    pub fn offsets(&self) -> [usize; 2] {
        self.offsets
    }
    pub fn shape(&self) -> [usize; 2] {
        self.shape
    }

    /// Element `[r, c]` of the window as f32, or `fill` where it falls
    /// outside the tensor (one scalar load: for epilogues, not main loops).
    #[inline(always)]
    pub fn get(&self, r: usize, c: usize, fill: f32) -> f32 {
        let (row, col) = (self.offsets[0] + r, self.offsets[1] + c);
        if row >= self.shape[0] || col >= self.shape[1] {
            return fill;
        }
        let at = row * self.strides[0] + col * self.strides[1];
        self.base.check("BlockPtr::get", at, 1, 1, false);
        unsafe { (*self.base.at(at)).to_f32() }
    }

    /// Where chunk `[r, c..c+8]` of the window starts in the tensor
    /// (elements from the base) and how many of its elements lie inside.
    #[inline(always)]
    fn chunk_at(&self, r: usize, c: usize) -> (usize, usize) {
        let (row, col) = (self.offsets[0] + r, self.offsets[1] + c);
        let valid = if row < self.shape[0] { self.valid_cols(col).min(V) } else { 0 };
        (row * self.strides[0] + col * self.strides[1], valid)
    }

    /// Issues the load of the 8 elements `[r, c..c+8]` of the window (zeros
    /// outside the tensor; one vector load where the chunk is whole and
    /// aligned) and hands back the chunk still in flight: a thread can start
    /// every chunk it needs before it waits for the first ([`Fetched::get`]).
    #[inline(always)]
    pub fn fetch_chunk(&self, r: usize, c: usize) -> Fetched<T> {
        let (at, valid) = self.chunk_at(r, c);
        self.base.check("BlockPtr::fetch_chunk", at, self.strides[1], valid, false);
        let p = self.base.at(at) as *const T;
        #[cfg(target_arch = "nvptx64")]
        let words = unsafe { be::fetch_chunk(p, self.strides[1], valid, T::default()) };
        #[cfg(not(target_arch = "nvptx64"))]
        let words = unsafe { be::read_chunk(p, self.strides[1], valid, T::default()) };
        Fetched { words, _t: PhantomData }
    }

    /// Stores `x` (converted to `T`) at `[r, c..c+8]` of the window, the
    /// elements inside the tensor only: one 16-byte store where the chunk
    /// is whole and aligned (a second output of a staged epilogue).
    #[inline(always)]
    pub fn put_chunk(&self, r: usize, c: usize, x: [f32; V]) {
        let (at, valid) = self.chunk_at(r, c);
        self.base.check("store_acc_staged", at, self.strides[1], valid, true);
        unsafe { be::write_chunk(self.base.at(at), self.strides[1], valid, pack_chunk(x)) }
    }

    /// Whether every 8-column chunk of the tensor is whole and aligned:
    /// columns contiguous and a multiple of 8, the base, the rows and the
    /// window's first column on 16-byte chunks. Then a chunk is all inside
    /// the tensor or all outside, and [`BlockPtr::fetch_whole_chunk`] and
    /// [`BlockPtr::put_whole_chunk`] may stand in for the general forms.
    /// Test it once, outside a loop, and run the loop in two versions.
    #[inline(always)]
    pub fn whole_chunks(&self) -> bool {
        let [rs, cs] = self.strides;
        let bytes = core::mem::size_of::<T>();
        cs == 1
            && self.shape[1] % V == 0
            && self.offsets[1] % V == 0
            && (rs * bytes) % T::CHUNK_ALIGN == 0
            && (self.base.at(0) as usize) % T::CHUNK_ALIGN == 0
    }

    /// [`BlockPtr::fetch_chunk`] where [`BlockPtr::whole_chunks`] holds (`c`
    /// a multiple of 8): one predicated vector load, zeros outside the
    /// tensor, with no per-element path (no branch in the caller's loop).
    #[inline(always)]
    pub fn fetch_whole_chunk(&self, r: usize, c: usize) -> Fetched<T> {
        let (at, valid) = self.whole_chunk_at(r, c, "BlockPtr::fetch_whole_chunk");
        self.base.check("BlockPtr::fetch_whole_chunk", at, 1, valid, false);
        let p = self.base.at(at) as *const T;
        #[cfg(target_arch = "nvptx64")]
        let words = unsafe { be::fetch_whole_chunk(p, valid > 0) };
        #[cfg(not(target_arch = "nvptx64"))]
        let words = unsafe { be::read_chunk(p, 1, valid, T::default()) };
        Fetched { words, _t: PhantomData }
    }

    /// [`BlockPtr::put_chunk`] where [`BlockPtr::whole_chunks`] holds: one
    /// predicated vector store, nothing outside the tensor.
    #[inline(always)]
    pub fn put_whole_chunk(&self, r: usize, c: usize, x: [f32; V]) {
        let (at, valid) = self.whole_chunk_at(r, c, "BlockPtr::put_whole_chunk");
        self.base.check("BlockPtr::put_whole_chunk", at, 1, valid, true);
        #[cfg(target_arch = "nvptx64")]
        unsafe {
            be::write_whole_chunk(self.base.at(at), valid > 0, pack_chunk(x))
        }
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            be::write_chunk(self.base.at(at), 1, valid, pack_chunk(x))
        }
    }

    /// [`BlockPtr::chunk_at`] for the whole-chunk forms; the interpreter
    /// refuses a tensor or chunk for which [`BlockPtr::whole_chunks`] fails
    /// (on the GPU that would be a misaligned access).
    #[inline(always)]
    fn whole_chunk_at(&self, r: usize, c: usize, what: &str) -> (usize, usize) {
        #[cfg(not(target_arch = "nvptx64"))]
        assert!(self.whole_chunks() && c % V == 0, "rustile interpreter: {what} on a tensor whose 8-column chunks are not whole and aligned (test BlockPtr::whole_chunks first)");
        let _ = what;
        self.chunk_at(r, c)
    }

    /// Whether the whole window lies inside the tensor, with rows contiguous
    /// and every 8-element chunk 16-byte aligned (so it can be copied in
    /// whole chunks with no mask).
    #[inline(always)]
    pub(crate) fn inside_aligned(&self) -> bool {
        let [rs, cs] = self.strides;
        let [r0, c0] = self.offsets;
        let bytes = core::mem::size_of::<T>();
        cs == 1
            && (rs * bytes) % 16 == 0
            && (c0 * bytes) % 16 == 0
            && (self.base.at(0) as usize) % 16 == 0
            && r0 + R <= self.shape[0]
            && c0 + C <= self.shape[1]
    }

    /// How many of the `V` columns from `col` are inside the tensor.
    #[inline(always)]
    pub(crate) fn valid_cols(&self, col: usize) -> usize {
        if col >= self.shape[1] { 0 } else { self.shape[1] - col }
    }
}

/// Eight f32 values rounded to `T` in pairs: a chunk for
/// [`BlockPtr::put_chunk`] and [`BlockPtr::put_whole_chunk`].
#[inline(always)]
fn pack_chunk<T: Elem>(x: [f32; V]) -> [T; V] {
    let mut out = [T::default(); V];
    for i in 0..V / 2 {
        [out[2 * i], out[2 * i + 1]] = T::from_f32_pair(x[2 * i], x[2 * i + 1]);
    }
    out
}

/// Runs `f(c)` for each 8-column strip (`c = 0, 8, .., C − 8`) of a
/// `C`-column window that this thread owns: on the GPU thread `t` takes
/// strips `t, t + TH, ..`; the interpreter's one thread takes them all, in
/// order. For a kernel that walks each strip down its rows in one thread,
/// keeping what it needs of the rows above in registers (a stencil along
/// the rows, a running sum) and [`BlockPtr::fetch_chunk`]ing rows ahead of
/// use: no barrier, no shared memory, and each row loaded once.
#[inline(always)]
pub fn for_each_strip<const C: usize, const TH: usize>(mut f: impl FnMut(usize)) {
    let () = Strips::<C>::OK;
    #[cfg(target_arch = "nvptx64")]
    let (mut s, step) = (rustile_device::thread_idx() as usize, TH);
    #[cfg(not(target_arch = "nvptx64"))]
    let (mut s, step) = (0, 1);
    while s < C / V {
        f(s * V);
        s += step;
    }
}

/// Compile-time check: whole strips.
struct Strips<const C: usize>;
impl<const C: usize> Strips<C> {
    const OK: () = assert!(C % V == 0, "for_each_strip: the window's columns must be whole 8-column strips");
}

/// A chunk of 8 elements whose load was issued by [`BlockPtr::fetch_chunk`]
/// (zeros outside the tensor), kept packed until [`Fetched::get`].
#[derive(Clone, Copy)]
pub struct Fetched<T> {
    #[cfg(target_arch = "nvptx64")]
    words: be::Chunk,
    #[cfg(not(target_arch = "nvptx64"))]
    words: [T; V],
    _t: PhantomData<T>,
}

impl<T: Elem> Fetched<T> {
    /// A chunk of zeros, for an operand an epilogue does not use.
    #[inline(always)]
    pub fn zeros() -> Self {
        #[cfg(target_arch = "nvptx64")]
        return Fetched { words: [0; 8], _t: PhantomData };
        #[cfg(not(target_arch = "nvptx64"))]
        return Fetched { words: [T::default(); V], _t: PhantomData };
    }

    /// The 8 values as f32 (here the thread waits for the load).
    #[inline(always)]
    pub fn get(self) -> [f32; V] {
        #[cfg(target_arch = "nvptx64")]
        let x: [T; V] = be::unpack(be::settle::<T>(self.words));
        #[cfg(not(target_arch = "nvptx64"))]
        let x = self.words;
        let mut out = [0.0; V];
        for i in 0..V {
            out[i] = x[i].to_f32();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16;

    /// A bf16 tensor of `rows×cols` holding `1 + index`, 16-byte aligned.
    fn tensor(rows: usize, cols: usize) -> (Vec<u128>, Ptr<bf16>) {
        let mut store = vec![0u128; (rows * cols * 2).div_ceil(16)];
        let p = store.as_mut_ptr() as *mut bf16;
        for i in 0..rows * cols {
            unsafe { *p.add(i) = bf16::from_f32(1.0 + i as f32) };
        }
        let ptr = unsafe { Ptr::from_raw(p, rows * cols) };
        (store, ptr)
    }

    #[test]
    fn whole_chunks_read_like_the_general_form() {
        let (_keep, x) = tensor(3, 24);
        let at = BlockPtr::<bf16, 4, 16, 32>::rows(x, 3, 24, [0, 8]);
        assert!(at.whole_chunks());
        // Rows 0..4 (the last past the tensor), chunks at 8 and 16 of the window (the second past its columns).
        for r in 0..4 {
            for c in [0, 8, 16] {
                assert_eq!(at.fetch_whole_chunk(r, c).get(), at.fetch_chunk(r, c).get(), "[{r}, {c}]");
            }
        }
        assert_eq!(at.fetch_whole_chunk(1, 0).get()[0], 1.0 + 24.0 + 8.0);
        assert_eq!(at.fetch_whole_chunk(3, 0).get(), [0.0; V]);
        // Columns not a multiple of 8, or a window starting inside a chunk: not whole.
        let (_keep, y) = tensor(3, 20);
        assert!(!BlockPtr::<bf16, 4, 16, 32>::rows(y, 3, 20, [0, 0]).whole_chunks());
        assert!(!BlockPtr::<bf16, 4, 16, 32>::rows(x, 3, 24, [0, 4]).whole_chunks());
    }

    #[test]
    #[should_panic(expected = "not whole and aligned")]
    fn the_interpreter_refuses_a_whole_chunk_read_of_ragged_rows() {
        let (_keep, y) = tensor(3, 20);
        let _ = BlockPtr::<bf16, 4, 16, 32>::rows(y, 3, 20, [0, 0]).fetch_whole_chunk(0, 0);
    }

    #[test]
    fn the_interpreter_walks_every_strip_in_order() {
        let mut seen = Vec::new();
        for_each_strip::<40, 2>(|c| seen.push(c));
        assert_eq!(seen, [0, 8, 16, 24, 32]);
    }
}
