//! CPU-interpreter checks of attention against float64: every head dim,
//! odd lengths (1, 17, 130, 1000, 4099: none a multiple of a tile), causal,
//! rectangular, GQA/MQA and variable lengths; the forward's two programs
//! (`mma.sync` and Hopper's `wgmma`, each of the latter's configs: the
//! warp-specialized ones too) and the backward's two (each config of
//! Hopper's dK/dV program).
use super::*;
use crate::reference;
use crate::testing::*;

fn check<T: Elem>(dims: Dims, opt: Attention, spread: f32) {
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let (mut rng, seed) = rng();
    let q: Vec<T> = normal(&mut rng, batch * sq * heads * d, 0.0, spread);
    let k: Vec<T> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, spread);
    let v: Vec<T> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, 1.0);
    let want = attention_want(&q, &k, &v, dims, opt);
    for kernel in [Program::Mma, Program::Wgmma] {
        let (o, lse) = attention_cpu_on(kernel, &q, &k, &v, dims, opt);
        let ctx = format!("attention<{}> {kernel:?} {dims:?} {opt:?} (seed {seed})", T::NAME);
        assert_attention_close(&o, &lse, |z, h, i| (z * heads + h) * sq + i, want.clone(), &ctx);
    }
    for cfg in other_forward_configs(d) {
        let (o, lse) = attention_cpu_on(Program::Wgmma, &q, &k, &v, dims, opt.config(cfg));
        let ctx = format!("attention<{}> {} {dims:?} {opt:?} (seed {seed})", T::NAME, attention_fwd_wgmma_kernel::CONFIGS[cfg].name);
        assert_attention_close(&o, &lse, |z, h, i| (z * heads + h) * sq + i, want.clone(), &ctx);
    }
}

/// Hopper's forward configs for head dim `d` besides the default one (which
/// the tuned table may pick).
fn other_forward_configs(d: usize) -> Vec<usize> {
    let configs = attention_fwd_wgmma_kernel::CONFIGS;
    let dp = configs.iter().map(|c| c.get("D").unwrap()).filter(|&dp| dp >= d).min().unwrap();
    let first = configs.iter().position(|c| c.get("D") == Some(dp)).unwrap();
    (first + 1..configs.len()).filter(|&i| configs[i].get("D") == Some(dp)).collect()
}

#[test]
fn the_forward_defaults_to_the_warp_specialized_program_at_64_and_128() {
    let configs = attention_fwd_wgmma_kernel::CONFIGS;
    for d in [64, 128] {
        let first = Program::Wgmma.forward_config(None, d, 0, 4096, 4096);
        assert_eq!((configs[first].get("COPIER"), configs[first].get("PING")), (Some(1), Some(1)), "head dim {d}");
        // The program without a copy warpgroup stays a candidate, and the loops above run it too.
        assert!(other_forward_configs(d).iter().any(|&i| configs[i].get("COPIER") == Some(0)), "head dim {d}");
    }
    assert_eq!(forward_bucket(64, true, 1000, 70), "d64_causal_1024x128");
}

fn dims(batch: usize, sq: usize, sk: usize, heads: usize, kv_heads: usize, d: usize) -> Dims {
    Dims { batch, sq, sk, heads, kv_heads, d }
}

#[test]
fn every_head_dim_at_odd_lengths() {
    for d in [64, 72, 96, 128] {
        for (sq, sk) in [(1, 1), (17, 17), (130, 70), (33, 200)] {
            check::<bf16>(dims(2, sq, sk, 2, 2, d), Attention::default(), 1.0);
        }
    }
    check::<f16>(dims(1, 77, 150, 3, 3, 72), Attention::default(), 1.0);
}

#[test]
fn causal() {
    for d in [64, 72, 96, 128] {
        check::<bf16>(dims(2, 150, 150, 2, 2, d), Attention::causal(), 1.0);
    }
    // Top-left aligned when the lengths differ: more keys than queries, and fewer.
    check::<bf16>(dims(1, 100, 260, 2, 2, 64), Attention::causal(), 1.0);
    check::<f16>(dims(1, 260, 100, 2, 2, 64), Attention::causal(), 1.0);
}

#[test]
fn rectangular_queries_over_the_first_keys() {
    // M = 150 context points + N = 41 targets; k and v hold all 191 rows.
    check::<bf16>(dims(2, 191, 191, 2, 2, 64), Attention::default().keys(150), 1.0);
    check::<bf16>(dims(1, 191, 191, 1, 1, 72), Attention::default().keys(1), 1.0);
}

