//! AdamW over every parameter of a model in one launch.
//!
//! The parameters live in one flat f32 buffer (llm.c's layout: each tensor
//! a range of it), as do their gradients and both moments, so "every
//! tensor" is one range of elements and one kernel. Weight decay applies to
//! the first `decay_end` elements: a model puts its matrices first and its
//! norm weights after. The step also writes the 16-bit copy of every
//! parameter that the next step's kernels read, so no conversion pass runs.
//!
//! The step-dependent scalars (learning rate, bias corrections) are read
//! from device memory (`hyper`), so a captured CUDA graph replays with the
//! values of each step written into `hyper` before it.
use rustile::prelude::*;

/// `hyper`'s layout: `[lr, 1/(1 − β₁ᵗ), 1/(1 − β₂ᵗ)]`.
pub const HYPER_LEN: usize = 3;

// ---- kernel ----------------------------------------------------------------------------

#[kernel(
    configs = [(BLOCK = 2048, WARPS = 8)],
    grid = [cdiv(n, BLOCK)],
    dtypes = [bf16, f16],
)]
/// One AdamW step (PyTorch's `AdamW`, decoupled decay) of `n` parameters:
/// `p ← p − lr·wd·p` for the first `decay_end`, then `m ← β₁m + (1−β₁)g`,
/// `v ← β₂v + (1−β₂)g²`, `p ← p − lr·m̂/(√v̂ + eps)`, and `out = T(p)`.
pub fn adamw_kernel<T: Elem>(
    param: PtrMut<f32>, grad: Ptr<f32>, m: PtrMut<f32>, v: PtrMut<f32>, out: PtrMut<T>, hyper: Ptr<f32>,
    n: usize, decay_end: usize, beta1: f32, beta2: f32, eps: f32, wd: f32,
) {
    let at = [0, program_id(0) * BLOCK];
    let (pt, gt) = (load(&BlockPtr::<f32, 1, BLOCK>::rows(param, 1, n, at)), load(&BlockPtr::<f32, 1, BLOCK>::rows(grad, 1, n, at)));
    let (mt, vt) = (load(&BlockPtr::<f32, 1, BLOCK>::rows(m, 1, n, at)), load(&BlockPtr::<f32, 1, BLOCK>::rows(v, 1, n, at)));
    let (lr, bc1, bc2) = (hyper.read(0), hyper.read(1), hyper.read(2));
    let decays = Tile::<bool, 1, BLOCK>::from_fn(|_, c| at[1] + c < decay_end);
    let pt = decays.select(pt * (1.0 - lr * wd), pt);
    let mt = mt * beta1 + gt * (1.0 - beta1);
    let vt = vt * beta2 + gt * gt * (1.0 - beta2);
    let pt = pt - (mt * bc1) / ((vt * bc2).sqrt() + eps) * lr;
    store(&BlockPtr::rows(param, 1, n, at), &pt);
    store(&BlockPtr::rows(m, 1, n, at), &mt);
    store(&BlockPtr::rows(v, 1, n, at), &vt);
    store(&BlockPtr::rows(out, 1, n, at), &pt.cast::<T>());
}

