//! Element types a tile can hold in memory, and their conversions to and from
//! the f32 that all tile arithmetic is done in.

pub use half::{bf16, f16};

/// Which element type an [`Elem`] is, for code that must branch on it (a
/// `match` on a constant folds away; comparing `NAME`s may not).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    F32,
    Bf16,
    F16,
    E4M3,
    E5M2,
    /// Indices and offsets (a kernel's tables, read with [`Ptr::read`](crate::Ptr::read)), not tile data.
    U32,
}

/// An element type that lives in device memory: f32, bf16, f16, fp8 (e4m3 / e5m2).
///
/// # Safety
/// `Self` must be plain bits (no padding, any bit pattern valid), because
/// tensors of it are copied to and from the device byte for byte.
pub unsafe trait Elem: Copy + Default + PartialEq + Send + Sync + core::fmt::Debug + 'static {
    /// The short name used in kernel entry names and messages ("bf16").
    const NAME: &'static str;
    const KIND: Kind;
    fn to_f32(self) -> f32;
    fn from_f32(x: f32) -> Self;
    /// `[from_f32(a), from_f32(b)]`; the 16-bit types convert a pair in one
    /// GPU instruction.
    #[inline(always)]
    fn from_f32_pair(a: f32, b: f32) -> [Self; 2] {
        [Self::from_f32(a), Self::from_f32(b)]
    }

    /// Alignment (bytes) that a chunk of 8 elements needs for one vector access on the GPU.
    const CHUNK_ALIGN: usize = 16;
}

unsafe impl Elem for f32 {
    const NAME: &'static str = "f32";
    const KIND: Kind = Kind::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
}

/// Indices and offsets in device memory: a grouped GEMM's table of sizes,
/// a batch's cumulative sequence lengths. Kernels read them whole with
/// [`Ptr::read`](crate::Ptr::read); as tile data they convert like any number.
unsafe impl Elem for u32 {
    const NAME: &'static str = "u32";
    const KIND: Kind = Kind::U32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x as u32
    }
}

unsafe impl Elem for bf16 {
    const NAME: &'static str = "bf16";
    const KIND: Kind = Kind::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        return bf16::from_bits(rustile_device::f32_to_bf16(x));
        #[cfg(not(target_arch = "nvptx64"))]
        return bf16::from_f32(x);
    }
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    fn from_f32_pair(a: f32, b: f32) -> [Self; 2] {
        let [lo, hi] = rustile_device::f32x2_to_bf16x2(a, b);
        [bf16::from_bits(lo), bf16::from_bits(hi)]
    }
}

unsafe impl Elem for f16 {
    const NAME: &'static str = "f16";
    const KIND: Kind = Kind::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        return rustile_device::f16_to_f32(self.to_bits());
        #[cfg(not(target_arch = "nvptx64"))]
        return f16::to_f32(self);
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        return f16::from_bits(rustile_device::f32_to_f16(x));
        #[cfg(not(target_arch = "nvptx64"))]
        return f16::from_f32(x);
    }
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    fn from_f32_pair(a: f32, b: f32) -> [Self; 2] {
        let [lo, hi] = rustile_device::f32x2_to_f16x2(a, b);
        [f16::from_bits(lo), f16::from_bits(hi)]
    }
}

/// A small float format: `E` exponent bits, `M` mantissa bits, stored in one byte.
/// The two OCP FP8 formats differ in how they spend the top of the range, so
/// `IEEE` says whether the all-ones exponent means inf/NaN (e5m2) or is an
/// ordinary binade with only `S.1111.111` as NaN and no infinities (e4m3).
const fn fp8_bias(e: u32) -> i32 {
    (1 << (e - 1)) - 1
}

#[inline(always)]
fn fp8_from_f32<const E: u32, const M: u32, const IEEE: bool>(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let a = f32::from_bits(bits & 0x7fff_ffff);
    let bias = fp8_bias(E);
    // The largest finite value and the NaN encoding of the format.
    let (max_code, nan_code) = if IEEE {
        ((((1u32 << E) - 2) << M | ((1 << M) - 1)) as u8, 0x7f_u8)
    } else {
        ((((1u32 << E) - 1) << M | ((1 << M) - 2)) as u8, 0x7f_u8)
    };
    if a != a {
        return sign | nan_code;
    }
    let max_val = fp8_decode::<E, M, IEEE>(max_code);
    if a >= max_val {
        // Saturate (the OCP "satfinite" conversion), infinities included: a
        // kernel that overflows fp8 gets the largest value, not a NaN.
        return sign | max_code;
    }
    // Round to nearest even by scaling into the format's integer grid.
    let exp = if a == 0.0 { i32::MIN } else { ((a.to_bits() >> 23) as i32) - 127 };
    let min_normal_exp = 1 - bias;
    let e = if exp < min_normal_exp { min_normal_exp } else { exp };
    let quantum = pow2(e - M as i32);
    let q = round_half_even(a / quantum); // integer count of quanta, < 2^(M+1)
    let q = q as u32;
    let code = if e == min_normal_exp && q < (1 << M) {
        q // subnormal (or zero)
    } else if q >= (2 << M) {
        // rounded up into the next binade
        (((e + bias + 1) as u32) << M) | ((q >> 1) - (1 << M))
    } else {
        (((e + bias) as u32) << M) | (q - (1 << M))
    };
    sign | code as u8
}

