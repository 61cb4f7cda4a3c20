//! Integration tests of Rustile (see the files beside this one):
//! * `gpu_ops.rs`: every op on the GPU against float64, every config;
//!   skipped, with a message on the terminal, where there is no GPU;
//! * `ptxas.rs`: every kernel entry assembled for sm_80 and sm_90a, none spilling;
//! * `macro_errors.rs` + `ui/`: kernels that must not compile, and their messages.
//!
//! The CPU-interpreter numerics of each op live beside its kernel in `ops/`.
use std::io::Write;

/// The GPU, or `None` after telling the terminal why this test is skipped.
/// (Written straight to stderr: the test harness captures `eprintln!`.)
pub fn gpu_or_skip(test: &str) -> Option<rustile_host::Gpu> {
    match rustile_host::Gpu::new() {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no GPU ({e})");
            None
        }
    }
}

/// [`gpu_or_skip`] for a test of Hopper-only kernels (`arch = sm_90a`): the
/// GPU if it is one, else `None` after saying so on the terminal.
pub fn hopper_or_skip(test: &str) -> Option<rustile_host::Gpu> {
    let gpu = gpu_or_skip(test)?;
    if gpu.compute_capability() != (9, 0) {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs Hopper (sm_90a); this GPU is {}", gpu.name());
        return None;
    }
    Some(gpu)
}
