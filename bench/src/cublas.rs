//! cuBLAS through cudarc: the GEMM family's baseline, on the same stream as
//! our kernels, in the same process. cuBLASLt (`BlasLt`) is the FP8 GEMM's,
//! and with its listed algorithms the `mma.sync` path's (`listed_bf16_configs`).
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::cublas::{result, sys, CudaBlas};
use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::CudaStream;
use rustile::{bf16, Elem, Kind};
use rustile_host::{Error, Gpu, Result, Tensor};

pub struct Blas(CudaBlas);

impl Blas {
    /// cuBLAS on `gpu`'s stream, or why it cannot be used.
    pub fn new(gpu: &Gpu) -> std::result::Result<Blas, String> {
        // cudarc panics on first use of a library it cannot load; ask first.
        if !unsafe { sys::is_culib_present() } {
            return Err("libcublas was not found (put its folder, e.g. /usr/local/cuda/lib64, on LD_LIBRARY_PATH)".into());
        }
        let stream = gpu.cuda_stream().map_err(|e| e.to_string())?.clone();
        CudaBlas::new(stream).map(Blas).map_err(|e| format!("cublasCreate failed: {e:?}"))
    }

    /// `c = a·bᵀ` with `a` `[m, k]`, `b` `[n, k]`, `c` `[m, n]` row-major
    /// (the operands' type, or f32), f32 accumulation (`cublasGemmEx`,
    /// cuBLAS's own algorithm choice).
    pub fn gemm_nt<T: Elem, C: Elem>(&self, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<C>) -> Result<()> {
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[0]);
        self.gemm_nt_view([m, n, k], (a, 0, k), (b, 0, k), (c, 0, n))
    }

    /// `gemm_nt` on views: each operand is (tensor, first element, row
    /// stride), so that one call can read or write a slice of every row (a
    /// head's columns).
    pub fn gemm_nt_view<T: Elem, C: Elem>(
        &self, [m, n, k]: [usize; 3], a: (&Tensor<T>, usize, usize), b: (&Tensor<T>, usize, usize), c: (&mut Tensor<C>, usize, usize),
    ) -> Result<()> {
        let dtype = match T::KIND {
            Kind::Bf16 => sys::cudaDataType::CUDA_R_16BF,
            Kind::F16 => sys::cudaDataType::CUDA_R_16F,
            _ => return Err(Error::DType(format!("cuBLAS baseline: bf16 or f16, not {}", T::NAME))),
        };
        let ctype = match C::KIND {
            Kind::F32 => sys::cudaDataType::CUDA_R_32F,
            kind if kind == T::KIND => dtype,
            _ => return Err(Error::DType(format!("cuBLAS baseline: {} or f32 out, not {}", T::NAME, C::NAME))),
        };
        let int = |x: usize| i32::try_from(x).map_err(|_| Error::Shape(format!("cuBLAS takes dimensions below 2^31, not {x}")));
        let at = |p: u64, first: usize, size: usize| p + (first * size) as u64;
        let at_t = |t: &Tensor<T>, first: usize| at(t.device_ptr(), first, std::mem::size_of::<T>());
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Column-major cuBLAS sees row-major C[m, n] as Cᵀ[n, m] = B·Aᵀ:
        // B row-major [n, k] is column-major [k, n], so op(B) = transpose.
        unsafe {
            result::gemm_ex(
                *self.0.handle(),
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                int(n)?,
                int(m)?,
                int(k)?,
                (&alpha as *const f32).cast(),
                at_t(b.0, b.1) as *const _,
                dtype,
                int(b.2)?,
                at_t(a.0, a.1) as *const _,
                dtype,
                int(a.2)?,
                (&beta as *const f32).cast(),
                at(c.0.device_ptr(), c.1, std::mem::size_of::<C>()) as *mut _,
                ctype,
                int(c.2)?,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Launch { kernel: "cublasGemmEx".into(), msg: format!("{e:?}") })
    }
}

