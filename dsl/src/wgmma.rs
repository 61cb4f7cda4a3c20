//! Hopper's warpgroup matrix products (`wgmma`, sm_90a): the tensor cores
//! read both operand tiles straight from shared memory, run asynchronously
//! beside the program's other work, and accumulate into registers.
//!
//! A main loop with them reads like this (the `cp.async` ring around it is
//! `ops::gemm::mainloop_wgmma`):
//!
//! ```ignore
//! let mut acc = Acc::<BM, BN, THREADS, true>::zeros();  // the wgmma layout
//! for kt in 0..steps {
//!     wait_copies::<{ STAGES - 3 }>();
//!     wgmma::fence_shared();       // copies → visible to the tensor cores
//!     sync();
//!     wgmma::dot_async(&sa(kt), &sb(kt), &mut acc);
//!     fill(kt + STAGES - 2);        // overlaps the tensor cores
//!     wgmma::wait::<1, BM, BN, TH>(&mut acc); // the step before this one is done
//! }
//! wgmma::wait::<0, BM, BN, TH>(&mut acc);
//! ```
//!
//! The program's warps form `TH/128` warpgroups; warpgroup `g` computes rows
//! `64g..64g+64` of the `M×N` block (so `M = 64·TH/128`) against all `N`
//! columns (64, 128 or 256). Operand tiles are K-major (`Shared<T, M, K>`,
//! `Shared<T, N, K>`) with rows of 32, 64 or 128 bytes (`K` 16, 32 or 64
//! for bf16/f16; 32, 64 or 128 for the FP8 formats e4m3/e5m2, which the
//! tensor cores multiply twice as deep per instruction, and which A and B
//! may mix), which is exactly
//! the swizzle `Shared` and the copy engine store (16-byte chunk `c` of row
//! `r` at `c ^ f(r)`): the descriptors name the hardware's matching mode, so
//! the tile must start at a multiple of 8 rows.
//!
//! On the CPU `dot_async` multiplies at once and `wait` does nothing: the
//! interpreter runs the same kernel source to the same result.
use crate::mma::{acc_len, Acc, Packed, Shared};
use crate::{Elem, Kind};

/// Why `M` rows cannot be a `wgmma` product on `TH` threads (64 a warpgroup), or `None`.
const fn check_rows(m: usize, th: usize) -> Option<&'static str> {
    if th % 128 != 0 || m != 64 * (th / 128) {
        return Some("wgmma: the program is TH/128 warpgroups, 64 rows each: M must be 64·WARPS/4");
    }
    None
}

/// Why an `M×N` accumulator over `K`-deep operands of kinds `a` and `b`
/// cannot be a `wgmma` product on `TH` threads, or `None`.
pub const fn check(m: usize, n: usize, k: usize, a: Kind, b: Kind, th: usize) -> Option<&'static str> {
    if let Some(why) = check_rows(m, th) {
        return Some(why);
    }
    if !(n == 64 || n == 128 || n == 256) {
        return Some("wgmma: N (the block's columns) must be 64, 128 or 256");
    }
    let bytes = match (a, b) {
        (Kind::Bf16, Kind::Bf16) | (Kind::F16, Kind::F16) => 2,
        (Kind::E4M3 | Kind::E5M2, Kind::E4M3 | Kind::E5M2) => 1,
        _ => return Some("wgmma: operands are both bf16, both f16, or FP8 (e4m3 or e5m2, either with either)"),
    };
    let row = k * bytes;
    if !(row == 32 || row == 64 || row == 128) {
        return Some("wgmma: a shared tile's row (K elements) must be 32, 64 or 128 bytes: K 16, 32 or 64 for 16-bit operands, 32, 64 or 128 for 8-bit");
    }
    None
}

