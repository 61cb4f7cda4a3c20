//! NVFP4 on the CPU: the quantize kernel in the interpreter against
//! [`quantize_cpu`] bit for bit, the reference against NVIDIA's error
//! bounds, the blocked layout against cuBLAS's atom order built another
//! way, and the task's reference against a direct sum.
use super::*;
use crate::testing::{nvfp4_gpu_mode, rng, standard_normal};
use rand::{rngs::StdRng, Rng};
use rustile::{bf16, e2m1_to_f32};
use rustile_host::{Error, Gpu};

/// `rows×k` bf16 values whose blocks span every case of the scale: normal
/// values at magnitudes from 2^-24 (scales that round to zero or are
/// subnormal) to 2^12 (scales that saturate at 448), blocks of zeros, and
/// blocks of exact E2M1×E4M3 values (their midpoints and ties included).
fn awkward_values(rng: &mut StdRng, rows: usize, k: usize) -> Vec<bf16> {
    let mut x = Vec::with_capacity(rows * k);
    for _ in 0..rows * k / BLOCK {
        let kind = rng.gen_range(0..8);
        let magnitude = 2f32.powi(rng.gen_range(-24..13));
        let scale = F8E4M3(rng.gen_range(1..0x7f)).to_f32();
        for i in 0..BLOCK {
            let v = match kind {
                0 => 0.0,
                // A 6 makes `scale` the block's, so the others lie exactly
                // halfway between neighbouring E2M1 values.
                1 if i == 0 => 6.0 * scale,
                1 => [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0][rng.gen_range(0..7)] * scale * if rng.gen() { 1.0 } else { -1.0 },
                2 => e2m1_to_f32(rng.gen_range(0..16)) * scale,
                _ => standard_normal(rng) * magnitude,
            };
            x.push(bf16::from_f32(v));
        }
    }
    x
}

#[test]
fn the_kernel_quantizes_as_the_reference_bit_for_bit() {
    let gpu = Gpu::interpreter();
    for (rows, k) in [(1, 16), (7, 48), (129, 256), (7, 1040), (3, 7168)] {
        let (mut rng, seed) = rng();
        let x = awkward_values(&mut rng, rows, k);
        let xt = gpu.upload(&x, &[rows, k]).unwrap();
        // Poisoned: 0xff is two −6s, 0x7f an e4m3 NaN.
        let mut q = gpu.upload(&vec![F4E2M1x2(0xff); rows * k / 2], &[rows, k / 2]).unwrap();
        let mut scales = gpu.upload(&vec![F8E4M3(0x7f); rows * k / BLOCK], &[rows, k / BLOCK]).unwrap();
        quantize(&gpu, &xt, &mut q, &mut scales).unwrap();
        let (want_q, want_scales) = quantize_cpu(&x, rows, k);
        let (got_q, got_scales) = (gpu.download(&q).unwrap(), gpu.download(&scales).unwrap());
        let ctx = format!("[{rows}, {k}] (seed {seed})");
        if let Some(i) = (0..want_scales.len()).find(|&i| got_scales[i] != want_scales[i]) {
            panic!("{ctx}: scale {i} is {:#04x}, expected {:#04x}", got_scales[i].0, want_scales[i].0);
        }
        if let Some(i) = (0..want_q.len()).find(|&i| got_q[i] != want_q[i]) {
            panic!("{ctx}: value pair {i} is {:#04x}, expected {:#04x}", got_q[i].0, want_q[i].0);
        }
    }
}

#[test]
fn the_kernel_takes_batches_and_f16() {
    let gpu = Gpu::interpreter();
    let (mut rng, seed) = rng();
    let (l, rows, k) = (3, 5, 64);
    let x: Vec<rustile::f16> = (0..l * rows * k).map(|_| rustile::f16::from_f32(standard_normal(&mut rng))).collect();
    let xt = gpu.upload(&x, &[l, rows, k]).unwrap();
    let mut q = gpu.alloc::<F4E2M1x2>(&[l, rows, k / 2]).unwrap();
    let mut scales = gpu.alloc::<F8E4M3>(&[l, rows, k / BLOCK]).unwrap();
    quantize(&gpu, &xt, &mut q, &mut scales).unwrap();
    let want = quantize_cpu(&x, l * rows, k);
    assert_eq!((gpu.download(&q).unwrap(), gpu.download(&scales).unwrap()), want, "seed {seed}");
}

