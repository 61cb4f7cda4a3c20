//! The delta rule (QuasarAttention's core op) over two packed sequences of
//! 300 and 1000 tokens, 4 heads of 64, starting from a given state: the
//! chunked form, its final states kept for the next call. On the GPU when
//! there is one, else in the CPU interpreter, checked against the float64
//! recurrence either way.
//! `cargo run --release --example delta_rule -p rustile-ops`
use rustile::bf16;
use rustile_host::Gpu;
use rustile_ops::delta_rule::{delta_rule, DeltaRule, VarLens, D};
use rustile_ops::testing::{rel_err, rng, DeltaRuleCase};

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
}