/// Compile-time form of [`check`].
pub struct WgShape<TA, TB, const M: usize, const N: usize, const K: usize, const TH: usize>(core::marker::PhantomData<(TA, TB)>);
impl<TA: Elem, TB: Elem, const M: usize, const N: usize, const K: usize, const TH: usize> WgShape<TA, TB, M, N, K, TH> {
    pub const OK: () = match check(M, N, K, TA::KIND, TB::KIND, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

// ---- warp specialization ----------------------------------------------------------------

/// Whether this thread is in the copy warpgroup of a warp-specialized
/// program: `TH` threads compute (`Acc<_, _, TH, true>`), and the 128 after
/// them only issue copies. Never in the CPU interpreter, whose one thread
/// per program does every role.
#[inline(always)]
pub fn is_copier<const TH: usize>() -> bool {
    #[cfg(target_arch = "nvptx64")]
    return rustile_device::thread_idx() as usize >= TH;
    #[cfg(not(target_arch = "nvptx64"))]
    return false;
}

/// Whether this thread issues the copy warpgroup's copies (its first).
#[inline(always)]
pub fn is_copy_issuer<const TH: usize>() -> bool {
    #[cfg(target_arch = "nvptx64")]
    return rustile_device::thread_idx() as usize == TH;
    #[cfg(not(target_arch = "nvptx64"))]
    return false;
}

/// Whether this thread is in the first warp of the copy warpgroup: the
/// issuer and the 31 lanes beside it, for copies a warp shares
/// (`SharedVec::copy_from_warp`).
#[inline(always)]
pub fn is_copy_warp<const TH: usize>() -> bool {
    #[cfg(target_arch = "nvptx64")]
    return rustile_device::thread_idx() as usize / 32 == TH / 32;
    #[cfg(not(target_arch = "nvptx64"))]
    return false;
}

/// Whether this thread is the first of its warpgroup (the one that issues
/// the warpgroup's own copy-engine work: `tma::SharedSum` additions).
/// Always in the interpreter, whose one thread a program does every role.
#[inline(always)]
pub fn is_warpgroup_leader() -> bool {
    #[cfg(target_arch = "nvptx64")]
    return rustile_device::thread_idx() % 128 == 0;
    #[cfg(not(target_arch = "nvptx64"))]
    return true;
}

/// Ends this thread of the copy warpgroup (on the GPU: `exit`, so that
/// whatever the other threads run next is theirs alone; barriers of the
/// whole program stop counting it).
#[inline(always)]
pub fn copier_done() -> ! {
    #[cfg(target_arch = "nvptx64")]
    rustile_device::exit();
    #[cfg(not(target_arch = "nvptx64"))]
    unreachable!("the interpreter runs no copy warpgroup");
}

/// Calls `f(row, part)` for the pieces of a `ROWS`-row tile, `PARTS` a
/// row (a power of two up to 32), that this thread works on when its
/// warpgroup shares the tile out (a copy warpgroup that also transforms
/// what it copied): each warp takes bands of `32 / PARTS` consecutive
/// rows, its lanes along a row's parts first, so a warp's reads of
/// consecutive parts are consecutive bytes. The interpreter's one thread
/// takes every piece.
#[inline(always)]
pub fn warpgroup_pieces<const ROWS: usize, const PARTS: usize>(mut f: impl FnMut(usize, usize)) {
    assert!(PARTS.is_power_of_two() && PARTS <= 32 && ROWS % (128 / PARTS) == 0, "warpgroup_pieces: PARTS a power of two up to 32, ROWS a multiple of 128 / PARTS");
    #[cfg(target_arch = "nvptx64")]
    {
        let t = rustile_device::thread_idx() as usize % 128;
        let (warp, lane) = (t / 32, t % 32);
        for band in 0..ROWS / (128 / PARTS) {
            f(band * (128 / PARTS) + warp * (32 / PARTS) + lane / PARTS, lane % PARTS);
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for row in 0..ROWS {
        for part in 0..PARTS {
            f(row, part);
        }
    }
}

/// Which warpgroup of the program this thread is in (0 in the interpreter).
#[inline(always)]
pub fn warpgroup() -> usize {
    #[cfg(target_arch = "nvptx64")]
    return rustile_device::thread_idx() as usize / 128;
    #[cfg(not(target_arch = "nvptx64"))]
    return 0;
}

/// `GROUPS` warpgroups that take turns at issuing their tensor-core work
/// (FlashAttention-3's ping-pong): warpgroup `g` [`Turns::wait`]s for its
/// turn, issues its `wgmma`s, and [`Turns::pass`]es the turn to `g + 1`
/// (the last to the first), so one warpgroup's products run while the
/// others do their softmax. A turn is named barrier `first + g` of two
/// warpgroups: the waiting one and the one that passes.
///
/// Every warpgroup takes the same number of turns. The interpreter's one
/// thread a program takes every turn: there the calls do nothing. Turns
/// made with `on = false` do nothing either (a config without ping-pong).
#[derive(Clone, Copy)]
pub struct Turns<const GROUPS: usize> {
    first: u32,
    on: bool,
}

impl<const GROUPS: usize> Turns<GROUPS> {
    /// Turns on named barriers `first..first + GROUPS`, if `on`; warpgroup
    /// 0 has the first (the last warpgroup passes it, so every warpgroup
    /// calls this before its first `wait`).
    #[inline(always)]
    pub fn new(on: bool, first: u32) -> Self {
        let turns = Turns { first, on };
        if on && warpgroup() == GROUPS - 1 {
            turns.arrive(0);
        }
        turns
    }

    /// Waits until it is this warpgroup's turn.
    #[inline(always)]
    pub fn wait(&self) {
        if self.on {
            crate::mma::sync_named(self.first + warpgroup() as u32, 256);
        }
    }

    /// Gives the turn to the next warpgroup. `last`: this was the
    /// warpgroup's last turn; the last warpgroup's last turn is passed to
    /// no one (warpgroup 0 has no turn left to take it).
    #[inline(always)]
    pub fn pass(&self, last: bool) {
        let g = warpgroup();
        if self.on && !(last && g == GROUPS - 1) {
            self.arrive((g + 1) % GROUPS);
        }
    }

    #[inline(always)]
    fn arrive(&self, g: usize) {
        #[cfg(target_arch = "nvptx64")]
        rustile_device::bar_arrive(self.first + g as u32, 256);
        #[cfg(not(target_arch = "nvptx64"))]
        let _ = g;
    }
}

/// Stops the program unless its shared memory starts on a swizzle period
/// (1024 bytes), once, and from there on lets the compiler rely on it, so
/// that the products' own period checks of tiles placed at whole periods
/// fold away. A warp-specialized program calls it before
/// [`raise_registers`]: ptxas gives a raised warpgroup its new budget only
/// while no trap lies on its path, and those checks, left in the loop of
/// the attention dK/dV program's multiplying warpgroups, held them to the
/// entry's 168 registers (bench/RESULTS.md, 2026-11-27, “The dK/dV
/// program's registers…”). A program whose main loop kept such a check
/// (a branch to a trap before each step's products) also has its
/// `wgmma`s serialized by ptxas (C7518), as QuasarAttention's projection
/// kernel had. In the interpreter shared memory starts at offset 0:
/// nothing to check.
#[inline(always)]
pub fn check_periods_once() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        let base = rustile_device::smem_addr(rustile_device::dyn_smem::<u8>());
        assert!(base % 1024 == 0, "wgmma: the program's shared memory does not start on a swizzle period (1024 bytes)");
        // SAFETY: the assert above stops the program otherwise.
        unsafe { core::hint::assert_unchecked(base % 1024 == 0) };
    }
}

/// This warpgroup may use up to `N` registers a thread, taken from one that
/// called [`lower_registers`]: a program's launch bound shares the register
/// file evenly, and a warpgroup that only issues copies needs few
/// (`setmaxnreg`; every thread of the warpgroup calls it).
#[inline(always)]
pub fn raise_registers<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::setmaxnreg_inc::<N>();
}

/// This warpgroup gives registers back, down to `N` a thread.
#[inline(always)]
pub fn lower_registers<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::setmaxnreg_dec::<N>();
}

/// Shared memory that threads wrote (with `copy_from` copies, after
/// `wait_copies`, or with `Shared::store`) becomes visible to the tensor
/// cores' reads; `sync()` next, as for reads by other threads.
#[inline(always)]
pub fn fence_shared() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::fence_proxy_async();
}

/// Bytes between the reduction scratch that every program's shared memory
/// starts with (`4·TH`, see `Shared::at`) and the first 1024-byte
/// boundary: where a program's first `wgmma` tile may go.
pub const fn pad(th: usize) -> usize {
    (1024 - (th * 4) % 1024) % 1024
}