#[test]
fn exact_nvfp4_values_come_back_unchanged() {
    // Blocks that are already NVFP4 with a ±6 in each (so amax/6 is the
    // scale exactly) quantize to their own codes and scales.
    let gpu = Gpu::interpreter();
    let (mut rng, seed) = rng();
    let (rows, k) = (37, 80);
    let mut q: Vec<F4E2M1x2> = (0..rows * k / 2).map(|_| F4E2M1x2(rng.gen())).collect();
    for block in q.chunks_mut(BLOCK / 2) {
        block[rng.gen_range(0..BLOCK / 2)] = F4E2M1x2::from_codes(if rng.gen() { 0x7 } else { 0xf }, rng.gen_range(0..16));
    }
    // Every positive scale, subnormals included (0x7f is NaN).
    let scales: Vec<F8E4M3> = (0..rows * k / BLOCK).map(|_| F8E4M3(rng.gen_range(0x01..0x7f))).collect();
    let x: Vec<bf16> = dequantize_cpu(&q, &scales, rows, k).into_iter().map(bf16::from_f32).collect();
    assert_eq!(quantize_cpu(&x, rows, k), (q.clone(), scales.clone()), "quantize_cpu (seed {seed})");
    let xt = gpu.upload(&x, &[rows, k]).unwrap();
    let (mut qt, mut st) = (gpu.alloc::<F4E2M1x2>(&[rows, k / 2]).unwrap(), gpu.alloc::<F8E4M3>(&[rows, k / BLOCK]).unwrap());
    quantize(&gpu, &xt, &mut qt, &mut st).unwrap();
    assert_eq!((gpu.download(&qt).unwrap(), gpu.download(&st).unwrap()), (q, scales), "the kernel (seed {seed})");
}

#[test]
fn quantize_cpu_keeps_each_value_within_half_an_e2m1_step() {
    let (mut rng, seed) = rng();
    let (rows, k) = (61, 112);
    let x: Vec<f32> = (0..rows * k).map(|_| standard_normal(&mut rng) * 2f32.powi(rng.gen_range(-4..8))).collect();
    let (q, scales) = quantize_cpu(&x, rows, k);
    let back = dequantize_cpu(&q, &scales, rows, k);
    for (b, block) in x.chunks(BLOCK).enumerate() {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = scales[b].to_f32();
        // The scale is amax/6 to e4m3's precision: half a step, relative
        // 2^-4 for normals, 2^-10 absolute for subnormals.
        assert!((s - amax / 6.0).abs() <= amax / 6.0 / 16.0 + 2f32.powi(-10), "block {b}: scale {s} for amax {amax} (seed {seed})");
        for (i, &v) in block.iter().enumerate() {
            let (r, got) = ((v / s).abs(), back[b * BLOCK + i]);
            if r > 6.0 {
                // Past 6 (the scale rounded down): saturated.
                assert_eq!(got, 6.0 * s * v.signum(), "block {b} value {i}: {v} (scale {s}, seed {seed})");
            } else {
                // Within half the E2M1 spacing at r.
                let half_step = if r >= 4.0 { 1.0 } else if r >= 2.0 { 0.5 } else { 0.25 };
                assert!((got - v).abs() <= half_step * s * 1.00001, "block {b} value {i}: {v} came back as {got} (scale {s}, seed {seed})");
            }
            assert!(got == 0.0 || got.signum() == v.signum(), "block {b} value {i}: {v} changed sign (seed {seed})");
        }
    }
}

#[test]
fn blocks_whose_scale_rounds_to_zero_store_zeros() {
    // e4m3's smallest value is 2^-9, so amax/6 below 2^-10 rounds to 0.
    let tiny = 6.0 * 2f32.powi(-11);
    let x: Vec<f32> = [[0.0; 16], [-tiny; 16], [f32::NAN; 16]].concat();
    let (q, scales) = quantize_cpu(&x, 1, 48);
    assert_eq!(scales, vec![F8E4M3(0); 3]);
    assert!(dequantize_cpu(&q, &scales, 1, 48).iter().all(|&v| v == 0.0), "{q:?}");
    // A NaN is left out of its block's amax and stored as a zero.
    let mut x = [1.0f32; 16];
    x[3] = f32::NAN;
    x[5] = 6.0;
    let (q, scales) = quantize_cpu(&x, 1, 16);
    assert_eq!(scales[0].to_f32(), 1.0);
    assert_eq!(dequantize_cpu(&q, &scales, 1, 16)[3], 0.0);
    assert_eq!(dequantize_cpu(&q, &scales, 1, 16)[5], 6.0);
}