/// cuBLASLt scratch: NVIDIA's advice for Hopper, where the fastest FP8
/// algorithms split K and need it.
const LT_WORKSPACE_BYTES: usize = 32 << 20;

/// cuBLASLt, for the FP8 GEMM baseline: cuBLAS's `cublasGemmEx` has no FP8
/// with per-tensor scales.
pub struct BlasLt {
    handle: ltsys::cublasLtHandle_t,
    /// f32 only because a tensor needs an `Elem`; cuBLASLt sees bytes.
    workspace: Tensor<f32>,
    /// The stream the workspace belongs to: another one could race on it.
    stream: Arc<CudaStream>,
    /// One plan per shape and operand types, so that timing loops run the
    /// algorithm heuristic once, not per call.
    plans: Mutex<HashMap<PlanKey, Plan>>,
}

/// One cuBLASLt algorithm fixed to one config, from
/// [`BlasLt::listed_bf16_configs`]: its algorithm id and its tile and stage
/// ids (cuBLASLt's `CUBLASLT_MATMUL_TILE_*` and `CUBLASLT_MATMUL_STAGES_*`).
#[derive(Clone, Copy, Debug)]
pub struct LtAlgo {
    algo: ltsys::cublasLtMatmulAlgo_t,
    pub id: i32,
    pub tile: u32,
    pub stages: u32,
}

// SAFETY: a cuBLASLt handle may be used from any thread, and the descriptors
// in `plans` are only touched with its lock held.
unsafe impl Send for BlasLt {}
unsafe impl Sync for BlasLt {}

/// `[m, n, k]`, then cuBLASLt's types for our `a` and our `b`.
type PlanKey = ([usize; 3], ltsys::cudaDataType, ltsys::cudaDataType);

impl BlasLt {
    /// cuBLASLt with a workspace on `gpu`, or why it cannot be used.
    pub fn new(gpu: &Gpu) -> std::result::Result<BlasLt, String> {
        // cudarc panics on first use of a library it cannot load; ask first.
        if !unsafe { ltsys::is_culib_present() } {
            return Err("libcublasLt was not found (put its folder, e.g. /usr/local/cuda/lib64, on LD_LIBRARY_PATH)".into());
        }
        let stream = gpu.cuda_stream().map_err(|e| e.to_string())?.clone();
        stream.context().bind_to_thread().map_err(|e| format!("making the context current: {e:?}"))?;
        let workspace = gpu.alloc::<f32>(&[LT_WORKSPACE_BYTES / 4]).map_err(|e| format!("the cuBLASLt workspace: {e}"))?;
        let handle = lt::create_handle().map_err(|e| format!("cublasLtCreate failed: {:?}", e.0))?;
        Ok(BlasLt { handle, workspace, stream, plans: Mutex::default() })
    }

    /// `c = scale_a[0]·scale_b[0]·a·bᵀ` with FP8 `a` `[m, k]`, `b` `[n, k]`
    /// and bf16 `c` `[m, n]`, all row-major, in cuBLASLt's fast-accumulation
    /// mode (see `Plan::new`). The scales are one-element device tensors,
    /// read by the GPU when the GEMM runs.
    pub fn gemm_fp8_nt<TA: Elem, TB: Elem>(
        &self, gpu: &Gpu, a: &Tensor<TA>, b: &Tensor<TB>, c: &mut Tensor<bf16>, scale_a: &Tensor<f32>, scale_b: &Tensor<f32>,
    ) -> Result<()> {
        let [a_type, b_type] = fp8_types([(TA::KIND, TA::NAME), (TB::KIND, TB::NAME)])?;
        let [m, n, k] = fp8_nt_dims(a.shape(), b.shape(), c.shape(), scale_a.shape(), scale_b.shape())?;
        self.enter(gpu)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            return gpu.fill_bytes(c, 0); // an empty sum; bf16 zero is all-zero bits
        }

