//! `cargo xtask build`: kernels → PTX → cubins, one target directory per arch.
//!
//! `-C target-cpu` must be the same for every crate of one build (core
//! included), so each arch is its own cargo build into `target/nvptx/<arch>`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::ptxas::{self, AllowList};
use crate::setup::Tools;
use crate::{secs, show, write_if_changed, Repo, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arch {
    Sm80,
    Sm90a,
    /// Compile-only: there is no Blackwell machine to run it on yet.
    Sm100a,
}

impl Arch {
    /// What `--arch all` means.
    pub const DEFAULT: [Arch; 2] = [Arch::Sm80, Arch::Sm90a];

    /// The name ptxas, the CUDA driver and `rustile_host::Cubins` use.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm90a => "sm_90a",
            Arch::Sm100a => "sm_100a",
        }
    }

    pub fn parse(s: &str) -> Result<Arch> {
        match s.replace('_', "").to_ascii_lowercase().as_str() {
            "sm80" => Ok(Arch::Sm80),
            "sm90a" => Ok(Arch::Sm90a),
            "sm100a" => Ok(Arch::Sm100a),
            _ => Err(format!("unknown arch {s:?}; expected sm80, sm90a, sm100a or all")),
        }
    }

    pub fn parse_list(names: &[String]) -> Result<Vec<Arch>> {
        let mut arches = Vec::new();
        for name in names {
            let more = if name == "all" { Arch::DEFAULT.to_vec() } else { vec![Arch::parse(name)?] };
            for arch in more {
                if !arches.contains(&arch) {
                    arches.push(arch);
                }
            }
        }
        Ok(arches)
    }

    /// The arch of the first GPU nvidia-smi reports, when it is one we build.
    pub fn of_local_gpu() -> Option<Arch> {
        let out = Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output().ok()?;
        let cap = String::from_utf8_lossy(&out.stdout).lines().next()?.trim().to_string();
        match cap.split('.').next()? {
            "8" => Some(Arch::Sm80),
            "9" => Some(Arch::Sm90a),
            "10" => Some(Arch::Sm100a),
            _ => None,
        }
    }
}

/// Which crate to build for the device and where its outputs go.
pub struct BuildSpec {
    manifest: PathBuf,
    package: Option<String>,
    /// Holds `nvptx/<arch>/` (cargo's target dirs) and `cubins/<arch>/` (the results).
    out_root: PathBuf,
    /// File stem of the cubin and PTX in `cubins/<arch>/`; None: that of the PTX rustc wrote.
    stem: Option<String>,
    allow_spills: PathBuf,
}

impl BuildSpec {
    pub fn new(repo: &Repo, manifest: Option<PathBuf>, package: Option<String>, allow_spills: Option<PathBuf>) -> Result<BuildSpec> {
        let spec = match manifest {
            None => BuildSpec {
                manifest: repo.root.join("Cargo.toml"),
                package: Some(package.unwrap_or_else(|| "rustile-ops-ptx".into())),
                out_root: repo.root.join("target"),
                // ops/build.rs embeds this name, whatever the cdylib is called.
                stem: Some("rustile_ops".into()),
                allow_spills: repo.root.join("ops/allow-spills.txt"),
            },
            Some(manifest) => {
                let manifest = std::path::absolute(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
                let dir = manifest.parent().ok_or("manifest path has no directory")?.to_path_buf();
                BuildSpec {
                    manifest,
                    package,
                    out_root: dir.join("target"),
                    stem: None,
                    allow_spills: dir.join("allow-spills.txt"),
                }
            }
        };
        Ok(BuildSpec { allow_spills: allow_spills.unwrap_or(spec.allow_spills), ..spec })
    }

    pub fn cubin_dir(&self, arch: Arch) -> PathBuf {
        self.out_root.join("cubins").join(arch.name())
    }

    /// The built cubins of `arch` (one per kernel family), in name order.
    pub fn cubin_paths(&self, arch: Arch) -> Vec<PathBuf> {
        let prefix = self.stem.as_ref().map(|s| format!("{s}."));
        let mut found: Vec<PathBuf> = std::fs::read_dir(self.cubin_dir(arch))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "cubin"))
            .filter(|p| prefix.as_ref().is_none_or(|pre| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(pre.as_str()))))
            .collect();
        found.sort();
        found
    }
}