/// Stops a product whose tile is off its swizzle period (8 rows of
/// `row_bytes`): the hardware swizzles by address, so the tensor cores would
/// read it scrambled. The interpreter checks the same offsets as the GPU.
#[inline(always)]
fn on_period<T: Elem, const R: usize, const C: usize, const TH: usize>(t: &Shared<T, R, C, TH>, row_bytes: usize) {
    assert!(
        t.address() % (8 * row_bytes) == 0,
        "wgmma: a shared tile does not start on its swizzle period (8 rows); put tiles at wgmma::pad(TH) plus whole periods"
    );
}

/// Starts `acc + a·bᵀ` over all `K` of the tiles on the tensor cores
/// (one `wgmma` per 16-deep slice, committed as one group). `acc` must not
/// be read until [`wait`] says this group finished.
#[inline(always)]
pub fn dot_async<TA: Elem, TB: Elem, const M: usize, const N: usize, const K: usize, const TH: usize>(
    a: &Shared<TA, M, K, TH>,
    b: &Shared<TB, N, K, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, N, TH)]:,
{
    start::<false, TA, TB, M, N, K, TH>(a, b, acc);
}

/// Starts `acc = a·bᵀ` as [`dot_async`] does `acc + a·bᵀ`: `acc`'s old
/// values are not read, so its registers need no zeros while other
/// products run (ptxas waits for a product in flight before such a write).
/// For products that start a block: attention's scores.
#[inline(always)]
pub fn dot_new_async<TA: Elem, TB: Elem, const M: usize, const N: usize, const K: usize, const TH: usize>(
    a: &Shared<TA, M, K, TH>,
    b: &Shared<TB, N, K, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, N, TH)]:,
{
    start::<true, TA, TB, M, N, K, TH>(a, b, acc);
}

/// [`dot_async`] (`FRESH = false`) and [`dot_new_async`].
#[inline(always)]
fn start<const FRESH: bool, TA: Elem, TB: Elem, const M: usize, const N: usize, const K: usize, const TH: usize>(
    a: &Shared<TA, M, K, TH>,
    b: &Shared<TB, N, K, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, N, TH)]:,
{
    let () = WgShape::<TA, TB, M, N, K, TH>::OK;
    on_period(a, K * core::mem::size_of::<TA>());
    on_period(b, K * core::mem::size_of::<TB>());
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        use rustile_device as d;
        let warpgroup = d::thread_idx() / 128;
        let row_bytes = (K * core::mem::size_of::<TA>()) as u32;
        // A descriptor's address field counts 16-byte units, and one
        // instruction reads 32 bytes along a row (16 deep at 16 bits, 32 at
        // 8): the next slice is the descriptor + 2.
        let da = d::wgmma_desc(a.base + warpgroup * 64 * row_bytes, row_bytes);
        let db = d::wgmma_desc(b.base, row_bytes);
        d::wgmma_fence();
        for ks in 0..row_bytes as usize / 32 {
            let (da, db) = (da + 2 * ks as u64, db + 2 * ks as u64);
            // `acc.v` has N/2 values a thread: the cast picks the instruction's width.
            let v = acc.v.as_mut_ptr();
            macro_rules! issue {
                ($n64:ident, $n128:ident, $n256:ident) => {
                    match (N, FRESH && ks == 0) {
                        (64, false) => d::$n64::<false>(&mut *(v as *mut [f32; 32]), da, db),
                        (64, true) => d::$n64::<true>(&mut *(v as *mut [f32; 32]), da, db),
                        (128, false) => d::$n128::<false>(&mut *(v as *mut [f32; 64]), da, db),
                        (128, true) => d::$n128::<true>(&mut *(v as *mut [f32; 64]), da, db),
                        (_, false) => d::$n256::<false>(&mut *(v as *mut [f32; 128]), da, db),
                        (_, true) => d::$n256::<true>(&mut *(v as *mut [f32; 128]), da, db),
                    }
                };
            }
            unsafe {
                match (TA::KIND, TB::KIND) {
                    (Kind::Bf16, _) => issue!(wgmma_m64n64k16_bf16, wgmma_m64n128k16_bf16, wgmma_m64n256k16_bf16),
                    (Kind::F16, _) => issue!(wgmma_m64n64k16_f16, wgmma_m64n128k16_f16, wgmma_m64n256k16_f16),
                    (Kind::E4M3, Kind::E4M3) => issue!(wgmma_m64n64k32_e4m3, wgmma_m64n128k32_e4m3, wgmma_m64n256k32_e4m3),
                    (Kind::E5M2, Kind::E5M2) => issue!(wgmma_m64n64k32_e5m2, wgmma_m64n128k32_e5m2, wgmma_m64n256k32_e5m2),
                    (Kind::E4M3, _) => issue!(wgmma_m64n64k32_e4m3_e5m2, wgmma_m64n128k32_e4m3_e5m2, wgmma_m64n256k32_e4m3_e5m2),
                    (Kind::E5M2, _) => issue!(wgmma_m64n64k32_e5m2_e4m3, wgmma_m64n128k32_e5m2_e4m3, wgmma_m64n256k32_e5m2_e4m3),
                    (Kind::F32 | Kind::U32 | Kind::E2M1x2, _) => unreachable!(), // refused by `check`
                }
            }
        }
        d::wgmma_commit();
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    {
        let _ = (a, b, acc);
        panic!("wgmma needs sm_90a: give the kernel `arch = sm_90a`");
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        for n in 0..N {
            let mut s = if FRESH { 0.0 } else { acc.v[m * N + n] };
            for k in 0..K {
                s += a.get(m, k).to_f32() * b.get(n, k).to_f32();
            }
            acc.v[m * N + n] = s;
        }
    }
}

/// Waits until at most `PENDING` of this warpgroup's [`dot_async`] groups
/// are still running; `acc` may be read once its own group is done.
#[inline(always)]
pub fn wait<const PENDING: u32, const M: usize, const N: usize, const TH: usize>(acc: &mut Acc<M, N, TH, true>)
where
    [(); acc_len(M, N, TH)]:,
{
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        rustile_device::wgmma_wait::<PENDING>();
        // Reads of the accumulators stay below the wait.
        for x in acc.v.iter_mut() {
            rustile_device::fence_reg(x);
        }
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_90a")))]
    let _ = acc;
}

