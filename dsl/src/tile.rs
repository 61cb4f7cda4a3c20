//! Tiles and the vectors that broadcast over them.
//!
//! * [`Tile<T, R, C>`]: an `R×C` block of values, the unit every kernel works in;
//! * [`Col<T, R, C>`]: one value per row of such a tile (what a row reduction
//!   returns, e.g. a running max): it broadcasts along the columns;
//! * [`Row<T, R, C>`]: one value per column (e.g. a LayerNorm weight): it
//!   broadcasts along the rows.
//!
//! Arithmetic is done in f32; other element types are for memory (`load`,
//! `cast`, `store`). Every method is one expression of the whole tile: how
//! the elements are spread over threads (see [`layout`](crate::layout)) is
//! the backend's business, so the same kernel runs on the GPU and in the CPU
//! interpreter. Inside a `#[kernel]` these types take `<T, R, C>`; the
//! program's thread count `TH` is filled in per config.
//!
//! The argument-order rule used everywhere: the place comes first, then the
//! values (`store(&dst, &tile)`, `col.store(ptr, start, n)`).
use crate::backend::{self as be, held_cols, held_rows};
use crate::layout::{Shape, V};
use crate::math;
use crate::{BlockPtr, Elem, Ptr, PtrMut};

/// Elements of a tile held by one thread (all of them on the CPU).
///
/// Every tile type's size bound goes through here, so a shape that cannot be
/// laid out over the program is rejected while type-checking the kernel
/// (`cargo check` included), on both backends.
pub const fn len(r: usize, c: usize, th: usize) -> usize {
    if let Some(why) = crate::layout::check(r, c, th) {
        panic!("{}", why);
    }
    held_rows(r, c, th) * held_cols(c, th)
}

#[derive(Clone, Copy)]
pub struct Tile<T, const R: usize, const C: usize, const TH: usize>
where
    [(); len(R, C, TH)]:,
{
    pub(crate) v: [T; len(R, C, TH)],
}

#[derive(Clone, Copy)]
pub struct Col<T, const R: usize, const C: usize, const TH: usize>
where
    [(); held_rows(R, C, TH)]:,
{
    pub(crate) v: [T; held_rows(R, C, TH)],
}

#[derive(Clone, Copy)]
pub struct Row<T, const R: usize, const C: usize, const TH: usize>
where
    [(); held_cols(C, TH)]:,
{
    pub(crate) v: [T; held_cols(C, TH)],
}

// ---- construction and elementwise maps (any element type) ------------------------------

impl<T: Copy, const R: usize, const C: usize, const TH: usize> Tile<T, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    /// Columns held per row by this thread: element `e` is in held row `e / W`, held column `e % W`.
    const W: usize = held_cols(C, TH);

    // (No shape check here: the `len` bound of every tile type already is one.)

    /// Every element `x`.
    #[inline(always)]
    pub fn splat(x: T) -> Self {
        Tile { v: [x; len(R, C, TH)] }
    }

    /// The tile whose element at (row, col) (within the tile) is `f(row, col)`.
    #[inline(always)]
    pub fn from_fn(f: impl Fn(usize, usize) -> T) -> Self {
        // A loop here (always inlined, then unrolled), not `core::array::from_fn`:
        // that is a function of its own, which LLVM kept out of line, its array
        // in local memory, once `f` was large (the NVFP4 decode of a tile).
        let mut v = [core::mem::MaybeUninit::<T>::uninit(); len(R, C, TH)];
        for (e, x) in v.iter_mut().enumerate() {
            x.write(f(be::tile_row::<C, TH>(e / Self::W), be::tile_col::<C, TH>(e % Self::W)));
        }
        // SAFETY: the loop wrote every element.
        Tile { v: unsafe { core::mem::transmute_copy(&v) } }
    }

    #[inline(always)]
    pub fn map<U: Copy>(self, f: impl Fn(T) -> U) -> Tile<U, R, C, TH> {
        Tile { v: core::array::from_fn(|e| f(self.v[e])) }
    }

    #[inline(always)]
    pub fn zip<U: Copy, O: Copy>(self, o: Tile<U, R, C, TH>, f: impl Fn(T, U) -> O) -> Tile<O, R, C, TH> {
        Tile { v: core::array::from_fn(|e| f(self.v[e], o.v[e])) }
    }

    /// Combines each element with its row's value of `c`.
    #[inline(always)]
    pub fn zip_col<U: Copy, O: Copy>(self, c: Col<U, R, C, TH>, f: impl Fn(T, U) -> O) -> Tile<O, R, C, TH>
    where
        [(); held_rows(R, C, TH)]:,
    {
        Tile { v: core::array::from_fn(|e| f(self.v[e], c.v[e / Self::W])) }
    }

    /// Combines each element with its column's value of `r`.
    #[inline(always)]
    pub fn zip_row<U: Copy, O: Copy>(self, r: Row<U, R, C, TH>, f: impl Fn(T, U) -> O) -> Tile<O, R, C, TH>
    where
        [(); held_cols(C, TH)]:,
    {
        Tile { v: core::array::from_fn(|e| f(self.v[e], r.v[e % Self::W])) }
    }
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Tile<T, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    /// Converts every element (through f32, rounding to nearest even), two at
    /// a time: a 16-bit pair is one conversion instruction on the GPU.
    #[inline(always)]
    pub fn cast<U: Elem>(self) -> Tile<U, R, C, TH> {
        // Tiles hold whole 8-element chunks, so the length is even.
        let mut v = [U::default(); len(R, C, TH)];
        for e in (0..len(R, C, TH)).step_by(2) {
            [v[e], v[e + 1]] = U::from_f32_pair(self.v[e].to_f32(), self.v[e + 1].to_f32());
        }
        Tile { v }
    }
}

