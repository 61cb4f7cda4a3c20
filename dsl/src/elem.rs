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
    /// Two FP4 values a byte ([`F4E2M1x2`]): packed data, not a tile element.
    E2M1x2,
}

/// An element type that lives in device memory: f32, bf16, f16, fp8 (e4m3 / e5m2),
/// and packed FP4 pairs (e2m1).
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

// ---- FP4 E2M1 ------------------------------------------------------------------------------
//
// NVFP4 is FP4 E2M1 values with one FP8 E4M3 scale per 16 of them. The
// scales are the unsigned use of e4m3 ("UE4M3": sign bit 0), so
// [`F8E4M3`] serves for them as it is. Every E2M1 value times every e4m3
// value is exact in f16 and in bf16 (significands of at most 2 and 4 bits
// multiply into at most 6; the magnitudes stay within 2^-10 .. 2688), so
// a dequantized operand can feed 16-bit tensor cores without rounding.

/// The largest E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

/// The value of the E2M1 code in the low 4 bits of `nibble` (sign, 2
/// exponent bits, 1 mantissa bit: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, with a −0).
#[inline(always)]
pub fn e2m1_to_f32(nibble: u8) -> f32 {
    // Twice the magnitudes of codes 0..8, one hex digit each, so that the
    // decode is a shift and a mask with no table in memory and no branch.
    const TWICE: u32 = 0xC864_3210;
    let code = (nibble & 0xf) as u32;
    let magnitude = ((TWICE >> (4 * (code & 7))) & 0xf) as f32 * 0.5;
    f32::from_bits(magnitude.to_bits() | ((code & 8) << 28))
}

/// `x` rounded to the nearest E2M1 value (ties to the even code), saturating
/// at ±6 (infinities too), as a code in the low 4 bits. The sign is kept, so
/// a small negative value becomes −0. E2M1 has no NaN: a NaN becomes ±0,
/// which leaves a block's other values intact.
#[inline(always)]
pub fn e2m1_from_f32(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 28) & 8) as u8;
    let a = f32::from_bits(bits & 0x7fff_ffff);
    // The code is the number of midpoints between neighbouring values that
    // `a` lies above. At a midpoint the even code wins: a midpoint below an
    // even code counts once reached (>=), one below an odd code only once
    // passed (>). Every comparison with a NaN is false, hence code 0.
    let code = (a > 0.25) as u8
        + (a >= 0.75) as u8
        + (a > 1.25) as u8
        + (a >= 1.75) as u8
        + (a > 2.5) as u8
        + (a >= 3.5) as u8
        + (a > 5.0) as u8;
    sign | code
}

/// Two FP4 E2M1 values in one byte, the first in the low nibble (the
/// order of PyTorch's `float4_e2m1fn_x2` and of the tensor cores' packed
/// operands): a tensor of these is `k/2` bytes a row of `k` values.
///
/// As an [`Elem`] it moves byte for byte between host and device, and its
/// `to_f32`/`from_f32` act on the low (first) value only; use
/// [`decode`](Self::decode) and [`encode`](Self::encode) for both.
/// Kernels write pairs with [`Tile::scatter_pairs`](crate::Tile::scatter_pairs).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
#[repr(transparent)]
#[allow(non_camel_case_types)]
pub struct F4E2M1x2(pub u8);

impl F4E2M1x2 {
    /// The pair of codes (low nibble first).
    #[inline(always)]
    pub fn from_codes(first: u8, second: u8) -> Self {
        F4E2M1x2((first & 0xf) | (second << 4))
    }
    #[inline(always)]
    pub fn codes(self) -> [u8; 2] {
        [self.0 & 0xf, self.0 >> 4]
    }
    /// Both values, exactly.
    #[inline(always)]
    pub fn decode(self) -> [f32; 2] {
        [e2m1_to_f32(self.0), e2m1_to_f32(self.0 >> 4)]
    }
    /// `first` and `second`, each rounded as [`e2m1_from_f32`].
    #[inline(always)]
    pub fn encode(first: f32, second: f32) -> Self {
        F4E2M1x2(e2m1_from_f32(first) | (e2m1_from_f32(second) << 4))
    }
}

