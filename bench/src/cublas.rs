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
        let dtype = match T::KIND {
            Kind::Bf16 => sys::cudaDataType::CUDA_R_16BF,
            Kind::F16 => sys::cudaDataType::CUDA_R_16F,
            _ => return Err(Error::DType(format!("cuBLAS baseline: bf16 or f16, not {}", T::NAME))),
        };
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[0]);
        let int = |x: usize| i32::try_from(x).map_err(|_| Error::Shape(format!("cuBLAS takes dimensions below 2^31, not {x}")));
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
                b.device_ptr() as *const _,
                dtype,
                int(k)?,
                a.device_ptr() as *const _,
                dtype,
                int(k)?,
                (&beta as *const f32).cast(),
                c.device_ptr() as *mut _,
                dtype,
                int(n)?,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Launch { kernel: "cublasGemmEx".into(), msg: format!("{e:?}") })
    }
}