impl<const R: usize, const C: usize, const TH: usize> Tile<bool, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    /// `a` where this mask is true, else `b`.
    #[inline(always)]
    pub fn select<T: Copy>(self, a: Tile<T, R, C, TH>, b: Tile<T, R, C, TH>) -> Tile<T, R, C, TH> {
        Tile { v: core::array::from_fn(|e| if self.v[e] { a.v[e] } else { b.v[e] }) }
    }
}

// ---- f32 math and reductions -----------------------------------------------------------

macro_rules! unary_math {
    ($($name:ident => $f:path),* $(,)?) => {
        $(
            #[doc = concat!("Elementwise `", stringify!($name), "`.")]
            #[inline(always)]
            pub fn $name(self) -> Self { Self { v: self.v.map($f) } }
        )*
    };
}
pub(crate) use unary_math;

macro_rules! math_methods {
    () => {
        crate::tile::unary_math!(
            exp => math::exp, exp2 => math::exp2, log => math::log, log2 => math::log2,
            sqrt => math::sqrt, rsqrt => math::rsqrt, tanh => math::tanh, abs => math::abs,
            sigmoid => math::sigmoid, silu => math::silu, gelu_tanh => math::gelu_tanh,
        );
        /// Elementwise `1/x`.
        #[inline(always)]
        pub fn recip(self) -> Self { Self { v: self.v.map(|x| 1.0 / x) } }
        /// Elementwise `max(x, 0)`.
        #[inline(always)]
        pub fn relu(self) -> Self { Self { v: self.v.map(|x| math::max(x, 0.0)) } }
        // (Index loops here and below: an array's by-value iterator keeps its
        // position in memory, which on the GPU becomes a stack frame.)
        /// Elementwise maximum of two.
        #[inline(always)]
        pub fn max(self, o: Self) -> Self { let mut v = self.v; for i in 0..v.len() { v[i] = math::max(v[i], o.v[i]) } Self { v } }
        /// Elementwise minimum of two.
        #[inline(always)]
        pub fn min(self, o: Self) -> Self { let mut v = self.v; for i in 0..v.len() { v[i] = math::min(v[i], o.v[i]) } Self { v } }
    };
}

