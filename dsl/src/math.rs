//! Scalar f32 math, the same function on both backends: the GPU uses the
//! `.approx` special-function unit where it is accurate to f32 rounding
//! (exp2, log2, rsqrt, reciprocal) and builds the rest from those; the CPU
//! uses `std`. [`recip`] is the one-instruction reciprocal. The activations
//! divide exactly; their `_fast` twins ([`silu_fast`], [`gelu_tanh_fast`],
//! [`tanh_fast`]) use `recip`, for epilogues that store 16-bit values (the
//! staged GEMM epilogue, the TMA dual GEMM).

#[cfg(target_arch = "nvptx64")]
use rustile_device as dev;

#[cfg(target_arch = "nvptx64")]
const LOG2_E: f32 = core::f32::consts::LOG2_E;
#[cfg(target_arch = "nvptx64")]
const LN_2: f32 = core::f32::consts::LN_2;

#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::ex2(x);
    #[cfg(not(target_arch = "nvptx64"))]
    return x.exp2();
}

#[inline(always)]
pub fn exp(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::ex2(x * LOG2_E);
    #[cfg(not(target_arch = "nvptx64"))]
    return x.exp();
}

#[inline(always)]
pub fn log2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::lg2(x);
    #[cfg(not(target_arch = "nvptx64"))]
    return x.log2();
}

#[inline(always)]
pub fn log(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::lg2(x) * LN_2;
    #[cfg(not(target_arch = "nvptx64"))]
    return x.ln();
}

#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::sqrt(x);
    #[cfg(not(target_arch = "nvptx64"))]
    return x.sqrt();
}

#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::rsqrt(x);
    #[cfg(not(target_arch = "nvptx64"))]
    return 1.0 / x.sqrt();
}

/// 1/x to within an ulp or two (one `rcp.approx` on the GPU).
#[inline(always)]
pub fn recip(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::rcp_approx(x);
    #[cfg(not(target_arch = "nvptx64"))]
    return 1.0 / x;
}

/// tanh to f32 accuracy (the hardware's `tanh.approx` is only good to ~1e-3).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    #[cfg(not(target_arch = "nvptx64"))]
    return x.tanh();
    #[cfg(target_arch = "nvptx64")]
    return tanh_with(x, |d| 1.0 / d);
}

/// `tanh` with `rcp.approx` for its division (a few ulp of f32).
#[inline(always)]
pub fn tanh_fast(x: f32) -> f32 {
    #[cfg(not(target_arch = "nvptx64"))]
    return x.tanh();
    #[cfg(target_arch = "nvptx64")]
    return tanh_with(x, recip);
}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn tanh_with(x: f32, recip: impl Fn(f32) -> f32) -> f32 {
    // Both forms are computed and one is selected: a branch per value made
    // each thread's values run one after another (a GELU epilogue with one
    // warp a scheduler took 3.5× its GEMM's time), where straight-line code
    // lets the 8 values of a chunk overlap.
    let a = abs(x);
    // Odd Taylor series: the x^11 term is below 2e-9 for |x| < 0.25.
    let x2 = x * x;
    let p = 62.0 / 2835.0;
    let p = p * x2 - 17.0 / 315.0;
    let p = p * x2 + 2.0 / 15.0;
    let p = p * x2 - 1.0 / 3.0;
    let small = x + x * x2 * p;
    // 1 - 2/(e^2a + 1): exact at infinity, no cancellation for a ≥ 0.25.
    let t = 1.0 - 2.0 * recip(exp(2.0 * a) + 1.0);
    let large = f32::from_bits(t.to_bits() | (x.to_bits() & 0x8000_0000));
    if a < 0.25 { small } else { large }
}

#[inline(always)]
pub fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// x·σ(x), the SiLU (swish) activation.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// The SiLU's derivative: `σ(x)·(1 + x·(1 − σ(x)))`.
#[inline(always)]
pub fn silu_grad(x: f32) -> f32 {
    let s = sigmoid(x);
    s * (1.0 + x * (1.0 - s))
}

/// `silu_grad` with `rcp.approx` for its division (see [`silu_fast`]).
#[inline(always)]
pub fn silu_grad_fast(x: f32) -> f32 {
    let s = recip(1.0 + exp(-x));
    s * (1.0 + x * (1.0 - s))
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU with the tanh approximation (as `F.gelu(x, approximate="tanh")`).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// `silu` with `rcp.approx` for its division: a few ulp of f32 and a third
/// of the instructions (IEEE division has a slow path), for epilogues that
/// store 16-bit values.
#[inline(always)]
pub fn silu_fast(x: f32) -> f32 {
    x * recip(1.0 + exp(-x))
}

/// `gelu_tanh` with `rcp.approx` for its division (see [`silu_fast`]).
#[inline(always)]
pub fn gelu_tanh_fast(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh_fast(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// max that ignores the sign of zero and treats NaN as missing (like `f32::max`).
#[inline(always)]
pub fn max(a: f32, b: f32) -> f32 {
    a.max(b)
}

#[inline(always)]
pub fn min(a: f32, b: f32) -> f32 {
    a.min(b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn activations_match_their_definitions() {
        for &x in &[-20.0f32, -3.0, -0.5, -1e-3, 0.0, 1e-3, 0.7, 4.0, 30.0] {
            let xd = x as f64;
            let s = 1.0 / (1.0 + (-xd).exp());
            assert!((super::sigmoid(x) as f64 - s).abs() < 1e-6);
            assert!((super::silu(x) as f64 - xd * s).abs() <= 1e-6 * (1.0 + xd.abs()));
            let g = 0.5 * xd * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!((super::gelu_tanh(x) as f64 - g).abs() <= 1e-6 * (1.0 + xd.abs()));
            assert!((super::silu_fast(x) as f64 - xd * s).abs() <= 1e-6 * (1.0 + xd.abs()));
            assert!((super::gelu_tanh_fast(x) as f64 - g).abs() <= 1e-6 * (1.0 + xd.abs()));
        }
    }
}

/// Two f16 products at once: `a` and `b` each hold two f16 values (the
/// first in the low half), and each product is rounded to nearest even (one
/// instruction on the GPU; for decoding packed formats in registers).
#[inline(always)]
pub fn mul_f16x2(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    return dev::mul_f16x2(a, b);
    #[cfg(not(target_arch = "nvptx64"))]
    {
        use half::f16;
        let half = |x: u32, at: u32| f16::from_bits((x >> at) as u16).to_f32();
        // An f16 product is exact in f32, so rounding it once to f16 is the
        // correctly rounded f16 product.
        let prod = |at: u32| f16::from_f32(half(a, at) * half(b, at)).to_bits() as u32;
        prod(0) | prod(16) << 16
    }
}