/// Builds every arch at once: rustc compiles the kernel crate on one core
/// (one codegen unit, for our linker), so two arches' cargo builds fill two
/// cores where one in turn left the other idle; their ptxas runs then share
/// one pool of as many slots as there are cores.
pub fn build(repo: &Repo, tools: &Tools, spec: &BuildSpec, arches: &[Arch]) -> Result<()> {
    let start = Instant::now();
    let linker = build_linker(repo)?;
    let allow = AllowList::read(&spec.allow_spills)?;
    let slots = ptxas::Slots::new(std::thread::available_parallelism().map_or(2, |n| n.get()));
    let results: Vec<(Arch, Result<()>)> = std::thread::scope(|s| {
        let (linker, allow, slots) = (&linker, &allow, &slots);
        let running: Vec<_> = arches.iter().map(|&arch| (arch, s.spawn(move || build_arch(repo, tools, spec, linker, allow, arch, slots)))).collect();
        running.into_iter().map(|(arch, h)| (arch, h.join().unwrap_or_else(|_| Err("the build thread panicked".into())))).collect()
    });
    let mut failures = Vec::new();
    for (arch, result) in results {
        if let Err(e) = result {
            eprintln!("error: {e}");
            failures.push(arch.name());
        }
    }
    if failures.is_empty() {
        println!("==> device build done in {}", secs(start));
        Ok(())
    } else {
        Err(format!("device build failed for {}", failures.join(", ")))
    }
}

/// Builds `rustile-ptx-linker` for the host and returns the path of the executable.
fn build_linker(repo: &Repo) -> Result<PathBuf> {
    let start = Instant::now();
    let mut cmd = repo.cargo();
    cmd.args(["build", "--quiet", "-p", "xtask", "--bin", "rustile-ptx-linker", "--message-format=json-render-diagnostics"]);
    let artifacts = cargo_artifacts(cmd)?;
    let linker = artifacts
        .iter()
        .filter_map(|a| a.get("executable")?.as_str())
        .map(PathBuf::from)
        .find(|p| p.file_stem().is_some_and(|s| s == "rustile-ptx-linker"))
        .ok_or("cargo built xtask but reported no rustile-ptx-linker executable")?;
    println!("==> PTX linker ready: {} ({})", linker.display(), secs(start));
    Ok(linker)
}

