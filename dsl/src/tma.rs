//! Hopper's copy engine (TMA, sm_90a) and the shared-memory barriers its
//! copies complete on.
//!
//! A [`Barrier`] lives in shared memory; one thread's arrival says how many
//! bytes will land ([`Barrier::expect`]), [`Shared::load_tma`] starts a
//! copy of a whole tile that counts its bytes against the barrier, and
//! [`Barrier::wait`] returns once the phase of the given parity completed
//! (every barrier starts in phase 0; each completion flips the parity).
//! The same barriers can count threads instead: `init(TH)` and one
//! [`Barrier::arrive`] per thread, e.g. "every warpgroup has finished
//! reading this stage", which is how a stage goes back to the copy engine
//! without a barrier of the whole program.
//!
//! The copy engine reads the tensor through a tensor map the host encoded
//! (`rustile_host::Gpu::tensor_map`), passed to the kernel as its device
//! address; it fills the box outside the tensor with zeros and writes the
//! tile with the swizzle `Shared` uses for rows of its width (32, 64 or
//! 128 bytes: 16, 32 or 64 16-bit elements, twice that many 8-bit ones).
//!
//! On the CPU a barrier does nothing and `load_tma` is `copy_from` of the
//! block pointer, which must describe the same tensor as the map.
use crate::mma::Shared;
use crate::{BlockPtr, Elem};

/// One `mbarrier` (8 bytes) of the program's shared memory.
#[derive(Clone, Copy)]
pub struct Barrier {
    // Read by the sm_90a instructions only.
    #[cfg(target_arch = "nvptx64")]
    #[cfg_attr(not(target_feature = "sm_90a"), allow(dead_code))]
    addr: u32,
}

/// Whether this thread issues the program's copies and barrier setup: its
/// first on the GPU; the interpreter's one thread a program.
#[inline(always)]
pub fn leader() -> bool {
    #[cfg(target_arch = "nvptx64")]
    return rustile_device::thread_idx() == 0;
    #[cfg(not(target_arch = "nvptx64"))]
    return true;
}

impl Barrier {
    /// The barrier at `byte_offset` of the program's shared memory (past
    /// the reduction scratch, as `Shared::at`; 8-byte aligned).
    #[inline(always)]
    pub fn at<const TH: usize>(byte_offset: usize) -> Barrier {
        #[cfg(target_arch = "nvptx64")]
        {
            let addr = rustile_device::smem_addr(rustile_device::dyn_smem::<u8>()) + (TH * 4 + byte_offset) as u32;
            Barrier { addr }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            let _ = byte_offset;
            Barrier {}
        }
    }

    /// Sets the arrivals each phase waits for (one thread does it; then
    /// [`fence_init`] and `sync()` before any use).
    #[inline(always)]
    pub fn init(&self, arrivals: u32) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        if leader() {
            unsafe { rustile_device::mbar_init(self.addr, arrivals) };
        }
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_90a")))]
        let _ = arrivals;
    }

    /// One thread of the program arrives, telling the barrier that `bytes`
    /// will land from copies: the arrival of a barrier `init(1)` that
    /// [`Shared::load_tma`] copies complete on.
    #[inline(always)]
    pub fn expect(&self, bytes: usize) {
        if leader() {
            self.expect_by_this_thread(bytes);
        }
    }

    /// [`Barrier::expect`] by the calling thread, whichever it is: for the
    /// one thread of a copy warpgroup that issues the copies.
    #[inline(always)]
    pub fn expect_by_this_thread(&self, bytes: usize) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        unsafe {
            rustile_device::mbar_arrive_expect(self.addr, bytes as u32)
        };
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_90a")))]
        let _ = bytes;
    }

    /// This thread arrives (for a barrier `init(TH)`: every thread does).
    #[inline(always)]
    pub fn arrive(&self) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        unsafe {
            rustile_device::mbar_arrive(self.addr)
        };
    }

    /// This thread arrives once its earlier [`SharedVec::copy_from_warp`]
    /// copies have landed (for a barrier whose `init` counts it; nothing
    /// in the interpreter, whose copies land at once).
    ///
    /// [`SharedVec::copy_from_warp`]: crate::mma::SharedVec::copy_from_warp
    #[inline(always)]
    pub fn arrive_after_copies(&self) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        unsafe {
            rustile_device::cp_async_mbar_arrive(self.addr)
        };
    }

    /// Waits until the phase of parity `parity` (0 or 1) has completed.
    #[inline(always)]
    pub fn wait(&self, parity: usize) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        unsafe {
            rustile_device::mbar_wait(self.addr, parity as u32)
        };
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_90a")))]
        let _ = parity;
    }

    /// [`Barrier::wait`] by the one thread that issues copies only.
    #[inline(always)]
    pub fn wait_leader(&self, parity: usize) {
        if leader() {
            self.wait(parity);
        }
    }
}

/// Makes initialized barriers visible to the copy engine; `sync()` next.
#[inline(always)]
pub fn fence_init() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::fence_proxy_async();
}

impl<T: Elem, const R: usize, const C: usize, const TH: usize> Shared<T, R, C, TH> {
    /// Starts copying `src`'s window (matrix `z` of a batch) into this tile
    /// with one TMA copy through tensor map `map` (the device address of a
    /// map of the same tensor, boxes of `R×C`); it completes on `bar`,
    /// which must [`Barrier::expect`] its `R·C·size_of::<T>()` bytes. The
    /// tile's rows must be one swizzled row of 32, 64 or 128 bytes (`C` 16,
    /// 32 or 64 for 16-bit elements, twice that for FP8; the map's box says
    /// the same), and it must start on its swizzle period (8 rows).
    #[inline(always)]
    pub fn load_tma(&self, map: u64, src: &BlockPtr<T, R, C, TH>, z: usize, bar: &Barrier) {
        if leader() {
            self.load_tma_by_this_thread(map, src, z, bar);
        }
    }

    /// [`Shared::load_tma`] issued by the calling thread, whichever it is.
    #[inline(always)]
    pub fn load_tma_by_this_thread(&self, map: u64, src: &BlockPtr<T, R, C, TH>, z: usize, bar: &Barrier) {
        let row = C * core::mem::size_of::<T>();
        assert!(row == 32 || row == 64 || row == 128, "load_tma copies swizzled rows of 32, 64 or 128 bytes");
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        {
            let at = [src.offsets[1] as u32, src.offsets[0] as u32, z as u32];
            unsafe { rustile_device::tma_load_3d(self.base, map, at, bar.addr) };
        }
        #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
        {
            let _ = (map, src, z, bar);
            panic!("TMA needs sm_90a: give the kernel `arch = sm_90a`");
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            let _ = (map, z, bar);
            self.copy_window(src);
        }
    }
}
