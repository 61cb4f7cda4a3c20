//! Integration tests of Rustile (see the files beside this one):
//! * `gpu_ops.rs`: every op on the GPU against float64, every config;
//! * `gpu_fuzz.rs`: every op family through its public API at random odd shapes;
//! * `ptxas.rs`: every kernel entry assembled for sm_80 and sm_90a, none spilling;
//! * `macro_errors.rs` + `ui/`: kernels that must not compile, and their messages.
//!
//! A GPU test skips, with a message on the terminal, only where there is no
//! GPU: no CUDA driver, or a driver that sees no device. Any other error
//! while opening the GPU (a context a crashed kernel left unusable, a driver
//! failure) fails the test, so a broken GPU never passes as a missing one.
//!
//! The CPU-interpreter numerics of each op live beside its kernel in `ops/`.
use std::io::Write;

use rustile::Elem;
use rustile_host::{Error, Gpu, Tensor};

/// The GPU, or `None` after telling the terminal why this test is skipped.
/// (Written straight to stderr: the test harness captures `eprintln!`.)
pub fn gpu_or_skip(test: &str) -> Option<Gpu> {
    gpu_unless_absent(test, Gpu::new())
}

/// The rule of [`gpu_or_skip`]: `None` (skip) only for an error that says
/// there is no GPU ([`Error::is_no_gpu`]); any other error panics, failing the test.
pub fn gpu_unless_absent(test: &str, opened: Result<Gpu, Error>) -> Option<Gpu> {
    match opened {
        Ok(gpu) => Some(gpu),
        Err(e) if e.is_no_gpu() => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no GPU ({e})");
            None
        }
        Err(e) => panic!("{test}: a GPU is present but could not be opened: {e}"),
    }
}

/// [`gpu_or_skip`] for a test of Hopper-only kernels (`arch = sm_90a`): the
/// GPU if it is one, else `None` after saying so on the terminal.
pub fn hopper_or_skip(test: &str) -> Option<Gpu> {
    let gpu = gpu_or_skip(test)?;
    if gpu.compute_capability() != (9, 0) {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs Hopper (sm_90a); this GPU is {}", gpu.name());
        return None;
    }
    Some(gpu)
}

/// `x` on the GPU, shaped `shape`.
pub fn up<T: Elem>(gpu: &Gpu, x: &[T], shape: &[usize]) -> Tensor<T> {
    gpu.upload(x, shape).expect("upload")
}

/// A tensor whose every bit is set (a NaN in every float type), so an
/// element a kernel fails to write fails the comparison.
pub fn poisoned<T: Elem>(gpu: &Gpu, shape: &[usize]) -> Tensor<T> {
    let mut t = gpu.alloc(shape).expect("alloc");
    gpu.fill_bytes(&mut t, 0xFF).expect("poison");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_or_device_skips() {
        assert!(gpu_unless_absent("t", Err(Error::NoDriver("libcuda.so.1: cannot open shared object file".into()))).is_none());
        assert!(gpu_unless_absent("t", Err(Error::NoGpu)).is_none());
    }

    #[test]
    #[should_panic(expected = "a GPU is present but could not be opened")]
    fn a_dead_context_fails() {
        // What the GPU tests saw after compute-sanitizer stopped a kernel.
        let e = Error::Cuda("creating a context on device 0: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)".into());
        gpu_unless_absent("t", Err(e));
    }

    #[test]
    #[should_panic(expected = "could not be opened")]
    fn any_other_error_fails() {
        gpu_unless_absent("t", Err(Error::OutOfMemory { requested: 1 << 20, free: 0 }));
    }
}