fn build_arch(repo: &Repo, tools: &Tools, spec: &BuildSpec, linker: &Path, allow: &AllowList, arch: Arch, slots: &ptxas::Slots) -> Result<()> {
    let start = Instant::now();
    let cpu = arch.name();
    println!("==> {cpu}: rustc → PTX (cargo; minutes when the kernels changed) ...");

    let target_dir = spec.out_root.join("nvptx").join(arch.name());
    let mut rustflags = vec![
        format!("-Ctarget-cpu={cpu}"),
        format!("-Clinker={}", linker.display()),
        "-Cllvm-args=-unroll-threshold=20000".to_string(),
    ];
    // For experiments such as a newer PTX ISA (`-Ctarget-feature=+ptx87`); changing them rebuilds core.
    if let Ok(extra) = std::env::var("RUSTILE_DEVICE_RUSTFLAGS") {
        rustflags.extend(extra.split_whitespace().map(str::to_string));
    }
    let mut cmd = repo.cargo();
    cmd.current_dir(spec.manifest.parent().unwrap_or(&repo.root))
        // Quiet: the arches build at once, and their progress lines would interleave (warnings still show).
        .args(["build", "--quiet", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core", "--profile", "device"])
        .arg("--manifest-path")
        .arg(&spec.manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .arg("--message-format=json-render-diagnostics")
        // The encoded form wins over RUSTFLAGS and over config files, and with
        // --target it reaches only device crates, not build scripts or proc macros.
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        .env("RUSTILE_LLVM_TOOLS", &tools.llvm_bin);
    if let Some(package) = &spec.package {
        cmd.args(["-p", package]);
    }
    let artifacts = cargo_artifacts(cmd).map_err(|e| format!("{cpu}: {e}"))?;
    let ptx_files: Vec<PathBuf> = artifacts
        .iter()
        .filter_map(|a| a.get("filenames")?.as_array())
        .flatten()
        .filter_map(|f| f.as_str())
        .filter(|f| f.ends_with(".ptx"))
        .map(PathBuf::from)
        .collect();
    let ptx = match ptx_files.as_slice() {
        [one] => one.clone(),
        [] => return Err(format!("{cpu}: cargo produced no .ptx (is the crate a cdylib?)")),
        many => return Err(format!("{cpu}: cargo produced several .ptx files, pick one with -p: {many:?}")),
    };
    let cargo_time = start.elapsed();
    println!("==> {cpu}: PTX ready after {:.1} s; ptxas, one part per kernel family ...", cargo_time.as_secs_f64());

    let ptxas_start = Instant::now();
    let stem = spec.stem.clone().unwrap_or_else(|| ptx.file_stem().unwrap_or_default().to_string_lossy().into_owned());
    let text = std::fs::read_to_string(&ptx).map_err(|e| format!("reading {}: {e}", ptx.display()))?;
    let bounded_ptx = crate::bounds::annotate(&text);
    let bounded = target_dir.join(format!("{stem}.bounded.ptx"));
    write_if_changed(&bounded, bounded_ptx.as_bytes())?;
    let ptxas::Assembled { cubins: staged, mut report, unchanged, timings } =
        ptxas::assemble_shards(&tools.ptxas, &bounded_ptx, &target_dir, &stem, arch, slots)?;
    report.mark_allowed(allow);
    if !timings.is_empty() {
        let total: f64 = timings.iter().map(|t| t.1).sum();
        let slowest: Vec<String> = timings.iter().take(6).map(|(f, t)| format!("{f} {t:.0} s")).collect();
        println!("    {cpu}: ptxas ran {} parts, {total:.0} s in all; slowest: {}", timings.len(), slowest.join(", "));
    }

    let out_dir = spec.cubin_dir(arch);
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    report.write(&out_dir)?;
    let final_ptx = out_dir.join(format!("{stem}.ptx"));
    // Cubins of an earlier build (another family set, or the single-module
    // layout) would be embedded as if they were this one's.
    for old in spec.cubin_paths(arch) {
        let _ = std::fs::remove_file(old);
    }

    let violations = report.violations();
    if !violations.is_empty() {
        let _ = std::fs::remove_file(&final_ptx);
        return Err(format!(
            "{cpu}: {}\n  (report: {}/resources.txt; a kernel allowed to spill is listed by name or glob in {})",
            violations.join("\n  "),
            out_dir.display(),
            spec.allow_spills.display()
        ));
    }
    let mut bytes = 0;
    for cubin in &staged {
        let to = out_dir.join(cubin.file_name().expect("a file"));
        copy(cubin, &to)?;
        bytes += std::fs::metadata(&to).map(|m| m.len()).unwrap_or(0);
    }
    copy(&bounded, &final_ptx)?;
    // What the images were compiled from, for the host build's staleness check
    // (written by the kernel crate's build script, `ops/build.rs`).
    let manifest = artifacts
        .iter()
        .filter(|a| a.get("reason").and_then(|r| r.as_str()) == Some("build-script-executed"))
        .filter_map(|a| a.get("out_dir")?.as_str())
        .map(|d| Path::new(d).join("sources.txt"))
        .find(|p| p.is_file());
    match manifest {
        Some(m) => copy(&m, &out_dir.join("sources.txt"))?,
        None => {
            let _ = std::fs::remove_file(out_dir.join("sources.txt"));
        }
    }

    for k in report.kernels.iter().filter(|k| k.stack_frame_bytes + k.spill_store_bytes + k.spill_load_bytes > 0) {
        println!(
            "    note: `{}` uses local memory ({} B stack, {} B spill stores, {} B spill loads){}",
            k.name,
            k.stack_frame_bytes,
            k.spill_store_bytes,
            k.spill_load_bytes,
            if k.spill_allowed { ", allowed by the allow list" } else { "" }
        );
    }
    for note in &report.notes {
        println!("    ptxas: {note}");
    }
    println!(
        "    {cpu}: {} kernels, {}, {} cubins in {} ({bytes} bytes); {} (cargo {:.1} s, ptxas {}, {unchanged} of them unchanged)",
        report.entries().count(),
        report.max_registers_line(),
        staged.len(),
        out_dir.display(),
        secs(start),
        cargo_time.as_secs_f64(),
        secs(ptxas_start),
    );
    Ok(())
}

/// Runs a cargo command with `--message-format=json-render-diagnostics`:
/// diagnostics and progress go to the terminal, artifacts (and build
/// scripts' output folders) come back parsed.
fn cargo_artifacts(mut cmd: Command) -> Result<Vec<serde_json::Value>> {
    let shown = show(&cmd);
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{shown}` failed ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| matches!(msg.get("reason").and_then(|r| r.as_str()), Some("compiler-artifact" | "build-script-executed")))
        .collect())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).map_err(|e| format!("reading {}: {e}", from.display()))?;
    write_if_changed(to, &bytes)
}
