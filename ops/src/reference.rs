//! Float64 references for every op, the yardstick of the CPU-interpreter
//! tests, the GPU tests and the bench's correctness check.

pub fn add(x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| a + b).collect()
}

pub fn swiglu(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / (1.0 + (-a).exp()) * b).collect()
}

pub fn softmax(x: &[f64], cols: usize) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        y.extend(row.iter().map(|v| (v - m).exp() / s));
    }
    y
}

/// LayerNorm: (y, mean, rstd).
pub fn layer_norm(x: &[f64], cols: usize, w: &[f64], b: Option<&[f64]>, eps: f64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut means, mut rstds) = (Vec::with_capacity(x.len()), Vec::new(), Vec::new());
    for row in x.chunks(cols) {
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        y.extend(row.iter().enumerate().map(|(c, v)| (v - mean) * rstd * w[c] + b.map_or(0.0, |b| b[c])));
        means.push(mean);
        rstds.push(rstd);
    }
    (y, means, rstds)
}

/// RMSNorm: (y, rstd).
pub fn rms_norm(x: &[f64], cols: usize, w: &[f64], eps: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut rstds) = (Vec::with_capacity(x.len()), Vec::new());
    for row in x.chunks(cols) {
        let rstd = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / cols as f64 + eps).sqrt();
        y.extend(row.iter().enumerate().map(|(c, v)| v * rstd * w[c]));
        rstds.push(rstd);
    }
    (y, rstds)
}

/// The backward of LayerNorm (`rms = false`) or RMSNorm from the input `x`
/// and the output gradient `dy`, the statistics recomputed in float64:
/// `(dx, dw, db)`.
pub fn norm_backward(dy: &[f64], x: &[f64], cols: usize, w: &[f64], eps: f64, rms: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut dx, mut dw, mut db) = (Vec::with_capacity(x.len()), vec![0.0; cols], vec![0.0; cols]);
    for (row, dyr) in x.chunks(cols).zip(dy.chunks(cols)) {
        let n = cols as f64;
        let mean = if rms { 0.0 } else { row.iter().sum::<f64>() / n };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let rstd = 1.0 / (var + eps).sqrt();
        let xh: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
        let g: Vec<f64> = (0..cols).map(|c| dyr[c] * w[c]).collect();
        let mg = if rms { 0.0 } else { g.iter().sum::<f64>() / n };
        let mgx = (0..cols).map(|c| g[c] * xh[c]).sum::<f64>() / n;
        dx.extend((0..cols).map(|c| rstd * (g[c] - mg - xh[c] * mgx)));
        for c in 0..cols {
            dw[c] += dyr[c] * xh[c];
            db[c] += dyr[c];
        }
    }
    (dx, dw, db)
}

/// `a·bᵀ` for `a` `[m, k]` and `b` `[n, k]`, row-major.
pub fn matmul_nt(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    use rayon::prelude::*;
    // Rows on their own threads (the layer's references run at 65,536 tokens); each sum in k order.
    let mut c = vec![0.0; m * n];
    c.par_chunks_mut(n.max(1)).enumerate().for_each(|(i, row)| {
        let ai = &a[i * k..][..k];
        for (j, cj) in row.iter_mut().enumerate() {
            *cj = ai.iter().zip(&b[j * k..][..k]).map(|(x, y)| x * y).sum();
        }
    });
    c
}

/// `gemm::Epi::apply_chunk` in float64: `act(α·x + bias) + residual + β·old`.
pub fn epilogue(e: &crate::gemm::Epi, x: f64, bias: f64, residual: f64, old: f64) -> f64 {
    use crate::gemm::Act;
    let y = e.alpha as f64 * x + bias;
    if e.act == Act::SiluGrad {
        let s = 1.0 / (1.0 + (-residual).exp());
        return y * s * (1.0 + residual * (1.0 - s)) + e.beta as f64 * old;
    }
    let y = match e.act {
        Act::None => y,
        Act::Relu => y.max(0.0),
        Act::Relu2 => y.max(0.0).powi(2),
        Act::Silu => y / (1.0 + (-y).exp()),
        Act::GeluTanh => 0.5 * y * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (y + 0.044715 * y.powi(3))).tanh()),
        Act::SiluGrad => unreachable!(),
    };
    y + residual + e.beta as f64 * old
}

