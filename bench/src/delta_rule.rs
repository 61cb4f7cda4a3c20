//! Our side of the delta-rule benchmark ([`rustile_ops::delta_rule`]) at
//! QuasarAttention's shape: one sequence, 8 heads of 64, `T` tokens.
//!
//! Each length is checked first (against the float64 recurrence up to 4096
//! tokens, beyond that the chunked form against our recurrent kernel on the
//! GPU, and no NaN or Inf), then timed: the chunked forward whole and per
//! kernel, and the recurrent kernel. `torch_baselines.py` times FLA's
//! `chunk_delta_rule` and `fused_recurrent_delta_rule` at the same lengths
//! on the rescaled inputs that make them compute the same function (rows
//! join by op `delta_rule` and shape `1xTx8x64`), and checks FLA's output
//! against ours on the inputs [`write_check`] leaves for it. The floor is
//! the bytes of q, k, v and o over the measured copy bandwidth.
use std::path::Path;

use crate::harness::{measure, MeasureCfg, Row, RUSTILE};
use rustile::{bf16, Elem};
use rustile_host::{Error, Gpu, Result, Tensor};
use rustile_ops::delta_rule::{delta_rule_backward_in, delta_rule_in, segments_for, DeltaRule, DeltaRuleGrads, Workspace, CHUNK, D};
use rustile_ops::testing::{dbeta_err, rel_err, rng, wide, DeltaRuleCase, DELTA_RULE_GRAD_TOL};

/// QuasarAttention's heads.
pub const HEADS: usize = 8;
/// The seed's lengths.
pub const TOKENS: &[usize] = &[4096, 16_384, 65_536, 100_000, 500_000, 1_000_000];
/// Random tokens drawn per run; longer inputs repeat them (drawing a
/// million tokens of three tensors on the host would take longer than
/// the whole bench, and repeats change nothing for a scan).
const DRAWN: usize = 65_536;
/// The recurrent kernel is timed up to this length (it walks every token in turn).
const RECURRENT_UP_TO: usize = 65_536;

fn shape(t: usize) -> [usize; 4] {
    [1, t, HEADS, D]
}

/// The lengths for `torch_baselines.py --delta`, comma-separated.
pub fn spec(tokens: &[usize]) -> String {
    tokens.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",")
}

/// Bytes any implementation moves at least: q, k, v read, o written (bf16).
pub fn bytes(t: usize) -> f64 {
    4.0 * (t * HEADS * D * 2) as f64
}

/// The same for the forward and backward: also q, k, v and dO read, dq, dk, dv written.
pub fn fwd_bwd_bytes(t: usize) -> f64 {
    11.0 / 4.0 * bytes(t)
}

/// `x` repeated to `n` elements.
pub(crate) fn repeat<T: Copy>(x: &[T], n: usize) -> Vec<T> {
    x.iter().copied().cycle().take(n).collect()
}

