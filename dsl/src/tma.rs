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
//! The copy engine also adds a shared f32 tile into a global tensor
//! ([`SharedSum`]): a sum of many programs' parts, added at L2 a box at a
//! time instead of an atomic a value.
//!
//! On the CPU a barrier does nothing, `load_tma` is `copy_from` of the
//! block pointer, which must describe the same tensor as the map, and a
//! [`SharedSum`]'s addition is done at once through its block pointer.
use crate::mma::{acc_len, acc_pos, Acc, Shared};
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

/// An `R×32` f32 tile in shared memory, each 128-byte row swizzled as the
/// copy engine's 128-byte mode lays boxes out (16-byte chunk `c` of row
/// `r` at chunk `c ^ (r % 8)`, so that an accumulator's stores meet no
/// bank twice): an accumulator goes in ([`SharedSum::store_acc`]) and the
/// copy engine adds it into a global f32 tensor
/// ([`SharedSum::add_tma_by_this_thread`]). It must start on a multiple
/// of 1024 bytes of the shared memory (the swizzle's period).
#[derive(Clone, Copy)]
pub struct SharedSum<const R: usize, const TH: usize> {
    #[cfg(target_arch = "nvptx64")]
    base: u32,
    #[cfg(not(target_arch = "nvptx64"))]
    base: *mut f32,
}

impl<const R: usize, const TH: usize> SharedSum<R, TH> {
    /// The tile at `byte_offset` of the program's shared memory (past the
    /// reduction scratch, as `Shared::at`; the config's `SMEM` must cover it).
    #[inline(always)]
    pub fn at(byte_offset: usize) -> Self {
        #[cfg(target_arch = "nvptx64")]
        return SharedSum { base: rustile_device::smem_addr(rustile_device::dyn_smem::<u8>()) + (TH * 4 + byte_offset) as u32 };
        #[cfg(not(target_arch = "nvptx64"))]
        return SharedSum { base: crate::backend::smem_at(TH * 4 + byte_offset, R * 128) as *mut f32 };
    }

    /// Writes an accumulator whose rows are the tile's (each thread its own
    /// pairs of neighbouring columns, one 8-byte store each); then
    /// `wgmma::fence_shared()` and a barrier of the writers before the copy
    /// engine reads it.
    #[inline(always)]
    pub fn store_acc<const WG: bool>(&self, acc: &Acc<R, 32, TH, WG>)
    where
        [(); acc_len(R, 32, TH)]:,
    {
        for e in (0..acc.v.len()).step_by(2) {
            let (r, c) = acc_pos::<R, 32, TH, WG>(e);
            #[cfg(target_arch = "nvptx64")]
            unsafe {
                let at = self.base + (r * 128 + ((c / 4) ^ (r % 8)) * 16 + (c % 4) * 4) as u32;
                rustile_device::st_shared_v2(at, [acc.v[e].to_bits(), acc.v[e + 1].to_bits()]);
            }
            #[cfg(not(target_arch = "nvptx64"))]
            unsafe {
                (*self.base.add(r * 32 + c), *self.base.add(r * 32 + c + 1)) = (acc.v[e], acc.v[e + 1]);
            }
        }
    }

    /// Starts adding rows `first .. first + B` of the tile into `dst`'s
    /// window (matrix `z` of a batch) through tensor map `map` (f32, boxes
    /// of `B×32`, the 128-byte swizzle), issued by the calling thread; the
    /// window's parts outside the tensor are dropped. The addition joins
    /// this thread's open group: [`commit_adds`] closes it, and
    /// [`wait_adds_read`] says when the tile may be written again. `first`
    /// is a multiple of 8 (the swizzle's period).
    #[inline(always)]
    pub fn add_tma_by_this_thread<const B: usize>(&self, first: usize, map: u64, dst: &BlockPtr<f32, B, 32, TH>, z: usize) {
        debug_assert!(first % 8 == 0 && first + B <= R);
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        {
            let at = [dst.offsets[1] as u32, dst.offsets[0] as u32, z as u32];
            unsafe { rustile_device::tma_reduce_add_3d(self.base + (first * 128) as u32, map, at) };
        }
        #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
        {
            let _ = (first, map, dst, z);
            panic!("TMA needs sm_90a: give the kernel `arch = sm_90a`");
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            let _ = (map, z);
            let [r0, c0] = dst.offsets;
            for r in 0..B {
                for c in 0..32 {
                    if r0 + r < dst.shape[0] && c0 + c < dst.shape[1] {
                        let at = (r0 + r) * dst.strides[0] + (c0 + c) * dst.strides[1];
                        dst.base.check("SharedSum::add_tma_by_this_thread", at, 1, 1, true);
                        unsafe { *dst.base.at(at) += *self.base.add((first + r) * 32 + c) };
                    }
                }
            }
        }
    }
}

/// Closes this thread's group of [`SharedSum`] additions.
#[inline(always)]
pub fn commit_adds() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::bulk_commit();
}

/// Waits until at most `N` of this thread's groups of additions still read
/// their shared tiles: the tiles of the others may be written again.
#[inline(always)]
pub fn wait_adds_read<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::bulk_wait_read::<N>();
}

/// Waits until at most `N` of this thread's groups of additions are still
/// running (0 before the program ends, so that no tile is read after it).
#[inline(always)]
pub fn wait_adds<const N: u32>() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
    rustile_device::bulk_wait::<N>();
}
