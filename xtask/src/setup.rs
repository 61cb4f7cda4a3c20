//! `cargo xtask setup`: everything device builds need, installed once.
//!
//! Every other command calls this first, so it must cost next to nothing when
//! all is in place: it checks files on disk and only then asks rustup or pip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{run_step, secs, Repo, Result};

/// ptxas of CUDA 12.9: assembles sm_80, sm_90a and sm_100a without a GPU.
const PTXAS_WHEEL: &str = "nvidia-cuda-nvcc-cu12==12.9.86";
/// There is no `-cu12` nvdisasm wheel; the CUDA 13 one reads sm_80+ cubins from ptxas 12.9.
const NVDISASM_WHEEL: &str = "nvidia-cuda-nvdisasm==13.2.78";
const STAMP: &str = ".rustile-installed";

#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    /// `cargo xtask setup`: also retries the optional tools that failed before.
    Explicit,
    /// The first step of every other command.
    Implicit,
}

pub struct Tools {
    /// The directory holding llvm-link, opt and llc of the pinned nightly.
    pub llvm_bin: PathBuf,
    pub ptxas: PathBuf,
    pub nvdisasm: Option<PathBuf>,
}

pub fn setup(repo: &Repo, mode: Mode) -> Result<Tools> {
    let start = Instant::now();
    let mut did = Vec::new();

    let (sysroot, llvm_bin) = match rust_components(repo)? {
        Some(found) => found,
        None => {
            let mut cmd = Command::new("rustup");
            cmd.args(["component", "add", "rust-src", "llvm-tools", "--toolchain", &repo.toolchain]);
            run_step("installing rust-src and llvm-tools", cmd)?;
            did.push("rust-src, llvm-tools");
            rust_components(repo)?.ok_or_else(|| {
                format!("rust-src or llvm-tools still missing for toolchain {} after rustup", repo.toolchain)
            })?
        }
    };

    let tools_dir = repo.root.join(".tools");
    let cuda_dir = tools_dir.join("cuda");
    let ptxas = cuda_dir.join("nvidia/cuda_nvcc/bin/ptxas");
    if !(ptxas.is_file() && stamp_says(&cuda_dir, PTXAS_WHEEL)) {
        pip_install(&cuda_dir, PTXAS_WHEEL)?;
        if !ptxas.is_file() {
            return Err(format!("{PTXAS_WHEEL} installed, but {} is not there", ptxas.display()));
        }
        did.push("ptxas");
    }

    let nvdisasm_dir = tools_dir.join("nvdisasm");
    let tried_before = std::fs::read_to_string(nvdisasm_dir.join(STAMP)).is_ok();
    if find_file(&nvdisasm_dir, "nvdisasm").is_none() && (!tried_before || mode == Mode::Explicit) {
        // Optional: only `cargo xtask sass` uses it, so a failure is remembered, not fatal.
        match pip_install(&nvdisasm_dir, NVDISASM_WHEEL) {
            Ok(()) => did.push("nvdisasm"),
            Err(e) => {
                println!("    nvdisasm not installed (optional, for `cargo xtask sass`): {}", first_line(&e));
                let _ = std::fs::create_dir_all(&nvdisasm_dir);
                let _ = std::fs::write(nvdisasm_dir.join(STAMP), format!("unavailable: {NVDISASM_WHEEL}\n"));
            }
        }
    }
    let nvdisasm = find_file(&nvdisasm_dir, "nvdisasm");

    let tools = Tools { llvm_bin, ptxas, nvdisasm };
    if mode == Mode::Explicit || !did.is_empty() {
        let installed = if did.is_empty() { "nothing to install".to_string() } else { format!("installed {}", did.join(", ")) };
        println!("==> setup: {installed} ({})", secs(start));
        println!("    toolchain  {} ({})", repo.toolchain, sysroot.display());
        println!("    llvm tools {}", tools.llvm_bin.display());
        println!("    ptxas      {} ({})", tools.ptxas.display(), ptxas_version(&tools.ptxas));
        match &tools.nvdisasm {
            Some(path) => println!("    nvdisasm   {}", path.display()),
            None => println!("    nvdisasm   not available (`cargo xtask setup` retries {NVDISASM_WHEEL})"),
        }
    }
    Ok(tools)
}

/// The sysroot and its LLVM tools directory, or None when rust-src or llvm-tools is missing.
fn rust_components(repo: &Repo) -> Result<Option<(PathBuf, PathBuf)>> {
    let out = repo
        .rustc()
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("could not run rustc (is rustup installed?): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`rustc --print sysroot` for toolchain {} failed; install it with `rustup toolchain install {}`:\n{}",
            repo.toolchain,
            repo.toolchain,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let has_src = sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml").is_file();
    let llvm_bin = std::fs::read_dir(sysroot.join("lib/rustlib"))
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .find(|bin| ["llvm-link", "opt", "llc"].iter().all(|t| bin.join(t).is_file()));
    Ok(match (has_src, llvm_bin) {
        (true, Some(bin)) => Some((sysroot, bin)),
        _ => None,
    })
}

fn stamp_says(dir: &Path, wheel: &str) -> bool {
    std::fs::read_to_string(dir.join(STAMP)).is_ok_and(|s| s.trim() == wheel)
}

fn pip_install(dir: &Path, wheel: &str) -> Result<()> {
    let mut cmd = Command::new("python3");
    // --upgrade: pip --target will not replace the `nvidia/` folder of an earlier, partial install otherwise.
    cmd.env("PIP_ROOT_USER_ACTION", "ignore");
    cmd.args(["-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target"]).arg(dir).arg(wheel);
    run_step(&format!("installing {wheel} into {}", dir.display()), cmd)?;
    std::fs::write(dir.join(STAMP), format!("{wheel}\n")).map_err(|e| format!("writing stamp in {}: {e}", dir.display()))
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

pub fn ptxas_version(ptxas: &Path) -> String {
    Command::new(ptxas)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines().find(|l| l.contains("release")).map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "version unknown".into())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
