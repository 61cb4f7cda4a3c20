//! `rustile-ptx-linker`: the linker rustc calls for `nvptx64-nvidia-cuda`.
//!
//! The prebuilt `llvm-bitcode-linker` component does not download for our
//! nightly, so this stands in for it. rustc's default linker flavor for the
//! target (`llbc`) calls us with
//!
//! ```text
//! --export-symbol NAME … <bitcode .o> … <.rlib> … -L DIR --target T
//! --target-cpu sm_XX [--target-feature=…] -o OUT.ptx -O3 [--debug]
//! ```
//!
//! and we run `llvm-link` → `opt` (internalize everything but the exported
//! kernels, then O3) → `llc`, all from the nightly's `llvm-tools`.
//!
//! Extra flags for the LLVM tools can be given through rustc as
//! `-C link-arg=--opt-arg=…` or `-C link-arg=--llc-arg=…`. The intermediate
//! bitcode stays in `<OUT>.linker/` next to the output, for inspection.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// `a·b + c` becomes one fused multiply-add, as nvcc (`--fmad=true`) and
/// Triton do by default: rustc emits no contraction flags, and without this
/// a LayerNorm ran a separate FMUL and FADD for every product (measured:
/// its SM issue rate, not DRAM, was the limit). One rounding instead of two.
const FP_CONTRACT: &str = "--fp-contract=fast";

/// Unrolling must be aggressive enough that per-thread fragment loops vanish
/// into registers; the default threshold left accumulators in local memory.
const UNROLL_THRESHOLD: &str = "-unroll-threshold=20000";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("rustile-ptx-linker: error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Default, Debug)]
struct Invocation {
    exports: Vec<String>,
    objects: Vec<PathBuf>,
    archives: Vec<PathBuf>,
    library_dirs: Vec<PathBuf>,
    target_cpu: Option<String>,
    target_features: Vec<String>,
    output: Option<PathBuf>,
    opt_args: Vec<String>,
    llc_args: Vec<String>,
}

fn run() -> Result<(), String> {
    let args = expand_response_files(std::env::args_os().skip(1).collect())?;
    let inv = parse_args(args)?;
    let output = inv.output.clone().ok_or("no output file given (-o)")?;
    let cpu = inv.target_cpu.clone().ok_or("no --target-cpu given; build with -C target-cpu=sm_XX")?;
    let tools = LlvmTools::locate(&inv.library_dirs)?;

    let work = work_dir_for(&output)?;
    let linked = link(&inv, &tools, &work)?;

    let optimized = work.join("optimized.bc");
    let mut opt = Command::new(&tools.opt);
    opt.arg(&linked)
        .arg("-o")
        .arg(&optimized)
        .arg(format!("-mcpu={cpu}"))
        .arg("-passes=internalize,default<O3>")
        .arg(format!("--internalize-public-api-list={}", inv.exports.join(",")))
        .arg(UNROLL_THRESHOLD)
        .args(&inv.opt_args);
    if !inv.target_features.is_empty() {
        opt.arg(format!("-mattr={}", inv.target_features.join(",")));
    }
    run_tool(opt)?;

    let mut llc = Command::new(&tools.llc);
    llc.arg(&optimized)
        .arg("-o")
        .arg(&output)
        .arg(format!("-mcpu={cpu}"))
        .arg("-O3")
        .arg(FP_CONTRACT)
        .args(&inv.llc_args);
    if !inv.target_features.is_empty() {
        llc.arg(format!("-mattr={}", inv.target_features.join(",")));
    }
    run_tool(llc)?;

    if inv.exports.is_empty() {
        eprintln!("rustile-ptx-linker: warning: no exported symbols; the PTX module has no kernels");
    }
    Ok(())
}

/// rustc falls back to `@file` when the command line gets long. Its format for
/// non-MSVC linkers: one argument per line, with `\` escaping ` ` and `\`.
fn expand_response_files(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    for arg in args {
        let Some(path) = arg.to_str().and_then(|s| s.strip_prefix('@')) else {
            out.push(arg);
            continue;
        };
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading response file {path}: {e}"))?;
        for line in text.lines().filter(|l| !l.is_empty()) {
            let mut unescaped = String::with_capacity(line.len());
            let mut chars = line.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => unescaped.extend(chars.next()),
                    c => unescaped.push(c),
                }
            }
            out.push(unescaped.into());
        }
    }
    Ok(out)
}

