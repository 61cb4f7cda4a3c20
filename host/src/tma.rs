//! Tensor maps for Hopper's TMA copies (`rustile::tma`): the driver encodes
//! one (`cuTensorMapEncodeTiled`), it is written to device memory once, and
//! kernels take its address. A map is a pure function of what it describes,
//! so the cache is keyed by that description: a later call on the same
//! tensor (or on one allocated at the same address with the same shape)
//! costs a hash lookup, not a write.
//!
//! Maps live in slots of one device buffer allocated with the GPU, and are
//! written by memsets in stream order: nothing is allocated, uploaded from
//! host memory or waited for, so a map can be made inside a CUDA graph
//! capture (PyTorch's included), where new activations get new addresses.
//! The slots of maps used outside captures are reused in least-recently-used
//! order once [`MAPS_KEPT`] are taken (a training loop that allocates fresh
//! activations every step would otherwise add maps without end); a map a
//! capture made or used is kept for the GPU's life, since the graph reads it
//! at every replay.
use std::collections::HashMap;
use std::num::NonZeroUsize;

use cudarc::driver::sys::{self, CUresult};

use crate::{Error, Gpu, Result};

/// A tensor of 16-bit (bf16, f16) or 8-bit (FP8) elements of up to three
/// dimensions, as TMA copies boxes of it: dimensions innermost first, row
/// strides in bytes (multiples of 16, in any order), the box in elements
/// (its innermost extent one swizzled row of 32, 64 or 128 bytes: for
/// 2-byte elements 16, 32 or 64 of them, the rows `Shared` keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileMap {
    /// Device address of element (0, 0, 0) (16-byte aligned).
    pub base: u64,
    pub dims: [u64; 3],
    /// Bytes between consecutive indices of dimensions 1 and 2.
    pub strides: [u64; 2],
    pub boxes: [u32; 3],
    /// Bytes an element: 2, 1 or 4 (f32, which the copy engine can also add into).
    pub elem_bytes: u32,
}

impl TileMap {
    /// Why TMA cannot copy this tensor, or `None`.
    pub fn unsupported(&self) -> Option<String> {
        if self.base % 16 != 0 {
            return Some(format!("its base address {:#x} is not 16-byte aligned", self.base));
        }
        if let Some(s) = self.strides.iter().find(|s| **s % 16 != 0 || **s >= 1 << 40) {
            return Some(format!("a row stride of {s} bytes is not a multiple of 16 below 2^40"));
        }
        if !matches!(self.elem_bytes, 1 | 2 | 4) {
            return Some(format!("its elements are {} bytes, not 2 (bf16, f16), 1 (FP8) or 4 (f32)", self.elem_bytes));
        }
        if self.swizzle().is_none() || self.boxes.iter().any(|b| *b == 0 || *b > 256) {
            return Some(format!(
                "the box {:?} is not one row of 32, 64 or 128 bytes wide ({}, {} or {} elements) and at most 256 in each dimension",
                self.boxes,
                32 / self.elem_bytes,
                64 / self.elem_bytes,
                128 / self.elem_bytes
            ));
        }
        if self.dims.iter().any(|d| *d == 0 || *d >= 1 << 32) {
            return Some(format!("the dimensions {:?} are not all in 1..2^32", self.dims));
        }
        None
    }

    /// The swizzle of the box's rows: `Shared`'s for rows of that many bytes.
    fn swizzle(&self) -> Option<sys::CUtensorMapSwizzle> {
        use sys::CUtensorMapSwizzle::*;
        match self.boxes[0] * self.elem_bytes {
            32 => Some(CU_TENSOR_MAP_SWIZZLE_32B),
            64 => Some(CU_TENSOR_MAP_SWIZZLE_64B),
            128 => Some(CU_TENSOR_MAP_SWIZZLE_128B),
            _ => None,
        }
    }
}

/// How many tensor maps a [`Gpu`] keeps on the device (128 bytes each): far
/// more than one step of a model launches with, so that steady-state steps
/// find theirs.
pub const MAPS_KEPT: NonZeroUsize = NonZeroUsize::new(4096).unwrap();

