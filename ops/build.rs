//! Embeds the kernel images `cargo xtask build` left in `target/cubins/<arch>/`
//! (or `$RUSTILE_CUBIN_DIR/<arch>/`) as `$OUT_DIR/cubins.rs`:
//!
//! ```ignore
//! pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins {
//!     crate_name: "rustile_ops",
//!     images: &[("sm_90a", include_bytes!("…/sm_90a/rustile_ops.gemm_nt_kernel.cubin")), …],
//!     ptx: &[("sm_90a", include_str!("…/sm_90a/rustile_ops.ptx")), …],
//! };
//! ```
//!
//! With no images the slices are empty, so a host build on a machine that
//! never ran the device build still compiles (and launches fail with a clear
//! error instead). The device build leaves beside each arch's images the
//! hash of every kernel source they were compiled from (`sources.txt`, which
//! this script writes into its `OUT_DIR` in that build); images whose
//! sources' code changed since (comments and blank lines do not count) are
//! marked `stale`: one build warning here naming the files, and a notice
//! when the GPU loads them. A new file changes nothing until some module
//! includes it, and that edit is what marks the images stale.
//!
//! It also writes `$OUT_DIR/sources.rs`: the hash of the sources each tuned
//! op is built from, which `tune` compares with the tuned tables' provenance.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const STEM: &str = "rustile_ops";

/// Sources every kernel is built from (relative to the workspace root).
const KERNEL_SOURCES: &[&str] = &["dsl/src", "dsl-macros/src", "device/src", "ops/src", "ops/ptx/src"];

/// Host-only sources (the interpreter's backend, host modules of `ops/src`): editing
/// them does not make the kernel images stale.
/// Nor do they count in a tuned op's source hash.
const HOST_ONLY: &[&str] = &[
    "dsl/src/backend/cpu.rs",
    "ops/src/attention/host.rs",
    "ops/src/attention/tests.rs",
    "ops/src/check.rs",
    "ops/src/delta_rule/host.rs",
    "ops/src/delta_rule/tests.rs",
    "ops/src/dual_gemm/host.rs",
    "ops/src/dual_gemm_nvfp4/host.rs",
    "ops/src/dual_gemm_nvfp4/tests.rs",
    "ops/src/gemm_fp8/host.rs",
    "ops/src/gemm/host.rs",
    "ops/src/mlp/mod.rs",
    "ops/src/mlp/tests.rs",
    "ops/src/nvfp4/tests.rs",
    "ops/src/quasar/host.rs",
    "ops/src/quasar/tests.rs",
    "ops/src/grouped_gemm/tests.rs",
    "ops/src/reference.rs",
    "ops/src/testing.rs",
    "ops/src/tune.rs",
];

/// The sources (folders or files) each tuned op's kernels come from,
/// besides the DSL's: a tuned table whose hash of these differs is out of
/// date. Attention's tuned op is the forward alone; the NVFP4 GEMMs' are
/// their warp-specialized kernels.
const TUNED_OPS: &[(&str, &[&str])] =
    &[("gemm_nt", &["ops/src/gemm"]), ("gemm_wgmma", &["ops/src/gemm"]), ("gemm_tma", &["ops/src/gemm"]),
      ("dual_gemm", &["ops/src/gemm", "ops/src/dual_gemm"]), ("dual_gemm_tma", &["ops/src/gemm", "ops/src/dual_gemm"]),
      ("gemm_fp8", &["ops/src/gemm", "ops/src/gemm_fp8"]), ("attention", &["ops/src/attention/mod.rs", "ops/src/attention/hopper.rs"]),
      ("dual_gemm_nvfp4", &["ops/src/gemm", "ops/src/nvfp4", "ops/src/dual_gemm_nvfp4"]),
      ("gemm_nvfp4", &["ops/src/gemm", "ops/src/nvfp4", "ops/src/dual_gemm_nvfp4"])];