        // The lock is held until the GEMM is queued: the scale pointers live
        // in the shared descriptor.
        let mut plans = self.plans.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let plan = plan_for(&mut plans, ([m, n, k], a_type, b_type))?;
        // cuBLASLt's A is our b, its B our a (see Plan::new).
        unsafe {
            set_desc(plan.desc, ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_b.device_ptr())
                .and_then(|()| set_desc(plan.desc, ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a.device_ptr()))
                .map_err(failed("setting the scale pointers"))?;
        }
        let algo = match plan.algo {
            Some(algo) => algo,
            None => {
                let algo = self.pick_algo(plan).map_err(failed("cublasLtMatmulAlgoGetHeuristic (cuBLASLt FP8 needs sm_89 or newer)"))?;
                plan.algo = Some(algo);
                algo
            }
        };
        self.matmul(plan, &algo, a.device_ptr(), b.device_ptr(), c.device_ptr())
    }

    /// Every config (tile × stages × CTA swizzle, without split-K) of every
    /// algorithm cuBLASLt *lists* for the bf16 `c = a·bᵀ` of shape `[m, n,
    /// k]` that it accepts for that shape within our workspace.
    ///
    /// On the H100 with CUDA 13 the listed algorithms are cuBLAS's pre-Hopper
    /// kernels only (CUTLASS's sm80 `mma.sync` GEMMs, and slower older ones);
    /// its Hopper kernels come from the heuristic alone.
    /// `bench/probes/cublaslt_algos.cu` names the kernel behind each config.
    /// So the fastest of these is the `mma.sync` path's fair baseline there.
    pub fn listed_bf16_configs(&self, gpu: &Gpu, [m, n, k]: [usize; 3]) -> Result<Vec<LtAlgo>> {
        use ltsys::cublasLtMatmulAlgoCapAttributes_t::{CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, CUBLASLT_ALGO_CAP_STAGES_IDS, CUBLASLT_ALGO_CAP_TILE_IDS};
        use ltsys::cublasLtMatmulAlgoConfigAttributes_t::{CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, CUBLASLT_ALGO_CONFIG_STAGES_ID, CUBLASLT_ALGO_CONFIG_TILE_ID};
        let bf16 = ltsys::cudaDataType::CUDA_R_16BF;
        let (compute, scale) = (ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F, ltsys::cudaDataType::CUDA_R_32F);
        self.enter(gpu)?;
        let mut plans = self.plans.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let plan = plan_for(&mut plans, ([m, n, k], bf16, bf16))?;
        let mut listed = [0i32; 256];
        let mut count = 0i32;
        unsafe { ltsys::cublasLtMatmulAlgoGetIds(self.handle, compute, scale, bf16, bf16, bf16, bf16, listed.len() as i32, listed.as_mut_ptr(), &mut count) }
            .result()
            .map_err(failed("cublasLtMatmulAlgoGetIds"))?;
        // A capability's value into `buf`; false if the algorithm has none.
        let cap = |algo: &ltsys::cublasLtMatmulAlgo_t, attr, buf: &mut [u32]| {
            let mut written = 0usize;
            unsafe { ltsys::cublasLtMatmulAlgoCapGetAttribute(algo, attr, buf.as_mut_ptr().cast(), 4 * buf.len(), &mut written) }.result().is_ok()
        };
        // An algorithm's tile or stage ids; [0] ("undefined": its default)
        // when it lists none.
        let ids = |algo: &ltsys::cublasLtMatmulAlgo_t, attr| -> Vec<u32> {
            let mut bytes = 0usize;
            let ok = unsafe { ltsys::cublasLtMatmulAlgoCapGetAttribute(algo, attr, std::ptr::null_mut(), 0, &mut bytes) }.result().is_ok();
            let mut v = vec![0u32; bytes / 4];
            if ok && !v.is_empty() && cap(algo, attr, &mut v) { v } else { vec![0] }
        };
        let set = |cfg: &mut ltsys::cublasLtMatmulAlgo_t, attr, v: u32| {
            unsafe { ltsys::cublasLtMatmulAlgoConfigSetAttribute(cfg, attr, (&v as *const u32).cast(), 4) }.result().is_ok()
        };
        // Accepted for this shape, within our workspace.
        let accepted = |cfg: &ltsys::cublasLtMatmulAlgo_t| {
            let [lt_a, lt_b, lt_d] = plan.layouts;
            let mut check = std::mem::MaybeUninit::<ltsys::cublasLtMatmulHeuristicResult_t>::zeroed();
            unsafe { ltsys::cublasLtMatmulAlgoCheck(self.handle, plan.desc, lt_a, lt_b, lt_d, lt_d, cfg, check.as_mut_ptr()) }.result().is_ok()
                && unsafe { check.assume_init() }.workspaceSize <= self.workspace.bytes()
        };
        let mut out = vec![];
        for &id in &listed[..count.max(0) as usize] {
            let mut algo = ltsys::cublasLtMatmulAlgo_t { data: [0; 8] };
            if unsafe { ltsys::cublasLtMatmulAlgoInit(self.handle, compute, scale, bf16, bf16, bf16, bf16, id, &mut algo) }.result().is_err() {
                continue;
            }
            let mut swizzle = [0u32];
            cap(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &mut swizzle);
            for tile in ids(&algo, CUBLASLT_ALGO_CAP_TILE_IDS) {
                for stages in ids(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS) {
                    for swz in 0..=swizzle[0].min(1) {
                        let mut cfg = algo;
                        let settings = [(CUBLASLT_ALGO_CONFIG_TILE_ID, tile), (CUBLASLT_ALGO_CONFIG_STAGES_ID, stages), (CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz), (CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1)];
                        if settings.into_iter().all(|(attr, v)| set(&mut cfg, attr, v)) && accepted(&cfg) {
                            out.push(LtAlgo { algo: cfg, id, tile, stages });
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// `c = a·bᵀ` (bf16, row-major, f32 accumulation) with one config of
    /// [`BlasLt::listed_bf16_configs`] for this shape.
    pub fn gemm_bf16_nt_with<T: Elem>(&self, gpu: &Gpu, algo: &LtAlgo, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        if T::KIND != Kind::Bf16 {
            return Err(Error::DType(format!("cuBLASLt listed configs: bf16 only, not {}", T::NAME)));
        }
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[0]);
        if b.shape() != [n, k] || c.shape() != [m, n] {
            return Err(Error::Shape(format!("cuBLASLt GEMM: a [m, k], b [n, k], c [m, n], not {:?}, {:?}, {:?}", a.shape(), b.shape(), c.shape())));
        }
        self.enter(gpu)?;
        let bf16 = ltsys::cudaDataType::CUDA_R_16BF;
        let plans = self.plans.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let plan = plans.get(&([m, n, k], bf16, bf16)).ok_or_else(|| Error::Invalid(format!("no cuBLASLt configs were listed for {m}x{n}x{k}")))?;
        self.matmul(plan, &algo.algo, a.device_ptr(), b.device_ptr(), c.device_ptr())
    }

    /// Refuses another `Gpu` than ours (the workspace lives on our stream)
    /// and makes our context current for the calls that follow.
    fn enter(&self, gpu: &Gpu) -> Result<()> {
        if !Arc::ptr_eq(gpu.cuda_stream()?, &self.stream) {
            return Err(Error::Invalid("this BlasLt was made for another Gpu (its workspace lives on that one's stream)".into()));
        }
        self.stream.context().bind_to_thread().map_err(|e| Error::Cuda(format!("making the context current: {e:?}")))
    }

    /// One `cublasLtMatmul` of `plan` with `algo`, on our stream and
    /// workspace: `c = a·bᵀ` in our row-major terms.
    fn matmul(&self, plan: &Plan, algo: &ltsys::cublasLtMatmulAlgo_t, a: u64, b: u64, c: u64) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // cuBLASLt's A, B and D layouts: its A is our b, its B our a.
        let [lt_a, lt_b, lt_d] = plan.layouts;
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                b as *const c_void,
                lt_a,
                a as *const c_void,
                lt_b,
                // beta = 0: C is not read, but must be a valid bf16 matrix.
                c as *const c_void,
                lt_d,
                c as *mut c_void,
                lt_d,
                algo,
                self.workspace.device_ptr() as *mut c_void,
                self.workspace.bytes(),
                self.stream.cu_stream().cast(),
            )
        }
        .map_err(failed("cublasLtMatmul"))
    }

    /// cuBLASLt's first choice for `plan` within our workspace.
    fn pick_algo(&self, plan: &Plan) -> std::result::Result<ltsys::cublasLtMatmulAlgo_t, lt::CublasError> {
        let pref = lt::create_matmul_pref()?;
        let max_bytes = self.workspace.bytes() as u64;
        let [lt_a, lt_b, lt_d] = plan.layouts;
        let found = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&max_bytes as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| lt::get_matmul_algo_heuristic(self.handle, plan.desc, lt_a, lt_b, lt_d, lt_d, pref))
        };
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        Ok(found?.algo)
    }
}