/// Bytes of one encoded map.
const MAP_BYTES: u64 = 128;

/// Where a GPU keeps its tensor maps: the slots of one device buffer, those
/// of maps last used outside captures in least-recently-used order, those
/// of maps captured graphs read, and the free ones.
pub(crate) struct MapSlots {
    base: u64,
    recent: lru::LruCache<TileMap, usize>,
    captured: HashMap<TileMap, usize>,
    free: Vec<usize>,
}

impl MapSlots {
    /// Slots over the device buffer at `base` of [`MAPS_KEPT`] maps.
    pub(crate) fn new(base: u64) -> MapSlots {
        MapSlots { base, recent: lru::LruCache::unbounded(), captured: HashMap::new(), free: (0..MAPS_KEPT.get()).rev().collect() }
    }

    pub(crate) fn bytes() -> usize {
        MAPS_KEPT.get() * MAP_BYTES as usize
    }

    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    fn at(&self, slot: usize) -> u64 {
        self.base + slot as u64 * MAP_BYTES
    }

    /// The address of `m`'s map if it has one; a map used while `capturing`
    /// is kept from then on.
    fn find(&mut self, m: &TileMap, capturing: bool) -> Option<u64> {
        if let Some(&slot) = self.captured.get(m) {
            return Some(self.at(slot));
        }
        let slot = if capturing { self.recent.pop(m).inspect(|&slot| _ = self.captured.insert(*m, slot))? } else { *self.recent.get(m)? };
        Some(self.at(slot))
    }

    /// A slot for `m`: a free one, else the least recently used one's.
    fn take(&mut self, m: &TileMap, capturing: bool) -> Option<usize> {
        let slot = self.free.pop().or_else(|| self.recent.pop_lru().map(|(_, slot)| slot))?;
        if capturing {
            self.captured.insert(*m, slot);
        } else {
            self.recent.put(*m, slot);
        }
        Some(slot)
    }

    fn len(&self) -> usize {
        self.recent.len() + self.captured.len()
    }
}

impl Gpu {
    /// The device address of the tensor map for `m` (swizzled as `Shared`
    /// tiles of its rows, zero fill outside the tensor), encoded and written
    /// on first use, on the current queue. The address stays valid for the
    /// kernels issued before [`MAPS_KEPT`] other maps are made, and for good
    /// once a graph capture has used it.
    pub fn tensor_map(&self, m: &TileMap) -> Result<u64> {
        if let Some(why) = m.unsupported() {
            return Err(Error::Shape(format!("TMA cannot copy this tensor: {why}")));
        }
        let Some(dev) = self.cuda.as_ref() else {
            // The interpreter's kernels copy the window a map would describe.
            return Ok(0);
        };
        let capturing = self.capturing();
        let mut slots = dev.tensor_maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = slots.find(m, capturing) {
            return Ok(at);
        }
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        let elem_strides = [1u32; 3];
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                // Copies move bits; f32 is named as such because the copy
                // engine's additions (`SharedSum`) read the type.
                match m.elem_bytes {
                    1 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                    2 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
                    _ => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                },
                3,
                m.base as *mut std::ffi::c_void,
                m.dims.as_ptr(),
                m.strides.as_ptr(),
                m.boxes.as_ptr(),
                elem_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                m.swizzle().expect("checked by unsupported()"),
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        if r != CUresult::CUDA_SUCCESS {
            return Err(Error::Shape(format!("cuTensorMapEncodeTiled refused {m:?}: {r:?}")));
        }
        let slot = slots
            .take(m, capturing)
            .ok_or_else(|| Error::Invalid(format!("captured CUDA graphs read {MAPS_KEPT} tensor maps already; this GPU keeps no more")))?;
        let at = slots.at(slot);
        // One memset a run of equal 32-bit words: by value, so capturable.
        let words: Vec<u32> = map.opaque.iter().flat_map(|w| [*w as u32, (*w >> 32) as u32]).collect();
        self.bind()?;
        let mut i = 0;
        while i < words.len() {
            let run = words[i..].iter().take_while(|w| **w == words[i]).count();
            unsafe { sys::cuMemsetD32Async(at + 4 * i as u64, words[i], run, self.raw_stream()) }
                .result()
                .map_err(crate::gpu::cuda("writing a tensor map"))?;
            i += run;
        }
        Ok(at)
    }

