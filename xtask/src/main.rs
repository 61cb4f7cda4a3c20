//! `cargo xtask`: the project's build, test and bench entry points.
//!
//! Device code goes rustc (nvptx64) → our `rustile-ptx-linker` → PTX →
//! `ptxas` → cubin, once per GPU arch; see `docs/ARCHITECTURE.md`.

mod bounds;
mod device;
mod ptxas;
mod python;
mod setup;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use crate::device::{Arch, BuildSpec};

#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Installs what device builds need: rust-src and llvm-tools for the
    /// pinned nightly, and ptxas (plus nvdisasm where pip has it) in .tools/.
    Setup,
    /// Builds every kernel to PTX and cubins in target/cubins/<arch>/, with a
    /// ptxas resource report; fails when a kernel spills or uses a stack frame.
    Build(BuildArgs),
    /// The one test command: setup, `build --arch all`, `cargo test --workspace [ARGS]`, then
    /// (no package named) the Python package built and its tests run.
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Builds the cubins for the local GPU (sm90a when unsure), then runs the bench binary.
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Tunes each op's config per shape bucket on the local GPU and writes
    /// tuned/<arch>.toml: builds the cubins and `rustile-tune`, then runs it.
    Autotune {
        /// The table: sm90 (Hopper) or sm80 (Ampere, Ada).
        #[arg(long)]
        arch: String,
        /// Only this op (gemm_nt, gemm_wgmma, gemm_tma, dual_gemm, dual_gemm_tma, gemm_fp8, attention, dual_gemm_nvfp4, gemm_nvfp4).
        #[arg(long)]
        op: Option<String>,
        /// Headline shapes only, fewer repetitions.
        #[arg(long)]
        quick: bool,
    },
    /// Disassembles a built cubin to SASS in target/cubins/<arch>/sass.txt.
    Sass {
        #[arg(long, default_value = "sm90a", value_parser = Arch::parse)]
        arch: Arch,
        /// Only this kernel (its exported name).
        #[arg(long)]
        kernel: Option<String>,
        #[arg(long, hide = true)]
        manifest_path: Option<PathBuf>,
    },
}

#[derive(Args)]
struct BuildArgs {
    /// sm80, sm90a, sm100a, or `all` (sm80 and sm90a; sm100a is compile-only and only built when named).
    /// Comma-separated or repeated.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    arch: Vec<String>,
    /// Build another nvptx64 cdylib instead of the workspace's rustile-ops-ptx
    /// (for testing this pipeline); outputs go to <its dir>/target/.
    #[arg(long, hide = true)]
    manifest_path: Option<PathBuf>,
    #[arg(long, short = 'p', hide = true)]
    package: Option<String>,
    /// Kernel-name globs that may spill (default: ops/allow-spills.txt).
    #[arg(long, hide = true)]
    allow_spills: Option<PathBuf>,
}

