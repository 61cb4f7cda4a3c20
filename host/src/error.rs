//! One error type for everything the host runtime can refuse or fail at.

use std::fmt;

#[derive(Debug, Clone)]
pub enum Error {
    /// libcuda could not be loaded or initialised; the string says why.
    NoDriver(String),
    /// The driver works but sees no device.
    NoGpu,
    /// The kernel crate was built without an image this GPU can run.
    NoCubin { arch: String, available: Vec<String> },
    Shape(String),
    DType(String),
    Misaligned(String),
    /// A scalar argument outside its range.
    Invalid(String),
    OutOfMemory { requested: usize, free: usize },
    /// Any other driver failure: "what we tried: CUDA_ERROR_NAME (driver text)".
    Cuda(String),
    Launch { kernel: String, msg: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether this says there is no GPU here (no CUDA driver, or a driver
    /// that sees no device), as opposed to a GPU that failed: the only case
    /// in which a GPU test may skip, or a program fall back to the CPU.
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, Error::NoDriver(_) | Error::NoGpu)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDriver(why) => write!(
                f,
                "no CUDA driver found (libcuda.so could not be loaded): {why}. \
                 Run on a machine with an NVIDIA GPU, or use the CPU interpreter"
            ),
            Error::NoGpu => write!(
                f,
                "the CUDA driver is present but sees no GPU (check nvidia-smi and \
                 CUDA_VISIBLE_DEVICES), or use the CPU interpreter"
            ),
            Error::NoCubin { arch, available } => {
                let have = if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                };
                write!(
                    f,
                    "no kernel image for this GPU ({arch}); the kernels were built for: {have}. \
                     Build them with `cargo xtask build --arch {arch}`"
                )
            }
            Error::Shape(msg) => write!(f, "shape error: {msg}"),
            Error::DType(msg) => write!(f, "dtype error: {msg}"),
            Error::Misaligned(msg) => write!(f, "misaligned: {msg}"),
            Error::Invalid(msg) => write!(f, "invalid argument: {msg}"),
            Error::OutOfMemory { requested, free } => write!(
                f,
                "out of GPU memory: asked for {} while {} is free",
                human_bytes(*requested),
                human_bytes(*free)
            ),
            Error::Cuda(msg) => write!(f, "CUDA error: {msg}"),
            Error::Launch { kernel, msg } => write!(f, "launching kernel `{kernel}` failed: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

pub(crate) fn human_bytes(n: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_reads_well() {
        let cases = [
            (Error::NoDriver("libcuda.so.1: cannot open".into()), "no CUDA driver found"),
            (Error::NoGpu, "sees no GPU"),
            (
                Error::NoCubin { arch: "sm_75".into(), available: vec!["sm_80".into(), "sm_90a".into()] },
                "cargo xtask build --arch sm_75",
            ),
            (Error::Shape("3 values for shape [2, 2]".into()), "shape error: 3 values"),
            (Error::DType("want bf16".into()), "dtype error"),
            (Error::Misaligned("ptr 0x3".into()), "misaligned: ptr 0x3"),
            (Error::OutOfMemory { requested: 3 << 30, free: 1 << 20 }, "3.00 GiB while 1.00 MiB"),
            (Error::Cuda("cuMemcpy: CUDA_ERROR_X (boom)".into()), "CUDA error: cuMemcpy"),
            (Error::Launch { kernel: "add_f32".into(), msg: "not found".into() }, "`add_f32`"),
        ];
        for (e, want) in cases {
            let text = e.to_string();
            assert!(text.contains(want), "{text:?} should contain {want:?}");
        }
        assert!(Error::NoDriver("x".into()).to_string().contains("CPU interpreter"));
        let e: Box<dyn std::error::Error> = Box::new(Error::NoGpu);
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn only_a_missing_driver_or_device_means_no_gpu() {
        assert!(Error::NoDriver("libcuda.so.1: cannot open".into()).is_no_gpu());
        assert!(Error::NoGpu.is_no_gpu());
        let failed = Error::Cuda("creating a context on device 0: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)".into());
        assert!(!failed.is_no_gpu());
        assert!(!Error::OutOfMemory { requested: 1, free: 0 }.is_no_gpu());
        assert!(!Error::NoCubin { arch: "sm_75".into(), available: vec![] }.is_no_gpu());
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }
}
