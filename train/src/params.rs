//! A model's parameters in flat buffers, as llm.c keeps them: one f32
//! master buffer, its gradients, AdamW's two moments, and the bf16 copy the
//! kernels read, each parameter a range of every buffer at the same offset.
//! A parameter is a pair of views (`Tensor::view`) into them, so layers
//! take ordinary tensors, and the optimizer is one launch over everything.
//!
//! Parameters with weight decay (matrices) come first, so the optimizer's
//! decay is one bound (`decay_end`) rather than a table.
use rustile::bf16;
use rustile_host::{Gpu, Result, Tensor};
use rustile_ops::adamw::{adamw_step, AdamW, AdamWState, HYPER_LEN};

/// One parameter: its bf16 weights (what the forward reads) and its f32
/// gradient (what the backward writes), views of the flat buffers.
pub struct Param {
    pub name: String,
    pub w: Tensor<bf16>,
    pub grad: Tensor<f32>,
    /// Where it starts in the flat buffers.
    pub offset: usize,
}

/// Parameters being declared: each with its initial values.
#[derive(Default)]
pub struct Declared {
    list: Vec<(String, Vec<usize>, bool, Vec<f32>)>,
}

impl Declared {
    /// Declares `name` of `shape` with its initial values; `decay` for the
    /// matrices AdamW decays. Returns its index, for [`Params::get`].
    pub fn add(&mut self, name: impl Into<String>, shape: &[usize], decay: bool, init: Vec<f32>) -> usize {
        assert_eq!(init.len(), shape.iter().product::<usize>(), "initial values of a parameter must fill its shape");
        self.list.push((name.into(), shape.to_vec(), decay, init));
        self.list.len() - 1
    }
}

/// Every parameter of a model, its optimizer state, and the step count.
pub struct Params {
    pub params: Vec<Param>,
    master: Tensor<f32>,
    grads: Tensor<f32>,
    m: Tensor<f32>,
    v: Tensor<f32>,
    copy: Tensor<bf16>,
    /// The step's learning rate and bias corrections, on the device.
    hyper: Tensor<f32>,
    decay_end: usize,
    pub opt: AdamW,
    /// Steps taken.
    pub t: u64,
}

impl Params {
    /// Lays the declared parameters out (decayed ones first), uploads their
    /// values and their bf16 copy, and zeroes gradients and moments.
    pub fn new(gpu: &Gpu, declared: Declared, opt: AdamW) -> Result<Params> {
        let mut order: Vec<usize> = (0..declared.list.len()).collect();
        order.sort_by_key(|&i| !declared.list[i].2); // stable: decayed first, in declaration order
        let mut offsets = vec![0; declared.list.len()];
        let (mut n, mut decay_end) = (0, 0);
        for &i in &order {
            offsets[i] = n;
            n += declared.list[i].3.len();
            if declared.list[i].2 {
                decay_end = n;
            }
        }
        let mut values = vec![0.0f32; n];
        for (i, (_, _, _, init)) in declared.list.iter().enumerate() {
            values[offsets[i]..offsets[i] + init.len()].copy_from_slice(init);
        }
        let master = gpu.upload(&values, &[n])?;
        let copy = gpu.upload(&values.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(), &[n])?;
        let zeros = || -> Result<Tensor<f32>> {
            let mut t = gpu.alloc(&[n])?;
            gpu.fill_bytes(&mut t, 0)?;
            Ok(t)
        };
        let (grads, m, v) = (zeros()?, zeros()?, zeros()?);
        let mut params = Vec::new();
        for (i, (name, shape, _, _)) in declared.list.into_iter().enumerate() {
            let (w, grad) = (copy.view(offsets[i], &shape)?, grads.view(offsets[i], &shape)?);
            params.push(Param { name, w, grad, offset: offsets[i] });
        }
        let hyper = gpu.alloc(&[HYPER_LEN])?;
        Ok(Params { params, master, grads, m, v, copy, hyper, decay_end, opt, t: 0 })
    }

    /// Parameter `i` (the index [`Declared::add`] returned).
    pub fn get(&self, i: usize) -> &Param {
        &self.params[i]
    }

    /// How many scalars the model has.
    pub fn count(&self) -> usize {
        self.master.numel()
    }

    /// Counts the next step and writes its learning rate and bias
    /// corrections to the device: before [`Params::update`], eagerly or
    /// before a captured graph's replay.
    pub fn begin_step(&mut self, gpu: &Gpu) -> Result<()> {
        self.t += 1;
        gpu.write(&mut self.hyper, &self.opt.hyper(self.t))
    }

    /// One AdamW step over every parameter, from the gradients the
    /// backward wrote; also writes the bf16 copy. One launch.
    pub fn update(&mut self, gpu: &Gpu) -> Result<()> {
        let state = AdamWState { params: &mut self.master, grads: &self.grads, m: &mut self.m, v: &mut self.v, copy: &mut self.copy };
        adamw_step(gpu, &self.opt, state, &self.hyper, self.decay_end)
    }

    /// Sets every parameter (the flat f32 buffer's values, in its layout:
    /// [`Param::offset`]) and their bf16 copy.
    pub fn set_all(&mut self, gpu: &Gpu, values: &[f32]) -> Result<()> {
        gpu.write(&mut self.master, values)?;
        gpu.write(&mut self.copy, &values.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
    }

    /// The flat f32 buffer of every parameter, in its layout.
    pub fn all(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        gpu.download(&self.master)
    }

    /// The flat gradient buffer, in the same layout.
    pub fn all_grads(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        gpu.download(&self.grads)
    }

    /// The f32 master values of every parameter, as `(name, shape, values)`.
    pub fn download(&self, gpu: &Gpu) -> Result<Vec<(String, Vec<usize>, Vec<f32>)>> {
        let all = gpu.download(&self.master)?;
        Ok(self.params.iter().map(|p| (p.name.clone(), p.w.shape().to_vec(), all[p.offset..p.offset + p.w.numel()].to_vec())).collect())
    }

    /// Every gradient, as `(name, values)`.
    pub fn download_grads(&self, gpu: &Gpu) -> Result<Vec<(String, Vec<f32>)>> {
        let all = gpu.download(&self.grads)?;
        Ok(self.params.iter().map(|p| (p.name.clone(), all[p.offset..p.offset + p.w.numel()].to_vec())).collect())
    }
}