// ---- host API --------------------------------------------------------------------------

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use super::*;
    use rustile_host::{Error, Gpu, Result, Tensor};

    /// AdamW's settings (the defaults are the TransformerNP's: lr 3e-4, betas
    /// 0.9 / 0.95, eps 1e-8, weight decay 0.01).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct AdamW {
        pub lr: f32,
        pub beta1: f32,
        pub beta2: f32,
        pub eps: f32,
        pub weight_decay: f32,
    }

    impl Default for AdamW {
        fn default() -> Self {
            AdamW { lr: 3e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.01 }
        }
    }

    impl AdamW {
        /// `hyper` for step `t` (from 1).
        pub fn hyper(&self, t: u64) -> [f32; HYPER_LEN] {
            let bc = |b: f32| 1.0 / (1.0 - (b as f64).powi(t.min(i32::MAX as u64) as i32)) as f32;
            [self.lr, bc(self.beta1), bc(self.beta2)]
        }
    }

    /// The flat buffers of one optimizer: parameters, gradients and moments
    /// in f32, and the 16-bit copy the model reads.
    pub struct AdamWState<'a, T> {
        pub params: &'a mut Tensor<f32>,
        pub grads: &'a Tensor<f32>,
        pub m: &'a mut Tensor<f32>,
        pub v: &'a mut Tensor<f32>,
        pub copy: &'a mut Tensor<T>,
    }

    fn check(opt: &AdamW, n: usize, lens: [usize; 5], decay_end: usize) -> Result<()> {
        if lens.iter().any(|&l| l != n) {
            return Err(Error::Shape(format!("adamw: params, grads, m, v and the copy must hold {n} values each; they hold {lens:?}")));
        }
        if decay_end > n {
            return Err(Error::Shape(format!("adamw: decay_end {decay_end} is past the {n} parameters")));
        }
        let ok = opt.lr >= 0.0 && (0.0..1.0).contains(&opt.beta1) && (0.0..1.0).contains(&opt.beta2) && opt.eps > 0.0 && opt.weight_decay >= 0.0;
        if !ok {
            return Err(Error::Invalid(format!("adamw: settings out of range: {opt:?}")));
        }
        Ok(())
    }

    /// One step over every parameter: `hyper` holds [`AdamW::hyper`] of this
    /// step (a device tensor of [`HYPER_LEN`], written before the step, so a
    /// captured graph replays with each step's values).
    pub fn adamw_step<T: Elem>(gpu: &Gpu, opt: &AdamW, s: AdamWState<T>, hyper: &Tensor<f32>, decay_end: usize) -> Result<()> {
        let n = s.params.numel();
        check(opt, n, [n, s.grads.numel(), s.m.numel(), s.v.numel(), s.copy.numel()], decay_end)?;
        if hyper.numel() != HYPER_LEN {
            return Err(Error::Shape(format!("adamw: hyper must hold {HYPER_LEN} values (AdamW::hyper)")));
        }
        adamw_kernel::launch(gpu, 0, s.params, s.grads, s.m, s.v, s.copy, hyper, n, decay_end, opt.beta1, opt.beta2, opt.eps, opt.weight_decay)
    }

    /// [`adamw_step`] in the CPU interpreter, on slices, at step `t`.
    #[allow(clippy::too_many_arguments)]
    pub fn adamw_step_cpu<T: Elem>(opt: &AdamW, t: u64, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], copy: &mut [T], decay_end: usize) {
        let n = p.len();
        check(opt, n, [n, g.len(), m.len(), v.len(), copy.len()], decay_end).unwrap_or_else(|e| panic!("{e}"));
        adamw_kernel::cpu(0, p, g, m, v, copy, &opt.hyper(t), n, decay_end, opt.beta1, opt.beta2, opt.eps, opt.weight_decay);
    }
}
#[cfg(not(target_arch = "nvptx64"))]
pub use host::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    /// Three steps against PyTorch's AdamW written out in float64, with
    /// decay on the first part only, at a length that ends mid-block.
    #[test]
    fn matches_float64_over_steps() {
        let (mut rng, seed) = rng();
        let (n, decay_end) = (5001, 3000);
        let opt = AdamW { lr: 1e-2, ..AdamW::default() };
        let mut p: Vec<f32> = normal(&mut rng, n, 0.0, 1.0);
        let (mut m, mut v, mut copy) = (vec![0.0; n], vec![0.0; n], vec![bf16::from_f32(0.0); n]);
        let mut want: Vec<f64> = wide(&p);
        let (mut wm, mut wv) = (vec![0.0f64; n], vec![0.0f64; n]);
        for t in 1..=3u64 {
            let g: Vec<f32> = normal(&mut rng, n, 0.0, 0.1);
            adamw_step_cpu(&opt, t, &mut p, &g, &mut m, &mut v, &mut copy, decay_end);
            let (b1, b2) = (opt.beta1 as f64, opt.beta2 as f64);
            for i in 0..n {
                let gi = g[i] as f64;
                if i < decay_end {
                    want[i] *= 1.0 - opt.lr as f64 * opt.weight_decay as f64;
                }
                wm[i] = b1 * wm[i] + (1.0 - b1) * gi;
                wv[i] = b2 * wv[i] + (1.0 - b2) * gi * gi;
                let (mh, vh) = (wm[i] / (1.0 - b1.powi(t as i32)), wv[i] / (1.0 - b2.powi(t as i32)));
                want[i] -= opt.lr as f64 * mh / (vh.sqrt() + opt.eps as f64);
            }
            let ctx = format!("adamw step {t} (seed {seed})");
            assert!(rel_err(&p, &want) < 1e-6, "{ctx}: params rel err {:.2e}", rel_err(&p, &want));
            assert!(rel_err(&copy, &want) <= tolerance::<bf16>(), "{ctx}: bf16 copy");
        }
    }

    #[test]
    #[should_panic(expected = "decay_end 11 is past")]
    fn refuses_decay_past_the_end() {
        let mut p = vec![0.0; 10];
        adamw_step_cpu(&AdamW::default(), 1, &mut p.clone(), &p.clone(), &mut p.clone(), &mut p, &mut vec![bf16::from_f32(0.0); 10], 11);
    }
}
