//! CPU-interpreter checks of the NVFP4 dual GEMM against float64 of the
//! dequantized operands (GPU MODE's tolerance), every config, odd M and N.
use super::*;
use crate::reference;
use crate::nvfp4::{dequantize, dual_gemm_nvfp4_ref, Nvfp4};
use crate::testing::*;

/// The packed pairs as the kernel reads them: 32-bit words of eight values.
fn words(pairs: &[F4E2M1x2]) -> Vec<u32> {
    pairs.chunks(4).map(|b| u32::from_le_bytes([b[0].0, b[1].0, b[2].0, b[3].0])).collect()
}

#[test]
fn dual_gemm_nvfp4_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 64), (70, 33, 128), (129, 131, 64), (37, 200, 256)] {
        let (mut rng, seed) = rng();
        let (a, sa, _) = nvfp4_random(&mut rng, m, k, true);
        let (b1, sb1, _) = nvfp4_random(&mut rng, n, k, true);
        let (b2, sb2, _) = nvfp4_random(&mut rng, n, k, true);
        let want = dual_gemm_nvfp4_ref(&a, &sa, &b1, &sb1, &b2, &sb2, m, n, k);
        for cfg in 0..dual_gemm_nvfp4_kernel::CONFIGS.len() {
            let mut c = poisoned::<f16>(m * n);
            dual_gemm_nvfp4_kernel::cpu(cfg, &words(&a), &sa, &words(&b1), &sb1, &words(&b2), &sb2, &mut c, m, n, k);
            if let Some((i, got, w)) = nvfp4_outside_tolerance(&c, &want) {
                panic!("{m}×{n}×{k} cfg={cfg} (seed {seed}): c[{i}] = {got}, want {w}");
            }
        }
    }
}

/// The Hopper kernel (B widened by a warpgroup into shared memory, A
/// decoded in its order first) through the host wrapper in the
/// interpreter, every config.
#[test]
fn the_widening_kernel_matches_float64_at_odd_shapes() {
    let gpu = rustile_host::Gpu::interpreter();
    for (m, n, k) in [(1, 1, 64), (70, 33, 128), (129, 131, 192)] {
        let (mut rng, seed) = rng();
        let ops: Vec<_> = [m, n, n].into_iter().map(|rows| nvfp4_random(&mut rng, rows, k, true)).collect();
        let want = dual_gemm_nvfp4_ref(&ops[0].0, &ops[0].1, &ops[1].0, &ops[1].1, &ops[2].0, &ops[2].1, m, n, k);
        let dev: Vec<_> = ops.iter().zip([m, n, n]).map(|((v, s, _), rows)| (gpu.upload(v, &[rows, k / 2]).unwrap(), gpu.upload(s, &[rows, k / 16]).unwrap())).collect();
        let op = |j: usize| Nvfp4 { values: &dev[j].0, scales: &dev[j].1 };
        for cfg in (0..dual_gemm_nvfp4_ws_kernel::CONFIGS.len()).map(Config::Ws) {
            let mut c = gpu.upload(&poisoned::<f16>(m * n), &[m, n]).unwrap();
            dual_gemm_nvfp4_with_config(&gpu, cfg, op(0), op(1), op(2), &mut c).unwrap();
            if let Some((i, got, w)) = nvfp4_outside_tolerance(&gpu.download(&c).unwrap(), &want) {
                panic!("{m}×{n}×{k} {} (seed {seed}): c[{i}] = {got}, want {w}", cfg.describe());
            }
        }
    }
}