impl<const R: usize, const C: usize, const TH: usize> Tile<f32, R, C, TH>
where
    [(); len(R, C, TH)]:,
    [(); held_rows(R, C, TH)]:,
    [(); held_cols(C, TH)]:,
{
    math_methods!();

    /// Zeros.
    #[inline(always)]
    pub fn zeros() -> Self {
        Self::splat(0.0)
    }

    /// Elementwise `self < o` as a mask.
    #[inline(always)]
    pub fn lt(self, o: Self) -> Tile<bool, R, C, TH> {
        self.zip(o, |a, b| a < b)
    }

    /// Folds each row with `op` (along axis 1): one value per row.
    #[inline(always)]
    pub fn reduce_rows(self, init: f32, op: impl Fn(f32, f32) -> f32 + Copy) -> Col<f32, R, C, TH> {
        let mut parts = [self.row_partials(init, op)];
        be::row_allreduce::<C, TH, { held_rows(R, C, TH) }, 1>(&mut parts, op);
        Col { v: parts[0] }
    }

    /// The row sums of `K` tiles in one block-wide round: the threads of a
    /// row meet once (one pair of barriers) instead of `K` times.
    #[inline(always)]
    pub fn row_sums<const K: usize>(tiles: [Self; K]) -> [Col<f32, R, C, TH>; K] {
        let add = |a: f32, b: f32| a + b;
        // `from_fn` over indices, not `map` by value: that would copy the tiles through the stack.
        let mut parts: [[f32; held_rows(R, C, TH)]; K] = core::array::from_fn(|k| tiles[k].row_partials(-0.0, add));
        be::row_allreduce::<C, TH, { held_rows(R, C, TH) }, K>(&mut parts, add);
        core::array::from_fn(|k| Col { v: parts[k] })
    }

    /// This thread's fold of each of its rows.
    #[inline(always)]
    fn row_partials(self, init: f32, op: impl Fn(f32, f32) -> f32 + Copy) -> [f32; held_rows(R, C, TH)] {
        let w = Self::W;
        let mut parts = [init; held_rows(R, C, TH)];
        for (i, p) in parts.iter_mut().enumerate() {
            // Eight independent chains (one per column of a chunk), then a
            // tree: latency hiding on the GPU, pairwise rounding on the CPU.
            let mut lanes = [init; V];
            for k in 0..w {
                lanes[k % V] = op(lanes[k % V], self.v[i * w + k]);
            }
            let mut n = V / 2;
            while n > 0 {
                for l in 0..n {
                    lanes[l] = op(lanes[l], lanes[l + n]);
                }
                n /= 2;
            }
            *p = lanes[0];
        }
        parts
    }

    /// Folds each column with `op` (along axis 0): one value per column.
    #[inline(always)]
    pub fn reduce_cols(self, init: f32, op: impl Fn(f32, f32) -> f32 + Copy) -> Row<f32, R, C, TH> {
        let w = Self::W;
        let mut parts = [init; held_cols(C, TH)];
        for e in 0..len(R, C, TH) {
            parts[e % w] = op(parts[e % w], self.v[e]);
        }
        be::col_allreduce::<C, TH, { held_cols(C, TH) }>(&mut parts, op);
        Row { v: parts }
    }

    /// Sum of each row.
    #[inline(always)]
    pub fn row_sum(self) -> Col<f32, R, C, TH> {
        // −0 is the identity of + (0 is not: 0 + −0 = 0), so the first add folds away.
        self.reduce_rows(-0.0, |a, b| a + b)
    }
    /// Maximum of each row (−∞ for an empty or all-masked row).
    #[inline(always)]
    pub fn row_max(self) -> Col<f32, R, C, TH> {
        self.reduce_rows(f32::NEG_INFINITY, math::max)
    }
    /// Sum of each column.
    #[inline(always)]
    pub fn col_sum(self) -> Row<f32, R, C, TH> {
        self.reduce_cols(-0.0, |a, b| a + b)
    }
    /// Maximum of each column.
    #[inline(always)]
    pub fn col_max(self) -> Row<f32, R, C, TH> {
        self.reduce_cols(f32::NEG_INFINITY, math::max)
    }
}

// ---- the vectors -------------------------------------------------------------------------