fn value_of(flag: &str, args: &mut impl Iterator<Item = Result<String, String>>) -> Result<String, String> {
    args.next().unwrap_or_else(|| Err(format!("{flag} needs a value")))
}

fn parse_args(args: Vec<OsString>) -> Result<Invocation, String> {
    let mut inv = Invocation::default();
    let mut args = args.into_iter().map(|a| a.into_string().map_err(|a| format!("non-UTF-8 argument {a:?}")));
    while let Some(arg) = args.next() {
        let arg = arg?;
        match arg.as_str() {
            "--export-symbol" => inv.exports.push(value_of(&arg, &mut args)?),
            "-o" => inv.output = Some(value_of(&arg, &mut args)?.into()),
            "-L" => inv.library_dirs.push(value_of(&arg, &mut args)?.into()),
            "--target-cpu" => inv.target_cpu = Some(value_of(&arg, &mut args)?),
            "--target-feature" => inv.target_features.push(value_of(&arg, &mut args)?),
            "--target" => {
                let target = value_of(&arg, &mut args)?;
                if !target.starts_with("nvptx64") {
                    return Err(format!("this linker only handles nvptx64 targets, got --target {target}"));
                }
            }
            // We always optimize at O3 and never emit debug info: line info in
            // PTX changes nothing we need, and `-g` PTX is slower to assemble.
            "-O0" | "-O1" | "-O2" | "-O3" | "-Os" | "-Oz" | "--debug" => {}
            _ => {
                if let Some(features) = arg.strip_prefix("--target-feature=") {
                    inv.target_features.push(features.to_string());
                } else if let Some(dir) = arg.strip_prefix("-L") {
                    inv.library_dirs.push(dir.into());
                } else if let Some(extra) = arg.strip_prefix("--opt-arg=") {
                    inv.opt_args.push(extra.to_string());
                } else if let Some(extra) = arg.strip_prefix("--llc-arg=") {
                    inv.llc_args.push(extra.to_string());
                } else if arg.starts_with('-') {
                    // Silently dropping a flag could change the code we emit without anyone noticing.
                    return Err(format!("unknown argument {arg:?}; see xtask/src/linker.rs for what is understood"));
                } else if arg.ends_with(".rlib") || arg.ends_with(".a") {
                    inv.archives.push(arg.into());
                } else {
                    inv.objects.push(arg.into());
                }
            }
        }
    }
    // rustc joins features with commas itself, but may also pass the flag more than once.
    inv.target_features = inv
        .target_features
        .iter()
        .flat_map(|f| f.split(','))
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect();
    Ok(inv)
}

struct LlvmTools {
    link: PathBuf,
    opt: PathBuf,
    llc: PathBuf,
}

impl LlvmTools {
    /// `RUSTILE_LLVM_TOOLS` (a directory) wins; then the sysroot of the rustc
    /// that called us, which it reveals through its `-L <sysroot>/lib/rustlib/…`
    /// argument; then whatever `rustc --print sysroot` says.
    fn locate(library_dirs: &[PathBuf]) -> Result<LlvmTools, String> {
        let dir = match std::env::var_os("RUSTILE_LLVM_TOOLS") {
            Some(dir) => PathBuf::from(dir),
            None => {
                let sysroot = library_dirs
                    .iter()
                    .find_map(|dir| sysroot_of(dir))
                    .map(Ok)
                    .unwrap_or_else(rustc_sysroot)?;
                tools_dir_in(&sysroot).ok_or_else(|| {
                    format!(
                        "no LLVM tools (llc) under {}/lib/rustlib/*/bin; run `cargo xtask setup` \
                         or `rustup component add llvm-tools` for this toolchain",
                        sysroot.display()
                    )
                })?
            }
        };
        let tool = |name: &str| -> Result<PathBuf, String> {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "{} not found; run `cargo xtask setup` or `rustup component add llvm-tools` for this toolchain",
                    path.display()
                ))
            }
        };
        Ok(LlvmTools { link: tool("llvm-link")?, opt: tool("opt")?, llc: tool("llc")? })
    }
}

fn sysroot_of(library_dir: &Path) -> Option<PathBuf> {
    library_dir
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "rustlib") && a.parent().is_some_and(|p| p.ends_with("lib")))
        .and_then(|rustlib| rustlib.parent()?.parent().map(Path::to_path_buf))
}