/// The heads MLP `y[r, g, :] = act(x·w1[g]ᵀ + b1[g])·w2[g]ᵀ + b2[g]` (`dims`
/// = rows, d, G, h, out); `round` is applied to the hidden activations (the
/// kernel stores them in its element type).
#[allow(clippy::too_many_arguments)]
pub fn heads_mlp(x: &[f64], w1: &[f64], b1: &[f64], act: crate::gemm::Act, w2: &[f64], b2: &[f64], dims: [usize; 5], round: impl Fn(f64) -> f64) -> Vec<f64> {
    let [rows, d, g, h, out] = dims;
    let e = crate::gemm::Epi { act, ..crate::gemm::Epi::NONE };
    let mut y = vec![0.0; rows * g * out];
    for head in 0..g {
        let hid = matmul_nt(x, &w1[head * h * d..][..h * d], rows, h, d);
        let hid: Vec<f64> = hid.iter().enumerate().map(|(i, v)| round(epilogue(&e, *v, b1[head * h + i % h], 0.0, 0.0))).collect();
        let o = matmul_nt(&hid, &w2[head * out * h..][..out * h], rows, out, h);
        for (i, v) in o.into_iter().enumerate() {
            y[(i / out * g + head) * out + i % out] = v + b2[head * out + i % out];
        }
    }
    y
}

/// Query `i`'s probabilities over its first `seen` keys (`seen > 0`) and
/// their log-sum-exp, of the scores `scale·q_i·k_j`.
fn softmax_row(q: &[f64], k: &[f64], i: usize, seen: usize, d: usize, scale: f64) -> (Vec<f64>, f64) {
    let s: Vec<f64> = (0..seen).map(|j| scale * (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum::<f64>()).collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let l: f64 = e.iter().sum();
    (e.iter().map(|x| x / l).collect(), m + l.ln())
}

/// The `n` rows of head `h` (of `hs`, `d` wide) from token `at` of a token-major tensor.
fn head_rows(x: &[f64], at: usize, n: usize, h: usize, hs: usize, d: usize) -> Vec<f64> {
    (0..n).flat_map(|r| x[((at + r) * hs + h) * d..][..d].to_vec()).collect()
}

/// Attention of one head of one sequence: `q [sq, d]`, `k`, `v` with at
/// least `keys` rows of `d` (only the first `keys` used). Returns `(o [sq,
/// d], lse [sq])`; a query that sees no key gets zeros and −∞.
#[allow(clippy::too_many_arguments)]
pub fn attention_head(q: &[f64], k: &[f64], v: &[f64], sq: usize, keys: usize, d: usize, scale: f64, causal: bool) -> (Vec<f64>, Vec<f64>) {
    let (mut o, mut lse) = (vec![0.0; sq * d], vec![f64::NEG_INFINITY; sq]);
    for i in 0..sq {
        let seen = if causal { keys.min(i + 1) } else { keys };
        if seen == 0 {
            continue;
        }
        let p;
        (p, lse[i]) = softmax_row(q, k, i, seen, d, scale);
        for c in 0..d {
            o[i * d + c] = (0..seen).map(|j| p[j] * v[j * d + c]).sum::<f64>();
        }
    }
    (o, lse)
}

/// `ops::attention` in float64 on token-major tensors: sequence `z` of the
/// batch is `q_lens[z]` query rows starting at `q_at[z]` (tokens) and
/// `k_lens[z]` key rows at `k_at[z]`; rows are `heads·d` (`kv_heads·d`)
/// wide. Returns `o` in `q`'s layout and `lse[z][h][i]` flattened in
/// sequence, head, query order.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    seqs: &[(usize, usize, usize, usize)],
    [heads, kv_heads, d]: [usize; 3],
    scale: f64,
    causal: bool,
) -> (Vec<f64>, Vec<Vec<Vec<f64>>>) {
    let mut o = vec![0.0; q.len()];
    let mut lse = Vec::new();
    let rows = |x: &[f64], at: usize, n: usize, h: usize, hs: usize| head_rows(x, at, n, h, hs, d);
    for &(q_at, lq, k_at, lk) in seqs {
        let mut per_head = Vec::new();
        for h in 0..heads {
            let kh = h / (heads / kv_heads);
            let (qh, kh_, vh) = (rows(q, q_at, lq, h, heads), rows(k, k_at, lk, kh, kv_heads), rows(v, k_at, lk, kh, kv_heads));
            let (oh, lh) = attention_head(&qh, &kh_, &vh, lq, lk, d, scale, causal);
            for r in 0..lq {
                o[((q_at + r) * heads + h) * d..][..d].copy_from_slice(&oh[r * d..][..d]);
            }
            per_head.push(lh);
        }
        lse.push(per_head);
    }
    (o, lse)
}