impl Drop for BlasLt {
    fn drop(&mut self) {
        // A failure here has nowhere to go; the plans and workspace go after.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// The descriptors of one GEMM shape, destroyed with it, and the algorithm
/// once picked.
struct Plan {
    desc: ltsys::cublasLtMatmulDesc_t,
    /// cuBLASLt's A, B and D (C is D's twin).
    layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    algo: Option<ltsys::cublasLtMatmulAlgo_t>,
}

impl Plan {
    /// Column-major cuBLASLt sees row-major C[m, n] as Cᵀ[n, m] = B·Aᵀ: its
    /// A is our b, column-major [k, n] used transposed; its B is our a,
    /// column-major [k, m] as is. That is the "TN" form FP8 requires. The
    /// output is bf16; the operands FP8 or bf16.
    fn new([m, n, k]: [usize; 3], a_type: ltsys::cudaDataType, b_type: ltsys::cudaDataType) -> std::result::Result<Plan, lt::CublasError> {
        use ltsys::cublasLtMatmulDescAttributes_t::{CUBLASLT_MATMUL_DESC_FAST_ACCUM, CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB};
        // Built up in place, so that an error drops (destroys) what exists.
        let mut plan = Plan { desc: std::ptr::null_mut(), layouts: [std::ptr::null_mut(); 3], algo: None };
        plan.desc = lt::create_matmul_desc(ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F, ltsys::cudaDataType::CUDA_R_32F)?;
        let (op_t, op_n) = (sys::cublasOperation_t::CUBLAS_OP_T as i32, sys::cublasOperation_t::CUBLAS_OP_N as i32);
        unsafe {
            set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t)?;
            set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n)?;
            // Our kernel keeps its sums in the tensor cores' FP8 accumulator
            // for the whole K loop (no periodic promotion to a separate f32
            // sum): cuBLASLt's fast-accumulation mode is the same arithmetic.
            if matches!(a_type, ltsys::cudaDataType::CUDA_R_8F_E4M3 | ltsys::cudaDataType::CUDA_R_8F_E5M2) {
                set_desc(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &1i8)?;
            }
        }
        let (m, n, k) = (m as u64, n as u64, k as u64);
        plan.layouts[0] = lt::create_matrix_layout(b_type, k, n, k as i64)?;
        plan.layouts[1] = lt::create_matrix_layout(a_type, k, m, k as i64)?;
        plan.layouts[2] = lt::create_matrix_layout(ltsys::cudaDataType::CUDA_R_16BF, n, m, n as i64)?;
        Ok(plan)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe {
            for &layout in self.layouts.iter().filter(|l| !l.is_null()) {
                let _ = lt::destroy_matrix_layout(layout);
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
        }
    }
}

/// The plan for `key` among `plans` (locked by the caller), made on first use.
fn plan_for(plans: &mut HashMap<PlanKey, Plan>, key: PlanKey) -> Result<&mut Plan> {
    Ok(match plans.entry(key) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => e.insert(Plan::new(key.0, key.1, key.2).map_err(failed("creating descriptors"))?),
    })
}