/// Checks and times the delta rule at `tokens`; `copy_gb_s` is the measured
/// copy bandwidth. Writes FLA's check inputs (4096 tokens) into `check_dir`.
/// With `sweep`, also times the chunked form at other segment counts (rows
/// `rustile seg=N`): where cutting a sequence pays.
pub fn bench_delta_rule(gpu: &Gpu, cfg: &MeasureCfg, copy_gb_s: f64, tokens: &[usize], check_dir: Option<&Path>, sweep: bool) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (mut rng, seed) = rng();
    let drawn = DeltaRuleCase::new(&mut rng, &[DRAWN], false, HEADS, |_| 1.0, false);
    if let Some(dir) = check_dir {
        write_check(gpu, &drawn, dir)?;
    }
    let beta = gpu.upload(&drawn.beta, &[HEADS])?;
    eprintln!("delta_rule: B = 1, {HEADS} heads of {D}; floor = bytes of q, k, v, o / {copy_gb_s:.0} GB/s (seed {seed})");
    for &t in tokens {
        crate::harness::status(format!("delta_rule {t} tokens"));
        let n = t * HEADS * D;
        let up = |x: &[bf16]| gpu.upload(&repeat(x, n), &shape(t));
        let (q, k, v) = (up(&drawn.q)?, up(&drawn.k)?, up(&drawn.v)?);
        let mut o = gpu.alloc::<bf16>(&shape(t))?;
        let mut ws = Workspace::new(gpu, &shape(t))?;
        let mut state = gpu.alloc::<f32>(&[1, HEADS, D, D])?;
        let mut run_with = |o: &mut Tensor<bf16>, state: &mut Tensor<f32>, recurrent: bool, segments: Option<usize>| {
            delta_rule_in(gpu, &mut ws, &q, &k, &v, &beta, o, Some(state), DeltaRule { recurrent, segments, ..DeltaRule::default() })
        };
        run_with(&mut o, &mut state, false, None)?;
        let (got, got_state) = (gpu.download(&o)?, gpu.download(&state)?);
        let finite = got.iter().all(|x| x.to_f32().is_finite()) && got_state.iter().all(|x| x.is_finite());
        // The check: float64 where it is quick, else our recurrence.
        let (what, err) = if t <= 4096 {
            let cut = |x: &[bf16]| x[..n].to_vec();
            let case = DeltaRuleCase { lens: vec![t], varlen: false, heads: HEADS, q: cut(&drawn.q), k: cut(&drawn.k), v: cut(&drawn.v), beta: drawn.beta.clone(), initial: None };
            ("float64", rel_err(&got, &case.want().0))
        } else {
            let mut o_rec = gpu.alloc::<bf16>(&shape(t))?;
            let mut s_rec = gpu.alloc::<f32>(&[1, HEADS, D, D])?;
            run_with(&mut o_rec, &mut s_rec, true, None)?;
            ("our recurrence", rel_err(&got, &wide(&gpu.download(&o_rec)?)))
        };
        eprintln!("delta_rule T = {t}: o against {what}: rel err {err:.2e}; finite: {finite}");
        if !finite || err > 1e-2 {
            return Err(Error::Launch { kernel: "delta_rule".into(), msg: format!("wrong result at T = {t}: rel err {err:.2e} against {what}, finite {finite} (seed {seed})") });
        }

        let whole = measure(gpu, cfg, || run_with(&mut o, &mut state, false, None))?;
        // Where the time goes: one call with every launch timed apart.
        gpu.profile(true)?;
        run_with(&mut o, &mut state, false, None)?;
        let parts: Vec<String> = gpu.profile_report()?.iter().map(|(name, _, ms)| format!("{} {ms:.3}", name.split("_kernel").next().unwrap_or(name))).collect();
        gpu.profile(false)?;
        let floor_ms = bytes(t) / (copy_gb_s * 1e9) * 1e3;
        let ms = whole.median_ms;
        let segments = segments_for(gpu, HEADS, t.div_ceil(CHUNK));
        eprintln!(
            "  chunked {ms:.3} ms ({:.2} M tokens/s), {segments} segments a head; by kernel (ms): {}; floor {floor_ms:.3} ms ({:.1} % of ours); peak {:.2} GB (q, k, v, o, Tα)",
            t as f64 / ms / 1e3,
            parts.join(", "),
            100.0 * floor_ms / ms,
            5.0 * bytes(t) / 4.0 / 1e9,
        );
        rows.push(Row::new("delta_rule", &shape(t), bf16::NAME, RUSTILE, whole).bytes(bytes(t)));
        if sweep {
            for n in [1, 4, 16, 32, 64, 128, 256, 512].into_iter().filter(|&n| n != segments && n <= t.div_ceil(CHUNK)) {
                let stats = measure(gpu, cfg, || run_with(&mut o, &mut state, false, Some(n)))?;
                eprintln!("  {n} segments: {:.3} ms", stats.median_ms);
                rows.push(Row::new("delta_rule", &shape(t), bf16::NAME, &format!("{RUSTILE} seg={n}"), stats).bytes(bytes(t)));
            }
        }
        if t <= RECURRENT_UP_TO {
            let rec = measure(gpu, &MeasureCfg { reps: cfg.reps.min(10), ..cfg.clone() }, || run_with(&mut o, &mut state, true, None))?;
            eprintln!("  recurrent {:.3} ms ({:.2} M tokens/s)", rec.median_ms, t as f64 / rec.median_ms / 1e3);
            rows.push(Row::new("delta_rule", &shape(t), bf16::NAME, &format!("{RUSTILE} recurrent"), rec).bytes(bytes(t)));
        }
        rows.extend(bench_backward(gpu, cfg, copy_gb_s, &drawn, t, &q, &k, &v, &beta, &mut ws, seed)?);
    }
    Ok(rows)
}