/// The gradients of [`attention_head`] for `d_o` (`[sq, d]`): `(dq [sq, d],
/// dk [keys, d], dv [keys, d])`.
#[allow(clippy::too_many_arguments)]
pub fn attention_head_grad(q: &[f64], k: &[f64], v: &[f64], d_o: &[f64], sq: usize, keys: usize, d: usize, scale: f64, causal: bool) -> [Vec<f64>; 3] {
    let (mut dq, mut dk, mut dv) = (vec![0.0; sq * d], vec![0.0; keys * d], vec![0.0; keys * d]);
    for i in 0..sq {
        let seen = if causal { keys.min(i + 1) } else { keys };
        if seen == 0 {
            continue;
        }
        let (p, _) = softmax_row(q, k, i, seen, d, scale);
        // dP = dO·Vᵀ; dS = P ⊙ (dP − Σ_j P·dP).
        let dp: Vec<f64> = (0..seen).map(|j| (0..d).map(|c| d_o[i * d + c] * v[j * d + c]).sum::<f64>()).collect();
        let delta: f64 = (0..seen).map(|j| p[j] * dp[j]).sum();
        for j in 0..seen {
            let ds = p[j] * (dp[j] - delta) * scale;
            for c in 0..d {
                dq[i * d + c] += ds * k[j * d + c];
                dk[j * d + c] += ds * q[i * d + c];
                dv[j * d + c] += p[j] * d_o[i * d + c];
            }
        }
    }
    [dq, dk, dv]
}

/// [`attention`]'s gradients in the same token-major layouts (`seqs` as
/// there; key rows no query sees get zeros): `[dq, dk, dv]`.
pub fn attention_grad(q: &[f64], k: &[f64], v: &[f64], d_o: &[f64], seqs: &[(usize, usize, usize, usize)], [heads, kv_heads, d]: [usize; 3], scale: f64, causal: bool) -> [Vec<f64>; 3] {
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let rows = |x: &[f64], at: usize, n: usize, h: usize, hs: usize| head_rows(x, at, n, h, hs, d);
    for &(q_at, lq, k_at, lk) in seqs {
        for h in 0..heads {
            let kh = h / (heads / kv_heads);
            let [gq, gk, gv] = attention_head_grad(&rows(q, q_at, lq, h, heads), &rows(k, k_at, lk, kh, kv_heads), &rows(v, k_at, lk, kh, kv_heads), &rows(d_o, q_at, lq, h, heads), lq, lk, d, scale, causal);
            for r in 0..lq {
                dq[((q_at + r) * heads + h) * d..][..d].copy_from_slice(&gq[r * d..][..d]);
            }
            for r in 0..lk {
                for c in 0..d {
                    dk[((k_at + r) * kv_heads + kh) * d + c] += gk[r * d + c];
                    dv[((k_at + r) * kv_heads + kh) * d + c] += gv[r * d + c];
                }
            }
        }
    }
    [dq, dk, dv]
}

