//! The TransformerNP in the CPU interpreter and, where there is one, on the
//! GPU: every parameter's gradient against the loss's change along it,
//! checkpointing changes no bit, a few steps of training lower the loss,
//! and a replayed CUDA graph gives the eager steps' bits.
use rustile_host::Gpu;
use rustile_ops::adamw::AdamW;
use rustile_train::data::GpData;
use rustile_train::{Config, Shape, TransformerNp};

/// The interpreter, and the GPU unless there is none (said on the terminal).
fn devices(test: &str) -> Vec<Gpu> {
    let mut all = vec![Gpu::interpreter()];
    all.extend(rustile_tests::gpu_or_skip(test));
    all
}

const SHAPE: Shape = Shape {
    batch: 2,
    context: 12,
    targets: 9,
};

fn model(gpu: &Gpu, checkpoint: bool, opt: AdamW) -> (TransformerNp, GpData) {
    let m = TransformerNp::new(gpu, Config::TINY, SHAPE, checkpoint, opt, 3).unwrap();
    (m, GpData::new(5, SHAPE.batch, SHAPE.context, SHAPE.targets))
}

fn loss_at(gpu: &Gpu, m: &mut TransformerNp, values: &[f32]) -> f64 {
    m.params.set_all(gpu, values).unwrap();
    m.forward(gpu).unwrap();
    m.read_loss(gpu).unwrap() as f64
}

/// For each parameter tensor P with gradient g: moving P by ∓ε·g/|g|
/// changes the loss by about ±ε|g|. A gradient that is wrong (a transpose,
/// a sign, a missing term) points elsewhere and fails this by far more than
/// bf16's rounding, which the tolerance allows for.
#[test]
fn every_gradient_matches_the_loss_along_it() {
    for gpu in devices("every_gradient_matches_the_loss_along_it") {
        let (mut m, mut data) = model(&gpu, false, AdamW::default());
        m.load_batch(&gpu, &data.next_batch()).unwrap();
        m.forward(&gpu).unwrap();
        m.backward(&gpu).unwrap();
        let theta = m.params.all(&gpu).unwrap();
        let grads = m.params.all_grads(&gpu).unwrap();
        let spans: Vec<(String, usize, usize)> = m
            .params
            .params
            .iter()
            .map(|p| (p.name.clone(), p.offset, p.w.numel()))
            .collect();
        let mut report = Vec::new();
        for (name, at, n) in spans {
            let g = &grads[at..at + n];
            let norm = g.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            assert!(
                norm.is_finite() && norm > 0.0,
                "{}: {name}: gradient norm {norm}",
                gpu.name()
            );
            // A step of 2 % of the tensor's size: far above bf16's rounding of each weight.
            let size = theta[at..at + n]
                .iter()
                .map(|x| (*x as f64).powi(2))
                .sum::<f64>()
                .sqrt();
            let eps = 0.02 * size;
            let moved = |sign: f64| {
                let mut v = theta.clone();
                for i in 0..n {
                    v[at + i] += (sign * eps * g[i] as f64 / norm) as f32;
                }
                v
            };
            let (up, down) = (
                loss_at(&gpu, &mut m, &moved(1.0)),
                loss_at(&gpu, &mut m, &moved(-1.0)),
            );
            let slope = (up - down) / (2.0 * eps);
            report.push(format!("{name}: |g| {norm:.4e}, measured {slope:.4e}"));
            let rel = (slope - norm).abs() / norm;
            assert!(rel < 0.15, "{}: {name}: the loss changes at {slope:.4e} along the gradient, whose norm is {norm:.4e} (rel {rel:.2})\n{}", gpu.name(), report.join("\n"));
        }
        eprintln!("{}:\n{}", gpu.name(), report.join("\n"));
        assert_eq!(report.len(), 2 + 8 * Config::TINY.layers + 1 + 1);
    }
}

/// Recomputing a layer in the backward gives the very same gradients.
#[test]
fn checkpointing_changes_no_bit() {
    for gpu in devices("checkpointing_changes_no_bit") {
        let mut grads = Vec::new();
        for checkpoint in [false, true] {
            let (mut m, mut data) = model(&gpu, checkpoint, AdamW::default());
            m.load_batch(&gpu, &data.next_batch()).unwrap();
            m.forward(&gpu).unwrap();
            m.backward(&gpu).unwrap();
            grads.push((
                m.read_loss(&gpu).unwrap(),
                m.params.all_grads(&gpu).unwrap(),
            ));
        }
        assert_eq!(grads[0].0.to_bits(), grads[1].0.to_bits(), "{}", gpu.name());
        assert!(
            grads[0]
                .1
                .iter()
                .zip(&grads[1].1)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}",
            gpu.name()
        );
    }
}

/// Steps on one fixed batch drive its loss down (the optimizer and the
/// gradients agree in sign and scale).
#[test]
fn steps_lower_the_loss() {
    for gpu in devices("steps_lower_the_loss") {
        let (mut m, mut data) = model(
            &gpu,
            false,
            AdamW {
                lr: 3e-3,
                ..AdamW::default()
            },
        );
        m.load_batch(&gpu, &data.next_batch()).unwrap();
        let mut losses = Vec::new();
        for _ in 0..15 {
            m.step(&gpu).unwrap();
            losses.push(m.read_loss(&gpu).unwrap());
        }
        assert!(
            losses.iter().all(|l| l.is_finite()),
            "{}: {losses:?}",
            gpu.name()
        );
        assert!(losses[14] < losses[0] - 0.1, "{}: {losses:?}", gpu.name());
    }
}