/// Why `p·v` with `p` packed `M×K` and `v` a `[K, N]` tile cannot be a
/// register-operand `wgmma` on `TH` threads, or `None`.
pub const fn check_acc(m: usize, k: usize, n: usize, th: usize) -> Option<&'static str> {
    if let Some(why) = check_rows(m, th) {
        return Some(why);
    }
    if !(n == 16 || n == 32 || n == 64) {
        return Some("wgmma: the right tile of dot_acc_async is one swizzle row wide: N of 16, 32 or 64 (bf16/f16)");
    }
    if k % 16 != 0 {
        return Some("wgmma: K (the packed accumulator's columns) must be a multiple of 16");
    }
    None
}

/// Compile-time form of [`check_acc`].
pub struct WgAccShape<const M: usize, const K: usize, const N: usize, const TH: usize>;
impl<const M: usize, const K: usize, const N: usize, const TH: usize> WgAccShape<M, K, N, TH> {
    pub const OK: () = match check_acc(M, K, N, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

/// Starts `acc + p·v` on the tensor cores with the left operand straight
/// from registers: `p` a packed accumulator of this program (attention's
/// probabilities) and `v` stored `[K, N]` in shared memory, N-major (the
/// tile `Shared` keeps, rows of N = 16, 32 or 64 elements). A wider right
/// operand is several tiles, one call each. As [`dot_async`], `acc` (and
/// `p`) must not be touched until [`wait`].
#[inline(always)]
pub fn dot_acc_async<T: Elem, const M: usize, const K: usize, const N: usize, const TH: usize>(
    p: &Packed<T, M, K, TH>,
    v: &Shared<T, K, N, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, K, TH) / 2]:,
    [(); acc_len(M, N, TH)]:,
{
    let () = WgAccShape::<M, K, N, TH>::OK;
    on_period(v, N * 2);
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        use rustile_device as d;
        let row_bytes = (N * 2) as u32;
        d::wgmma_fence();
        for ks in 0..K / 16 {
            // Sixteen rows of v further down; this warp's A fragment of
            // columns 16ks.. is four consecutive packed registers (the
            // accumulator pairs of two neighbouring 8-column pieces).
            let db = d::wgmma_desc(v.base + (ks * 16) as u32 * row_bytes, row_bytes);
            let a = [p.v[4 * ks], p.v[4 * ks + 1], p.v[4 * ks + 2], p.v[4 * ks + 3]];
            let acc_v = acc.v.as_mut_ptr();
            macro_rules! issue {
                ($n16:ident, $n32:ident, $n64:ident) => {
                    match N {
                        16 => d::$n16(&mut *(acc_v as *mut [f32; 8]), a, db),
                        32 => d::$n32(&mut *(acc_v as *mut [f32; 16]), a, db),
                        _ => d::$n64(&mut *(acc_v as *mut [f32; 32]), a, db),
                    }
                };
            }
            unsafe {
                match T::KIND {
                    Kind::Bf16 => issue!(wgmma_m64n16k16_bf16_rs, wgmma_m64n32k16_bf16_rs, wgmma_m64n64k16_bf16_rs),
                    _ => issue!(wgmma_m64n16k16_f16_rs, wgmma_m64n32k16_f16_rs, wgmma_m64n64k16_f16_rs),
                }
            }
        }
        d::wgmma_commit();
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    {
        let _ = (p, v, acc);
        panic!("wgmma needs sm_90a: give the kernel `arch = sm_90a`");
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        for n in 0..N {
            let mut s = acc.v[m * N + n];
            for k in 0..K {
                let pair: [T; 2] = unsafe { core::mem::transmute_copy(&p.v[(m * K + k) / 2]) };
                s += pair[(m * K + k) % 2].to_f32() * v.get(k, n).to_f32();
            }
            acc.v[m * N + n] = s;
        }
    }
}

/// Why `a·v` with `a` a K-major `[M, K]` tile and `v` an N-major `[K, N]`
/// one cannot be a `wgmma` on `TH` threads, or `None`.
pub const fn check_kn(m: usize, k: usize, n: usize, th: usize) -> Option<&'static str> {
    if let Some(why) = check_rows(m, th) {
        return Some(why);
    }
    if n != 64 {
        return Some("wgmma: the right tile of dot_kn_async is one 128-byte swizzle row wide: N = 64 (bf16/f16)");
    }
    if !(k == 16 || k == 32 || k == 64) {
        return Some("wgmma: the left tile's rows (K) must be 32, 64 or 128 bytes: K 16, 32 or 64");
    }
    None
}