unsafe impl Elem for F4E2M1x2 {
    const NAME: &'static str = "e2m1x2";
    const KIND: Kind = Kind::E2M1x2;
    /// The first (low) value.
    #[inline(always)]
    fn to_f32(self) -> f32 {
        e2m1_to_f32(self.0)
    }
    /// `x` as the first (low) value, the second 0.
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        F4E2M1x2(e2m1_from_f32(x))
    }
    const CHUNK_ALIGN: usize = 8;
}

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

    /// Every E2M1 value, in code order (codes 8..16 are their negatives).
    const E2M1_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

    #[test]
    fn e2m1_decodes_and_round_trips_every_code() {
        for code in 0..16u8 {
            let want = if code < 8 { E2M1_VALUES[code as usize] } else { -E2M1_VALUES[code as usize - 8] };
            let x = e2m1_to_f32(code);
            assert_eq!(x.to_bits(), want.to_bits(), "code {code:#x}: {x}, expected {want}");
            assert_eq!(e2m1_from_f32(x), code, "code {code:#x} ({x}) does not come back");
            // Only the low nibble is the code.
            assert_eq!(e2m1_to_f32(code | 0xa0).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn e2m1_rounds_to_nearest_even_and_saturates() {
        // Midpoints: the even code wins (codes 0, 2, 4, 6 are 0, 1, 2, 4).
        for (x, want) in [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)] {
            assert_eq!(e2m1_to_f32(e2m1_from_f32(x)), want, "{x}");
            assert_eq!(e2m1_to_f32(e2m1_from_f32(-x)), -want, "-{x}");
        }
        // Just off the midpoints: the nearer value.
        for (x, want) in [(0.26, 0.5), (0.74, 0.5), (0.76, 1.0), (1.26, 1.5), (1.74, 1.5), (2.49, 2.0), (2.51, 3.0), (3.49, 3.0), (4.99, 4.0), (5.01, 6.0)] {
            assert_eq!(e2m1_to_f32(e2m1_from_f32(x)), want, "{x}");
        }
        for x in [6.0, 6.5, 7.0, 1e30, f32::INFINITY] {
            assert_eq!(e2m1_from_f32(x), 0x7, "{x} saturates to 6");
            assert_eq!(e2m1_from_f32(-x), 0xf, "-{x} saturates to -6");
        }
        assert_eq!(e2m1_from_f32(-0.0), 0x8);
        assert_eq!(e2m1_from_f32(-0.1), 0x8, "a small negative value is -0");
        assert_eq!(e2m1_from_f32(f32::NAN) & 7, 0, "NaN encodes as a zero");
    }

    #[test]
    fn e2m1_rounding_matches_a_search_of_the_grid() {
        // Against the nearest value found by brute force (ties to the even
        // code), on a fine grid of inputs that hits every midpoint exactly.
        for i in 0..=8 * 64 {
            let x = i as f32 / 64.0;
            let best = (0..8)
                .min_by(|&a, &b| {
                    let (da, db) = ((E2M1_VALUES[a] - x).abs(), (E2M1_VALUES[b] - x).abs());
                    da.partial_cmp(&db).unwrap().then(((a % 2 != 0) as u8).cmp(&((b % 2 != 0) as u8)))
                })
                .unwrap();
            assert_eq!(e2m1_from_f32(x), best as u8, "{x}");
        }
    }

    #[test]
    fn e2m1_pairs_pack_low_nibble_first() {
        let p = F4E2M1x2::encode(1.5, -4.0);
        assert_eq!(p.0, 0x3 | (0xe << 4));
        assert_eq!(p.decode(), [1.5, -4.0]);
        assert_eq!(p.codes(), [0x3, 0xe]);
        assert_eq!(F4E2M1x2::from_codes(0x3, 0xe), p);
        assert_eq!(<F4E2M1x2 as Elem>::to_f32(p), 1.5);
        assert_eq!(<F4E2M1x2 as Elem>::from_f32(-6.0).decode(), [-6.0, 0.0]);
        for b in 0..=255u8 {
            let [x, y] = F4E2M1x2(b).decode();
            assert_eq!(F4E2M1x2::encode(x, y), F4E2M1x2(b));
        }
    }

    #[test]
    fn e2m1_times_e4m3_is_exact_in_f16_and_bf16() {
        let mut checked = 0;
        for s in 0..=255u8 {
            let scale = F8E4M3(s).to_f32();
            if scale.is_nan() {
                continue;
            }
            for code in 0..16u8 {
                let product = e2m1_to_f32(code) * scale;
                let exact = e2m1_to_f32(code) as f64 * scale as f64;
                assert_eq!(product as f64, exact, "code {code:#x} × scale {s:#x} is not exact in f32");
                assert_eq!(f16::from_f32(product).to_f32(), product, "code {code:#x} × scale {s:#x} = {product} in f16");
                assert_eq!(bf16::from_f32(product).to_f32(), product, "code {code:#x} × scale {s:#x} = {product} in bf16");
                checked += 1;
            }
        }
        assert_eq!(checked, 16 * 254, "two e4m3 codes are NaN");
    }

    #[test]
    fn half_types_round_trip() {
        for x in [0.0f32, 1.0, -2.5, 3.1415927, 65504.0] {
            assert_eq!(f16::from_f32(x).to_f32(), half::f16::from_f32(x).to_f32());
            assert_eq!(<bf16 as Elem>::to_f32(<bf16 as Elem>::from_f32(x)), half::bf16::from_f32(x).to_f32());
        }
    }
}