impl<T: Copy, const R: usize, const C: usize, const TH: usize> Col<T, R, C, TH>
where
    [(); held_rows(R, C, TH)]:,
{
    #[inline(always)]
    pub fn splat(x: T) -> Self {
        let () = Shape::<R, C, TH>::OK;
        Col { v: [x; held_rows(R, C, TH)] }
    }
    #[inline(always)]
    pub fn map<U: Copy>(self, f: impl Fn(T) -> U) -> Col<U, R, C, TH> {
        Col { v: self.v.map(f) }
    }
    #[inline(always)]
    pub fn zip<U: Copy, O: Copy>(self, o: Col<U, R, C, TH>, f: impl Fn(T, U) -> O) -> Col<O, R, C, TH> {
        Col { v: core::array::from_fn(|i| f(self.v[i], o.v[i])) }
    }
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Col<T, R, C, TH>
where
    [(); held_rows(R, C, TH)]:,
{
    /// Column `c` of a block pointer's window (element `[i, c]` of each of
    /// its rows); rows past the end are zero. Loaded without a branch, so it
    /// can be issued ahead like a tile.
    #[inline(always)]
    pub fn load_column(src: &BlockPtr<T, R, C, TH>, c: usize) -> Self {
        let col = src.offsets[1] + c;
        Col {
            v: core::array::from_fn(|i| {
                let row = src.offsets[0] + be::tile_row::<C, TH>(i);
                let inside = row < src.shape[0] && col < src.shape[1];
                let at = row * src.strides[0] + col * src.strides[1];
                src.base.check("Col::load_column", at, 1, inside as usize, false);
                unsafe { be::read_one(src.base.at(at), inside, T::from_f32(0.0)) }
            }),
        }
    }

    /// Elements `start .. start+R` of a 1-D tensor of length `n`; missing ones are zero.
    #[inline(always)]
    pub fn load(src: Ptr<T>, start: usize, n: usize) -> Self {
        let fill = T::from_f32(0.0);
        let () = Shape::<R, C, TH>::OK;
        Col {
            v: core::array::from_fn(|i| {
                let row = start + be::tile_row::<C, TH>(i);
                if row < n {
                    src.0.check("Col::load", row, 1, 1, false);
                    unsafe { *src.0.at(row) }
                } else {
                    fill
                }
            }),
        }
    }

    /// Writes rows `start .. start+R` that are below `n` (one thread per row writes).
    #[inline(always)]
    pub fn store(self, dst: PtrMut<T>, start: usize, n: usize) {
        self.scatter(dst, start, n, |row| row);
    }

    /// [`Col::store`] through an index map: row `row = start + i` (where
    /// below `n`) goes to `dst[at(row)]`, for a vector whose rows are not
    /// contiguous in the destination.
    #[inline(always)]
    pub fn scatter(self, dst: PtrMut<T>, start: usize, n: usize, at: impl Fn(usize) -> usize) {
        if !be::owns_row::<C, TH>() {
            return;
        }
        for (i, x) in self.v.iter().enumerate() {
            let row = start + be::tile_row::<C, TH>(i);
            if row < n {
                let to = at(row);
                dst.0.check("Col::scatter", to, 1, 1, true);
                unsafe { *dst.0.at(to) = *x };
            }
        }
    }
}

impl<T: Copy, const R: usize, const C: usize, const TH: usize> Row<T, R, C, TH>
where
    [(); held_cols(C, TH)]:,
{
    #[inline(always)]
    pub fn splat(x: T) -> Self {
        let () = Shape::<R, C, TH>::OK;
        Row { v: [x; held_cols(C, TH)] }
    }
    #[inline(always)]
    pub fn map<U: Copy>(self, f: impl Fn(T) -> U) -> Row<U, R, C, TH> {
        Row { v: self.v.map(f) }
    }
    #[inline(always)]
    pub fn zip<U: Copy, O: Copy>(self, o: Row<U, R, C, TH>, f: impl Fn(T, U) -> O) -> Row<O, R, C, TH> {
        Row { v: core::array::from_fn(|i| f(self.v[i], o.v[i])) }
    }
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Row<T, R, C, TH>
where
    [(); held_cols(C, TH)]:,
{
    /// Elements `start .. start+C` of a 1-D tensor of length `n`; missing ones are zero.
    #[inline(always)]
    pub fn load(src: Ptr<T>, start: usize, n: usize) -> Self {
        let fill = T::from_f32(0.0);
        let () = Shape::<R, C, TH>::OK;
        let mut v = [fill; held_cols(C, TH)];
        for j in 0..held_cols(C, TH) / V {
            let col = start + be::tile_col::<C, TH>(j * V);
            let valid = if col >= n { 0 } else { n - col };
            src.0.check("Row::load", col, 1, valid.min(V), false);
            let chunk = unsafe { be::read_chunk(src.0.at(col), 1, valid, fill) };
            v[j * V..j * V + V].copy_from_slice(&chunk);
        }
        Row { v }
    }

    /// Writes elements `start .. start+C` that are below `n` (the first row
    /// group of threads writes, a chunk at a time): a column reduction's result.
    #[inline(always)]
    pub fn store(self, dst: PtrMut<T>, start: usize, n: usize) {
        if !be::owns_col::<C, TH>() {
            return;
        }
        for j in 0..held_cols(C, TH) / V {
            let col = start + be::tile_col::<C, TH>(j * V);
            let valid = if col >= n { 0 } else { n - col };
            dst.0.check("Row::store", col, 1, valid.min(V), true);
            let mut chunk = [T::from_f32(0.0); V];
            chunk.copy_from_slice(&self.v[j * V..j * V + V]);
            unsafe { be::write_chunk(dst.0.at(col), 1, valid, chunk) };
        }
    }

    /// Converts every element (through f32).
    #[inline(always)]
    pub fn cast<U: Elem>(self) -> Row<U, R, C, TH> {
        self.map(|x| U::from_f32(x.to_f32()))
    }
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Col<T, R, C, TH>
where
    [(); held_rows(R, C, TH)]:,
{
    /// Converts every element (through f32).
    #[inline(always)]
    pub fn cast<U: Elem>(self) -> Col<U, R, C, TH> {
        self.map(|x| U::from_f32(x.to_f32()))
    }
}

impl<const R: usize, const C: usize, const TH: usize> Col<f32, R, C, TH>
where
    [(); held_rows(R, C, TH)]:,
{
    math_methods!();
}

impl<const R: usize, const C: usize, const TH: usize> Row<f32, R, C, TH>
where
    [(); held_cols(C, TH)]:,
{
    math_methods!();
}

// ---- memory ----------------------------------------------------------------------------

/// Loads the block pointer's window; elements outside the tensor are zero.
#[inline(always)]
pub fn load<T: Elem, const R: usize, const C: usize, const TH: usize>(src: &BlockPtr<T, R, C, TH>) -> Tile<T, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    load_or(src, 0.0)
}

/// Loads the block pointer's window; elements outside the tensor are `fill`
/// (e.g. `f32::NEG_INFINITY` before a max).
#[inline(always)]
pub fn load_or<T: Elem, const R: usize, const C: usize, const TH: usize>(src: &BlockPtr<T, R, C, TH>, fill: f32) -> Tile<T, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    let fill = T::from_f32(fill);
    let mut out = Tile::<T, R, C, TH>::splat(fill);
    let w = held_cols(C, TH);
    let [rs, cs] = src.strides;
    let at = |e: usize| {
        let (i, j) = (e / w, (e % w) / V);
        let row = src.offsets[0] + be::tile_row::<C, TH>(i);
        let col = src.offsets[1] + be::tile_col::<C, TH>(j * V);
        // A row past the end loads nothing (valid = 0), without a branch.
        let valid = if row < src.shape[0] { src.valid_cols(col) } else { 0 };
        let first = row * rs + col * cs;
        src.base.check("load", first, cs, valid.min(V), false);
        (src.base.at(first), valid)
    };
    #[cfg(target_arch = "nvptx64")]
    {
        // Every chunk in flight first, then unpack (see `backend::gpu::Chunk`).
        let mut words = [[0u32; 8]; len(R, C, TH)];
        for e in (0..len(R, C, TH)).step_by(V) {
            let (p, valid) = at(e);
            words[e] = unsafe { be::fetch_chunk(p, cs, valid, fill) };
        }
        for e in (0..len(R, C, TH)).step_by(V) {
            out.v[e..e + V].copy_from_slice(&be::unpack::<T>(be::settle::<T>(words[e])));
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for e in (0..len(R, C, TH)).step_by(V) {
        let (p, valid) = at(e);
        out.v[e..e + V].copy_from_slice(&unsafe { be::read_chunk(p, cs, valid, fill) });
    }
    out
}

/// Stores a tile into the block pointer's window; elements outside the tensor are skipped.
#[inline(always)]
pub fn store<T: Elem, const R: usize, const C: usize, const TH: usize>(dst: &BlockPtr<T, R, C, TH>, tile: &Tile<T, R, C, TH>)
where
    [(); len(R, C, TH)]:,
{
    let w = held_cols(C, TH);
    let [rs, cs] = dst.strides;
    for i in 0..held_rows(R, C, TH) {
        let row = dst.offsets[0] + be::tile_row::<C, TH>(i);
        for j in 0..w / V {
            let col = dst.offsets[1] + be::tile_col::<C, TH>(j * V);
            // A row past the end stores nothing (valid = 0), without a branch.
            let valid = if row < dst.shape[0] { dst.valid_cols(col) } else { 0 };
            let first = row * rs + col * cs;
            dst.base.check("store", first, cs, valid.min(V), true);
            let mut chunk = [tile.v[0]; V];
            chunk.copy_from_slice(&tile.v[i * w + j * V..i * w + j * V + V]);
            unsafe { be::write_chunk(dst.base.at(first), cs, valid, chunk) };
        }
    }
}

// ---- operators ---------------------------------------------------------------------------

macro_rules! binary_ops {
    ($($Op:ident $op:ident $sym:tt),*) => {$(
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op for Tile<f32, R, C, TH>
        where [(); len(R, C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, o: Self) -> Self { self.zip(o, |a, b| a $sym b) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op<f32> for Tile<f32, R, C, TH>
        where [(); len(R, C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, s: f32) -> Self { self.map(|a| a $sym s) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op<Tile<f32, R, C, TH>> for f32
        where [(); len(R, C, TH)]: {
            type Output = Tile<f32, R, C, TH>;
            #[inline(always)]
            fn $op(self, t: Tile<f32, R, C, TH>) -> Tile<f32, R, C, TH> { t.map(|a| self $sym a) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op<Col<f32, R, C, TH>> for Tile<f32, R, C, TH>
        where [(); len(R, C, TH)]:, [(); held_rows(R, C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, c: Col<f32, R, C, TH>) -> Self { self.zip_col(c, |a, b| a $sym b) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op<Row<f32, R, C, TH>> for Tile<f32, R, C, TH>
        where [(); len(R, C, TH)]:, [(); held_cols(C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, r: Row<f32, R, C, TH>) -> Self { self.zip_row(r, |a, b| a $sym b) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op for Col<f32, R, C, TH>
        where [(); held_rows(R, C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, o: Self) -> Self { self.zip(o, |a, b| a $sym b) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op<f32> for Col<f32, R, C, TH>
        where [(); held_rows(R, C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, s: f32) -> Self { self.map(|a| a $sym s) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op for Row<f32, R, C, TH>
        where [(); held_cols(C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, o: Self) -> Self { self.zip(o, |a, b| a $sym b) }
        }
        impl<const R: usize, const C: usize, const TH: usize> core::ops::$Op<f32> for Row<f32, R, C, TH>
        where [(); held_cols(C, TH)]: {
            type Output = Self;
            #[inline(always)]
            fn $op(self, s: f32) -> Self { self.map(|a| a $sym s) }
        }
    )*};
}
binary_ops!(Add add +, Sub sub -, Mul mul *, Div div /);

impl<const R: usize, const C: usize, const TH: usize> core::ops::Neg for Tile<f32, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        self.map(|a| -a)
    }
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Tile<T, R, C, TH>
where
    [(); len(R, C, TH)]:,
{
    /// Writes each element `(row, col)` to `dst[at(row, col)]`, or nowhere
    /// where `at` gives `None`: one scalar store an element, for a layout no
    /// block pointer describes (an FP8 Vᵀ with its keys permuted). The tile
    /// must have at least `8·TH` elements, so that each is held by one thread.
    #[inline(always)]
    pub fn scatter(self, dst: PtrMut<T>, at: impl Fn(usize, usize) -> Option<usize>) {
        for (e, x) in self.v.iter().enumerate() {
            let (row, col) = (be::tile_row::<C, TH>(e / Self::W), be::tile_col::<C, TH>(e % Self::W));
            if let Some(to) = at(row, col) {
                dst.0.check("Tile::scatter", to, 1, 1, true);
                unsafe { *dst.0.at(to) = *x };
            }
        }
    }

    /// Writes each pair of neighbouring elements, `(row, 2j)` and
    /// `(row, 2j + 1)`, as one value `pack(first, second)` to
    /// `dst[at(row, j)]`, or nowhere where `at` gives `None`: how a tile of
    /// values becomes a tensor of packed pairs (FP4, two values a byte:
    /// `pack` is [`F4E2M1x2::encode`](crate::F4E2M1x2::encode)). Both
    /// elements of a pair are always one thread's (a thread holds whole
    /// 8-column chunks), so no values move between threads; each pair is one
    /// scalar store. The tile must have at least `8·TH` elements, as for
    /// [`Tile::scatter`].
    #[inline(always)]
    pub fn scatter_pairs<U: Elem>(self, dst: PtrMut<U>, pack: impl Fn(T, T) -> U, at: impl Fn(usize, usize) -> Option<usize>) {
        for e in (0..len(R, C, TH)).step_by(2) {
            let (row, col) = (be::tile_row::<C, TH>(e / Self::W), be::tile_col::<C, TH>(e % Self::W));
            if let Some(to) = at(row, col / 2) {
                dst.0.check("Tile::scatter_pairs", to, 1, 1, true);
                unsafe { *dst.0.at(to) = pack(self.v[e], self.v[e + 1]) };
            }
        }
    }
}