/// Compile-time form of [`check_kn`].
pub struct WgKnShape<const M: usize, const K: usize, const N: usize, const TH: usize>;
impl<const M: usize, const K: usize, const N: usize, const TH: usize> WgKnShape<M, K, N, TH> {
    pub const OK: () = match check_kn(M, K, N, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

/// Starts `acc + a·v` with both operands in shared memory: `a` K-major as
/// [`dot_async`] reads its left tile (warpgroup `g` its rows `64g..`), `v`
/// stored `[K, N]` N-major as [`dot_acc_async`] reads it (N = 64). For a
/// left operand made in registers that other products also read from
/// shared memory: attention's `dK += dS·Q` from the `dSᵀ` tile that
/// `dQ = dS·K` reads too, so that no product in flight has a register
/// operand the program is still writing. As [`dot_async`], `acc` must not
/// be read until [`wait`].
#[inline(always)]
pub fn dot_kn_async<T: Elem, const M: usize, const K: usize, const N: usize, const TH: usize>(
    a: &Shared<T, M, K, TH>,
    v: &Shared<T, K, N, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, N, TH)]:,
{
    let () = WgKnShape::<M, K, N, TH>::OK;
    on_period(a, K * 2);
    on_period(v, N * 2);
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        use rustile_device as d;
        let (a_row, v_row) = ((K * 2) as u32, (N * 2) as u32);
        let da = d::wgmma_desc(a.base + warpgroup() as u32 * 64 * a_row, a_row);
        d::wgmma_fence();
        for ks in 0..K / 16 {
            // 32 bytes along a's rows (the descriptor + 2), sixteen rows down v.
            let db = d::wgmma_desc(v.base + (ks * 16) as u32 * v_row, v_row);
            let acc_v = acc.v.as_mut_ptr() as *mut [f32; 32];
            unsafe {
                match T::KIND {
                    Kind::Bf16 => d::wgmma_m64n64k16_bf16_kn::<false>(&mut *acc_v, da + 2 * ks as u64, db),
                    _ => d::wgmma_m64n64k16_f16_kn::<false>(&mut *acc_v, da + 2 * ks as u64, db),
                }
            }
        }
        d::wgmma_commit();
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    {
        let _ = (a, v, acc);
        panic!("wgmma needs sm_90a: give the kernel `arch = sm_90a`");
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        for n in 0..N {
            let mut s = acc.v[m * N + n];
            for k in 0..K {
                s += a.get(m, k).to_f32() * v.get(k, n).to_f32();
            }
            acc.v[m * N + n] = s;
        }
    }
}

/// Starts `acc + p·bᵀ` on the tensor cores with the left operand straight
/// from registers: `p` an accumulator of this program packed to 16 bits
/// (made in registers: a normalized activation) and `b` stored `[N, K]`
/// K-major, as [`dot_async`] reads its right tile (N 64, 128 or 256; rows
/// of K = 16, 32 or 64 elements). As [`dot_async`], `acc` and `p` must not
/// be touched until [`wait`].
#[inline(always)]
pub fn dot_packed_async<T: Elem, const M: usize, const K: usize, const N: usize, const TH: usize>(
    p: &Packed<T, M, K, TH>,
    b: &Shared<T, N, K, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, K, TH) / 2]:,
    [(); acc_len(M, N, TH)]:,
{
    let () = WgShape::<T, T, M, N, K, TH>::OK;
    on_period(b, K * 2);
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        use rustile_device as d;
        let db = d::wgmma_desc(b.base, (K * 2) as u32);
        d::wgmma_fence();
        for ks in 0..K / 16 {
            // 32 bytes further along b's rows: the descriptor + 2; this
            // warp's A fragment of columns 16ks.. is four packed registers.
            let db = db + 2 * ks as u64;
            let a = [p.v[4 * ks], p.v[4 * ks + 1], p.v[4 * ks + 2], p.v[4 * ks + 3]];
            let acc_v = acc.v.as_mut_ptr();
            macro_rules! issue {
                ($n64:ident, $n128:ident, $n256:ident) => {
                    match N {
                        64 => d::$n64(&mut *(acc_v as *mut [f32; 32]), a, db),
                        128 => d::$n128(&mut *(acc_v as *mut [f32; 64]), a, db),
                        _ => d::$n256(&mut *(acc_v as *mut [f32; 128]), a, db),
                    }
                };
            }
            unsafe {
                match T::KIND {
                    Kind::Bf16 => issue!(wgmma_m64n64k16_bf16_rs_k, wgmma_m64n128k16_bf16_rs_k, wgmma_m64n256k16_bf16_rs_k),
                    _ => issue!(wgmma_m64n64k16_f16_rs_k, wgmma_m64n128k16_f16_rs_k, wgmma_m64n256k16_f16_rs_k),
                }
            }
        }
        d::wgmma_commit();
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    {
        let _ = (p, b, acc);
        panic!("wgmma needs sm_90a: give the kernel `arch = sm_90a`");
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        for n in 0..N {
            let mut s = acc.v[m * N + n];
            for k in 0..K {
                let pair: [T; 2] = unsafe { core::mem::transmute_copy(&p.v[(m * K + k) / 2]) };
                s += pair[(m * K + k) % 2].to_f32() * b.get(n, k).to_f32();
            }
            acc.v[m * N + n] = s;
        }
    }
}

// ---- both operands transposed, the warpgroups splitting the columns ----------------------

/// Why `aᵀ·b` split by columns among the warpgroups (an `M×N` accumulator
/// of `TH` threads, `a` `[K, 64]`, `b` `[K, NB]`, the warpgroups' blocks of
/// N columns within b's) cannot be a `wgmma`, or `None`.
pub const fn check_t_split(m: usize, n: usize, nb: usize, k: usize, th: usize) -> Option<&'static str> {
    if let Some(why) = check_rows(m, th) {
        return Some(why);
    }
    if !(n == 32 || n == 64) || n * (th / 128) > nb || nb != 64 {
        return Some("wgmma: dot_t_split_new_async takes b one swizzle row wide (64 columns), N of them a warpgroup (32 or 64)");
    }
    if k % 16 != 0 {
        return Some("wgmma: K (the tiles' rows) must be a multiple of 16");
    }
    None
}