fn rustc_sysroot() -> Result<PathBuf, String> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("running `rustc --print sysroot`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`rustc --print sysroot` failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn tools_dir_in(sysroot: &Path) -> Option<PathBuf> {
    let rustlib = sysroot.join("lib/rustlib");
    std::fs::read_dir(rustlib)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .find(|bin| bin.join("llc").is_file())
}

fn work_dir_for(output: &Path) -> Result<PathBuf, String> {
    let mut name = output.file_name().ok_or("output path has no file name")?.to_os_string();
    name.push(".linker");
    let dir = output.with_file_name(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Links every object and every bitcode member of the archives into one module.
///
/// `compiler_builtins` is never part of rustc's LTO, so it arrives as an rlib
/// even when the kernel crate and `core` come as one object. It defines many
/// symbols nobody calls, so it is linked with `--only-needed`; every other
/// archive is linked whole, since kernels exported from an rlib dependency are
/// referenced by nothing and `--only-needed` would drop them.
fn link(inv: &Invocation, tools: &LlvmTools, work: &Path) -> Result<PathBuf, String> {
    let mut whole: Vec<PathBuf> = inv.objects.clone();
    let mut only_needed: Vec<PathBuf> = Vec::new();
    for (index, archive) in inv.archives.iter().enumerate() {
        let members = extract_bitcode(archive, &work.join(format!("archive{index}")))?;
        let is_builtins = archive
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libcompiler_builtins"));
        if is_builtins {
            only_needed.extend(members);
        } else {
            whole.extend(members);
        }
    }
    if whole.is_empty() {
        return Err("no bitcode objects to link".into());
    }

    let linked = work.join("linked.bc");
    let mut cmd = Command::new(&tools.link);
    cmd.args(&whole).arg("-o").arg(&linked);
    run_tool(cmd)?;
    if only_needed.is_empty() {
        return Ok(linked);
    }

    // Archive members can reference each other in any order, so they are
    // first merged into one module; `--only-needed` then pulls what the
    // kernels use from it in one step.
    let support = work.join("support.bc");
    let mut cmd = Command::new(&tools.link);
    cmd.args(&only_needed).arg("-o").arg(&support);
    run_tool(cmd)?;

    let with_support = work.join("linked-with-support.bc");
    let mut cmd = Command::new(&tools.link);
    cmd.arg(&linked).arg("--only-needed").arg(&support).arg("-o").arg(&with_support);
    run_tool(cmd)?;
    Ok(with_support)
}

fn run_tool(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| format!("could not start {}: {e}", cmd.get_program().to_string_lossy()))?;
    if out.status.success() {
        // Warnings from the tools are rare and worth seeing; rustc shows them with -Wlinker-messages.
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        return Ok(());
    }
    let mut message = format!("{} failed ({})\n  command: {shown}\n", tool_name(&cmd), out.status);
    for line in String::from_utf8_lossy(&out.stderr).lines().chain(String::from_utf8_lossy(&out.stdout).lines()) {
        let _ = writeln!(message, "  | {line}");
    }
    Err(message)
}

fn tool_name(cmd: &Command) -> String {
    Path::new(cmd.get_program()).file_name().unwrap_or_default().to_string_lossy().into_owned()
}

/// Writes the LLVM bitcode members of an `ar` archive into `dir` and returns
/// their paths. Other members (`lib.rmeta`) are skipped.
fn extract_bitcode(archive: &Path, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let bytes = std::fs::read(archive).map_err(|e| format!("reading {}: {e}", archive.display()))?;
    let members = ar_members(&bytes).map_err(|e| format!("{}: {e}", archive.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for (index, (name, data)) in members.into_iter().enumerate() {
        if !is_bitcode(data) {
            if name.ends_with(".o") {
                return Err(format!(
                    "member {name} of {} is not LLVM bitcode; nvptx64 crates must be compiled by rustc to bitcode",
                    archive.display()
                ));
            }
            continue;
        }
        // Member names may repeat within one archive, so the index keeps them apart.
        let path = dir.join(format!("{index}-{}", sanitize(&name)));
        std::fs::write(&path, data).map_err(|e| format!("writing {}: {e}", path.display()))?;
        paths.push(path);
    }
    Ok(paths)
}

fn is_bitcode(data: &[u8]) -> bool {
    data.starts_with(b"BC\xC0\xDE") || data.starts_with(&[0xDE, 0xC0, 0x17, 0x0B])
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// The members of a GNU or BSD `ar` archive, as (name, data).
fn ar_members(bytes: &[u8]) -> Result<Vec<(String, &[u8])>, String> {
    const HEADER: usize = 60;
    let body = bytes.strip_prefix(b"!<arch>\n".as_slice()).ok_or("not an ar archive (thin archives are not supported)")?;
    let mut members = Vec::new();
    let mut long_names: &[u8] = &[];
    let mut pos = 0;
    while pos + HEADER <= body.len() {
        let header = &body[pos..pos + HEADER];
        if &header[58..60] != b"`\n" {
            return Err(format!("bad member header at byte {}", pos + 8));
        }
        let field = |range: std::ops::Range<usize>| String::from_utf8_lossy(&header[range]).trim_end().to_string();
        let raw_name = field(0..16);
        let size: usize = field(48..58).parse().map_err(|_| format!("bad member size at byte {}", pos + 8))?;
        let start = pos + HEADER;
        let mut data = body.get(start..start + size).ok_or("archive is truncated")?;
        pos = start + size + (size & 1);

        let name = if raw_name == "/" || raw_name == "/SYM64/" || raw_name.starts_with("__.SYMDEF") {
            continue;
        } else if raw_name == "//" {
            long_names = data;
            continue;
        } else if let Some(len) = raw_name.strip_prefix("#1/") {
            let len: usize = len.parse().map_err(|_| format!("bad BSD name length in {raw_name:?}"))?;
            let name = String::from_utf8_lossy(data.get(..len).ok_or("archive is truncated")?);
            let name = name.trim_end_matches('\0').to_string();
            data = &data[len..];
            name
        } else if let Some(offset) = raw_name.strip_prefix('/') {
            let offset: usize = offset.parse().map_err(|_| format!("bad long-name reference {raw_name:?}"))?;
            let rest = long_names.get(offset..).ok_or("long-name reference out of range")?;
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).trim_end_matches('/').to_string()
        } else {
            raw_name.trim_end_matches('/').to_string()
        };
        members.push((name, data));
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, data: &[u8]) -> Vec<u8> {
        let mut out = format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", 0, 0, 0, 644, data.len()).into_bytes();
        out.extend_from_slice(data);
        if data.len() % 2 == 1 {
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn reads_gnu_archives_with_long_names() {
        let long = "compiler_builtins-0123456789abcdef.cgu.0.rcgu.o";
        let mut ar = b"!<arch>\n".to_vec();
        ar.extend(member("/", b"\0\0\0\0"));
        ar.extend(member("//", format!("{long}/\n").as_bytes()));
        ar.extend(member("/0", b"BC\xC0\xDEodd"));
        ar.extend(member("lib.rmeta/", b"meta"));
        let members = ar_members(&ar).unwrap();
        let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [long, "lib.rmeta"]);
        assert_eq!(members[0].1, b"BC\xC0\xDEodd");
        assert!(is_bitcode(members[0].1) && !is_bitcode(members[1].1));
    }

    #[test]
    fn parses_what_rustc_passes() {
        let argv = "--export-symbol add --export-symbol gemm k.o /d/libcompiler_builtins-1.rlib -L /d/raw-dylibs \
                    --target nvptx64-nvidia-cuda --target-cpu sm_90a -L /s/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained \
                    -o /d/k.ptx -O3 --debug --target-feature=+ptx80";
        let inv = parse_args(argv.split_whitespace().map(OsString::from).collect()).unwrap();
        assert_eq!(inv.exports, ["add", "gemm"]);
        assert_eq!(inv.objects, [PathBuf::from("k.o")]);
        assert_eq!(inv.archives, [PathBuf::from("/d/libcompiler_builtins-1.rlib")]);
        assert_eq!(inv.target_cpu.as_deref(), Some("sm_90a"));
        assert_eq!(inv.target_features, ["+ptx80"]);
        assert_eq!(inv.output, Some(PathBuf::from("/d/k.ptx")));
        assert_eq!(inv.library_dirs.iter().find_map(|d| sysroot_of(d)), Some(PathBuf::from("/s")));
        assert!(parse_args(vec!["--frobnicate".into()]).is_err());
    }

    #[test]
    fn expands_response_files() {
        let path = std::env::temp_dir().join(format!("rustile-linker-test-{}.rsp", std::process::id()));
        std::fs::write(&path, "--export-symbol\nadd\n/dir with\\ space/k.o\n").unwrap();
        let args = expand_response_files(vec![format!("@{}", path.display()).into(), "-O3".into()]).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(args, ["--export-symbol", "add", "/dir with space/k.o", "-O3"].map(OsString::from));
    }
}
