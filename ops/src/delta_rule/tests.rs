//! CPU-interpreter checks of the delta rule against the float64 recurrence
//! (`reference::delta_rule`) on the same bf16 inputs: both forms, odd
//! lengths (not multiples of the chunk), packed sequences, an initial
//! state, keys from tiny to huge, and the argument errors.
use super::*;
use crate::testing::*;
use rand::Rng;
use rustile_host::Gpu;

/// Relative tolerances of `o` and the final state. `o` is stored in bf16
/// (its rounding alone is about 1.6e-3); the recurrence is f32 otherwise,
/// the chunked form's products take bf16 operands (Tα, S and U' rounded).
const RECURRENT_TOL: [f64; 2] = [4e-3, 1e-4];
const CHUNKED_TOL: [f64; 2] = [1e-2, 1e-2];

fn check(lens: &[usize], varlen: bool, heads: usize, initial: bool, lambda: impl Fn(&mut rand::rngs::StdRng) -> f32, recurrent: bool) {
    check_segments(lens, varlen, heads, initial, lambda, recurrent, None);
}

fn check_segments(
    lens: &[usize], varlen: bool, heads: usize, initial: bool, lambda: impl Fn(&mut rand::rngs::StdRng) -> f32, recurrent: bool, segments: Option<usize>,
) {
    let (mut rng, seed) = rng();
    let case = DeltaRuleCase::new(&mut rng, lens, varlen, heads, lambda, initial);
    let (o, state) = case.errors(&Gpu::interpreter(), recurrent, segments).unwrap();
    let tol = if recurrent { RECURRENT_TOL } else { CHUNKED_TOL };
    let ctx = format!("delta_rule lens {lens:?} varlen={varlen} heads={heads} initial={initial} recurrent={recurrent} segments {segments:?} (seed {seed})");
    assert!(o < tol[0] && state < tol[1], "{ctx}: o off by {o:.2e}, final state by {state:.2e} (tolerances {tol:?})");
    eprintln!("{ctx}: o {o:.2e}, state {state:.2e}");
}

/// Keys of squared norm about 1 (the bf16 normal draw's).
fn unit(_: &mut rand::rngs::StdRng) -> f32 {
    1.0
}

/// Squared norms log-uniform from 1e-4 to 1e3.
fn tiny_to_huge(rng: &mut rand::rngs::StdRng) -> f32 {
    10f32.powf(rng.gen_range(-4.0..3.0))
}

#[test]
fn chunked_matches_float64_at_odd_lengths() {
    for n in [1, 7, 63, 65, 200] {
        check(&[n, n], false, 2, false, unit, false);
    }
}

#[test]
fn chunked_with_initial_state_and_packed_sequences() {
    check(&[130, 130], false, 1, true, unit, false);
    check(&[1, 7, 65, 129], true, 2, true, unit, false);
}

#[test]
fn chunked_keys_from_tiny_to_huge() {
    check(&[257], false, 2, true, tiny_to_huge, false);
    check(&[1000], false, 1, false, tiny_to_huge, false);
}

/// Sequences cut into segments (maps, their scan, then every segment from
/// its start): segments of uneven length, more segments than chunks, and
/// packed sequences too short to reach the later segments (their maps are
/// the identity).
#[test]
fn chunked_over_segments() {
    check_segments(&[1000, 1000], false, 2, true, unit, false, Some(3));
    check_segments(&[130], false, 1, false, unit, false, Some(9));
    check_segments(&[1, 7, 65, 600, 1000], true, 2, true, tiny_to_huge, false, Some(4));
}

#[test]
fn recurrent_matches_float64() {
    check(&[1, 1], false, 1, false, unit, true);
    check(&[70, 70], false, 2, true, tiny_to_huge, true);
    check(&[7, 65, 3], true, 1, true, unit, true);
}

