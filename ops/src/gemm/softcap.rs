//! A GEMM with a custom epilogue, written by a user of [`mainloop`]: logits
//! soft-capped at ±`cap` (Gemma 2's attention and output logits),
//! `C = cap·tanh(A·Bᵀ / cap)`. The whole variant is the kernel below.
use super::*;

crate::gemm_kernel! {
grid = [cdiv(m, BM) * cdiv(n, BN)],
/// `C = cap·tanh(A·Bᵀ / cap)`, A `[m, k]`, B `[n, k]`.
pub fn gemm_softcap_kernel<T: Elem>(a: Ptr<T>, b: Ptr<T>, c: PtrMut<T>, m: usize, n: usize, k: usize, cap: f32) {
    let at = block::<BM, BN>(m, n);
    let acc = mainloop_nt::<T, BM, BN, BK, STAGES, THREADS>(a, b, m, n, k, at);
    store_acc_with(&BlockPtr::<T, BM, BN>::rows(c, m, n, at), &acc, |_, _, x| cap * math::tanh(x / cap));
}
}

/// `c = cap·tanh(a·bᵀ / cap)` on the GPU.
#[cfg(not(target_arch = "nvptx64"))]
pub fn gemm_softcap<T: Elem>(gpu: &rustile_host::Gpu, a: &rustile_host::Tensor<T>, b: &rustile_host::Tensor<T>, c: &mut rustile_host::Tensor<T>, cap: f32) -> rustile_host::Result<()> {
    check_dtype::<T>("gemm_softcap")?;
    if !(cap > 0.0 && cap.is_finite()) {
        return Err(rustile_host::Error::Invalid(format!("gemm_softcap: cap must be a positive finite number, not {cap}")));
    }
    let (m, n, k) = gemm_shape(a, b, c)?;
    gemm_softcap_kernel::launch(gpu, default_config(m, n), a, b, c, m, n, k, cap)
}