#[test]
fn the_host_api_refuses_bad_shapes_and_types() {
    let gpu = Gpu::interpreter();
    let x = gpu.alloc::<bf16>(&[3, 40]).unwrap();
    let (mut q, mut s) = (gpu.alloc::<F4E2M1x2>(&[3, 20]).unwrap(), gpu.alloc::<F8E4M3>(&[3, 2]).unwrap());
    assert!(matches!(quantize(&gpu, &x, &mut q, &mut s), Err(Error::Shape(m)) if m.contains("multiple of 16")));
    let x = gpu.alloc::<bf16>(&[3, 48]).unwrap();
    let (mut q, mut s) = (gpu.alloc::<F4E2M1x2>(&[3, 24]).unwrap(), gpu.alloc::<F8E4M3>(&[3, 4]).unwrap());
    assert!(matches!(quantize(&gpu, &x, &mut q, &mut s), Err(Error::Shape(m)) if m.contains("[3, 3]")));
    let (mut q, mut s) = (gpu.alloc::<F4E2M1x2>(&[3, 48]).unwrap(), gpu.alloc::<F8E4M3>(&[3, 3]).unwrap());
    assert!(matches!(quantize(&gpu, &x, &mut q, &mut s), Err(Error::Shape(m)) if m.contains("[3, 24]")));
    let x = gpu.alloc::<f32>(&[3, 48]).unwrap();
    let (mut q, mut s) = (gpu.alloc::<F4E2M1x2>(&[3, 24]).unwrap(), gpu.alloc::<F8E4M3>(&[3, 3]).unwrap());
    assert!(matches!(quantize(&gpu, &x, &mut q, &mut s), Err(Error::DType(_))));
}

#[test]
fn the_blocked_layout_is_cublas_atom_order() {
    let (mut rng, seed) = rng();
    for (rows, k) in [(1, 16), (7, 48), (128, 64), (129, 272), (300, 1040)] {
        let scales: Vec<F8E4M3> = (0..rows * k / BLOCK).map(|_| F8E4M3(rng.gen_range(1..=255))).collect();
        let blocked = to_blocked(&scales, rows, k);
        // Built another way: walk the atoms (128 rows × 4 scales, row blocks
        // outermost), in each the 32 rows of a quarter, the 4 quarters, the 4
        // scales, reading the plain scales padded with zeros.
        let (cols, mut want) = (k / BLOCK, Vec::new());
        for row_block in 0..rows.div_ceil(128) {
            for col_block in 0..cols.div_ceil(4) {
                for r32 in 0..32 {
                    for quarter in 0..4 {
                        for c in 0..4 {
                            let (r, kb) = (row_block * 128 + quarter * 32 + r32, col_block * 4 + c);
                            want.push(if r < rows && kb < cols { scales[r * cols + kb] } else { F8E4M3(0) });
                        }
                    }
                }
            }
        }
        assert_eq!(blocked.len(), blocked_len(rows, k), "[{rows}, {k}]");
        assert!(blocked == want, "[{rows}, {k}]: the blocked layout differs (seed {seed})");
        assert_eq!(from_blocked(&blocked, rows, k), scales, "[{rows}, {k}] (seed {seed})");
    }
}

/// The device's conversion to the blocked layout is the host's, padding
/// included, at odd row counts (the interpreter runs the kernel).
#[test]
fn the_blocked_kernel_matches_the_host_conversion() {
    let gpu = rustile_host::Gpu::interpreter();
    let (mut rng, seed) = rng();
    for (rows, k) in [(1, 64), (129, 192), (300, 2112)] {
        let scales: Vec<F8E4M3> = (0..rows * k / BLOCK).map(|_| F8E4M3(rng.gen_range(0..=255))).collect();
        let (values, scales_dev) = (gpu.upload(&vec![F4E2M1x2(0); rows * k / 2], &[rows, k / 2]).unwrap(), gpu.upload(&scales, &[rows, k / BLOCK]).unwrap());
        let mut out = gpu.upload(&vec![F8E4M3(0x7f); blocked_len(rows, k)], &[blocked_len(rows, k)]).unwrap();
        scales_to_blocked(&gpu, Nvfp4 { values: &values, scales: &scales_dev }, &mut out).unwrap();
        assert!(gpu.download(&out).unwrap() == to_blocked(&scales, rows, k), "[{rows}, {k}] (seed {seed})");
    }
}