/// A cuBLASLt status as our error: which step of the GEMM failed, and how.
fn failed(step: &'static str) -> impl Fn(lt::CublasError) -> Error {
    move |e| Error::Launch { kernel: "cublasLtMatmul".into(), msg: format!("{step}: {:?}", e.0) }
}

/// `cublasLtMatmulDescSetAttribute` with `value`'s own size.
///
/// # Safety
/// `desc` must be live, and `V` the type cuBLASLt documents for `attr`.
unsafe fn set_desc<V>(desc: ltsys::cublasLtMatmulDesc_t, attr: ltsys::cublasLtMatmulDescAttributes_t, value: &V) -> std::result::Result<(), lt::CublasError> {
    lt::set_matmul_desc_attribute(desc, attr, (value as *const V).cast(), std::mem::size_of::<V>())
}

/// cuBLASLt's types for the FP8 operands (our a, our b), each given as
/// (kind, name): e4m3 or e5m2, but not both e5m2, which cuBLASLt has no
/// kernel for (e5m2 is a gradient format, paired with e4m3).
fn fp8_types(operands: [(Kind, &str); 2]) -> Result<[ltsys::cudaDataType; 2]> {
    let one = |(kind, name): (Kind, &str)| match kind {
        Kind::E4M3 => Ok(ltsys::cudaDataType::CUDA_R_8F_E4M3),
        Kind::E5M2 => Ok(ltsys::cudaDataType::CUDA_R_8F_E5M2),
        _ => Err(Error::DType(format!("cuBLASLt FP8 baseline: e4m3 or e5m2, not {name}"))),
    };
    let types = [one(operands[0])?, one(operands[1])?];
    if types == [ltsys::cudaDataType::CUDA_R_8F_E5M2; 2] {
        return Err(Error::DType("cuBLASLt has no e5m2 × e5m2 GEMM: one operand must be e4m3".into()));
    }
    Ok(types)
}