#[test]
fn grouped_and_multi_query_heads() {
    check::<bf16>(dims(2, 70, 90, 4, 2, 64), Attention::default(), 1.0);
    check::<bf16>(dims(1, 130, 130, 3, 1, 96), Attention::causal(), 1.0);
}

#[test]
fn peaked_scores_and_a_given_scale() {
    // Scores of ±50: without the running maximum, exp would overflow.
    check::<bf16>(dims(1, 65, 129, 2, 2, 64), Attention::default(), 7.0);
    check::<f16>(dims(1, 65, 129, 2, 2, 128), Attention::causal().scale(0.3), 1.0);
}

#[test]
fn long_sequences() {
    check::<bf16>(dims(1, 1000, 1000, 1, 1, 64), Attention::default(), 1.0);
    check::<bf16>(dims(1, 4099, 4099, 1, 1, 64), Attention::causal(), 1.0);
}

/// Random `q [Σ q_lens, heads, d]`, `k`, `v [Σ k_lens, kv_heads, d]`.
fn varlen_qkv(rng: &mut rand::rngs::StdRng, q_lens: &[usize], k_lens: &[usize], [heads, kv_heads, d]: [usize; 3]) -> [Vec<bf16>; 3] {
    let (tq, tk): (usize, usize) = (q_lens.iter().sum(), k_lens.iter().sum());
    let q = normal(rng, tq * heads * d, 0.0, 1.0);
    [q, normal(rng, tk * kv_heads * d, 0.0, 1.0), normal(rng, tk * kv_heads * d, 0.0, 1.0)]
}

#[test]
fn variable_lengths() {
    // Sequences of 17, 1, 0 and 130 queries; one with no keys (its queries: zeros, lse −∞).
    let (q_lens, k_lens) = ([17, 1, 0, 130, 5], [20, 1, 3, 129, 0]);
    for (d, opt) in [(64, Attention::default()), (72, Attention::causal()), (128, Attention::default())] {
        let (heads, kv_heads) = (4, 2);
        let tq: usize = q_lens.iter().sum();
        let (mut rng, seed) = rng();
        let [q, k, v] = varlen_qkv(&mut rng, &q_lens, &k_lens, [heads, kv_heads, d]);
        let seqs = packed_seqs(&q_lens, &k_lens);
        let want = reference::attention(&wide(&q), &wide(&k), &wide(&v), &seqs, [heads, kv_heads, d], 1.0 / (d as f64).sqrt(), opt.causal);
        let runs = [(Program::Mma, opt), (Program::Wgmma, opt)].into_iter().chain(other_forward_configs(d).into_iter().map(|c| (Program::Wgmma, opt.config(c))));
        for (kernel, opt) in runs {
            let (o, lse) = attention_varlen_cpu_on(kernel, &q, &k, &v, &q_lens, &k_lens, [heads, kv_heads, d], opt);
            let ctx = format!("attention_varlen {kernel:?} d {d} {opt:?} (seed {seed})");
            assert_attention_close(&o, &lse, |z, h, i| h * tq + seqs[z].0 + i, want.clone(), &ctx);
        }
    }
}