/// TriMul (`ops::trimul`) in float64 with the stated math (LayerNorm eps
/// 1e-5): its output rows at the pairs `at` (`[b, i, j]` each), one `dim`
/// row a pair, for `x` `[batch, n, n, dim]`. A pair needs only row `i` of
/// left and row `j` of right, so a GPU test at a large shape can check
/// samples of its output.
pub fn trimul_at(x: &[f64], mask: Option<&[f64]>, p: &crate::trimul::Params<&[f64]>, d: crate::trimul::Dims, at: &[[usize; 3]]) -> Vec<f64> {
    use std::collections::HashMap;
    let crate::trimul::Dims { n, dim, hidden: h, .. } = d;
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
    // x̂ of pair r (flat index over [batch, n, n]).
    let norm = |r: usize| layer_norm(&x[r * dim..][..dim], dim, p.norm_w, Some(p.norm_b), 1e-5).0;
    // Row `first / n` of left (or right): [n pairs k, h], gated and masked.
    let gated_row = |first: usize, w: &[f64], g: &[f64]| -> Vec<f64> {
        let mut row = Vec::with_capacity(n * h);
        for r in first..first + n {
            let (xh, keep) = (norm(r), mask.map_or(1.0, |m| m[r]));
            row.extend((0..h).map(|c| dot(&xh, &w[c * dim..][..dim]) * keep * sigmoid(dot(&xh, &g[c * dim..][..dim]))));
        }
        row
    };
    let (mut lefts, mut rights) = (HashMap::new(), HashMap::new());
    let mut out = Vec::with_capacity(at.len() * dim);
    for &[b, i, j] in at {
        let first = |row: usize| (b * n + row) * n;
        let l = lefts.entry((b, i)).or_insert_with(|| gated_row(first(i), p.left, p.left_gate));
        let r = rights.entry((b, j)).or_insert_with(|| gated_row(first(j), p.right, p.right_gate));
        // t[b, i, j, c] = Σ_k left[b, i, k, c] · right[b, j, k, c]
        let t: Vec<f64> = (0..h).map(|c| (0..n).map(|k| l[k * h + c] * r[k * h + c]).sum()).collect();
        let tn = layer_norm(&t, h, p.out_norm_w, Some(p.out_norm_b), 1e-5).0;
        let xh = norm(first(i) + j);
        let u: Vec<f64> = (0..h).map(|c| tn[c] * sigmoid(dot(&xh, &p.out_gate[c * dim..][..dim]))).collect();
        out.extend((0..dim).map(|o| dot(&u, &p.out[o * h..][..h])));
    }
    out
}

/// The delta rule's recurrence ([`crate::delta_rule`]), token by token, for
/// sequences given as `(first token, length)` of `[.., heads, 64]` rows:
/// the outputs (laid out like `q`) and each sequence's final state
/// (`[seqs, heads, 64, 64]`, `S[k][v]`), from `initial` states (zeros if `None`).
pub fn delta_rule(q: &[f64], k: &[f64], v: &[f64], beta: &[f64], seqs: &[(usize, usize)], heads: usize, initial: Option<&[f64]>) -> (Vec<f64>, Vec<f64>) {
    use rayon::prelude::*;
    const D: usize = crate::delta_rule::D;
    let pairs: Vec<(usize, usize)> = (0..seqs.len()).flat_map(|si| (0..heads).map(move |h| (si, h))).collect();
    // Per sequence and head (each on its own thread): its outputs in order, its final state.
    let per: Vec<(Vec<f64>, Vec<f64>)> = pairs
        .par_iter()
        .map(|&(si, h)| {
            let (first, len) = seqs[si];
            let sh = (si * heads + h) * D * D;
            let mut s = initial.map_or_else(|| vec![0.0; D * D], |s| s[sh..sh + D * D].to_vec());
            let mut o = vec![0.0; len * D];
            for t in first..first + len {
                let at = (t * heads + h) * D;
                let (kt, vt, qt) = (&k[at..at + D], &v[at..at + D], &q[at..at + D]);
                let lambda: f64 = kt.iter().map(|x| x * x).sum();
                let alpha = -(-beta[h] * lambda).exp_m1() / (lambda + 1e-8);
                for j in 0..D {
                    let predicted: f64 = (0..D).map(|i| s[i * D + j] * kt[i]).sum();
                    let step = alpha * (vt[j] - predicted);
                    for i in 0..D {
                        s[i * D + j] += step * kt[i];
                    }
                }
                for j in 0..D {
                    o[(t - first) * D + j] = (0..D).map(|i| s[i * D + j] * qt[i]).sum();
                }
            }
            (o, s)
        })
        .collect();
    let mut o = vec![0.0; q.len()];
    let mut states = vec![0.0; seqs.len() * heads * D * D];
    for (&(si, h), (out, s)) in pairs.iter().zip(per) {
        let (first, len) = seqs[si];
        for t in 0..len {
            let at = ((first + t) * heads + h) * D;
            o[at..at + D].copy_from_slice(&out[t * D..(t + 1) * D]);
        }
        let sh = (si * heads + h) * D * D;
        states[sh..sh + D * D].copy_from_slice(&s);
    }
    (o, states)
}

/// Gradients of [`delta_rule`] (the recurrence, in float64).
pub struct DeltaRuleGrads {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    /// `[heads]`.
    pub dbeta: Vec<f64>,
    /// `[heads]`: the sum over each head's tokens of the size of its term of
    /// `dbeta` before any cancellation (`|k|ᵀ·|dS|·|e|` for `kᵀ·dS·e`): the
    /// terms cancel, and so do the dot products inside each, so this is the
    /// scale its rounding error is measured against.
    pub dbeta_scale: Vec<f64>,
    /// `[seqs, heads, 64, 64]`, like the states.
    pub d_initial: Vec<f64>,
}

