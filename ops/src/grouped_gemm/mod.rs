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
//! - [`gemm_groups`]: groups of different M, N and K in one launch, packed
//!   back to back in three tensors ([`sizes`](self::sizes) has the kernels).
mod sizes;
pub use sizes::*;

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use crate::check::{expect_shape, matrix};
    use super::{grouped_gemm_kernel, grouped_gemm_wgmma_kernel, WORDS};
    use crate::gemm::{block_shape, check_dtype, launch_plan, launch_plan_cpu, Act, Bias, Config, Epi, Epilogue, Plan};
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
        if cols == 0 {
            return out; // (no hidden units: nothing to copy, and chunks of 0 do not exist)
        }
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

    /// The sizes of a grouped GEMM (`[m, n, k]` a group) and what its kernel
    /// needs: the kernel and config, and the table (on the GPU) that maps
    /// each program to its group. Build it once for sizes that repeat
    /// (every step of a model whose experts see the same token counts).
    pub struct Groups {
        /// The groups, and the packed tensors' lengths.
        groups: usize,
        lens: [usize; 3],
        cfg: Config,
        blocks: usize,
        table: Tensor<u32>,
    }

    impl Groups {
        /// The sizes with the kernel this GPU runs best: `wgmma` on Hopper
        /// (128×128 blocks where they fill its SMs, else 64×128), else
        /// `mma.sync` (128×128 where they fill the SMs twice, else 64×64).
        pub fn new(gpu: &Gpu, sizes: &[[usize; 3]]) -> Result<Groups> {
            let big = blocks(sizes, [128, 128]);
            let cfg = if grouped_gemm_wgmma_kernel::supported(gpu) {
                Config::Wgmma(if big >= 132 { 0 } else { 1 })
            } else {
                Config::Mma(if big >= 264 { 2 } else { 0 })
            };
            Groups::with_config(gpu, sizes, cfg)
        }

        /// [`Groups::new`] with a given kernel and config (`Config::Mma`
        /// indexes `grouped_gemm_kernel::CONFIGS`, `Config::Wgmma`
        /// `grouped_gemm_wgmma_kernel::CONFIGS`).
        pub fn with_config(gpu: &Gpu, sizes: &[[usize; 3]], cfg: Config) -> Result<Groups> {
            let (table, blocks) = group_table(sizes, block_of(cfg)?)?;
            let table = gpu.upload(&table, &[table.len()])?;
            Ok(Groups { groups: sizes.len(), lens: packed_lens(sizes), cfg, blocks, table })
        }

        /// Elements the packed `a`, `b` and `c` hold: `Σ m·k`, `Σ n·k`, `Σ m·n`.
        pub fn lens(&self) -> [usize; 3] {
            self.lens
        }
    }

    /// Where each group's `a_g`, `b_g` and `c_g` start in the packed tensors,
    /// then (one more entry) their lengths.
    pub fn packed_offsets(sizes: &[[usize; 3]]) -> Vec<[usize; 3]> {
        let mut at = vec![[0; 3]];
        for &[m, n, k] in sizes {
            let [a, b, c] = at[at.len() - 1];
            at.push([a + m * k, b + n * k, c + m * n]);
        }
        at
    }

    /// Elements of the packed `a`, `b` and `c` for these sizes.
    fn packed_lens(sizes: &[[usize; 3]]) -> [usize; 3] {
        packed_offsets(sizes)[sizes.len()]
    }

    /// The programs of these sizes at `[BM, BN]` blocks.
    fn blocks(sizes: &[[usize; 3]], [bm, bn]: [usize; 2]) -> usize {
        sizes.iter().map(|&[m, n, _]| m.div_ceil(bm) * n.div_ceil(bn)).sum()
    }

    /// `[BM, BN]` of a grouped kernel config, or the error for one that does not exist.
    fn block_of(cfg: Config) -> Result<[usize; 2]> {
        match cfg {
            Config::Mma(i) => block_shape("grouped_gemm_kernel", grouped_gemm_kernel::CONFIGS, i),
            Config::Wgmma(i) => block_shape("grouped_gemm_wgmma_kernel", grouped_gemm_wgmma_kernel::CONFIGS, i),
            Config::Tma(_) => Err(Error::Launch { kernel: "grouped_gemm".into(), msg: "the grouped GEMM has no TMA kernel; use Config::Wgmma".into() }),
        }
    }

    /// The kernels' table ([`WORDS`] words a group) and the programs to launch.
    pub(crate) fn group_table(sizes: &[[usize; 3]], bmn: [usize; 2]) -> Result<(Vec<u32>, usize)> {
        let word = |x: usize, what: &str| {
            u32::try_from(x).map_err(|_| Error::Shape(format!("gemm_groups: {what} = {x} does not fit the table's 32 bits")))
        };
        let (mut table, mut first) = (Vec::with_capacity(sizes.len() * WORDS), 0);
        for (&[m, n, k], at) in sizes.iter().zip(packed_offsets(sizes)) {
            table.extend([word(m, "m")?, word(n, "n")?, word(k, "k")?, word(first, "a block number")?]);
            for x in at {
                table.extend([x as u32, (x >> 32) as u32]);
            }
            first += blocks(&[[m, n, k]], bmn);
        }
        Ok((table, first))
    }

    /// `c_g = a_g·b_gᵀ` for every group, in one launch: `a` holds every `a_g`
    /// (`[m_g, k_g]`) back to back, `b` every `b_g` (`[n_g, k_g]`), `c` every
    /// `c_g` (`[m_g, n_g]`); each tensor's shape is free, its length must be
    /// [`Groups::lens`]. bf16 or f16, f32 accumulation.
    ///
    /// ```ignore
    /// // Tokens sorted by expert: a [Σ m_g, 4096], experts' weights b [G, 14336, 4096].
    /// let groups = Groups::new(&gpu, &tokens_per_expert.iter().map(|&m| [m, 14336, 4096]).collect::<Vec<_>>())?;
    /// gemm_groups(&gpu, &groups, &a, &b, &mut c)?;
    /// ```
    pub fn gemm_groups<T: Elem>(gpu: &Gpu, groups: &Groups, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        check_dtype::<T>("gemm_groups")?;
        for ((what, t), want) in [("a", a), ("b", b), ("c", &*c)].into_iter().zip(groups.lens()) {
            if t.numel() != want || !t.is_contiguous() {
                return Err(Error::Shape(format!(
                    "gemm_groups: {what} must hold its groups' {want} elements, contiguous; it has {} (shape {:?})",
                    t.numel(),
                    t.shape()
                )));
            }
        }
        if groups.blocks == 0 {
            return Ok(());
        }
        let g = groups.groups;
        match groups.cfg {
            Config::Wgmma(cfg) => grouped_gemm_wgmma_kernel::launch(gpu, cfg, a, b, c, &groups.table, g, groups.blocks),
            Config::Mma(cfg) => grouped_gemm_kernel::launch(gpu, cfg, a, b, c, &groups.table, g, groups.blocks),
            Config::Tma(_) => unreachable!("Groups::with_config refuses TMA"),
        }
    }

    /// [`gemm_groups`] in the CPU interpreter, on packed slices.
    pub fn gemm_groups_cpu<T: Elem>(cfg: Config, sizes: &[[usize; 3]], a: &[T], b: &[T], c: &mut [T]) {
        let lens = packed_lens(sizes);
        assert_eq!([a.len(), b.len(), c.len()], lens, "gemm_groups_cpu: a, b, c hold these elements; the sizes need {lens:?}");
        let (table, blocks) = group_table(sizes, block_of(cfg).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
        if blocks == 0 {
            return;
        }
        match cfg {
            Config::Wgmma(cfg) => grouped_gemm_wgmma_kernel::cpu(cfg, a, b, c, &table, sizes.len(), blocks),
            Config::Mma(cfg) => grouped_gemm_kernel::cpu(cfg, a, b, c, &table, sizes.len(), blocks),
            Config::Tma(_) => unreachable!("block_of refuses TMA"),
        }
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests;
