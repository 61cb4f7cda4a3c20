//! Grouped GEMMs: G products in one launch, for G heads that share an input
//! (the readout of a multi-head model: ten MLPs of 512 → 1365 → 3 on one x).
//!
//! - [`shared_input`]: `y[:, g, :] = epilogue(x·w[g]ᵀ)`. With the heads'
//!   weights stored together (`w` `[G, n, k]` is `[G·n, k]`) it is one GEMM
//!   writing `[rows, G·n]`, which is `[rows, G, n]`: nothing to regroup.
//! - [`heads_mlp`]: `y[:, g, :] = act(x·w1[g]ᵀ + b1[g])·w2[g]ᵀ + b2[g]`, two
//!   launches. Each layer is a batch over heads of strided views (a
//!   [`Plan`]): head g's hidden activations start `g·hp` into each hidden
//!   row, its outputs `g·out` into each row of `y`. `hp` is the hidden width
//!   rounded up to 8 elements (1365 → 1368), so every head's slice starts
//!   16-byte aligned and the second layer's copies need no masks; the
//!   padding is never written or read. The first bias and the second
//!   weights are copied into rows of `hp` too (a few KB): with rows of 1365,
//!   eight of ten heads' bias chunks were misaligned (each a branch to
//!   scalar loads, 3.3× the plain GEMM's time), and the second GEMM could
//!   not use the copy engine.
//!
//! Groups of different M, N and K in one launch (a pointer table) are not
//! written yet.
#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use crate::check::{expect_shape, matrix};
    use crate::gemm::{launch_plan, launch_plan_cpu, Act, Bias, Epi, Epilogue, Plan};
    use rustile::Elem;
    use rustile_host::{Error, Gpu, Result, Tensor};

    /// The two layers of [`heads_mlp`] for `rows` inputs of `d` features, `g`
    /// heads of `h` hidden units and `out` outputs: (layer 1, layer 2, the
    /// padded hidden width `hp`). Layer 1 writes `hidden` `[rows, g·hp]` with
    /// the bias `[g, hp]`, layer 2 reads it with the weights `[g, out, hp]`.
    pub fn heads_plans(rows: usize, d: usize, g: usize, h: usize, out: usize) -> (Plan, Plan, usize) {
        let hp = h.next_multiple_of(8);
        let first = Plan { m: rows, n: h, k: d, batch: g, ld: [d, d, g * hp], stride: [0, h * d, hp, hp], ta: false, tb: true };
        let second = Plan { m: rows, n: out, k: h, batch: g, ld: [g * hp, hp, g * out], stride: [hp, out * hp, out, out], ta: false, tb: true };
        (first, second, hp)
    }

    /// `rows` rows of `cols` values copied into rows of `ld` (the rest zero).
    fn pad_rows<T: Elem>(v: &[T], rows: usize, cols: usize, ld: usize) -> Vec<T> {
        let mut out = vec![T::default(); rows * ld];
        for (o, i) in out.chunks_mut(ld).zip(v.chunks(cols)) {
            o[..cols].copy_from_slice(i);
        }
        out
    }

    /// The epilogues of the two layers: `act(· + b1)`, then `· + b2`.
    fn heads_epis(act: Act, b1: bool, b2: bool) -> (Epi, Epi) {
        let bias = |on| if on { Bias::PerColumn } else { Bias::None };
        (Epi { act, bias: bias(b1), ..Epi::NONE }, Epi { bias: bias(b2), ..Epi::NONE })
    }

    /// `[G, rows, cols]` of a head-stacked weight, or an error.
    fn stacked<T: Elem>(what: &str, w: &Tensor<T>) -> Result<(usize, usize, usize)> {
        match *w.shape() {
            [g, r, c] => expect_shape(what, w, &[g, r, c]).map(|_| (g, r, c)),
            _ => Err(Error::Shape(format!("{what} must be [G, rows, cols] (one matrix per head); it has shape {:?}", w.shape()))),
        }
    }

    /// `y[:, g, :] = epilogue(x·w[g]ᵀ)` for `x` `[rows, k]`, `w` `[G, n, k]`,
    /// `y` `[rows, G, n]`, in one GEMM (a bias is `[G, n]`, given flat as
    /// `[G·n]` or as `[G, n]`).
    pub fn shared_input<T: Elem>(gpu: &Gpu, x: &Tensor<T>, w: &Tensor<T>, y: &mut Tensor<T>, epi: &Epilogue<T>) -> Result<()> {
        let (rows, k) = matrix("x", x)?;
        let (g, n, kw) = stacked("w", w)?;
        if kw != k {
            return Err(Error::Shape(format!("x is [{rows}, {k}] but w is [{g}, {n}, {kw}]: w must be [G, n, {k}]")));
        }
        expect_shape("y", y, &[rows, g, n])?;
        if let Some(t) = epi.bias() {
            let (want, what) = if epi.epi().bias == Bias::PerRow { (rows, format!("[{rows}]")) } else { (g * n, format!("[{g}, {n}]")) };
            if t.numel() != want {
                return Err(Error::Shape(format!("the bias has shape {:?}; expected {what}", t.shape())));
            }
        }
        launch_plan(gpu, None, &Plan::nt(rows, g * n, k), x, w, y, epi)
    }

    /// `y[:, g, :] = act(x·w1[g]ᵀ + b1[g])·w2[g]ᵀ + b2[g]` for G heads: `x`
    /// `[rows, d]`, `w1` `[G, h, d]`, `b1` `[G, h]`, `w2` `[G, out, h]`, `b2`
    /// `[G, out]`, `y` `[rows, G, out]`. Two launches (the module doc says how).
    #[allow(clippy::too_many_arguments)]
    pub fn heads_mlp<T: Elem>(
        gpu: &Gpu,
        x: &Tensor<T>,
        w1: &Tensor<T>,
        b1: Option<&Tensor<T>>,
        act: Act,
        w2: &Tensor<T>,
        b2: Option<&Tensor<T>>,
        y: &mut Tensor<T>,
    ) -> Result<()> {
        let (rows, d) = matrix("x", x)?;
        let (g, h, d1) = stacked("w1", w1)?;
        let (g2, out, h2) = stacked("w2", w2)?;
        if d1 != d || g2 != g || h2 != h {
            return Err(Error::Shape(format!(
                "x is [{rows}, {d}], w1 [{g}, {h}, {d1}], w2 [{g2}, {out}, {h2}]: expected w1 [G, h, {d}] and w2 [{g}, out, {h}]"
            )));
        }
        expect_shape("y", y, &[rows, g, out])?;
        for (what, b, len) in [("b1", b1, h), ("b2", b2, out)] {
            if let Some(b) = b {
                expect_shape(what, b, &[g, len])?;
            }
        }
        let (first, second, hp) = heads_plans(rows, d, g, h, out);
        let mut hidden = gpu.alloc::<T>(&[rows, g * hp])?;
        let b1p = b1
            .map(|b| {
                let mut p = gpu.alloc::<T>(&[g, hp])?;
                gpu.copy_rows(b, &mut p, [g, h], [h, hp]).map(|_| p)
            })
            .transpose()?;
        let e1 = b1p.as_ref().map_or(Epilogue::new(), |b| Epilogue::new().bias_per_column(b)).act(act);
        launch_plan(gpu, None, &first, x, w1, &mut hidden, &e1)?;
        let mut w2p = gpu.alloc::<T>(&[g, out, hp])?;
        gpu.copy_rows(w2, &mut w2p, [g * out, h], [h, hp])?;
        let e2 = b2.map_or(Epilogue::new(), |b| Epilogue::new().bias_per_column(b));
        launch_plan(gpu, None, &second, &hidden, &w2p, y, &e2)
    }

    /// [`heads_mlp`] in the CPU interpreter (row-major slices; empty biases
    /// for none; the hidden activations rounded to `T`, as on the GPU).
    #[allow(clippy::too_many_arguments)]
    pub fn heads_mlp_cpu<T: Elem>(x: &[T], w1: &[T], b1: &[T], act: Act, w2: &[T], b2: &[T], [rows, d, g, h, out]: [usize; 5]) -> Vec<T> {
        let (first, second, hp) = heads_plans(rows, d, g, h, out);
        let (e1, e2) = heads_epis(act, !b1.is_empty(), !b2.is_empty());
        let cfg = crate::gemm::default_config(rows, h);
        let mut hidden = vec![T::default(); rows * g * hp];
        let b1p = if b1.is_empty() { vec![] } else { pad_rows(b1, g, h, hp) };
        launch_plan_cpu(cfg, &first, x, w1, &mut hidden, &b1p, &[], e1);
        let mut y = vec![T::default(); rows * g * out];
        launch_plan_cpu(cfg, &second, &hidden, &pad_rows(w2, g * out, h, hp), &mut y, b2, &[], e2);
        y
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