#[test]
fn offsets_from_the_caller_run_as_lengths_do_and_wrong_ones_stay_inside() {
    let gpu = rustile_host::Gpu::interpreter();
    let (q_lens, k_lens, [heads, kv_heads, d]) = ([5, 0, 70], [9, 3, 66], [2, 1, 64]);
    let (tq, tk) = (q_lens.iter().sum::<usize>(), k_lens.iter().sum::<usize>());
    let (mut rng, seed) = rng();
    let [q, k, v] = varlen_qkv(&mut rng, &q_lens, &k_lens, [heads, kv_heads, d]);
    let [qt, kt, vt] = [(&q, tq, heads), (&k, tk, kv_heads), (&v, tk, kv_heads)].map(|(x, n, h)| gpu.upload(x, &[n, h, d]).unwrap());
    let run = |seqs: &SeqLens| {
        let (mut o, mut lse) = (gpu.alloc::<bf16>(&[tq, heads, d]).unwrap(), gpu.alloc::<f32>(&[heads, tq]).unwrap());
        attention_varlen(&gpu, &qt, &kt, &vt, seqs, &mut o, &mut lse, Attention::causal()).map(|_| (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap()))
    };
    let offsets = |cu: &[u32]| gpu.upload(cu, &[cu.len()]).unwrap();
    let given = SeqLens::from_offsets(offsets(&[0, 5, 5, 75]), offsets(&[0, 9, 12, 78]), [70, 66], [tq, tk]).unwrap();
    let (o, lse) = run(&given).unwrap();
    let (want_o, want_lse) = run(&SeqLens::new(&gpu, &q_lens, &k_lens).unwrap()).unwrap();
    assert!(o.iter().zip(&want_o).all(|(a, b)| a.to_bits() == b.to_bits()), "o (seed {seed})");
    assert!(lse.iter().zip(&want_lse).all(|(a, b)| a.to_bits() == b.to_bits()), "lse (seed {seed})");
    // And both are the attention: the interpreter's own entry agrees.
    let (cpu_o, _) = attention_varlen_cpu(&q, &k, &v, &q_lens, &k_lens, [heads, kv_heads, d], Attention::causal());
    assert!(o.iter().zip(&cpu_o).all(|(a, b)| (a.to_f32() - b.to_f32()).abs() <= 0.02 * b.to_f32().abs().max(0.1)), "o against attention_varlen_cpu (seed {seed})");
    assert!(o.iter().any(|x| x.to_f32() != 0.0), "o was written (seed {seed})");
    // Past the tokens, and decreasing: cut to the tensors, never read past
    // them (the interpreter checks every index).
    let wrong = SeqLens::from_offsets(offsets(&[0, 900, 3, u32::MAX]), offsets(&[7, 2, 1000, 4]), [70, 66], [tq, tk]).unwrap();
    run(&wrong).unwrap();
    assert!(SeqLens::from_offsets(offsets(&[0, 5]), offsets(&[0, 5, 9]), [5, 5], [5, 9]).is_err(), "offsets of different lengths");
    assert!(SeqLens::from_offsets(offsets(&[]), offsets(&[]), [0, 0], [0, 0]).is_err(), "no offsets at all");
}

#[test]
fn bad_arguments_are_errors() {
    assert!(check_head_dim(80).is_ok() && check_head_dim(72).is_ok());
    for d in [0, 60, 136, 256] {
        assert!(check_head_dim(d).is_err(), "head dim {d}");
    }
    let bad = |dims: Dims, opt: Attention| check_opts(&dims, &opt, false).is_err();
    assert!(bad(dims(1, 8, 8, 3, 2, 64), Attention::default()), "3 heads over 2 kv heads");
    assert!(bad(dims(1, 8, 8, 2, 2, 64), Attention::default().keys(9)), "more keys than k holds");
    assert!(bad(dims(1, 8, 8, 2, 2, 64), Attention::default().scale(-1.0)), "negative scale");
    assert!(check_opts(&dims(1, 8, 8, 2, 2, 64), &Attention::default().keys(4), true).is_err(), "keys with varlen");
    let configs = attention_fwd_wgmma_kernel::CONFIGS;
    let d128 = configs.iter().position(|c| c.get("D") == Some(128)).unwrap();
    assert!(!bad(dims(1, 8, 8, 2, 2, 64), Attention::default().config(d128)), "a wider config holds head dim 64");
    assert!(bad(dims(1, 8, 8, 2, 2, 128), Attention::default().config(0)), "a D = 64 config for head dim 128");
    assert!(bad(dims(1, 8, 8, 2, 2, 64), Attention::default().config(configs.len())), "no such config");
}

fn check_grad<T: Elem>(dims: Dims, opt: Attention) {
    let programs = [Program::Mma, Program::Wgmma].into_iter().filter(|p| p.has_backward(dims.d));
    check_grad_on::<T>(dims, opt, programs.map(|p| (p, [None; 2])));
}