fn main() -> ExitCode {
    match run(parse_cli(std::env::args().collect())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `test` and `bench` hand their arguments on untouched: clap would eat the
/// `--` of `cargo xtask test -- --nocapture`, which cargo test needs.
fn parse_cli(argv: Vec<String>) -> Cmd {
    let rest = argv.get(2..).unwrap_or_default().to_vec();
    let asks_help = matches!(rest.as_slice(), [h] if h == "-h" || h == "--help");
    match argv.get(1).map(String::as_str) {
        Some("test") if !asks_help => Cmd::Test { args: rest },
        Some("bench") if !asks_help => Cmd::Bench { args: rest },
        _ => Cli::parse_from(argv).command,
    }
}

type Result<T, E = String> = std::result::Result<T, E>;

fn run(command: Cmd) -> Result<()> {
    let repo = Repo::locate()?;
    match command {
        Cmd::Setup => {
            setup::setup(&repo, setup::Mode::Explicit)?;
        }
        Cmd::Build(args) => {
            let tools = setup::setup(&repo, setup::Mode::Implicit)?;
            let arches = Arch::parse_list(&args.arch)?;
            let spec = BuildSpec::new(&repo, args.manifest_path, args.package, args.allow_spills)?;
            device::build(&repo, &tools, &spec, &arches)?;
        }
        Cmd::Test { args } => {
            let tools = setup::setup(&repo, setup::Mode::Implicit)?;
            let spec = BuildSpec::new(&repo, None, None, None)?;
            // A failed device build should not hide what the host tests say, so both run.
            let device = device::build(&repo, &tools, &spec, &Arch::DEFAULT);
            // The cdylib of kernel entries is no_std with its own panic handler; it only builds for nvptx64.
            let names_a_package = args.iter().any(|a| a == "-p" || a.starts_with("--package"));
            let mut cmd = repo.cargo();
            cmd.arg("test");
            if !names_a_package {
                cmd.args(["--workspace", "--exclude", "rustile-ops-ptx"]);
            }
            // CI and newcomers should see every failing test binary, not just the first.
            if !args.iter().any(|a| a == "--no-fail-fast") {
                cmd.arg("--no-fail-fast");
            }
            cmd.args(&args);
            let host = run_step("cargo test", cmd);
            // The package links the same kernels; it is built and tested when no package is named.
            let python = if names_a_package { Ok(()) } else { python::test(&repo) };
            let failures: Vec<String> = [device, host, python].into_iter().filter_map(Result::err).collect();
            if !failures.is_empty() {
                return Err(failures.join("\n"));
            }
        }
        Cmd::Bench { args } => {
            let tools = setup::setup(&repo, setup::Mode::Implicit)?;
            let arch = Arch::of_local_gpu().unwrap_or(Arch::Sm90a);
            let spec = BuildSpec::new(&repo, None, None, None)?;
            device::build(&repo, &tools, &spec, &[arch])?;
            let mut cmd = repo.cargo();
            cmd.args(["run", "--release", "-p", "rustile-bench", "--"]).args(&args);
            run_step("bench", cmd)?;
        }
        Cmd::Autotune { arch, op, quick } => {
            let (table, device_arch) = match arch.replace('_', "").as_str() {
                "sm90" | "sm90a" => ("sm90", Arch::Sm90a),
                "sm80" => ("sm80", Arch::Sm80),
                other => return Err(format!("autotune takes --arch sm90 or sm80, not {other}")),
            };
            let tools = setup::setup(&repo, setup::Mode::Implicit)?;
            let spec = BuildSpec::new(&repo, None, None, None)?;
            device::build(&repo, &tools, &spec, &[device_arch])?;
            let mut build = repo.cargo();
            build.args(["build", "--release", "-p", "rustile-bench", "--bin", "rustile-tune"]);
            run_step("build the tuner", build)?;
            let mut tune = Command::new(repo.root.join("target/release/rustile-tune"));
            tune.current_dir(&repo.root).args(["--arch", table]);
            if let Some(op) = op {
                tune.args(["--op", &op]);
            }
            if quick {
                tune.arg("--quick");
            }
            run_step("tune", tune).map_err(|e| {
                format!("{e}\n(on a GPU machine without Rust, carry target/release/rustile-tune there and run it with the same flags)")
            })?;
        }
        Cmd::Sass { arch, kernel, manifest_path } => {
            let tools = setup::setup(&repo, setup::Mode::Implicit)?;
            let spec = BuildSpec::new(&repo, manifest_path, None, None)?;
            ptxas::sass(&tools, &spec, arch, kernel.as_deref())?;
        }
    }
    Ok(())
}

/// The workspace this xtask belongs to, and the toolchain it pins.
pub struct Repo {
    pub root: PathBuf,
    pub toolchain: String,
}

impl Repo {
    fn locate() -> Result<Repo> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("xtask has no parent directory")?.to_path_buf();
        let file = root.join("rust-toolchain.toml");
        let text = std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        // One key of a flat file: not worth a TOML parser in the build tool.
        let toolchain = text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("channel"))
            .filter_map(|rest| rest.trim_start().strip_prefix('='))
            .map(|value| value.trim().trim_matches('"').to_string())
            .next()
            .ok_or_else(|| format!("no `channel = \"…\"` in {}", file.display()))?;
        Ok(Repo { root, toolchain })
    }

    /// `cargo` for the pinned toolchain. Setting RUSTUP_TOOLCHAIN also keeps
    /// builds of crates outside the repo (the pipeline's test probe) on it.
    pub fn cargo(&self) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&self.root).env("RUSTUP_TOOLCHAIN", &self.toolchain);
        cmd
    }

    pub fn rustc(&self) -> Command {
        let mut cmd = Command::new("rustc");
        cmd.env("RUSTUP_TOOLCHAIN", &self.toolchain);
        cmd
    }
}

/// Runs a command with inherited output, announcing it and its duration.
pub fn run_step(title: &str, mut cmd: Command) -> Result<()> {
    println!("==> {title}: {}", show(&cmd));
    let start = Instant::now();
    let status = cmd.status().map_err(|e| format!("{title}: could not start {}: {e}", show(&cmd)))?;
    println!("    {title}: {} in {}", if status.success() { "done" } else { "FAILED" }, secs(start));
    if status.success() {
        Ok(())
    } else {
        Err(format!("{title} failed ({status})"))
    }
}

pub fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

pub fn secs(start: Instant) -> String {
    format!("{:.1} s", start.elapsed().as_secs_f64())
}

/// ops/build.rs watches target/cubins/: files rewritten with the same bytes
/// would rerun it and recompile everything above rustile-ops for nothing.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passed_through(argv: &[&str]) -> Vec<String> {
        match parse_cli(argv.iter().map(|a| a.to_string()).collect()) {
            Cmd::Test { args } | Cmd::Bench { args } => args,
            _ => panic!("not test or bench"),
        }
    }

    #[test]
    fn test_and_bench_pass_their_arguments_on() {
        assert_eq!(passed_through(&["xtask", "test", "-p", "rustile-ops", "--", "--nocapture"]), ["-p", "rustile-ops", "--", "--nocapture"]);
        assert_eq!(passed_through(&["xtask", "test", "--", "--nocapture"]), ["--", "--nocapture"]);
        assert_eq!(passed_through(&["xtask", "bench", "--op", "gemm"]), ["--op", "gemm"]);
    }

    #[test]
    fn arch_lists() {
        let all = Arch::parse_list(&["all".into(), "sm_100a".into(), "sm90a".into()]).unwrap();
        assert_eq!(all, [Arch::Sm80, Arch::Sm90a, Arch::Sm100a]);
        assert!(Arch::parse("sm75").is_err());
    }
}