/// The backward at `t` tokens: checked (against the float64 recurrence's
/// gradients up to 4096 tokens; beyond, no NaN or Inf), then the forward
/// and backward timed together (`delta_rule_fwd_bwd`, as a training step
/// runs them; FLA's row times the same under autograd) and per kernel.
#[allow(clippy::too_many_arguments)]
fn bench_backward(
    gpu: &Gpu, cfg: &MeasureCfg, copy_gb_s: f64, drawn: &DeltaRuleCase, t: usize, q: &Tensor<bf16>, k: &Tensor<bf16>, v: &Tensor<bf16>, beta: &Tensor<f32>,
    ws: &mut Workspace<bf16>, seed: u64,
) -> Result<Vec<Row>> {
    let n = t * HEADS * D;
    let (mut rng, _) = rng();
    let out = drawn.output_grads(&mut rng, false);
    let d_o = gpu.upload(&repeat(&out.d_o, n), &shape(t))?;
    let mut o = gpu.alloc::<bf16>(&shape(t))?;
    let (mut dq, mut dk, mut dv) = (gpu.alloc::<bf16>(&shape(t))?, gpu.alloc::<bf16>(&shape(t))?, gpu.alloc::<bf16>(&shape(t))?);
    let mut dbeta = gpu.alloc::<f32>(&[HEADS])?;
    let backward = |ws: &mut Workspace<bf16>, dq: &mut Tensor<bf16>, dk: &mut Tensor<bf16>, dv: &mut Tensor<bf16>, dbeta: &mut Tensor<f32>| {
        let grads = DeltaRuleGrads { dq, dk, dv, dbeta, d_initial: None };
        delta_rule_backward_in(gpu, ws, q, k, v, beta, &d_o, None, grads, DeltaRule::default())
    };
    backward(ws, &mut dq, &mut dk, &mut dv, &mut dbeta)?;
    let got = [gpu.download(&dq)?, gpu.download(&dk)?, gpu.download(&dv)?];
    let got_dbeta = gpu.download(&dbeta)?;
    let finite = got.iter().flatten().all(|x| x.to_f32().is_finite()) && got_dbeta.iter().all(|x| x.is_finite());
    if t <= 4096 {
        let cut = |x: &[bf16]| x[..n].to_vec();
        let case = DeltaRuleCase { lens: vec![t], varlen: false, heads: HEADS, q: cut(&drawn.q), k: cut(&drawn.k), v: cut(&drawn.v), beta: drawn.beta.clone(), initial: None };
        let want = case.want_grads(&rustile_ops::testing::DeltaRuleOutputGrads { d_o: cut(&out.d_o), d_final: None });
        let errs = [rel_err(&got[0], &want.dq), rel_err(&got[1], &want.dk), rel_err(&got[2], &want.dv), dbeta_err(&got_dbeta, &want)];
        let shown = errs.map(|e| format!("{e:.2e}")).join(", ");
        eprintln!("delta_rule backward T = {t}: [dq, dk, dv, dβ] against float64: rel err [{shown}]; finite: {finite}");
        if !finite || errs.iter().zip(DELTA_RULE_GRAD_TOL).any(|(&e, tol)| e > tol) {
            return Err(Error::Launch { kernel: "delta_rule_backward".into(), msg: format!("wrong gradients at T = {t}: [{shown}], finite {finite} (seed {seed})") });
        }
    } else if !finite {
        return Err(Error::Launch { kernel: "delta_rule_backward".into(), msg: format!("a NaN or infinity in the gradients at T = {t} (seed {seed})") });
    }
    let both = measure(gpu, cfg, || {
        delta_rule_in(gpu, ws, q, k, v, beta, &mut o, None, DeltaRule::default())?;
        backward(ws, &mut dq, &mut dk, &mut dv, &mut dbeta)
    })?;
    gpu.profile(true)?;
    backward(ws, &mut dq, &mut dk, &mut dv, &mut dbeta)?;
    let parts: Vec<String> = gpu.profile_report()?.iter().map(|(name, _, ms)| format!("{} {ms:.3}", name.split("_kernel").next().unwrap_or(name))).collect();
    gpu.profile(false)?;
    let floor_ms = fwd_bwd_bytes(t) / (copy_gb_s * 1e9) * 1e3;
    eprintln!(
        "  forward+backward {:.3} ms ({:.2} M tokens/s); the backward by kernel (ms): {}; floor {floor_ms:.3} ms; peak beyond the inputs {:.2} GB (o, dq, dk, dv, Tα, and each chunk's state and its gradient)",
        both.median_ms,
        t as f64 / both.median_ms / 1e3,
        parts.join(", "),
        (5.0 * n as f64 * 2.0 + 2.0 * (t.div_ceil(CHUNK) * HEADS * D * D * 2) as f64) / 1e9,
    );
    Ok(vec![Row::new("delta_rule_fwd_bwd", &shape(t), bf16::NAME, RUSTILE, both).bytes(fwd_bwd_bytes(t))])
}