/// [`check_grad`] of the programs named, each with its dK/dV and dQ configs
/// (`None`: the head dim's default).
fn check_grad_on<T: Elem>(dims: Dims, opt: Attention, runs: impl IntoIterator<Item = (Program, [Option<usize>; 2])>) {
    let Dims { batch, sq, sk, heads, kv_heads, d } = dims;
    let (mut rng, seed) = rng();
    let q: Vec<T> = normal(&mut rng, batch * sq * heads * d, 0.0, 1.0);
    let k: Vec<T> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, 1.0);
    let v: Vec<T> = normal(&mut rng, batch * sk * kv_heads * d, 0.0, 1.0);
    let d_o: Vec<T> = normal(&mut rng, batch * sq * heads * d, 0.0, 1.0);
    let (o, lse) = attention_cpu(&q, &k, &v, dims, opt);
    let keys = opt.keys.unwrap_or(sk);
    let seqs: Vec<_> = (0..batch).map(|z| (z * sq, sq, z * sk, keys)).collect();
    let scale = opt.scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64;
    let [wq, wk, wv] = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &seqs, [heads, kv_heads, d], scale, opt.causal);
    for (program, configs) in runs {
        let (dq, dk, dv) = backward_cpu_checked(program, configs, [&q, &k, &v, &o, &d_o], &lse, dims, opt);
        // The gradients pass through two products with 16-bit operands (P and dS rounded): twice the forward's tolerance.
        for (name, got, want) in [("dq", &dq, &wq), ("dk", &dk, &wk), ("dv", &dv, &wv)] {
            let err = rel_err(got, want);
            assert!(err <= 2.0 * tolerance::<T>(), "attention backward {name}<{}> {program:?} dK/dV and dQ configs {configs:?} {dims:?} {opt:?} (seed {seed}): rel err {err:.2e}", T::NAME);
        }
    }
}

/// Every config of Hopper's dK/dV and dQ programs, not only each head
/// dim's default: the warp-specialized ones at D = 64 and 128 and the ones
/// without a copy warpgroup.
#[test]
fn backward_every_config() {
    let kv = attention_bwd_kv_wgmma_kernel::CONFIGS.iter().enumerate().map(|(i, c)| (c, [Some(i), None]));
    let q = attention_bwd_q_wgmma_kernel::CONFIGS.iter().enumerate().map(|(i, c)| (c, [None, Some(i)]));
    for (c, configs) in kv.chain(q) {
        let d = match c.get("D").unwrap() {
            80 => 72,
            dp => dp,
        };
        let run = [(Program::Wgmma, configs)];
        check_grad_on::<bf16>(dims(1, 130, 70, 2, 1, d), Attention::causal(), run);
        check_grad_on::<bf16>(dims(2, 17, 150, 2, 2, d), Attention::default().keys(129), run);
        check_grad_on::<bf16>(dims(1, 200, 600, 2, 1, d), Attention::default(), run);
    }
}

#[test]
fn backward_matches_float64() {
    for d in [64, 72, 96, 128] {
        check_grad::<bf16>(dims(2, 17, 17, 2, 2, d), Attention::default());
        check_grad::<bf16>(dims(1, 130, 70, 2, 2, d), Attention::causal());
    }
    check_grad::<bf16>(dims(1, 100, 260, 4, 2, 64), Attention::causal());
    // Rectangular: the 41 key rows past the context get zero gradients.
    check_grad::<f16>(dims(2, 191, 191, 3, 1, 72), Attention::default().keys(150));
    check_grad::<bf16>(dims(1, 20, 70, 2, 2, 128), Attention::default().keys(0));
    check_grad::<bf16>(dims(1, 1, 1, 1, 1, 64), Attention::default());
    check_grad::<bf16>(dims(1, 1000, 1000, 1, 1, 64), Attention::causal());
}

#[test]
fn backward_of_variable_lengths() {
    // As `variable_lengths`: an empty sequence, one with no keys, and one with fewer queries than keys.
    let (q_lens, k_lens) = ([17, 1, 0, 130, 5, 40], [20, 1, 3, 129, 0, 200]);
    for (d, opt) in [(64, Attention::default()), (72, Attention::causal()), (128, Attention::causal())] {
        let (heads, kv_heads) = (4, 2);
        let (mut rng, seed) = rng();
        let [q, k, v] = varlen_qkv(&mut rng, &q_lens, &k_lens, [heads, kv_heads, d]);
        let d_o: Vec<bf16> = normal(&mut rng, q.len(), 0.0, 1.0);
        let shape = [heads, kv_heads, d];
        let (o, lse) = attention_varlen_cpu(&q, &k, &v, &q_lens, &k_lens, shape, opt);
        let seqs = packed_seqs(&q_lens, &k_lens);
        let want = reference::attention_grad(&wide(&q), &wide(&k), &wide(&v), &wide(&d_o), &seqs, shape, 1.0 / (d as f64).sqrt(), opt.causal);
        for program in [Program::Mma, Program::Wgmma].into_iter().filter(|p| p.has_backward(d)) {
            let (dq, dk, dv) = attention_varlen_backward_cpu_on(program, [&q, &k, &v, &o, &d_o], &lse, &q_lens, &k_lens, shape, opt);
            for ((name, got), want) in [("dq", &dq), ("dk", &dk), ("dv", &dv)].into_iter().zip(&want) {
                let err = rel_err(got, want);
                assert!(err <= 2.0 * tolerance::<bf16>(), "attention_varlen_backward {name} {program:?} d {d} {opt:?}: rel err {err:.2e} (seed {seed})");
            }
        }
    }
}

