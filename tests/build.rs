//! GPU tests are reported as *ignored* (with the reason) when the machine
//! that builds them has no NVIDIA GPU, instead of as passed. Binaries built
//! here and run on a GPU machine take `--include-ignored`
//! (bench/device_run.sh does); they also skip at run time if no GPU answers.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(rustile_no_gpu)");
    println!("cargo:rerun-if-changed=/dev/nvidia0");
    if !std::path::Path::new("/dev/nvidia0").exists() {
        println!("cargo:rustc-cfg=rustile_no_gpu");
    }
}