/// Every code times every finite scale, widened to f16 pairs, is 2⁻⁸ times
/// the exact product, each value in its [`run_slot`](crate::nvfp4::run_slot).
#[test]
fn a_run_widens_exactly() {
    use crate::nvfp4::{run_f16x2, run_value};
    for scale in (0..=255u8).map(F8E4M3).filter(|s| s.to_f32().is_finite()) {
        for codes in 0..16u32 {
            // Sixteen values: code `codes`, then its neighbours, so each nibble position sees every code.
            let value = |i: u32| (codes + i) % 16;
            let words = [0, 1].map(|w| (0..8).fold(0u32, |acc, i| acc | value(8 * w + i) << (4 * i)));
            let pairs = run_f16x2(words, scale);
            for slot in 0..16 {
                let half = f16::from_bits((pairs[slot / 2] >> (16 * (slot % 2))) as u16).to_f32();
                let i = run_value(slot) as u32;
                let want = rustile::e2m1_to_f32(value(i) as u8) * scale.to_f32() / 256.0;
                assert_eq!(half, want, "code {} scale {:#x}, value {i} in slot {slot}", value(i), scale.0);
            }
        }
    }
}

/// The run order is a permutation: of a run's 16 values, and of each 64
/// columns of a widened row.
#[test]
fn the_run_order_is_a_permutation() {
    use crate::nvfp4::{chunk_k_position, run_slot, run_value};
    for r in 0..16 {
        assert_eq!(run_value(run_slot(r)), r);
    }
    assert_eq!((0..8).map(run_slot).collect::<Vec<_>>(), [0, 2, 4, 6, 1, 3, 5, 7], "values r and r + 4 share a pair");
    for group in [0, 64, 448] {
        let mut seen: Vec<usize> = (group..group + 64).map(chunk_k_position).collect();
        seen.sort();
        assert_eq!(seen, (group..group + 64).collect::<Vec<_>>());
    }
}

#[test]
fn host_wrapper_runs_and_refuses_bad_shapes() {
    let gpu = rustile_host::Gpu::interpreter();
    let (m, n, k) = (45, 70, 192);
    let (mut rng, seed) = rng();
    let up = |(v, s, _): &(Vec<F4E2M1x2>, Vec<F8E4M3>, Vec<f64>), rows: usize| {
        (gpu.upload(v, &[rows, k / 2]).unwrap(), gpu.upload(s, &[rows, k / 16]).unwrap())
    };
    let (a, b1, b2) = (nvfp4_random(&mut rng, m, k, true), nvfp4_random(&mut rng, n, k, true), nvfp4_random(&mut rng, n, k, true));
    let want = dual_gemm_nvfp4_ref(&a.0, &a.1, &b1.0, &b1.1, &b2.0, &b2.1, m, n, k);
    let ((av, as_), (b1v, b1s), (b2v, b2s)) = (up(&a, m), up(&b1, n), up(&b2, n));
    let op = |v, s| Nvfp4 { values: v, scales: s };
    let mut c = gpu.upload(&poisoned::<f16>(m * n), &[m, n]).unwrap();
    dual_gemm_nvfp4(&gpu, op(&av, &as_), op(&b1v, &b1s), op(&b2v, &b2s), &mut c).unwrap();
    if let Some((i, got, w)) = nvfp4_outside_tolerance(&gpu.download(&c).unwrap(), &want) {
        panic!("{m}×{n}×{k} (seed {seed}): c[{i}] = {got}, want {w}");
    }
    // Dequantized exactly, as the reference reads the values.
    let mut a16 = gpu.upload(&poisoned::<f16>(m * k), &[m, k]).unwrap();
    dequantize(&gpu, op(&av, &as_), &mut a16).unwrap();
    assert!(gpu.download(&a16).unwrap().iter().zip(&a.2).all(|(g, &w)| g.to_f32() as f64 == w), "dequantize (seed {seed})");
    let err = |r: rustile_host::Result<()>| r.unwrap_err().to_string();
    let short = gpu.upload(&vec![F4E2M1x2(0); m * 48], &[m, 48]).unwrap();
    let short_s = gpu.upload(&vec![F8E4M3(0); m * 6], &[m, 6]).unwrap();
    assert!(err(dual_gemm_nvfp4(&gpu, op(&short, &short_s), op(&b1v, &b1s), op(&b2v, &b2s), &mut c)).contains("multiple of 64"));
    assert!(err(dual_gemm_nvfp4(&gpu, op(&av, &as_), op(&b1v, &b1s), op(&av, &as_), &mut c)).contains("b1 and b2 must be"));
    assert!(err(dual_gemm_nvfp4(&gpu, op(&av, &b1s), op(&b1v, &b1s), op(&b2v, &b2s), &mut c)).contains("scales"));
    let mut c_wrong = gpu.alloc::<f16>(&[m, n + 1]).unwrap();
    assert!(err(dual_gemm_nvfp4(&gpu, op(&av, &as_), op(&b1v, &b1s), op(&b2v, &b2s), &mut c_wrong)).contains("c"));
}