// ---- FP8 ---------------------------------------------------------------------------------

/// Quantized values are the inputs over their block's scale rounded to
/// e4m3, the scale is the block's largest magnitude over 448 (1 for a block
/// of zeros), and Vᵀ holds each token where `fp8_position` says, zeros past
/// the last.
#[test]
fn fp8_quantize_rounds_each_block_to_its_own_scale() {
    let gpu = rustile_host::Gpu::interpreter();
    let (mut rng, seed) = rng();
    let [batch, n, heads, d] = [2, 300, 3, 64];
    let mut x: Vec<bf16> = normal(&mut rng, batch * n * heads * d, 0.0, 2.0);
    // Tokens 128..256 of head 1 of sequence 0: zeros.
    for t in 128..256 {
        x[((t * heads) + 1) * d..][..d].fill(bf16::from_f32(0.0));
    }
    let tx = gpu.upload(&x, &[batch, n, heads, d]).unwrap();
    for layout in [Fp8Layout::Tokens, Fp8Layout::ValuesT] {
        let tokens = 250; // fewer than x holds
        let q = quantize_heads(&gpu, &tx, Some(tokens), layout).unwrap();
        let scales = gpu.download(&q.scales).unwrap();
        let back = dequantize_heads(&gpu, &q).unwrap();
        let blocks = tokens.div_ceil(FP8_BLOCK);
        for z in 0..batch {
            for h in 0..heads {
                for b in 0..blocks {
                    let rows = b * FP8_BLOCK..((b + 1) * FP8_BLOCK).min(tokens);
                    let at = |t: usize, c: usize| ((z * n + t) * heads + h) * d + c;
                    let amax = rows.clone().flat_map(|t| (0..d).map(move |c| (t, c))).map(|(t, c)| x[at(t, c)].to_f32().abs()).fold(0.0, f32::max);
                    let s = scales[(z * heads + h) * blocks + b];
                    let want_s = if amax > 0.0 { amax / 448.0 } else { 1.0 };
                    assert_eq!(s, want_s, "{layout:?} scale of sequence {z}, head {h}, block {b} (seed {seed})");
                    for t in rows {
                        for c in 0..d {
                            let (w, got) = (x[at(t, c)].to_f32(), back[((z * tokens + t) * heads + h) * d + c]);
                            // The kernel multiplies by the scale's reciprocal, as here.
                            assert_eq!(got, F8E4M3::from_f32(w * (1.0 / s)).to_f32() * s, "{layout:?} ({z}, {t}, {h}, {c}) (seed {seed})");
                        }
                    }
                }
            }
        }
        if layout == Fp8Layout::ValuesT {
            let data = gpu.download(&q.data).unwrap();
            let tp = blocks * FP8_BLOCK;
            assert_eq!(q.data.shape(), [batch, heads, d, tp]);
            assert!(data.chunks(tp).all(|row| row.iter().enumerate().all(|(p, x)| rustile::wgmma::fp8_column(p) < tokens || x.to_f32() == 0.0)), "Vᵀ past the tokens is not zero");
        }
    }
}

#[test]
fn fp8_forward_matches_float64_at_odd_lengths() {
    let gpu = rustile_host::Gpu::interpreter();
    for d in [64, 128] {
        for (sq, sk) in [(1, 1), (7, 7), (129, 129), (70, 300)] {
            let err = check_attention_fp8(&gpu, dims(2, sq, sk, 2, 2, d), Attention::default(), 1.0);
            assert!(err.vs_bf16_inputs < 0.1, "d {d} ({sq}, {sk}): {err:?}");
        }
    }
    // Causal (top-left, also with more keys than queries), GQA, a peaked softmax.
    check_attention_fp8(&gpu, dims(1, 200, 200, 4, 2, 128), Attention::causal(), 1.0);
    check_attention_fp8(&gpu, dims(1, 100, 260, 2, 1, 64), Attention::causal(), 2.0);
    check_attention_fp8(&gpu, dims(1, 1000, 1000, 1, 1, 64), Attention::causal().scale(0.3), 1.0);
}

