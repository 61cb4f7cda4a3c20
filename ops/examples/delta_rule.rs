//! The delta rule (QuasarAttention's core op) over two packed sequences of
//! 300 and 1000 tokens, 4 heads of 64, starting from a given state: the
//! chunked form, its final states kept for the next call; then the backward
//! for a loss `⟨dO, o⟩ + ⟨dS, S_final⟩`. On the GPU when there is one, else
//! in the CPU interpreter, checked against the float64 recurrence either way.
//! `cargo run --release --example delta_rule -p rustile-ops`
use rustile::bf16;
use rustile_host::Gpu;
use rustile_ops::delta_rule::{delta_rule, delta_rule_backward, DeltaRule, DeltaRuleGrads, VarLens, D};
use rustile_ops::testing::{dbeta_err, rel_err, rng, DeltaRuleCase, DELTA_RULE_GRAD_TOL};

fn main() {
    let (mut rng, _) = rng();
    let (lens, heads) = ([300, 1000], 4);
    // q, v ~ N(0, 1), keys of norm 1, β in [0.2, 2], a random initial state.
    let case = DeltaRuleCase::new(&mut rng, &lens, true, heads, |_| 1.0, true);
    let gpu = Gpu::new().unwrap_or_else(|e| {
        println!("{e}\nrunning the CPU interpreter instead");
        Gpu::interpreter()
    });
    let shape = [1, 1300, heads, D];
    let [q, k, v] = [&case.q, &case.k, &case.v].map(|x| gpu.upload(x, &shape).unwrap());
    let beta = gpu.upload(&case.beta, &[heads]).unwrap();
    let initial = gpu.upload(case.initial.as_ref().unwrap(), &[2, heads, D, D]).unwrap();
    let seqs = VarLens::new(&gpu, &lens).unwrap();
    let mut o = gpu.alloc::<bf16>(&shape).unwrap();
    let mut state = gpu.alloc::<f32>(&[2, heads, D, D]).unwrap();
    let opt = DeltaRule { initial: Some(&initial), varlen: Some(&seqs), ..DeltaRule::default() };
    delta_rule(&gpu, &q, &k, &v, &beta, &mut o, Some(&mut state), opt).unwrap();
    let (want_o, want_state) = case.want();
    let (eo, es) = (rel_err(&gpu.download(&o).unwrap(), &want_o), rel_err(&gpu.download(&state).unwrap(), &want_state));
    println!("ran on {}: o [1, 1300, {heads}, 64] off the float64 recurrence by {eo:.1e}, the final states by {es:.1e}", gpu.name());
    assert!(eo < 1e-2 && es < 1e-2, "outside the tolerance (1e-2)");

    // The gradients of every input, given those of o and of the final states.
    let out = case.output_grads(&mut rng, true);
    let d_o = gpu.upload(&out.d_o, &shape).unwrap();
    let d_final = gpu.upload(out.d_final.as_ref().unwrap(), &[2, heads, D, D]).unwrap();
    let (mut dq, mut dk, mut dv) = (gpu.alloc::<bf16>(&shape).unwrap(), gpu.alloc::<bf16>(&shape).unwrap(), gpu.alloc::<bf16>(&shape).unwrap());
    let mut dbeta = gpu.alloc::<f32>(&[heads]).unwrap();
    let mut d_initial = gpu.alloc::<f32>(&[2, heads, D, D]).unwrap();
    let grads = DeltaRuleGrads { dq: &mut dq, dk: &mut dk, dv: &mut dv, dbeta: &mut dbeta, d_initial: Some(&mut d_initial) };
    delta_rule_backward(&gpu, &q, &k, &v, &beta, &d_o, Some(&d_final), grads, opt).unwrap();
    let want = case.want_grads(&out);
    let got: Vec<f64> = [(&dq, &want.dq), (&dk, &want.dk), (&dv, &want.dv)].iter().map(|(g, w)| rel_err(&gpu.download(g).unwrap(), w)).collect();
    let (eb, ei) = (dbeta_err(&gpu.download(&dbeta).unwrap(), &want), rel_err(&gpu.download(&d_initial).unwrap(), &want.d_initial));
    println!("gradients off the float64 recurrence's: dq {:.1e}, dk {:.1e}, dv {:.1e}, dβ {eb:.1e} (of its terms' size), d initial state {ei:.1e}", got[0], got[1], got[2]);
    let errs = [got[0], got[1], got[2], eb, ei];
    assert!(errs.iter().zip(DELTA_RULE_GRAD_TOL).all(|(e, tol)| *e < tol), "outside the tolerances {DELTA_RULE_GRAD_TOL:?}");
}