#[test]
fn offsets_from_the_caller_run_as_lengths_do_and_wrong_ones_stay_inside() {
    let gpu = Gpu::interpreter();
    let (lens, heads) = ([70usize, 0, 3], 2);
    let shape = [1, 73, heads, D];
    let (mut rng, seed) = crate::testing::rng();
    let mut t = |scale: f32| gpu.upload(&crate::testing::normal::<rustile::bf16>(&mut rng, 73 * heads * D, 0.0, scale), &shape).unwrap();
    let (q, k, v) = (t(1.0), t(0.125), t(1.0));
    let beta = gpu.upload(&[0.5f32, 2.0], &[heads]).unwrap();
    let run = |vl: &VarLens| {
        let (mut o, mut s1) = (gpu.alloc::<rustile::bf16>(&shape).unwrap(), gpu.alloc::<f32>(&[3, heads, D, D]).unwrap());
        let opt = DeltaRule { varlen: Some(vl), ..DeltaRule::default() };
        delta_rule(&gpu, &q, &k, &v, &beta, &mut o, Some(&mut s1), opt).map(|_| (gpu.download(&o).unwrap(), gpu.download(&s1).unwrap()))
    };
    let offsets = |cu: &[u32]| gpu.upload(cu, &[cu.len()]).unwrap();
    let given = run(&VarLens::from_offsets(offsets(&[0, 70, 70, 73]), 70, 73).unwrap()).unwrap();
    let want = run(&VarLens::new(&gpu, &lens).unwrap()).unwrap();
    assert!(given.0.iter().zip(&want.0).all(|(a, b)| a.to_bits() == b.to_bits()), "o (seed {seed})");
    assert!(given.1.iter().zip(&want.1).all(|(a, b)| a.to_bits() == b.to_bits()), "final state (seed {seed})");
    // And both ran: the first sequence's state moved, the empty one's is zeros.
    let state = |s: usize| &given.1[s * heads * D * D..(s + 1) * heads * D * D];
    assert!(state(0).iter().any(|&x| x != 0.0) && state(1).iter().all(|&x| x == 0.0), "final states (seed {seed})");
    // Past the tokens, and decreasing: cut to them, never read past q, k, v
    // (the interpreter checks every index).
    run(&VarLens::from_offsets(offsets(&[5, 900, 2, u32::MAX]), 70, 73).unwrap()).unwrap();
    assert!(VarLens::from_offsets(offsets(&[0]), 1, 1).is_err(), "no sequence");
}

#[test]
fn refuses_bad_arguments() {
    let gpu = Gpu::interpreter();
    let shape = [1, 5, 2, D];
    let n: usize = shape.iter().product();
    let t = |s: &[usize]| gpu.upload(&vec![rustile::bf16::from_f32(0.5); s.iter().product()], s).unwrap();
    let (q, beta) = (t(&shape), gpu.upload(&[1.0f32, 1.0], &[2]).unwrap());
    let mut o = t(&shape);
    let err = |r: rustile_host::Result<()>| r.unwrap_err().to_string();
    let opt = DeltaRule::default();

    let wide = t(&[1, 5, 2, 128]);
    let mut o_wide = t(&[1, 5, 2, 128]);
    assert!(err(delta_rule(&gpu, &wide, &wide, &wide, &beta, &mut o_wide, None, opt)).contains("head dim must be 64"));
    let short = t(&[1, 4, 2, D]);
    assert!(err(delta_rule(&gpu, &q, &short, &q, &beta, &mut o, None, opt)).contains("k has shape"));
    let beta3 = gpu.upload(&[1.0f32; 3], &[3]).unwrap();
    assert!(err(delta_rule(&gpu, &q, &q, &q, &beta3, &mut o, None, opt)).contains("beta has shape"));
    let mut bad_state = gpu.upload(&vec![0.0f32; 2 * D * (D - 1)], &[1, 2, D, D - 1]).unwrap();
    assert!(err(delta_rule(&gpu, &q, &q, &q, &beta, &mut o, Some(&mut bad_state), opt)).contains("final state has shape"));
    let lens = VarLens::new(&gpu, &[2, 2]).unwrap();
    let packed = DeltaRule { varlen: Some(&lens), ..opt };
    assert!(err(delta_rule(&gpu, &q, &q, &q, &beta, &mut o, None, packed)).contains("packed sequences of 4 tokens"));
    let q16 = gpu.upload(&vec![rustile::f16::from_f32(0.5); n], &shape).unwrap();
    let mut o16 = gpu.upload(&vec![rustile::f16::from_f32(0.5); n], &shape).unwrap();
    assert!(err(delta_rule(&gpu, &q16, &q16, &q16, &beta, &mut o16, None, opt)).contains("must be bf16"));
    assert!(VarLens::new(&gpu, &[]).is_err());
}

// ---- the backward ------------------------------------------------------------------------