/// Every forward config (the tuner's candidates), and a block of keys all
/// zero (every score of the block equal: no NaN, `o` the mean of V there).
#[test]
fn fp8_forward_every_config_and_equal_scores() {
    let gpu = rustile_host::Gpu::interpreter();
    for (cfg, c) in attention_fwd_fp8_kernel::CONFIGS.iter().enumerate() {
        let d = c.get("D").unwrap();
        check_attention_fp8(&gpu, dims(1, 130, 390, 2, 2, d), Attention::default().config(cfg), 1.0);
    }
    let [sq, sk, d] = [3, 200, 64];
    let k = gpu.upload(&vec![bf16::from_f32(0.0); sk * d], &[1, sk, 1, d]).unwrap();
    let (mut rng, _) = rng();
    let q: Vec<bf16> = normal(&mut rng, sq * d, 0.0, 1.0);
    let v: Vec<bf16> = normal(&mut rng, sk * d, 0.0, 1.0);
    let (q, v) = (gpu.upload(&q, &[1, sq, 1, d]).unwrap(), gpu.upload(&v, &[1, sk, 1, d]).unwrap());
    let [q8, k8] = [&q, &k].map(|x| quantize_heads(&gpu, x, None, Fp8Layout::Tokens).unwrap());
    let v8 = quantize_heads(&gpu, &v, None, Fp8Layout::ValuesT).unwrap();
    let (mut o, mut lse) = (gpu.alloc::<bf16>(&[1, sq, 1, d]).unwrap(), gpu.alloc::<f32>(&[1, 1, sq]).unwrap());
    attention_fp8(&gpu, &q8, &k8, &v8, &mut o, &mut lse, Attention::default()).unwrap();
    let (o, lse) = (gpu.download(&o).unwrap(), gpu.download(&lse).unwrap());
    let vd = dequantize_heads(&gpu, &v8).unwrap();
    for c in 0..d {
        let mean = (0..sk).map(|t| vd[t * d + c] as f64).sum::<f64>() / sk as f64;
        for i in 0..sq {
            let got = o[i * d + c].to_f32() as f64;
            assert!((got - mean).abs() <= 0.02 * (1.0 + mean.abs()), "o[{i}, {c}] = {got}, the mean of V is {mean}");
        }
    }
    assert!(lse.iter().all(|&l| (l as f64 - (sk as f64).ln()).abs() < 1e-4), "{lse:?}");
}

#[test]
fn fp8_refuses_what_it_cannot_do() {
    let gpu = rustile_host::Gpu::interpreter();
    let x = gpu.upload(&vec![bf16::from_f32(0.0); 2 * 72], &[1, 2, 1, 72]).unwrap();
    let err = quantize_heads(&gpu, &x, None, Fp8Layout::Tokens).err().unwrap().to_string();
    assert!(err.contains("head dims 64 and 128"), "{err}");
    let x = gpu.upload(&vec![bf16::from_f32(0.0); 2 * 64], &[1, 2, 1, 64]).unwrap();
    let err = quantize_heads(&gpu, &x, Some(3), Fp8Layout::Tokens).err().unwrap().to_string();
    assert!(err.contains("tokens = 3"), "{err}");
    let q8 = quantize_heads(&gpu, &x, None, Fp8Layout::Tokens).unwrap();
    let k8 = quantize_heads(&gpu, &x, None, Fp8Layout::Tokens).unwrap();
    let v8 = quantize_heads(&gpu, &x, None, Fp8Layout::ValuesT).unwrap();
    let (mut o, mut lse) = (gpu.alloc::<bf16>(&[1, 2, 1, 64]).unwrap(), gpu.alloc::<f32>(&[1, 1, 2]).unwrap());
    let err = attention_fp8(&gpu, &q8, &k8, &k8, &mut o, &mut lse, Attention::default()).err().unwrap().to_string();
    assert!(err.contains("Tokens, Tokens and ValuesT"), "{err}");
    let err = attention_fp8(&gpu, &q8, &k8, &v8, &mut o, &mut lse, Attention::default().keys(1)).err().unwrap().to_string();
    assert!(err.contains("Attention::keys"), "{err}");
    let err = attention_fp8(&gpu, &q8, &k8, &v8, &mut o, &mut lse, Attention::default().config(0)).err().unwrap().to_string();
    assert!(err.contains("not one of head dim 64"), "{err}");
}