/// The gradients of [`delta_rule`]'s inputs given those of its outputs
/// (`d_o` like `o`, `d_final` like the final states or zeros): the
/// recurrence differentiated token by token, backwards, from the states it
/// went through (kept every 64 tokens on the way forward and recomputed
/// within each run of 64, so that 65,536 tokens take megabytes, not
/// gigabytes). Each sequence and head on its own thread.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_backward(
    q: &[f64], k: &[f64], v: &[f64], beta: &[f64], seqs: &[(usize, usize)], heads: usize, initial: Option<&[f64]>, d_o: &[f64], d_final: Option<&[f64]>,
) -> DeltaRuleGrads {
    use rayon::prelude::*;
    const D: usize = crate::delta_rule::D;
    const RUN: usize = 64;
    let pairs: Vec<(usize, usize)> = (0..seqs.len()).flat_map(|si| (0..heads).map(move |h| (si, h))).collect();
    // Per sequence and head: [dq, dk, dv] of its tokens in order, dβ, its scale, d_initial.
    let per: Vec<([Vec<f64>; 3], f64, f64, Vec<f64>)> = pairs
        .par_iter()
        .map(|&(si, h)| {
            let (first, len) = seqs[si];
            let sh = (si * heads + h) * D * D;
            let b = beta[h];
            let step = |t: usize| {
                let at = (t * heads + h) * D;
                let lambda: f64 = k[at..at + D].iter().map(|x| x * x).sum();
                let decay = (-b * lambda).exp();
                let alpha = -(-b * lambda).exp_m1() / (lambda + 1e-8);
                (at, lambda, decay, alpha)
            };
            let advance = |s: &mut [f64], t: usize| {
                let (at, _, _, alpha) = step(t);
                for j in 0..D {
                    let e = v[at + j] - (0..D).map(|i| s[i * D + j] * k[at + i]).sum::<f64>();
                    for i in 0..D {
                        s[i * D + j] += alpha * k[at + i] * e;
                    }
                }
            };
            // The state before tokens first, first + RUN, ….
            let mut marks = vec![initial.map_or_else(|| vec![0.0; D * D], |s| s[sh..sh + D * D].to_vec())];
            for r in 1..len.div_ceil(RUN) {
                let mut s = marks[r - 1].clone();
                for t in first + (r - 1) * RUN..first + r * RUN {
                    advance(&mut s, t);
                }
                marks.push(s);
            }
            let mut grads = [vec![0.0; len * D], vec![0.0; len * D], vec![0.0; len * D]];
            let (mut dbeta, mut scale) = (0.0, 0.0);
            let mut ds = d_final.map_or_else(|| vec![0.0; D * D], |d| d[sh..sh + D * D].to_vec());
            for r in (0..len.div_ceil(RUN)).rev() {
                let run = first + r * RUN..(first + (r + 1) * RUN).min(first + len);
                // states[i]: the state before token run.start + i.
                let mut states = vec![marks[r].clone()];
                for t in run.clone() {
                    let mut s = states.last().unwrap().clone();
                    advance(&mut s, t);
                    states.push(s);
                }
                for t in run.clone().rev() {
                    let (at, lambda, decay, alpha) = step(t);
                    let (s, s_after) = (&states[t - run.start], &states[t - run.start + 1]);
                    let (kt, qt, dot) = (&k[at..at + D], &q[at..at + D], &d_o[at..at + D]);
                    let row = (t - first) * D;
                    // o = S'ᵀq.
                    for i in 0..D {
                        grads[0][row + i] = (0..D).map(|j| s_after[i * D + j] * dot[j]).sum();
                        for j in 0..D {
                            ds[i * D + j] += qt[i] * dot[j];
                        }
                    }
                    // S' = S + α·k·eᵀ with e = v − Sᵀk.
                    let e: Vec<f64> = (0..D).map(|j| v[at + j] - (0..D).map(|i| s[i * D + j] * kt[i]).sum::<f64>()).collect();
                    let ds_e: Vec<f64> = (0..D).map(|i| (0..D).map(|j| ds[i * D + j] * e[j]).sum()).collect();
                    let d_alpha: f64 = (0..D).map(|i| kt[i] * ds_e[i]).sum();
                    let de: Vec<f64> = (0..D).map(|j| alpha * (0..D).map(|i| ds[i * D + j] * kt[i]).sum::<f64>()).collect();
                    // α(λ, β) with λ = ‖k‖².
                    let d_lambda = d_alpha * (b * decay / (lambda + 1e-8) - (1.0 - decay) / ((lambda + 1e-8) * (lambda + 1e-8)));
                    let term = d_alpha * lambda * decay / (lambda + 1e-8);
                    dbeta += term;
                    // The term's size before any cancellation: |k|ᵀ·|dS|·|e|.
                    let d_alpha_abs: f64 = (0..D).map(|i| kt[i].abs() * (0..D).map(|j| (ds[i * D + j] * e[j]).abs()).sum::<f64>()).sum();
                    scale += d_alpha_abs * lambda * decay / (lambda + 1e-8);
                    for i in 0..D {
                        grads[1][row + i] = alpha * ds_e[i] - (0..D).map(|j| s[i * D + j] * de[j]).sum::<f64>() + 2.0 * kt[i] * d_lambda;
                        for j in 0..D {
                            ds[i * D + j] -= kt[i] * de[j];
                        }
                    }
                    grads[2][row..row + D].copy_from_slice(&de);
                }
            }
            (grads, dbeta, scale, ds)
        })
        .collect();
    let mut g = DeltaRuleGrads {
        dq: vec![0.0; q.len()],
        dk: vec![0.0; k.len()],
        dv: vec![0.0; v.len()],
        dbeta: vec![0.0; heads],
        dbeta_scale: vec![0.0; heads],
        d_initial: vec![0.0; seqs.len() * heads * D * D],
    };
    for (&(si, h), (grads, dbeta, scale, ds)) in pairs.iter().zip(per) {
        let (first, len) = seqs[si];
        for t in 0..len {
            let at = ((first + t) * heads + h) * D;
            for (out, got) in [&mut g.dq, &mut g.dk, &mut g.dv].into_iter().zip(&grads) {
                out[at..at + D].copy_from_slice(&got[t * D..(t + 1) * D]);
            }
        }
        g.dbeta[h] += dbeta;
        g.dbeta_scale[h] += scale;
        let sh = (si * heads + h) * D * D;
        g.d_initial[sh..sh + D * D].copy_from_slice(&ds);
    }
    g
}