/// On a GPU, steps replayed from a captured graph give the eager steps'
/// losses and parameters bit for bit; the interpreter refuses to capture.
#[test]
fn graph_replay_matches_eager_steps() {
    let cpu = Gpu::interpreter();
    let err = model(&cpu, false, AdamW::default())
        .0
        .capture(&cpu)
        .err()
        .expect("the interpreter cannot capture")
        .to_string();
    assert!(err.contains("needs a GPU"), "{err}");
    let Some(gpu) = rustile_tests::gpu_or_skip("graph_replay_matches_eager_steps") else {
        return;
    };
    let run = |graphs: bool| {
        let (mut m, mut data) = model(&gpu, false, AdamW::default());
        let mut losses = Vec::new();
        let mut graph = None;
        for _ in 0..4 {
            m.load_batch(&gpu, &data.next_batch()).unwrap();
            match &graph {
                Some(g) => m.step_graph(&gpu, g).unwrap(),
                None => m.step(&gpu).unwrap(),
            }
            losses.push(m.read_loss(&gpu).unwrap().to_bits());
            if graphs && graph.is_none() {
                graph = Some(m.capture(&gpu).unwrap());
            }
        }
        (
            losses,
            m.params
                .all(&gpu)
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>(),
        )
    };
    let (eager, replayed) = (run(false), run(true));
    assert_eq!(eager.0, replayed.0, "losses");
    assert!(eager.1 == replayed.1, "parameters after 4 steps differ");
}

/// FP8 attention through the whole forward (issue 35's accuracy figure):
/// the mixture's outputs and the loss beside those of the bf16 attention,
/// printed. The interpreter runs a one-layer model with heads of 64 (FP8
/// attention's smallest); a Hopper GPU the TransformerNP at issue 7's mid
/// shape, with one layer and with all twelve (how the difference grows
/// with depth). FP8 rounds Q, K, V and P to 3 mantissa bits, so the outputs
/// move (attention's own output about 5 %), the loss much less; the
/// backward refuses to follow such a forward.
#[test]
fn fp8_attention_forward_stays_near_the_bf16_one() {
    for gpu in devices("fp8_attention_forward_stays_near_the_bf16_one") {
        let on_gpu = !gpu.is_interpreter();
        if on_gpu && gpu.compute_capability().0 != 9 {
            eprintln!(
                "fp8_attention_forward_stays_near_the_bf16_one: {} is not Hopper; skipped there",
                gpu.name()
            );
            continue;
        }
        let runs = if on_gpu {
            let mid = Shape {
                batch: 4,
                context: 10_000,
                targets: 1_000,
            };
            vec![
                (
                    Config {
                        layers: 1,
                        ..Config::TNP
                    },
                    mid,
                ),
                (Config::TNP, mid),
            ]
        } else {
            vec![(
                Config {
                    layers: 1,
                    d_model: 128,
                    heads: 2,
                    d_ff: 85,
                    components: 4,
                },
                SHAPE,
            )]
        };
        for (cfg, shape) in runs {
            let mut m = TransformerNp::new(&gpu, cfg, shape, false, AdamW::default(), 7).unwrap();
            m.load_batch(
                &gpu,
                &GpData::new(11, shape.batch, shape.context, shape.targets).next_batch(),
            )
            .unwrap();
            let run = |m: &mut TransformerNp, fp8: bool| {
                m.set_fp8_attention(&gpu, fp8).unwrap();
                m.forward(&gpu).unwrap();
                (m.outputs(&gpu).unwrap(), m.read_loss(&gpu).unwrap() as f64)
            };
            let (bf16_out, bf16_loss) = run(&mut m, false);
            let (fp8_out, fp8_loss) = run(&mut m, true);
            assert!(m
                .backward(&gpu)
                .unwrap_err()
                .to_string()
                .contains("FP8 attention"));
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            let diff: Vec<f64> = fp8_out
                .iter()
                .zip(&bf16_out)
                .map(|(a, b)| (*a - *b) as f64)
                .collect();
            let rel = norm(&diff) / norm(&bf16_out.iter().map(|x| *x as f64).collect::<Vec<_>>());
            let loss_rel = (fp8_loss - bf16_loss).abs() / bf16_loss.abs();
            eprintln!("{}: {cfg:?} at {shape:?}: outputs relative L2 {rel:.3e}, loss {bf16_loss:.5} (bf16) against {fp8_loss:.5} (FP8), {loss_rel:.3e} apart", gpu.name());
            assert!(fp8_out.iter().all(|x| x.is_finite()) && fp8_loss.is_finite());
            assert!(
                rel > 0.0,
                "the FP8 forward gave the bf16 one's bits: did it run?"
            );
            // Bounds far above what was measured (bench/RESULTS.md, 2026-11-27, "FP8 attention in the whole TransformerNP forward…").
            assert!(
                rel < 0.5 && loss_rel < 0.02,
                "outputs {rel}, loss {loss_rel} apart"
            );
        }
    }
}
