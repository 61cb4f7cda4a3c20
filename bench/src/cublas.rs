//! cuBLAS through cudarc: the GEMM family's baseline, on the same stream as
//! our kernels, in the same process.
use cudarc::cublas::{result, sys, CudaBlas};
use rustile::{Elem, Kind};
use rustile_host::{Error, Gpu, Result, Tensor};

pub struct Blas(CudaBlas);

impl Blas {
    /// cuBLAS on `gpu`'s stream, or why it cannot be used.
    pub fn new(gpu: &Gpu) -> std::result::Result<Blas, String> {
        // cudarc panics on first use of a library it cannot load; ask first.
        if !unsafe { sys::is_culib_present() } {
            return Err("libcublas was not found (put its folder, e.g. /usr/local/cuda/lib64, on LD_LIBRARY_PATH)".into());
        }
        CudaBlas::new(gpu.cuda_stream().clone()).map(Blas).map_err(|e| format!("cublasCreate failed: {e:?}"))
    }

    /// `c = a·bᵀ` with `a` `[m, k]`, `b` `[n, k]`, `c` `[m, n]` row-major,
    /// f32 accumulation (`cublasGemmEx`, cuBLAS's own algorithm choice).
    pub fn gemm_nt<T: Elem>(&self, a: &Tensor<T>, b: &Tensor<T>, c: &mut Tensor<T>) -> Result<()> {
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[0]);
        self.gemm_nt_view([m, n, k], (a, 0, k), (b, 0, k), (c, 0, n))
    }

    /// `gemm_nt` on views: each operand is (tensor, first element, row
    /// stride), so that one call can read or write a slice of every row (a
    /// head's columns).
    pub fn gemm_nt_view<T: Elem>(&self, [m, n, k]: [usize; 3], a: (&Tensor<T>, usize, usize), b: (&Tensor<T>, usize, usize), c: (&mut Tensor<T>, usize, usize)) -> Result<()> {
        let dtype = match T::KIND {
            Kind::Bf16 => sys::cudaDataType::CUDA_R_16BF,
            Kind::F16 => sys::cudaDataType::CUDA_R_16F,
            _ => return Err(Error::DType(format!("cuBLAS baseline: bf16 or f16, not {}", T::NAME))),
        };
        let int = |x: usize| i32::try_from(x).map_err(|_| Error::Shape(format!("cuBLAS takes dimensions below 2^31, not {x}")));
        let at = |t: &Tensor<T>, first: usize| t.device_ptr() + (first * std::mem::size_of::<T>()) as u64;
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
                at(b.0, b.1) as *const _,
                dtype,
                int(b.2)?,
                at(a.0, a.1) as *const _,
                dtype,
                int(a.2)?,
                (&beta as *const f32).cast(),
                at(c.0, c.1) as *mut _,
                dtype,
                int(c.2)?,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Launch { kernel: "cublasGemmEx".into(), msg: format!("{e:?}") })
    }
}
