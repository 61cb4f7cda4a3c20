//! Tensor maps for Hopper's TMA copies (`rustile::tma`): the driver encodes
//! one (`cuTensorMapEncodeTiled`), it is uploaded to device memory once, and
//! kernels take its address. A map is a pure function of what it describes,
//! so the cache is keyed by that description: a later call on the same
//! tensor (or on one allocated at the same address with the same shape)
//! costs a hash lookup, not an upload.
//!
//! The cache keeps the [`MAPS_KEPT`] most recently used maps: a training
//! loop that allocates fresh activations every step would otherwise add
//! maps without end. A dropped map is freed in stream order, after the
//! kernels already issued that read it.
use std::num::NonZeroUsize;

use cudarc::driver::sys::{self, CUresult};

use crate::{Error, Gpu, Result, Tensor};

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
    /// Bytes an element: 2 or 1.
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
        if !(self.elem_bytes == 1 || self.elem_bytes == 2) {
            return Some(format!("its elements are {} bytes, not 2 (bf16, f16) or 1 (FP8)", self.elem_bytes));
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

impl Gpu {
    /// The device address of the tensor map for `m` (swizzled as `Shared`
    /// tiles of its rows, zero fill outside the tensor), encoded and
    /// uploaded on first use. The address stays valid for the kernels
    /// issued before [`MAPS_KEPT`] other maps are made.
    pub fn tensor_map(&self, m: &TileMap) -> Result<u64> {
        if let Some(why) = m.unsupported() {
            return Err(Error::Shape(format!("TMA cannot copy this tensor: {why}")));
        }
        let Some(dev) = self.cuda.as_ref() else {
            // The interpreter's kernels copy the window a map would describe.
            return Ok(0);
        };
        let mut maps = dev.tensor_maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = maps.get(m) {
            return Ok(t.device_ptr());
        }
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        let elem_strides = [1u32; 3];
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                if m.elem_bytes == 1 {
                    sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8
                } else {
                    sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16
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
        // 128 bytes as 32 f32 words: a device buffer like any other tensor.
        let words: Vec<f32> = map.opaque.iter().flat_map(|w| [f32::from_bits(*w as u32), f32::from_bits((*w >> 32) as u32)]).collect();
        let t: Tensor<f32> = self.upload(&words, &[32])?;
        let at = t.device_ptr();
        maps.put(*m, t);
        Ok(at)
    }

    /// How many tensor maps this GPU keeps on the device now (at most [`MAPS_KEPT`]).
    pub fn tensor_maps_kept(&self) -> usize {
        self.cuda.as_ref().map_or(0, |dev| dev.tensor_maps.lock().unwrap_or_else(|e| e.into_inner()).len())
    }
}

#[cfg(test)]
mod tests {
    use super::TileMap;

    #[test]
    fn maps_the_copy_engine_cannot_use_are_named() {
        let ok = TileMap { base: 0x1000, dims: [520, 777, 1], strides: [1040, 1040 * 777], boxes: [64, 128, 1], elem_bytes: 2 };
        let fp8 = TileMap { boxes: [128, 128, 1], elem_bytes: 1, ..ok };
        assert_eq!(fp8.unsupported(), None);
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
            (TileMap { elem_bytes: 4, ..ok }, "not 2"),
            (TileMap { boxes: [64, 512, 1], ..ok }, "at most 256"),
            (TileMap { dims: [520, 0, 1], ..ok }, "dimensions"),
        ];
        for (m, why) in cases {
            let got = m.unsupported().unwrap_or_else(|| panic!("{m:?} was accepted"));
            assert!(got.contains(why), "{m:?}: {got:?} should say {why:?}");
        }
    }
}
