//! Hopper's tensor memory accelerator (TMA, sm_90) and the shared-memory
//! barriers (`mbarrier`) its copies complete on.
//!
//! A TMA copy moves a whole box of a tensor between global and shared
//! memory, described by a 128-byte tensor map the host encoded
//! (`cuTensorMapEncodeTiled`): one thread issues it, the copy engine does the
//! addressing, the zero fill outside the tensor and the swizzle, and counts
//! the bytes it wrote against an `mbarrier`, whose phase flips once the
//! expected bytes and arrivals are in.
use core::arch::asm;

/// `mbarrier.init`: the barrier at shared address `bar` expects `count`
/// arrivals per phase.
#[inline(always)]
pub unsafe fn mbar_init(bar: u32, count: u32) {
    unsafe { asm!("mbarrier.init.shared::cta.b64 [{b}], {n};", b = in(reg32) bar, n = in(reg32) count, options(nostack)) };
}

/// One arrival on `bar` that also tells it `bytes` more will come from
/// copies (`expect_tx`).
#[inline(always)]
pub unsafe fn mbar_arrive_expect(bar: u32, bytes: u32) {
    unsafe {
        asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar, n = in(reg32) bytes, options(nostack))
    };
}

/// One arrival on `bar`.
#[inline(always)]
pub unsafe fn mbar_arrive(bar: u32) {
    unsafe { asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar, options(nostack)) };
}

/// One arrival on `bar` once every `cp.async` this thread issued before
/// has landed (`cp.async.mbarrier.arrive.noinc`: the arrival is one of
/// those the barrier was initialized to expect).
#[inline(always)]
pub unsafe fn cp_async_mbar_arrive(bar: u32) {
    unsafe { asm!("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{b}];", b = in(reg32) bar, options(nostack)) };
}

/// Waits until the phase of `bar` with parity `parity` has completed.
#[inline(always)]
pub unsafe fn mbar_wait(bar: u32, parity: u32) {
    // `try_wait` itself suspends the thread for a while before it says no.
    loop {
        let done: u32;
        unsafe {
            asm!(
                "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
                b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done, options(nostack)
            )
        };
        if done != 0 {
            return;
        }
    }
}

/// Starts a TMA copy of the box at coordinates `(x, y, z)` (`x` the
/// innermost dimension) of the tensor that `map` (the generic address of a
/// tensor map in global memory) describes, into shared address `dst`;
/// it completes on `bar`.
#[inline(always)]
pub unsafe fn tma_load_3d(dst: u32, map: u64, [x, y, z]: [u32; 3], bar: u32) {
    unsafe {
        asm!(
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{x}, {y}, {z}}}], [{b}];",
            d = in(reg32) dst, m = in(reg64) map, x = in(reg32) x, y = in(reg32) y, z = in(reg32) z, b = in(reg32) bar,
            options(nostack)
        )
    };
}

/// `prefetch.tensormap`: brings a tensor map into the cache ahead of its first use.
#[inline(always)]
pub unsafe fn prefetch_tensormap(map: u64) {
    unsafe { asm!("prefetch.tensormap [{m}];", m = in(reg64) map, options(nostack)) };
}

/// Starts adding the f32 box at shared address `src` into the tensor's box
/// at `(x, y, z)` (the copy engine reads the box and adds it at L2; parts
/// outside the tensor are dropped). It joins this thread's open bulk group
/// ([`bulk_commit`] closes it).
#[inline(always)]
pub unsafe fn tma_reduce_add_3d(src: u32, map: u64, [x, y, z]: [u32; 3]) {
    unsafe {
        asm!(
            "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [{m}, {{{x}, {y}, {z}}}], [{s}];",
            s = in(reg32) src, m = in(reg64) map, x = in(reg32) x, y = in(reg32) y, z = in(reg32) z,
            options(nostack)
        )
    };
}

/// Closes this thread's open group of bulk copies and reductions.
#[inline(always)]
pub fn bulk_commit() {
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
}

/// Waits until at most `N` of this thread's bulk groups still read their
/// shared sources (the writes to global memory may still be on the way).
#[inline(always)]
pub fn bulk_wait_read<const N: u32>() {
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack)) };
}

/// Waits until at most `N` of this thread's bulk groups are still running.
#[inline(always)]
pub fn bulk_wait<const N: u32>() {
    unsafe { asm!("cp.async.bulk.wait_group {n};", n = const N, options(nostack)) };
}
