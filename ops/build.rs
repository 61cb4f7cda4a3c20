//! Embeds the kernel images `cargo xtask build` left in `target/cubins/<arch>/`
//! (or `$RUSTILE_CUBIN_DIR/<arch>/`) as `$OUT_DIR/cubins.rs`:
//!
//! ```ignore
//! pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins {
//!     crate_name: "rustile_ops",
//!     images: &[("sm_90a", include_bytes!("…/sm_90a/rustile_ops.cubin")), …],
//!     ptx: &[("sm_90a", include_str!("…/sm_90a/rustile_ops.ptx")), …],
//! };
//! ```
//!
//! With no images the slices are empty, so a host build on a machine that
//! never ran the device build still compiles (and launches fail with a clear
//! error instead).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const STEM: &str = "rustile_ops";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("cubins.rs");
    println!("cargo:rerun-if-env-changed=RUSTILE_CUBIN_DIR");

    // The device build is what makes the images; it embeds none.
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("nvptx64") {
        write(&out, "");
        return;
    }

    let dir = match std::env::var_os("RUSTILE_CUBIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/cubins"),
    };
    // Cargo reruns a build script on every build while a watched path is
    // missing, and every rerun recompiles this crate; an empty folder keeps
    // host-only builds incremental and still notices the first device build.
    if std::fs::create_dir_all(&dir).is_ok() {
        println!("cargo:rerun-if-changed={}", dir.display());
    } else {
        println!("cargo:warning=cannot create {}; kernel images will not be embedded", dir.display());
    }
    let dir = dir.canonicalize().unwrap_or(dir);

    let mut arches: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(arch, _)| arch.starts_with("sm_"))
        .collect();
    arches.sort();

    println!("cargo:rerun-if-env-changed=RUSTILE_EMBED_PTX");
    let embed_ptx = std::env::var_os("RUSTILE_EMBED_PTX").is_some();
    let mut images = String::new();
    let mut ptx = String::new();
    for (arch, arch_dir) in &arches {
        let cubin = arch_dir.join(format!("{STEM}.cubin"));
        let text = arch_dir.join(format!("{STEM}.ptx"));
        // Debug formatting of a str is a valid Rust string literal, escapes included.
        if cubin.is_file() {
            println!("cargo:rerun-if-changed={}", cubin.display());
            let _ = write!(images, "\n        ({arch:?}, include_bytes!({:?})),", cubin.display().to_string());
        }
        // PTX is only a fallback for an arch without its cubin, which a normal
        // build never produces; it is large, so it is embedded only on request.
        if text.is_file() && (embed_ptx || !cubin.is_file()) {
            println!("cargo:rerun-if-changed={}", text.display());
            let _ = write!(ptx, "\n        ({arch:?}, include_str!({:?})),", text.display().to_string());
        }
    }

    let code = format!(
        "pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins {{\n    \
         crate_name: {STEM:?},\n    images: &[{images}\n    ],\n    ptx: &[{ptx}\n    ],\n}};\n"
    );
    write(&out, &code);
}

fn write(path: &Path, text: &str) {
    // Rewriting identical contents would still bump the mtime and recompile dependents.
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