/// Leaves 4096 tokens of the drawn inputs and our outputs in `dir` for
/// `torch_baselines.py` to run FLA on and compare: `q`, `k`, `v`, `o`,
/// and for the backward `do` and our `dq`, `dk`, `dv` (bf16, `[1, 4096, 8,
/// 64]`), `beta` and our `dbeta` (f32, `[8]`), raw little-endian.
pub fn write_check(gpu: &Gpu, drawn: &DeltaRuleCase, dir: &Path) -> Result<()> {
    const T: usize = 4096;
    let n = T * HEADS * D;
    let up = |x: &[bf16]| gpu.upload(&x[..n], &shape(T));
    let (q, k, v) = (up(&drawn.q)?, up(&drawn.k)?, up(&drawn.v)?);
    let beta = gpu.upload(&drawn.beta, &[HEADS])?;
    let mut o = gpu.alloc::<bf16>(&shape(T))?;
    rustile_ops::delta_rule::delta_rule(gpu, &q, &k, &v, &beta, &mut o, None, DeltaRule::default())?;
    let io = |e: std::io::Error| Error::Invalid(format!("writing the delta-rule check files in {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let bf = |x: &[bf16]| x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect::<Vec<u8>>();
    let (mut rng, _) = rng();
    let d_o = drawn.output_grads(&mut rng, false).d_o[..n].to_vec();
    let (mut dq, mut dk, mut dv) = (gpu.alloc::<bf16>(&shape(T))?, gpu.alloc::<bf16>(&shape(T))?, gpu.alloc::<bf16>(&shape(T))?);
    let mut dbeta = gpu.alloc::<f32>(&[HEADS])?;
    let grads = DeltaRuleGrads { dq: &mut dq, dk: &mut dk, dv: &mut dv, dbeta: &mut dbeta, d_initial: None };
    rustile_ops::delta_rule::delta_rule_backward(gpu, &q, &k, &v, &beta, &gpu.upload(&d_o, &shape(T))?, None, grads, DeltaRule::default())?;
    let files = [("q", drawn.q[..n].to_vec()), ("k", drawn.k[..n].to_vec()), ("v", drawn.v[..n].to_vec()), ("o", gpu.download(&o)?), ("do", d_o)];
    for (name, data) in files.into_iter().chain([("dq", gpu.download(&dq)?), ("dk", gpu.download(&dk)?), ("dv", gpu.download(&dv)?)]) {
        std::fs::write(dir.join(format!("{name}.bf16")), bf(&data)).map_err(io)?;
    }
    let f32s = |x: &[f32]| x.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.join("beta.f32"), f32s(&drawn.beta)).map_err(io)?;
    std::fs::write(dir.join("dbeta.f32"), f32s(&gpu.download(&dbeta)?)).map_err(io)?;
    Ok(())
}