#[inline(always)]
fn fp8_decode<const E: u32, const M: u32, const IEEE: bool>(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((code >> M) & ((1 << E) - 1) as u8) as i32;
    let m = (code & ((1 << M) - 1) as u8) as u32;
    let bias = fp8_bias(E);
    if IEEE && e == (1 << E) - 1 {
        return if m == 0 { sign * f32::INFINITY } else { f32::NAN };
    }
    if !IEEE && e == (1 << E) - 1 && m == (1 << M) - 1 {
        return f32::NAN;
    }
    if e == 0 {
        sign * (m as f32) * pow2(1 - bias - M as i32)
    } else {
        sign * ((1 << M) + m) as f32 * pow2(e - bias - M as i32)
    }
}

#[inline(always)]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

#[inline(always)]
fn round_half_even(x: f32) -> f32 {
    // x is non-negative and below 2^23, so adding and removing 2^23 rounds it
    // to an integer with the FPU's own round-to-nearest-even.
    const BIG: f32 = 8388608.0;
    (x + BIG) - BIG
}

macro_rules! fp8 {
    ($(#[$doc:meta])* $name:ident, $e:literal, $m:literal, $ieee:literal, $tag:literal, $kind:ident, $cvt2:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Debug)]
        #[repr(transparent)]
        #[allow(non_camel_case_types)]
        pub struct $name(pub u8);
        impl $name {
            pub fn to_bits(self) -> u8 { self.0 }
            pub fn from_bits(b: u8) -> Self { $name(b) }
        }
        unsafe impl Elem for $name {
            const NAME: &'static str = $tag;
            const KIND: Kind = Kind::$kind;
            #[inline(always)]
            fn to_f32(self) -> f32 { fp8_decode::<$e, $m, $ieee>(self.0) }
            #[inline(always)]
            fn from_f32(x: f32) -> Self { $name(fp8_from_f32::<$e, $m, $ieee>(x)) }
            // Hopper converts two at once, with the same rounding and saturation.
            #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
            #[inline(always)]
            fn from_f32_pair(a: f32, b: f32) -> [Self; 2] {
                rustile_device::$cvt2(a, b).map($name)
            }
            const CHUNK_ALIGN: usize = 8;
        }
    };
}
fp8!(/// FP8 E4M3 (OCP): 4 exponent bits, 3 mantissa bits, max ±448, no infinities.
    F8E4M3, 4, 3, false, "e4m3", E4M3, f32x2_to_e4m3x2);
fp8!(/// FP8 E5M2 (OCP): 5 exponent bits, 2 mantissa bits, max ±57344, with infinities.
    F8E5M2, 5, 2, true, "e5m2", E5M2, f32x2_to_e5m2x2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_round_trips_every_code() {
        for b in 0..=255u8 {
            for (x, back) in [
                (F8E4M3(b).to_f32(), F8E4M3::from_f32(F8E4M3(b).to_f32()).to_f32()),
                (F8E5M2(b).to_f32(), F8E5M2::from_f32(F8E5M2(b).to_f32()).to_f32()),
            ] {
                if x.is_finite() {
                    assert_eq!(back, x, "code {b:#x}");
                }
            }
        }
    }

    #[test]
    fn fp8_known_values_and_saturation() {
        assert_eq!(F8E4M3::from_f32(448.0).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_f32(1e6).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_f32(-1e6).to_f32(), -448.0);
        assert_eq!(F8E5M2::from_f32(57344.0).to_f32(), 57344.0);
        assert_eq!(F8E4M3::from_f32(1.0).0, 0x38);
        assert_eq!(F8E5M2::from_f32(1.0).0, 0x3c);
        assert_eq!(F8E4M3::from_f32(2f32.powi(-9)).to_f32(), 2f32.powi(-9)); // smallest subnormal
        assert!(F8E4M3::from_f32(f32::NAN).to_f32().is_nan());
        // 1 + 1/16 lies halfway between 1 and 1.125: ties go to the even code (1.0).
        assert_eq!(F8E4M3::from_f32(1.0625).to_f32(), 1.0);
        assert_eq!(F8E4M3::from_f32(1.1875).to_f32(), 1.25);
    }

    #[test]
    fn fp8_rounding_error_is_within_half_a_quantum() {
        let mut x = 1e-3f32;
        while x < 400.0 {
            let y = F8E4M3::from_f32(x).to_f32();
            assert!((y - x).abs() <= x * 2f32.powi(-4) + 2f32.powi(-10), "{x} -> {y}");
            x *= 1.013;
        }
    }

    #[test]
    fn half_types_round_trip() {
        for x in [0.0f32, 1.0, -2.5, 3.1415927, 65504.0] {
            assert_eq!(f16::from_f32(x).to_f32(), half::f16::from_f32(x).to_f32());
            assert_eq!(<bf16 as Elem>::to_f32(<bf16 as Elem>::from_f32(x)), half::bf16::from_f32(x).to_f32());
        }
    }
}