/// `[m, n, k]` of `c[m, n] = a[m, k]·b[n, k]ᵀ`, if the shapes agree and suit
/// cuBLASLt's FP8 GEMM: its leading dimensions must be 16-byte multiples
/// (k one-byte elements for a and b, n bf16 ones for c).
fn fp8_nt_dims(a: &[usize], b: &[usize], c: &[usize], scale_a: &[usize], scale_b: &[usize]) -> Result<[usize; 3]> {
    let shape = |msg: String| Err(Error::Shape(format!("cuBLASLt FP8 GEMM: {msg}")));
    let &[m, k] = a else { return shape(format!("a must be [m, k], not {a:?}")) };
    let n = match *b {
        [n, kb] if kb == k => n,
        _ => return shape(format!("b must be [n, k] with k = {k} (a is {a:?}), not {b:?}")),
    };
    if c != [m, n] {
        return shape(format!("c must be [m, n] = [{m}, {n}], not {c:?}"));
    }
    if k % 16 != 0 {
        return shape(format!("k = {k} must be a multiple of 16 (16-byte aligned rows of a and b)"));
    }
    if n % 8 != 0 {
        return shape(format!("n = {n} must be a multiple of 8 (16-byte aligned rows of the bf16 c)"));
    }
    for (name, s) in [("scale_a", scale_a), ("scale_b", scale_b)] {
        if s.iter().product::<usize>() != 1 {
            return shape(format!("{name} must hold one f32, not shape {s:?}"));
        }
    }
    Ok([m, n, k])
}