    /// How many tensor maps this GPU keeps on the device now (at most [`MAPS_KEPT`]).
    pub fn tensor_maps_kept(&self) -> usize {
        self.cuda.as_ref().map_or(0, |dev| dev.tensor_maps.lock().unwrap_or_else(|e| e.into_inner()).len())
    }
}

#[cfg(test)]
mod tests {
    use super::{MapSlots, TileMap, MAPS_KEPT};

    #[test]
    fn slots_are_reused_least_recent_first_except_those_a_capture_read() {
        let map = |i: u64| TileMap { base: 0x1000 * (i + 1), dims: [64, 64, 1], strides: [128, 8192], boxes: [64, 64, 1], elem_bytes: 2 };
        let mut slots = MapSlots::new(0x10_0000);
        let n = MAPS_KEPT.get() as u64;
        for i in 0..n {
            assert!(slots.find(&map(i), false).is_none());
            slots.take(&map(i), false).unwrap();
        }
        assert_eq!(slots.find(&map(0), false), Some(0x10_0000), "the first map, in the first slot");
        // Map 1 is now the least recent: a new map takes its slot.
        let one = slots.find(&map(1), true).unwrap(); // ...unless a capture reads it: kept from then on
        let new = slots.take(&map(n), false).unwrap();
        assert_ne!(slots.at(new), one);
        assert!(slots.find(&map(2), false).is_none(), "map 2 gave up its slot");
        assert_eq!(slots.find(&map(1), false), Some(one));
        assert_eq!(slots.len(), MAPS_KEPT.get());
        // Once captures hold every slot, a new map has none.
        for i in 0..n + 1 {
            let _ = slots.find(&map(i), true);
        }
        for i in n + 1..2 * n {
            if slots.take(&map(i), true).is_none() {
                assert_eq!(slots.captured.len(), MAPS_KEPT.get());
                return;
            }
        }
        panic!("captured maps were evicted");
    }

    #[test]
    fn maps_the_copy_engine_cannot_use_are_named() {
        let ok = TileMap { base: 0x1000, dims: [520, 777, 1], strides: [1040, 1040 * 777], boxes: [64, 128, 1], elem_bytes: 2 };
        let fp8 = TileMap { boxes: [128, 128, 1], elem_bytes: 1, ..ok };
        // f32, 32 to a 128-byte row: what `SharedSum` adds into.
        let sum = TileMap { boxes: [32, 64, 1], elem_bytes: 4, ..ok };
        assert_eq!(fp8.unsupported(), None);
        assert_eq!(sum.unsupported(), None);
        assert_eq!(ok.unsupported(), None);
        // A head of 72 columns: a 64-column box and a 16-column one, heads 144 bytes apart.
        let tail = TileMap { dims: [72, 4096, 16], strides: [2304, 144], boxes: [16, 64, 1], ..ok };
        assert_eq!(tail.unsupported(), None);
        let cases = [
            (TileMap { base: 0x1008, ..ok }, "16-byte aligned"),
            (TileMap { strides: [1030, 1030 * 777], ..ok }, "multiple of 16"),
            (TileMap { boxes: [24, 128, 1], ..ok }, "128 bytes wide"),
            (TileMap { boxes: [8, 128, 1], ..ok }, "(16, 32 or 64 elements)"),
            (TileMap { boxes: [48, 128, 1], ..fp8 }, "(32, 64 or 128 elements)"),
            (TileMap { elem_bytes: 4, ..ok }, "128 bytes wide"),
            (TileMap { elem_bytes: 8, ..ok }, "not 2"),
            (TileMap { boxes: [64, 512, 1], ..ok }, "at most 256"),
            (TileMap { dims: [520, 0, 1], ..ok }, "dimensions"),
        ];
        for (m, why) in cases {
            let got = m.unsupported().unwrap_or_else(|| panic!("{m:?} was accepted"));
            assert!(got.contains(why), "{m:?}: {got:?} should say {why:?}");
        }
    }
}