/// QuasarAttention's short convolution ([`crate::quasar`]): `silu` of the
/// causal width-4 convolution of each channel of `[batch, tokens, channels]`
/// `x`, weights `[4, channels]`.
pub fn conv_silu(x: &[f64], w: &[f64], tokens: usize, channels: usize) -> Vec<f64> {
    conv_pre(x, w, tokens, channels).iter().map(|&a| a / (1.0 + (-a).exp())).collect()
}

/// [`conv_silu`] after a projection (`x` `[rows, hidden]`, `wp` `[channels,
/// hidden]`): `(pre, y)`, the projection `x·wpᵀ` and `y` from it rounded
/// to bf16, as `quasar::proj_conv_silu` stores and reads it.
pub fn proj_conv_silu(x: &[f64], wp: &[f64], w: &[f64], tokens: usize, hidden: usize, channels: usize) -> (Vec<f64>, Vec<f64>) {
    let pre: Vec<f64> = x.chunks(hidden).flat_map(|row| wp.chunks(hidden).map(|wr| row.iter().zip(wr).map(|(a, b)| a * b).sum::<f64>())).collect();
    let rounded: Vec<f64> = pre.iter().map(|&v| <rustile::bf16 as rustile::Elem>::from_f32(v as f32).to_f32() as f64).collect();
    let y = conv_silu(&rounded, w, tokens, channels);
    (pre, y)
}

fn conv_pre(x: &[f64], w: &[f64], tokens: usize, channels: usize) -> Vec<f64> {
    let width = w.len() / channels;
    let mut a = vec![0.0; x.len()];
    for (r, row) in a.chunks_mut(channels).enumerate() {
        let t = r % tokens;
        for (j, taps) in w.chunks(channels).enumerate() {
            if t + j + 1 >= width {
                let src = (r + j + 1 - width) * channels;
                for c in 0..channels {
                    row[c] += taps[c] * x[src + c];
                }
            }
        }
    }
    a
}