const DSL_SOURCES: &[&str] = &["dsl/src", "dsl-macros/src", "device/src"];

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("cubins.rs");
    println!("cargo:rerun-if-env-changed=RUSTILE_CUBIN_DIR");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in KERNEL_SOURCES {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    write(&out_dir.join("sources.rs"), &source_hashes(&root));

    // The device build is what makes the images; it embeds none, and records
    // what they are compiled from (`cargo xtask build` copies it beside them).
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("nvptx64") {
        write(&out, "");
        write(&out_dir.join(MANIFEST), &kernel_manifest(&root));
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
    let mut reports = String::new();
    let now = kernel_manifest(&root);
    let mut stale = None;
    for (arch, arch_dir) in &arches {
        // One cubin per kernel family (`rustile_ops.<family>.cubin`), which
        // the build assembles in parallel.
        let mut cubins: Vec<PathBuf> = std::fs::read_dir(arch_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "cubin") && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{STEM}."))))
            .collect();
        cubins.sort();
        let text = arch_dir.join(format!("{STEM}.ptx"));
        if !cubins.is_empty() {
            let manifest = arch_dir.join(MANIFEST);
            println!("cargo:rerun-if-changed={}", manifest.display());
            let built = std::fs::read_to_string(&manifest).unwrap_or_default();
            if let Some(why) = changed_since(&built, &now) {
                println!("cargo:warning=the {arch} kernel images in {} are stale: {why}; run `cargo xtask build`", arch_dir.display());
                stale.get_or_insert_with(|| format!("{arch}: {why}"));
            }
        }
        // Debug formatting of a str is a valid Rust string literal, escapes included.
        let report = arch_dir.join("resources.json");
        if report.is_file() {
            let _ = write!(reports, "\n    ({arch:?}, include_str!({:?})),", report.display().to_string());
        }
        for cubin in &cubins {
            println!("cargo:rerun-if-changed={}", cubin.display());
            let _ = write!(images, "\n        ({arch:?}, include_bytes!({:?})),", cubin.display().to_string());
        }
        // PTX is only a fallback for an arch without its cubins, which a normal
        // build never produces; it is large, so it is embedded only on request.
        if text.is_file() && (embed_ptx || cubins.is_empty()) {
            println!("cargo:rerun-if-changed={}", text.display());
            let _ = write!(ptx, "\n        ({arch:?}, include_str!({:?})),", text.display().to_string());
        }
    }

    let code = format!(
        "pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins {{\n    \
         crate_name: {STEM:?},\n    images: &[{images}\n    ],\n    ptx: &[{ptx}\n    ],\n    stale: {stale:?},\n}};\n\n\
         /// (arch, the ptxas resource report `cargo xtask build` wrote as JSON)\n\
         pub static RESOURCE_REPORTS: &[(&str, &str)] = &[{reports}\n];\n"
    );
    write(&out, &code);
}

/// Every file under `dirs` except tests, sorted, so the walk order is fixed.
fn source_files(root: &Path, dirs: &[&str]) -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, name: &str, out: &mut Vec<(String, PathBuf)>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let (path, file) = (e.path(), e.file_name().to_string_lossy().into_owned());
            let name = format!("{name}/{file}");
            if path.is_dir() {
                walk(&path, &name, out);
            } else if file.ends_with(".rs") && file != "tests.rs" {
                out.push((name, path));
            }
        }
    }
    let mut out = vec![];
    for dir in dirs {
        let path = root.join(dir);
        if path.is_file() {
            out.push((dir.to_string(), path));
        } else {
            walk(&path, dir, &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The code of a Rust source without what cannot change a kernel: `//`
/// comments (docs included), indentation and blank lines. So a doc edit
/// leaves a tuned table current, and any code edit makes it stale.
fn code_only(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        // Cut at the first `//` outside a string literal (`'"'` is a char,
        // not a quote; an escaped quote does not end a string).
        let (mut in_str, mut prev, mut cut) = (false, '\0', line.len());
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        for (i, &(at, c)) in chars.iter().enumerate() {
            match c {
                '"' if prev != '\\' && !(prev == '\'' && chars.get(i + 1).is_some_and(|&(_, n)| n == '\'')) => in_str = !in_str,
                '/' if !in_str && prev == '/' => {
                    cut = at - 1;
                    break;
                }
                _ => {}
            }
            prev = if prev == '\\' && c == '\\' { '\0' } else { c };
        }
        let code = line[..cut].trim();
        if !code.is_empty() {
            out.push_str(code);
            out.push('\n');
        }
    }
    out
}

/// `pub const SOURCE_HASHES`: (op, first 12 hex digits of the SHA-256 of its
/// sources' names and code, `code_only`).
fn source_hashes(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut code = String::from("/// (tuned op, hash of the sources its kernels are built from)\npub const SOURCE_HASHES: &[(&str, &str)] = &[\n");
    for (op, dirs) in TUNED_OPS {
        let mut h = Sha256::new();
        for (name, path) in source_files(root, &[DSL_SOURCES, dirs].concat()).into_iter().filter(|(name, _)| !HOST_ONLY.contains(&name.as_str())) {
            h.update(name.as_bytes());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            h.update(code_only(&text).as_bytes());
        }
        let hex: String = h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(code, "    ({op:?}, {hex:?}),");
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc).arg("-V").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    code + &format!("];\n/// The rustc that built this crate (and, by `cargo xtask build`, its kernels).\npub const RUSTC_VERSION: &str = {:?};\n", version.unwrap_or_default())
}

/// The file, beside an arch's images, of the sources they were compiled from.
const MANIFEST: &str = "sources.txt";

/// One line per kernel source: the first 16 hex digits of the SHA-256 of
/// its code (`code_only`), then its name.
fn kernel_manifest(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut out = String::new();
    for (name, path) in source_files(root, KERNEL_SOURCES).into_iter().filter(|(name, _)| !HOST_ONLY.contains(&name.as_str())) {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let hex: String = Sha256::digest(code_only(&text).as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(out, "{hex} {name}");
    }
    out
}

/// Why images built from the sources `built` lists are stale against `now`
/// (both `kernel_manifest`s), or `None`: a source whose code changed or that
/// is gone. Files that are new are left out (see the module doc).
fn changed_since(built: &str, now: &str) -> Option<String> {
    if built.trim().is_empty() {
        return Some("they record no sources (built by an older `cargo xtask build`)".into());
    }
    let now: std::collections::HashMap<&str, &str> = now.lines().filter_map(|l| l.split_once(' ')).map(|(h, n)| (n, h)).collect();
    let changed: Vec<String> = built
        .lines()
        .filter_map(|l| l.split_once(' '))
        // A file that became host-only since still changes no image.
        .filter(|(_, name)| !HOST_ONLY.contains(name))
        .filter_map(|(hash, name)| match now.get(name) {
            Some(h) if *h == hash => None,
            Some(_) => Some(format!("{name} changed")),
            None => Some(format!("{name} is gone")),
        })
        .collect();
    match changed.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        [first, rest @ ..] => Some(format!("{first} (and {} more)", rest.len())),
    }
}

fn write(path: &Path, text: &str) {
    // Rewriting identical contents would still bump the mtime and recompile dependents.
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