#[cfg(test)]
mod tests {
    use super::*;
    use ltsys::cudaDataType::{CUDA_R_8F_E4M3, CUDA_R_8F_E5M2};

    fn shape_error(r: Result<[usize; 3]>) -> String {
        match r {
            Err(Error::Shape(msg)) => msg,
            other => panic!("expected a shape error, got {other:?}"),
        }
    }

    #[test]
    fn fp8_types_map_and_refuse() {
        let (e4, e5) = ((Kind::E4M3, "e4m3"), (Kind::E5M2, "e5m2"));
        assert_eq!(fp8_types([e4, e4]).unwrap(), [CUDA_R_8F_E4M3, CUDA_R_8F_E4M3]);
        assert_eq!(fp8_types([e4, e5]).unwrap(), [CUDA_R_8F_E4M3, CUDA_R_8F_E5M2]);
        assert_eq!(fp8_types([e5, e4]).unwrap(), [CUDA_R_8F_E5M2, CUDA_R_8F_E4M3]);
        match fp8_types([e5, e5]) {
            Err(Error::DType(msg)) => assert!(msg.contains("e5m2 × e5m2"), "{msg}"),
            other => panic!("e5m2 × e5m2 should be refused, got {other:?}"),
        }
        for (kind, name) in [(Kind::Bf16, "bf16"), (Kind::F16, "f16"), (Kind::F32, "f32")] {
            match fp8_types([(kind, name), e4]) {
                Err(Error::DType(msg)) => assert!(msg.contains(name), "{msg}"),
                other => panic!("{name} should be refused, got {other:?}"),
            }
        }
        // The real element types carry the kinds the mapping expects.
        assert_eq!(fp8_types([(rustile::F8E4M3::KIND, "e4m3"); 2]).unwrap(), [CUDA_R_8F_E4M3; 2]);
        assert!(fp8_types([(rustile::F8E5M2::KIND, "e5m2"), (rustile::F8E4M3::KIND, "e4m3")]).is_ok());
        assert!(matches!(fp8_types([(bf16::KIND, bf16::NAME); 2]), Err(Error::DType(_))));
    }

    #[test]
    fn fp8_nt_dims_checks_shapes() {
        let one: &[usize] = &[1];
        assert_eq!(fp8_nt_dims(&[128, 64], &[256, 64], &[128, 256], one, one).unwrap(), [128, 256, 64]);
        // Any one-element shape is a scale; m needs no alignment.
        assert_eq!(fp8_nt_dims(&[3, 32], &[8, 32], &[3, 8], &[], &[1, 1]).unwrap(), [3, 8, 32]);

        let msg = shape_error(fp8_nt_dims(&[128, 64, 1], &[256, 64], &[128, 256], one, one));
        assert!(msg.contains("a must be [m, k]"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 64], &[256, 48], &[128, 256], one, one));
        assert!(msg.contains("b must be [n, k] with k = 64"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 64], &[256], &[128, 256], one, one));
        assert!(msg.contains("b must be"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 64], &[256, 64], &[256, 128], one, one));
        assert!(msg.contains("c must be [m, n] = [128, 256]"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 40], &[256, 40], &[128, 256], one, one));
        assert!(msg.contains("k = 40 must be a multiple of 16"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 64], &[100, 64], &[128, 100], one, one));
        assert!(msg.contains("n = 100 must be a multiple of 8"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 64], &[256, 64], &[128, 256], &[2], one));
        assert!(msg.contains("scale_a must hold one f32"), "{msg}");
        let msg = shape_error(fp8_nt_dims(&[128, 64], &[256, 64], &[128, 256], one, &[0]));
        assert!(msg.contains("scale_b must hold one f32"), "{msg}");
    }
}