/// The gradients `(dx, dw)` of [`conv_silu`] given `dy`.
pub fn conv_silu_backward(x: &[f64], w: &[f64], dy: &[f64], tokens: usize, channels: usize) -> (Vec<f64>, Vec<f64>) {
    let width = w.len() / channels;
    let a = conv_pre(x, w, tokens, channels);
    let da: Vec<f64> = a.iter().zip(dy).map(|(&a, &g)| {
        let s = 1.0 / (1.0 + (-a).exp());
        g * s * (1.0 + a * (1.0 - s))
    }).collect();
    let (mut dx, mut dw) = (vec![0.0; x.len()], vec![0.0; w.len()]);
    for r in 0..x.len() / channels {
        let t = r % tokens;
        for j in 0..width {
            if t + j + 1 >= width {
                let src = (r + j + 1 - width) * channels;
                for c in 0..channels {
                    dx[src + c] += w[j * channels + c] * da[r * channels + c];
                    dw[j * channels + c] += x[src + c] * da[r * channels + c];
                }
            }
        }
    }
    (dx, dw)
}

/// QuasarAttention's gated RMSNorm over rows of 64 (a token's head):
/// `o·rstd·w ⊙ sigmoid(g)`.
pub fn gated_rms_norm(o: &[f64], g: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let mut y = vec![0.0; o.len()];
    for ((yr, or), gr) in y.chunks_mut(w.len()).zip(o.chunks(w.len())).zip(g.chunks(w.len())) {
        let rstd = 1.0 / (or.iter().map(|x| x * x).sum::<f64>() / w.len() as f64 + eps).sqrt();
        for i in 0..w.len() {
            yr[i] = or[i] * rstd * w[i] / (1.0 + (-gr[i]).exp());
        }
    }
    y
}

/// `y·woᵀ` with `y` the [`gated_rms_norm`] of `o` gated by `g = g1·wg2ᵀ +
/// bias` (`o` `[rows, channels]`, `g1` `[rows, rank]`, `wg2` `[channels,
/// rank]`, `wo` `[n_out, channels]`), `g` and `y` rounded to bf16 as
/// `quasar::gated_out_proj` (and the layer's unfused path) keeps them.
#[allow(clippy::too_many_arguments)]
pub fn gated_out_proj(o: &[f64], g1: &[f64], wg2: &[f64], bias: &[f64], w: &[f64], wo: &[f64], eps: f64, channels: usize) -> Vec<f64> {
    let round = |v: f64| <rustile::bf16 as rustile::Elem>::from_f32(v as f32).to_f32() as f64;
    let rank = wg2.len() / channels;
    let g: Vec<f64> = g1.chunks(rank).flat_map(|row| wg2.chunks(rank).zip(bias).map(|(wr, b)| round(row.iter().zip(wr).map(|(a, b)| a * b).sum::<f64>() + b))).collect();
    let y: Vec<f64> = gated_rms_norm(o, &g, w, eps).into_iter().map(round).collect();
    y.chunks(channels).flat_map(|row| wo.chunks(channels).map(|wr| row.iter().zip(wr).map(|(a, b)| a * b).sum::<f64>())).collect()
}

/// The gradients `(do, dg, dw)` of [`gated_rms_norm`] given `dy`.
pub fn gated_rms_norm_backward(o: &[f64], g: &[f64], w: &[f64], eps: f64, dy: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = w.len();
    let (mut d_o, mut dg, mut dw) = (vec![0.0; o.len()], vec![0.0; g.len()], vec![0.0; n]);
    for r in 0..o.len() / n {
        let (or, gr, dyr) = (&o[r * n..][..n], &g[r * n..][..n], &dy[r * n..][..n]);
        let rstd = 1.0 / (or.iter().map(|x| x * x).sum::<f64>() / n as f64 + eps).sqrt();
        let mut dn = vec![0.0; n];
        for i in 0..n {
            let (x, s) = (or[i] * rstd, 1.0 / (1.0 + (-gr[i]).exp()));
            dg[r * n + i] = dyr[i] * x * w[i] * s * (1.0 - s);
            dw[i] += dyr[i] * s * x;
            dn[i] = dyr[i] * s * w[i];
        }
        let mean: f64 = (0..n).map(|i| dn[i] * or[i] * rstd).sum::<f64>() / n as f64;
        for i in 0..n {
            d_o[r * n + i] = rstd * (dn[i] - or[i] * rstd * mean);
        }
    }
    (d_o, dg, dw)
}