/// Compile-time form of [`check_t_split`].
pub struct WgSplitShape<const M: usize, const N: usize, const NB: usize, const K: usize, const TH: usize>;
impl<const M: usize, const N: usize, const NB: usize, const K: usize, const TH: usize> WgSplitShape<M, N, NB, K, TH> {
    pub const OK: () = match check_t_split(M, N, NB, K, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

/// Starts `acc = aᵀ·b` with both tiles as stored, `a` `[K, 64]` and `b`
/// `[K, NB]` (rows along the product's depth; 16-bit, rows of 128 bytes),
/// the warpgroups splitting `b`'s columns: warpgroup `w`'s 64 rows of
/// `acc` are `aᵀ · b[.., w·N .. (w+1)·N]`, the same 64 output rows in
/// another column block. Attention's `dQ = dS·K` from `dSᵀ` (keys × queries)
/// and K (keys × head dim) as the dK/dV program holds them, every warpgroup
/// over all keys, so that each adds its own column block of dQ. As
/// [`dot_async`], `acc` must not be read until [`wait`].
#[inline(always)]
pub fn dot_t_split_new_async<T: Elem, const K: usize, const NB: usize, const M: usize, const N: usize, const TH: usize>(
    a: &Shared<T, K, 64, TH>,
    b: &Shared<T, K, NB, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, N, TH)]:,
{
    let () = WgSplitShape::<M, N, NB, K, TH>::OK;
    let () = WgShape::<T, T, 64, 64, 16, 128>::OK;
    on_period(a, 128);
    on_period(b, 128);
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        use rustile_device as d;
        // Column block w starts w·N·2 bytes into b's swizzled rows, as a
        // K-major slice starts 32 bytes along them; 16 rows further down is
        // the next slice of both.
        let cols = (warpgroup() * N * 2) as u32;
        d::wgmma_fence();
        for ks in 0..K / 16 {
            let down = (ks * 16 * 128) as u32;
            let (da, db) = (d::wgmma_desc(a.base + down, 128), d::wgmma_desc(b.base + down + cols, 128));
            let acc_v = acc.v.as_mut_ptr();
            macro_rules! issue {
                ($n32:ident, $n64:ident) => {
                    match (N, ks == 0) {
                        (32, true) => d::$n32::<true>(&mut *(acc_v as *mut [f32; 16]), da, db),
                        (32, false) => d::$n32::<false>(&mut *(acc_v as *mut [f32; 16]), da, db),
                        (_, true) => d::$n64::<true>(&mut *(acc_v as *mut [f32; 32]), da, db),
                        (_, false) => d::$n64::<false>(&mut *(acc_v as *mut [f32; 32]), da, db),
                    }
                };
            }
            unsafe {
                match T::KIND {
                    Kind::Bf16 => issue!(wgmma_m64n32k16_bf16_tt, wgmma_m64n64k16_bf16_tt),
                    _ => issue!(wgmma_m64n32k16_f16_tt, wgmma_m64n64k16_f16_tt),
                }
            }
        }
        d::wgmma_commit();
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    {
        let _ = (a, b, acc);
        panic!("wgmma needs sm_90a: give the kernel `arch = sm_90a`");
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        let (w, row) = (m / 64, m % 64);
        for n in 0..N {
            let mut s = 0.0;
            for k in 0..K {
                s += a.get(k, row).to_f32() * b.get(k, w * N + n).to_f32();
            }
            acc.v[m * N + n] = s;
        }
    }
}

// ---- FP8 products with the left operand in registers -------------------------------------

/// The accumulator column that position `p` of an FP8 `wgmma` A fragment
/// holds after [`Acc::pack_e4m3`]: within each 16 columns, position
/// `4c + j` is column `[2c, 2c+1, 8+2c, 9+2c][j]` (any column: the
/// permutation repeats every 16). A thread's f32 accumulator holds columns `2c, 2c+1` of each
/// 8-column piece, while an 8-bit A fragment wants four consecutive ones:
/// so the packing moves no value between threads, and the right operand
/// is stored with its K rows in this order instead (attention's Vᵀ, as
/// `ops::attention::quantize_heads` writes it).
pub const fn fp8_column(p: usize) -> usize {
    let (group, q) = (p - p % 16, p % 16);
    let (c, j) = (q / 4, q % 4);
    group + 2 * c + (j % 2) + 8 * (j / 2)
}

/// The position that holds accumulator column `col`: [`fp8_column`]'s inverse.
pub const fn fp8_position(col: usize) -> usize {
    let (group, q) = (col - col % 16, col % 16);
    let (h, c, b) = (q / 8, (q % 8) / 2, q % 2);
    group + 4 * c + 2 * h + b
}

/// An `M×K` accumulator of this program rounded to e4m3 (saturating at
/// ±448) in the register order of the FP8 `wgmma` A fragment, four values a
/// word, its columns permuted as [`fp8_column`] says.
#[derive(Clone, Copy)]
pub struct PackedFp8<const M: usize, const K: usize, const TH: usize>
where
    [(); acc_len(M, K, TH) / 4]:,
{
    // Read by sm_90a's product and the interpreter's, not by other arches' builds.
    #[cfg_attr(all(target_arch = "nvptx64", not(target_feature = "sm_90a")), allow(dead_code))]
    v: [u32; acc_len(M, K, TH) / 4],
}

impl<const M: usize, const N: usize, const TH: usize> Acc<M, N, TH, true>
where
    [(); acc_len(M, N, TH)]:,
{
    /// The accumulator as the left operand of [`dot_fp8_acc_async`].
    #[inline(always)]
    pub fn pack_e4m3(&self) -> PackedFp8<M, N, TH>
    where
        [(); acc_len(M, N, TH) / 4]:,
    {
        let mut v = [0u32; acc_len(M, N, TH) / 4];
        // Four values into one word, the first in the lowest byte.
        let word = |a: usize, b: usize, c: usize, d: usize| {
            let lo = crate::F8E4M3::from_f32_pair(self.v[a], self.v[b]);
            let hi = crate::F8E4M3::from_f32_pair(self.v[c], self.v[d]);
            u32::from_le_bytes([lo[0].0, lo[1].0, hi[0].0, hi[1].0])
        };
        #[cfg(target_arch = "nvptx64")]
        for ks in 0..N / 32 {
            // Word r of 32 columns: rows g (r even) or g+8 (odd) of pieces
            // 4ks, 4ks+1 (r < 2) or 4ks+2, 4ks+3; a piece is 4 values a thread.
            for r in 0..4 {
                let at = 16 * ks + 8 * (r / 2) + 2 * (r % 2);
                v[4 * ks + r] = word(at, at + 1, at + 4, at + 5);
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        for m in 0..M {
            for w in 0..N / 4 {
                let at = |j: usize| m * N + fp8_column(4 * w + j);
                v[m * N / 4 + w] = word(at(0), at(1), at(2), at(3));
            }
        }
        PackedFp8 { v }
    }
}

/// Why `p·vtᵀ` with `p` packed `M×K` and `vt` an 8-bit `[N, K]` tile cannot
/// be a register-operand FP8 `wgmma` on `TH` threads, or `None`.
pub const fn check_fp8_acc(m: usize, k: usize, n: usize, th: usize) -> Option<&'static str> {
    if let Some(why) = check_rows(m, th) {
        return Some(why);
    }
    if !(n == 64 || n == 128) {
        return Some("wgmma: dot_fp8_acc_async's right tile has 64 or 128 rows (N)");
    }
    if !(k == 32 || k == 64 || k == 128) {
        return Some("wgmma: dot_fp8_acc_async's K (the packed accumulator's columns, the right tile's row bytes) must be 32, 64 or 128");
    }
    None
}

/// Compile-time form of [`check_fp8_acc`].
pub struct WgFp8AccShape<const M: usize, const K: usize, const N: usize, const TH: usize>;
impl<const M: usize, const K: usize, const N: usize, const TH: usize> WgFp8AccShape<M, K, N, TH> {
    pub const OK: () = match check_fp8_acc(M, K, N, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

/// Starts `acc + p·vtᵀ` on the tensor cores, `p` an accumulator packed by
/// [`Acc::pack_e4m3`] and `vt` stored `[N, K]` K-major in shared memory
/// with its K columns in [`fp8_position`] order (8-bit `wgmma` reads
/// K-major operands only). As [`dot_async`], `acc` must not be touched
/// until [`wait`].
#[inline(always)]
pub fn dot_fp8_acc_async<const M: usize, const K: usize, const N: usize, const TH: usize>(
    p: &PackedFp8<M, K, TH>,
    vt: &Shared<crate::F8E4M3, N, K, TH>,
    acc: &mut Acc<M, N, TH, true>,
) where
    [(); acc_len(M, K, TH) / 4]:,
    [(); acc_len(M, N, TH)]:,
{
    let () = WgFp8AccShape::<M, K, N, TH>::OK;
    on_period(vt, K);
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    {
        use rustile_device as d;
        let db = d::wgmma_desc(vt.base, K as u32);
        d::wgmma_fence();
        for ks in 0..K / 32 {
            // 32 bytes further along vt's rows: the descriptor + 2.
            let db = db + 2 * ks as u64;
            let a = [p.v[4 * ks], p.v[4 * ks + 1], p.v[4 * ks + 2], p.v[4 * ks + 3]];
            let acc_v = acc.v.as_mut_ptr();
            unsafe {
                match N {
                    64 => d::wgmma_m64n64k32_e4m3_rs(&mut *(acc_v as *mut [f32; 32]), a, db),
                    _ => d::wgmma_m64n128k32_e4m3_rs(&mut *(acc_v as *mut [f32; 64]), a, db),
                }
            }
        }
        d::wgmma_commit();
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
    {
        let _ = (p, vt, acc);
        panic!("wgmma needs sm_90a: give the kernel `arch = sm_90a`");
    }
    #[cfg(not(target_arch = "nvptx64"))]
    for m in 0..M {
        for n in 0..N {
            let mut s = acc.v[m * N + n];
            for k in 0..K {
                let byte = p.v[(m * K + k) / 4].to_le_bytes()[k % 4];
                s += crate::F8E4M3(byte).to_f32() * vt.get(n, k).to_f32();
            }
            acc.v[m * N + n] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::mma::{Acc, Shared};
    use crate::{bf16, backend::run_grid};

    /// One warpgroup's product over 64×64 tiles at byte `at` of the program's
    /// shared memory (after the reduction scratch).
    fn product_at(at: usize) {
        run_grid([1, 1, 1], 128 * 4 + at + 2 * 64 * 64 * 2, || {
            let (a, b) = (Shared::<bf16, 64, 64, 128>::at(at), Shared::<bf16, 64, 64, 128>::at(at + 64 * 64 * 2));
            let mut acc = Acc::<64, 64, 128, true>::zeros();
            super::dot_async(&a, &b, &mut acc);
        });
    }

    /// `dot_new_async` ignores what the accumulator held; `dot_async` adds
    /// to it (small integers: both exact in f32).
    #[test]
    fn a_new_product_ignores_the_accumulator() {
        let at = super::pad(128);
        run_grid([1, 1, 1], 128 * 4 + at + 2 * 64 * 64 * 2, || {
            let (a, b) = (Shared::<bf16, 64, 64, 128>::at(at), Shared::<bf16, 64, 64, 128>::at(at + 64 * 64 * 2));
            a.store(&crate::Tile::from_fn(|r, c| bf16::from_f32(((r * 7 + c) % 5) as f32 - 2.0)));
            b.store(&crate::Tile::from_fn(|r, c| bf16::from_f32(((r + 3 * c) % 3) as f32 - 1.0)));
            let old = Acc::<64, 64, 128, true>::zeros().map(|_, _, _| 100.0);
            let (mut fresh, mut added) = (old, old);
            super::dot_new_async(&a, &b, &mut fresh);
            super::dot_async(&a, &b, &mut added);
            assert!(fresh.v.iter().zip(&added.v).all(|(f, s)| *s == f + 100.0));
            assert!(fresh.v.iter().any(|&x| x != 0.0), "the product must not be all zeros");
        });
    }

    /// The GPU traps on a tile off its swizzle period; the interpreter stops
    /// there too, with the message (4 warps: a 512-byte scratch, so the
    /// first aligned tile is at `pad(128)` = 512).
    #[test]
    fn a_tile_off_its_swizzle_period_stops_the_interpreter() {
        assert_eq!(super::pad(128), 512);
        assert_eq!(super::pad(256), 0);
        product_at(super::pad(128));
        let off = std::panic::catch_unwind(|| product_at(0)).expect_err("a tile 512 bytes off its period ran");
        let msg = off.downcast_ref::<String>().map(String::as_str).or(off.downcast_ref::<&str>().copied()).unwrap_or("");
        assert!(msg.contains("swizzle period"), "{msg}");
    }
    /// A packed accumulator times a K-major right tile is the plain
    /// product `p·bᵀ` (small integers: exact in bf16 and f32).
    #[test]
    fn a_packed_product_with_a_k_major_tile_is_the_plain_product() {
        let at = super::pad(128);
        run_grid([1, 1, 1], 128 * 4 + at + 128 * 64 * 2, || {
            let b = Shared::<bf16, 128, 64, 128>::at(at);
            let bv = |n: usize, k: usize| ((n * 3 + k) % 7) as f32 - 3.0;
            b.store(&crate::Tile::from_fn(|n, k| bf16::from_f32(bv(n, k))));
            let p = Acc::<64, 64, 128, true>::zeros().map(|r, c, _| ((r + 2 * c) % 5) as f32 - 2.0);
            let mut acc = Acc::<64, 128, 128, true>::zeros().map(|_, _, _| 1.0);
            super::dot_packed_async(&p.pack::<bf16>(), &b, &mut acc);
            for r in 0..64 {
                for n in 0..128 {
                    let want: f32 = 1.0 + (0..64).map(|k| (((r + 2 * k) % 5) as f32 - 2.0) * bv(n, k)).sum::<f32>();
                    assert_eq!(acc.v[r * 128 + n], want, "({r}, {n})");
                }
            }
        });
    }

    /// A K-major left tile (two warpgroups, 64 rows each) times an N-major
    /// right tile is the plain product `a·v`, added to the accumulator
    /// (small integers: exact in bf16 and f32).
    #[test]
    fn a_k_major_tile_times_an_n_major_tile_is_the_plain_product() {
        run_grid([1, 1, 1], 256 * 4 + 128 * 64 * 2 + 64 * 64 * 2, || {
            let (a, v) = (Shared::<bf16, 128, 64, 256>::at(0), Shared::<bf16, 64, 64, 256>::at(128 * 64 * 2));
            let av = |m: usize, k: usize| ((m * 3 + k) % 7) as f32 - 3.0;
            let vv = |k: usize, n: usize| ((k + 5 * n) % 5) as f32 - 2.0;
            a.store(&crate::Tile::from_fn(|m, k| bf16::from_f32(av(m, k))));
            v.store(&crate::Tile::from_fn(|k, n| bf16::from_f32(vv(k, n))));
            let mut acc = Acc::<128, 64, 256, true>::zeros().map(|_, _, _| 1.0);
            super::dot_kn_async(&a, &v, &mut acc);
            for (m, n) in (0..128).flat_map(|m| (0..64).map(move |n| (m, n))) {
                let want: f32 = 1.0 + (0..64).map(|k| av(m, k) * vv(k, n)).sum::<f32>();
                assert_eq!(acc.v[m * 64 + n], want, "({m}, {n})");
            }
        });
    }

    /// Both warpgroups' `dSᵀ` stored packed, then `aᵀ·b` with the
    /// warpgroups splitting b's columns: row block w of the accumulator is
    /// `aᵀ` times b's column block w (small integers: exact), and the
    /// copy engine's addition of a [`crate::tma::SharedSum`] adds each block
    /// where its window says, leaving the rest of the tensor alone.
    #[test]
    fn a_transposed_product_split_by_columns_is_the_plain_product() {
        use crate::tma::SharedSum;
        run_grid([1, 1, 1], 256 * 4 + 3 * 128 * 64 * 2, || {
            let (a, b) = (Shared::<bf16, 128, 64, 256>::at(0), Shared::<bf16, 128, 64, 256>::at(128 * 64 * 2));
            let av = |k: usize, m: usize| ((k * 3 + m) % 7) as f32 - 3.0;
            let bv = |k: usize, n: usize| ((k + 5 * n) % 5) as f32 - 2.0;
            a.store_packed::<true>(&Acc::<128, 64, 256, true>::zeros().map(|k, m, _| av(k, m)).pack::<bf16>());
            b.store(&crate::Tile::from_fn(|k, n| bf16::from_f32(bv(k, n))));
            let mut acc = Acc::<128, 32, 256, true>::zeros().map(|_, _, _| 100.0);
            super::dot_t_split_new_async(&a, &b, &mut acc);
            for (w, m, n) in (0..2).flat_map(|w| (0..64).flat_map(move |m| (0..32).map(move |n| (w, m, n)))) {
                let want: f32 = (0..128).map(|k| av(k, m) * bv(k, 32 * w + n)).sum();
                assert_eq!(acc.v[(64 * w + m) * 32 + n], want, "block {w} ({m}, {n})");
            }
            // Into a [70, 64] tensor at rows 10.. (the last 4 rows past its end).
            let sum = SharedSum::<128, 256>::at(2 * 128 * 64 * 2);
            sum.store_acc(&acc);
            let mut dst = vec![1.0f32; 70 * 64];
            let out = crate::PtrMut::from_slice(&mut dst);
            for w in 0..2 {
                sum.add_tma_by_this_thread::<64>(64 * w, 0, &crate::BlockPtr::new(out, [70, 64], [64, 1], [10, 32 * w]), 0);
            }
            for (r, c) in (0..70).flat_map(|r| (0..64).map(move |c| (r, c))) {
                let want = if r < 10 { 1.0 } else { 1.0 + acc.v[(64 * (c / 32) + r - 10) * 32 + c % 32] };
                assert_eq!(dst[r * 64 + c], want, "({r}, {c})");
            }
        });
    }

    /// [`super::fp8_position`] undoes [`super::fp8_column`], and a packed
    /// accumulator times a right tile stored in that order is the plain
    /// product (small integers: exact in e4m3 and f32).
    #[test]
    fn an_fp8_product_from_registers_is_the_plain_product() {
        use crate::{Elem, F8E4M3};
        for col in 0..64 {
            assert_eq!(super::fp8_column(super::fp8_position(col)), col);
        }
        assert_eq!((0..4).map(super::fp8_column).collect::<Vec<_>>(), [0, 1, 8, 9]);
        let at = super::pad(128);
        run_grid([1, 1, 1], 128 * 4 + at + 64 * 32, || {
            let vt = Shared::<F8E4M3, 64, 32, 128>::at(at);
            let v = |k: usize, n: usize| ((k * 5 + n) % 7) as f32 - 3.0;
            for n in 0..64 {
                for pos in 0..32 {
                    vt.set(n, pos, F8E4M3::from_f32(v(super::fp8_column(pos), n)));
                }
            }
            let p = Acc::<64, 32, 128, true>::zeros().map(|r, c, _| ((r + 2 * c) % 5) as f32 - 2.0);
            let mut acc = Acc::<64, 64, 128, true>::zeros();
            super::dot_fp8_acc_async(&p.pack_e4m3(), &vt, &mut acc);
            for r in 0..64 {
                for n in 0..64 {
                    let want: f32 = (0..32).map(|k| (((r + 2 * k) % 5) as f32 - 2.0) * v(k, n)).sum();
                    assert_eq!(acc.v[r * 64 + n], want, "({r}, {n})");
                }
            }
        });
    }
}
