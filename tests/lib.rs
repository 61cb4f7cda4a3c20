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