/// The task by its definition, one output at a time: sums of E2M1 table
/// values times scales in float64, then `silu(g)·u`.
fn dual_gemm_direct(a: &(Vec<F4E2M1x2>, Vec<F8E4M3>), b1: &(Vec<F4E2M1x2>, Vec<F8E4M3>), b2: &(Vec<F4E2M1x2>, Vec<F8E4M3>), m: usize, n: usize, k: usize) -> Vec<f64> {
    const TABLE: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let value = |op: &(Vec<F4E2M1x2>, Vec<F8E4M3>), row: usize, c: usize| {
        let byte = op.0[(row * k + c) / 2].0;
        let code = if c % 2 == 0 { byte & 0xf } else { byte >> 4 };
        let v = TABLE[(code & 7) as usize] * if code & 8 != 0 { -1.0 } else { 1.0 };
        v * op.1[row * k / BLOCK + c / BLOCK].to_f32() as f64
    };
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let g: f64 = (0..k).map(|c| value(a, i, c) * value(b1, j, c)).sum();
            let u: f64 = (0..k).map(|c| value(a, i, c) * value(b2, j, c)).sum();
            out.push(g / (1.0 + (-g).exp()) * u);
        }
    }
    out
}

#[test]
fn the_task_reference_matches_a_direct_sum() {
    let (mut rng, seed) = rng();
    for (m, n, k) in [(1, 1, 16), (3, 5, 48), (7, 9, 256)] {
        let (a, b1, b2) = (nvfp4_gpu_mode(&mut rng, m, k), nvfp4_gpu_mode(&mut rng, n, k), nvfp4_gpu_mode(&mut rng, n, k));
        let got = dual_gemm_nvfp4_ref(&a.0, &a.1, &b1.0, &b1.1, &b2.0, &b2.1, m, n, k);
        let want = dual_gemm_direct(&a, &b1, &b2, m, n, k);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "[{m}, {n}, {k}] element {i}: {g}, directly {w} (seed {seed})");
        }
    }
    // By hand: A all 1.0 (code 2, scale 1), B1 all 0.5·2, B2 all −1·0.5,
    // so each gate is 16, each up −8.
    let k = 16;
    let a = (vec![F4E2M1x2::from_codes(0x2, 0x2); k / 2], vec![F8E4M3::from_f32(1.0)]);
    let b1 = (vec![F4E2M1x2::from_codes(0x1, 0x1); k / 2], vec![F8E4M3::from_f32(2.0)]);
    let b2 = (vec![F4E2M1x2::from_codes(0xa, 0xa); k / 2], vec![F8E4M3::from_f32(0.5)]);
    let got = dual_gemm_nvfp4_ref(&a.0, &a.1, &b1.0, &b1.1, &b2.0, &b2.1, 1, 1, k);
    assert_eq!(got, vec![16.0 / (1.0 + (-16.0f64).exp()) * -8.0]);
}

#[test]
fn gpu_mode_inputs_are_small_codes_with_zero_and_subnormal_scales() {
    let (mut rng, seed) = rng();
    let (q, scales) = nvfp4_gpu_mode(&mut rng, 128, 8192);
    let mut seen = [false; 16];
    for p in &q {
        for c in p.codes() {
            seen[c as usize] = true;
        }
    }
    let want: Vec<bool> = (0..16).map(|c| c & 4 == 0).collect();
    assert_eq!(seen.to_vec(), want, "codes seen (seed {seed}): only ±{{0, 0.5, 1, 1.5}}, all of them");
    assert!(scales.iter().all(|s| (0.0..=1.0).contains(&s.to_f32())), "scales in [0, 1] (seed {seed})");
    assert!(scales.iter().any(|s| s.0 == 0), "some scale is zero (seed {seed})");
    assert!(scales.iter().any(|s| s.0 > 0 && s.0 < 8), "some scale is subnormal (seed {seed})");
}