/// The single product's Hopper kernel through the host wrapper in the
/// interpreter, every config.
#[test]
fn the_single_widening_kernel_matches_float64_at_odd_shapes() {
    let gpu = rustile_host::Gpu::interpreter();
    for (m, n, k) in [(1, 1, 64), (70, 33, 128), (129, 131, 192)] {
        let (mut rng, seed) = rng();
        let (a, sa, av) = nvfp4_random(&mut rng, m, k, true);
        let (b, sb, bv) = nvfp4_random(&mut rng, n, k, true);
        let want = reference::matmul_nt(&av, &bv, m, n, k);
        let dev = [(&a, &sa, m), (&b, &sb, n)].map(|(v, s, rows)| (gpu.upload(v, &[rows, k / 2]).unwrap(), gpu.upload(s, &[rows, k / 16]).unwrap()));
        let op = |j: usize| Nvfp4 { values: &dev[j].0, scales: &dev[j].1 };
        for cfg in 0..gemm_nvfp4_ws_kernel::CONFIGS.len() {
            let mut c = gpu.upload(&poisoned::<f16>(m * n), &[m, n]).unwrap();
            gemm_nvfp4_with_config(&gpu, GemmConfig::Ws(cfg), op(0), op(1), &mut c).unwrap();
            if let Some((i, got, w)) = nvfp4_outside_tolerance(&gpu.download(&c).unwrap(), &want) {
                panic!("gemm_nvfp4 ws {m}×{n}×{k} cfg={cfg} (seed {seed}): c[{i}] = {got}, want {w}");
            }
        }
    }
}

#[test]
fn gemm_nvfp4_matches_float64_at_odd_shapes() {
    for (m, n, k) in [(1, 1, 64), (70, 33, 128), (129, 131, 192)] {
        let (mut rng, seed) = rng();
        let (a, sa, av) = nvfp4_random(&mut rng, m, k, true);
        let (b, sb, bv) = nvfp4_random(&mut rng, n, k, true);
        let want = reference::matmul_nt(&av, &bv, m, n, k);
        for cfg in 0..gemm_nvfp4_kernel::CONFIGS.len() {
            let mut c = poisoned::<f16>(m * n);
            gemm_nvfp4_kernel::cpu(cfg, &words(&a), &sa, &words(&b), &sb, &mut c, m, n, k);
            if let Some((i, got, w)) = nvfp4_outside_tolerance(&c, &want) {
                panic!("gemm_nvfp4 {m}×{n}×{k} cfg={cfg} (seed {seed}): c[{i}] = {got}, want {w}");
            }
        }
    }
}

/// The check holds a value past fp16's range to its infinity, as GPU MODE's
/// reference cast to fp16 is, and still refuses an infinity elsewhere.
#[test]
fn the_check_wants_infinity_past_the_fp16_range() {
    let ok = |g: f16, w: f64| nvfp4_outside_tolerance(&[g], &[w]).is_none();
    assert!(ok(f16::NEG_INFINITY, -69575.9) && ok(f16::INFINITY, 70000.0));
    assert!(!ok(f16::MAX, 70000.0) && !ok(f16::INFINITY, 1.0) && !ok(f16::INFINITY, -70000.0));
    assert!(ok(f16::from_f32(65504.0), 65504.0) && ok(f16::from_f32(1.0), 1.0005));
}
