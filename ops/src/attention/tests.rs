//! CPU-interpreter checks of attention against float64: every head dim,
//! odd lengths (1, 17, 130, 1000, 4099: none a multiple of a tile), causal,
//! rectangular, GQA/MQA and variable lengths; the forward's two programs
//! (`mma.sync` and Hopper's `wgmma`, each of the latter's configs: the
//! warp-specialized ones too) and the backward's two.
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
    for program in [Program::Mma, Program::Wgmma].into_iter().filter(|p| p.has_backward(d)) {
        let (dq, dk, dv) = attention_backward_cpu_on(program, [&q, &k, &v, &o, &d_o], &lse, dims, opt);
        // The gradients pass through two products with 16-bit operands (P and dS rounded): twice the forward's tolerance.
        for (name, got, want) in [("dq", &dq, &wq), ("dk", &dk, &wk), ("dv", &dv, &wv)] {
            let err = rel_err(got, want);
            assert!(err <= 2.0 * tolerance::<T>(), "attention backward {name}<{}> {program:?} {dims:?} {opt:?} (seed {seed}): rel err {err:.2e}", T::NAME);
        }
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
