//! The bench and the tuner share this: measuring and reporting (`harness`),
//! our side of each op's bench (`ops`, `gemm`), the baselines (`cublas`,
//! `torch`), the autotuner (`tune`) and the charts and headline table (`report`).

// Much of the harness is only used by some of the binaries.
#[allow(dead_code)]
pub mod harness;
pub mod attention;
pub mod cublas;
pub mod delta_rule;
pub mod fp8;
pub mod gemm;
pub mod grouped;
pub mod nvfp4;
pub mod ops;
pub mod quasar;
pub mod report;
pub mod torch;
pub mod trimul;
pub mod tune;

/// The sizes and element type one run uses, as the op benches see them.
pub struct Sizes {
    pub rows: usize,
    pub cols: usize,
    pub numel: usize,
    pub dtype: String,
}

/// The binaries' logger: `RUST_LOG` picks what the library crates' `log`
/// records show (`RUST_LOG=rustile_ops=info` names every shape that runs a
/// heuristic config for want of a tuned bucket); warnings only by default.
pub fn init_logging() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .format_target(true)
        .init();
}