fn check_backward(lens: &[usize], varlen: bool, heads: usize, initial: bool, with_final: bool, lambda: impl Fn(&mut rand::rngs::StdRng) -> f32, segments: Option<usize>) {
    let (mut rng, seed) = rng();
    let case = DeltaRuleCase::new(&mut rng, lens, varlen, heads, lambda, initial);
    let out = case.output_grads(&mut rng, with_final);
    let errs = case.grad_errors(&Gpu::interpreter(), &out, segments).unwrap();
    let ctx = format!("delta_rule_backward lens {lens:?} varlen={varlen} heads={heads} initial={initial} d_final={with_final} segments {segments:?} (seed {seed})");
    let shown = errs.map(|e| format!("{e:.2e}")).join(", ");
    eprintln!("{ctx}: [dq, dk, dv, dβ, d_initial] off by [{shown}]");
    let ok = errs.iter().zip(DELTA_RULE_GRAD_TOL).all(|(&e, tol)| e < tol);
    assert!(ok, "{ctx}: [dq, dk, dv, dβ, d_initial] off by [{shown}] (tolerances {DELTA_RULE_GRAD_TOL:?})");
}

/// The float64 reference's own gradients against central differences of
/// the float64 recurrence, for a few entries of each input.
#[test]
fn reference_gradients_match_finite_differences() {
    use crate::reference::{delta_rule as forward, delta_rule_backward as backward};
    let (mut rng, seed) = rng();
    let (len, heads) = (5, 2);
    let n = len * heads * D;
    let draw = |rng: &mut rand::rngs::StdRng, n: usize, s: f64| (0..n).map(|_| s * standard_normal(rng) as f64).collect::<Vec<f64>>();
    let (q, k, v, d_o) = (draw(&mut rng, n, 1.0), draw(&mut rng, n, 0.3), draw(&mut rng, n, 1.0), draw(&mut rng, n, 1.0));
    let (s0, d_final) = (draw(&mut rng, heads * D * D, 0.1), draw(&mut rng, heads * D * D, 0.1));
    let beta = vec![0.7, 1.6];
    let seqs = [(0, len)];
    // The loss ⟨d_o, o⟩ + ⟨d_final, S_final⟩.
    let loss = |q: &[f64], k: &[f64], v: &[f64], beta: &[f64], s0: &[f64]| {
        let (o, s) = forward(q, k, v, beta, &seqs, heads, Some(s0));
        o.iter().zip(&d_o).map(|(a, b)| a * b).sum::<f64>() + s.iter().zip(&d_final).map(|(a, b)| a * b).sum::<f64>()
    };
    let g = backward(&q, &k, &v, &beta, &seqs, heads, Some(&s0), &d_o, Some(&d_final));
    let h = 1e-6;
    let bumped = |x: &[f64], i: usize, by: f64| {
        let mut y = x.to_vec();
        y[i] += by;
        y
    };
    for i in [0, 3, 64, 130, 200, n - 1] {
        let numeric = |which: usize| {
            let f = |by: f64| match which {
                0 => loss(&bumped(&q, i, by), &k, &v, &beta, &s0),
                1 => loss(&q, &bumped(&k, i, by), &v, &beta, &s0),
                _ => loss(&q, &k, &bumped(&v, i, by), &beta, &s0),
            };
            (f(h) - f(-h)) / (2.0 * h)
        };
        for (which, got) in [(0, g.dq[i]), (1, g.dk[i]), (2, g.dv[i])] {
            let want = numeric(which);
            assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "input {which}, entry {i}: gradient {got}, differences {want} (seed {seed})");
        }
    }
    for hd in 0..heads {
        let want = (loss(&q, &k, &v, &bumped(&beta, hd, h), &s0) - loss(&q, &k, &v, &bumped(&beta, hd, -h), &s0)) / (2.0 * h);
        assert!((g.dbeta[hd] - want).abs() <= 1e-6 * (1.0 + want.abs()), "dβ of head {hd}: {} vs differences {want} (seed {seed})", g.dbeta[hd]);
    }
    for i in [0, 77, 4095, 5000] {
        let want = (loss(&q, &k, &v, &beta, &bumped(&s0, i, h)) - loss(&q, &k, &v, &beta, &bumped(&s0, i, -h))) / (2.0 * h);
        assert!((g.d_initial[i] - want).abs() <= 1e-6 * (1.0 + want.abs()), "d_initial[{i}]: {} vs differences {want} (seed {seed})", g.d_initial[i]);
    }
}

#[test]
fn backward_matches_float64_at_odd_lengths() {
    for n in [1, 7, 65, 200] {
        check_backward(&[n, n], false, 2, false, false, unit, None);
    }
}

#[test]
fn backward_with_states_segments_and_packed_sequences() {
    check_backward(&[130, 130], false, 1, true, true, unit, None);
    check_backward(&[300], false, 2, true, true, unit, Some(3));
    check_backward(&[1, 7, 65, 200], true, 2, true, true, unit, Some(2));
}

#[test]
fn backward_keys_from_tiny_to_huge() {
    check_backward(&[257], false, 2, true, true, tiny_to_huge, Some(2));
}
