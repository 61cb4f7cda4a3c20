//! ptxas: assembling PTX to cubins, its `-v` resource report, and the
//! spill/stack check every kernel must pass.
//!
//! A stack frame or spills mean a kernel keeps values in local memory, which
//! for our kernels almost always means a fragment loop that did not unroll:
//! a silent 2-10x slowdown. So the build fails on them unless the kernel is
//! listed in `ops/allow-spills.txt` (one glob per line, `#` comments).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::device::{Arch, BuildSpec};
use crate::setup::{ptxas_version, Tools};
use crate::{show, write_if_changed, Result};

#[derive(Serialize, Default, Debug, Clone, PartialEq)]
pub struct Resources {
    pub name: String,
    /// A kernel (`.entry`); false for a device function ptxas kept out of line.
    pub entry: bool,
    pub registers: u32,
    pub barriers: u32,
    pub shared_bytes: u64,
    pub constant_bytes: u64,
    pub stack_frame_bytes: u64,
    pub spill_store_bytes: u64,
    pub spill_load_bytes: u64,
    /// Listed in the allow list: its local memory does not fail the build
    /// (recorded so that tests read the build's decision, not a copy of it).
    pub spill_allowed: bool,
}

#[derive(Serialize, Debug)]
pub struct Report {
    pub arch: String,
    pub ptxas: String,
    pub kernels: Vec<Resources>,
    /// ptxas warnings and performance advisories (such as serialized wgmma).
    pub notes: Vec<String>,
}

/// Whether two PTX texts are the same code: equal once comments are
/// dropped and each basic-block label `$L__BB<function>_<block>` loses its
/// function number (labels are local to their function in PTX, so the
/// number only keeps LLVM's names unique across the module).
fn same_code(a: &[u8], b: &[u8]) -> bool {
    fn code(text: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(text)
            .lines()
            .map(|line| line.split("//").next().unwrap_or("").trim_end().to_string())
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let mut out = String::with_capacity(line.len());
                let mut rest = line.as_str();
                while let Some(at) = rest.find("$L__BB") {
                    let (head, tail) = rest.split_at(at + "$L__BB".len());
                    out.push_str(head);
                    // Drop `<function>_` when the label has both numbers.
                    let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
                    rest = if digits > 0 && tail.as_bytes().get(digits) == Some(&b'_') { &tail[digits + 1..] } else { tail };
                }
                out.push_str(rest);
                out
            })
            .collect()
    }
    a == b || code(a) == code(b)
}

/// Assembles `ptx` into `cubin` and reads the resource report. ptxas takes
/// seconds on a module of many kernels, so when the PTX and the command are
/// those of the last run, that run's cubin and report are reused. The PTX
/// is compared without its comments and with its block labels renumbered
/// from 0 in every function ([`same_code`]): LLVM numbers them across the
/// whole module, so a kernel added to one family changed every other
/// family's text, and ptxas ran them all again (the four `mma.sync` GEMM
/// families alone for about 8 minutes of this machine's two cores).
pub fn assemble(ptxas: &Path, ptx: &Path, cubin: &Path, arch: Arch) -> Result<(Report, bool)> {
    let mut cmd = Command::new(ptxas);
    cmd.arg(format!("-arch={}", arch.name())).args(["-O3", "-v"]).arg(ptx).arg("-o").arg(cubin);
    let version = ptxas_version(ptxas);
    let key = format!("{version}\n{}\n", show(&cmd));
    let ptx_bytes = std::fs::read(ptx).map_err(|e| format!("reading {}: {e}", ptx.display()))?;
    let last_input = cubin.with_extension("ptxas-input.ptx");
    let last_log = cubin.with_extension("ptxas-log.txt");

    let cached = cubin.is_file()
        && std::fs::read(&last_input).is_ok_and(|b| same_code(&b, &ptx_bytes))
        && std::fs::read_to_string(&last_log).is_ok_and(|log| log.starts_with(&key));
    let text = if cached {
        std::fs::read_to_string(&last_log).unwrap_or_default()[key.len()..].to_string()
    } else {
        let out = cmd.output().map_err(|e| format!("could not run {}: {e}", ptxas.display()))?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            return Err(format!("{}: ptxas failed ({})\n  command: {}\n{text}", arch.name(), out.status, show(&cmd)));
        }
        write_if_changed(&last_log, format!("{key}{text}").as_bytes())?;
        write_if_changed(&last_input, &ptx_bytes)?;
        text
    };
    let (kernels, notes) = parse_verbose(&text);
    Ok((Report { arch: arch.name().into(), ptxas: version, kernels, notes }, cached))
}

/// The kernel family of an entry: its name up to the config
/// (`gemm_nt_kernel__BM64_…__bf16` → `gemm_nt_kernel`).
fn family(name: &str) -> &str {
    name.split("__").next().unwrap_or(name)
}

/// The module split by kernel family, in name order: each part keeps every
/// item that is not an entry (declarations, device functions) and the
/// family's entries. Parts assemble in parallel, and a part whose PTX did
/// not change is not assembled again.
pub fn shard(ptx: &str) -> Vec<(String, String)> {
    let mut common = String::new();
    let mut parts: std::collections::BTreeMap<String, String> = Default::default();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        // The entry starts at its line (`.visible .entry name(`).
        let start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let name: String = rest[at + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$').collect();
        let Some(open) = rest[at..].find('{').map(|i| at + i) else { break };
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        common.push_str(&rest[..start]);
        let part = parts.entry(family(&name).to_string()).or_default();
        part.push_str(&rest[start..end]);
        part.push('\n');
        rest = &rest[end..];
    }
    common.push_str(rest);
    parts.into_iter().map(|(family, entries)| (family, format!("{common}\n{entries}"))).collect()
}

/// Counts the ptxas runs in flight, so that the arches built at once share
/// as many as there are cores.
pub struct Slots {
    free: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Slots {
    pub fn new(n: usize) -> Slots {
        Slots { free: std::sync::Mutex::new(n.max(1)), freed: std::sync::Condvar::new() }
    }

    /// Runs `f` once a slot is free.
    fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut free = self.free.lock().unwrap();
        while *free == 0 {
            free = self.freed.wait(free).unwrap();
        }
        *free -= 1;
        drop(free);
        let out = f();
        *self.free.lock().unwrap() += 1;
        self.freed.notify_one();
        out
    }
}

/// What ptxas did with the module of one arch.
pub struct Assembled {
    pub cubins: Vec<PathBuf>,
    pub report: Report,
    /// Parts whose PTX had not changed since the last run (their cubin reused).
    pub unchanged: usize,
    /// Each part that ran ptxas, with its seconds, slowest first.
    pub timings: Vec<(String, f64)>,
}

/// [`assemble`] of each part of [`shard`] into `dir/<stem>.<family>.cubin`,
/// in `slots`. The largest parts start first: ptxas takes minutes on the
/// GEMM families and seconds on most others, so a large part started last
/// would leave the other cores idle while it runs.
pub fn assemble_shards(ptxas: &Path, ptx: &str, dir: &Path, stem: &str, arch: Arch, slots: &Slots) -> Result<Assembled> {
    let mut jobs: Vec<(String, usize, PathBuf, PathBuf)> = Vec::new();
    for (family, text) in shard(ptx) {
        let part = dir.join(format!("{stem}.{family}.ptx"));
        write_if_changed(&part, text.as_bytes())?;
        jobs.push((family.clone(), text.len(), part, dir.join(format!("{stem}.{family}.cubin"))));
    }
    let mut cubins: Vec<PathBuf> = jobs.iter().map(|j| j.3.clone()).collect();
    cubins.sort();
    // Popped from the end: the largest last.
    jobs.sort_by_key(|j| j.1);
    let queue = std::sync::Mutex::new(jobs);
    let results = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some((family, _, part, cubin)) = queue.lock().unwrap().pop() else { break };
                let (done, secs) = slots.with(|| {
                    let start = std::time::Instant::now();
                    (assemble(ptxas, &part, &cubin, arch), start.elapsed().as_secs_f64())
                });
                results.lock().unwrap().push((family, done, secs));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut report = Report { arch: arch.name().into(), ptxas: ptxas_version(ptxas), kernels: Vec::new(), notes: Vec::new() };
    let (mut unchanged, mut timings) = (0, Vec::new());
    for (family, done, secs) in results {
        let (part, cached) = done?;
        if cached {
            unchanged += 1;
        } else {
            timings.push((family, secs));
        }
        // Device functions are in every part: report each once.
        for k in part.kernels {
            if !report.kernels.iter().any(|r| r.name == k.name) {
                report.kernels.push(k);
            }
        }
        for note in part.notes {
            if !report.notes.contains(&note) {
                report.notes.push(note);
            }
        }
    }
    timings.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(Assembled { cubins, report, unchanged, timings })
}

/// Reads `ptxas -v` output, which for each function looks like
///
/// ```text
/// ptxas info    : Compiling entry function 'add' for 'sm_80'
/// ptxas info    : Function properties for add
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 12 registers, used 0 barriers, 16 bytes smem, 384 bytes cmem[0]
/// ```
pub fn parse_verbose(text: &str) -> (Vec<Resources>, Vec<String>) {
    let mut kernels: Vec<Resources> = Vec::new();
    let mut notes = Vec::new();
    let mut current: Option<usize> = None;
    let select = |kernels: &mut Vec<Resources>, name: &str, entry: bool| -> usize {
        let index = kernels.iter().position(|k| k.name == name).unwrap_or_else(|| {
            kernels.push(Resources { name: name.to_string(), ..Default::default() });
            kernels.len() - 1
        });
        kernels[index].entry |= entry;
        index
    };
    for line in text.lines() {
        let body = line.split_once(": ").map(|(_, b)| b.trim()).unwrap_or(line.trim());
        if let Some(rest) = body.strip_prefix("Compiling entry function '") {
            let name = rest.split('\'').next().unwrap_or(rest);
            current = Some(select(&mut kernels, name, true));
        } else if let Some(rest) = body.strip_prefix("Compiling function '") {
            let name = rest.split('\'').next().unwrap_or(rest);
            current = Some(select(&mut kernels, name, false));
        } else if let Some(name) = body.strip_prefix("Function properties for ") {
            current = Some(select(&mut kernels, name.trim(), false));
        } else if let (Some(i), true) = (current, line.contains("bytes stack frame")) {
            for part in line.split(',') {
                let value = leading_number(part);
                let k = &mut kernels[i];
                if part.contains("stack frame") {
                    k.stack_frame_bytes = value;
                } else if part.contains("spill stores") {
                    k.spill_store_bytes = value;
                } else if part.contains("spill loads") {
                    k.spill_load_bytes = value;
                }
            }
        } else if let (Some(i), Some(rest)) = (current, body.strip_prefix("Used ")) {
            for part in rest.split(',') {
                let part = part.trim().trim_start_matches("used ");
                let value = leading_number(part);
                let k = &mut kernels[i];
                if part.ends_with("registers") {
                    k.registers = value as u32;
                } else if part.ends_with("barriers") {
                    k.barriers = value as u32;
                } else if part.ends_with("bytes smem") {
                    k.shared_bytes = value;
                } else if part.contains("bytes cmem") {
                    k.constant_bytes += value;
                }
            }
        } else if line.starts_with("ptxas warning") || line.starts_with("ptxas error") || body.contains("Performance") {
            notes.push(body.to_string());
        }
    }
    (kernels, notes)
}

fn leading_number(s: &str) -> u64 {
    s.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

impl Report {
    pub fn entries(&self) -> impl Iterator<Item = &Resources> {
        self.kernels.iter().filter(|k| k.entry)
    }

    pub fn max_registers_line(&self) -> String {
        match self.entries().max_by_key(|k| k.registers) {
            Some(k) => format!("max {} registers ({})", k.registers, k.name),
            None => "no kernels".into(),
        }
    }

    /// Marks the kernels the allow list lets keep values in local memory.
    pub fn mark_allowed(&mut self, allow: &AllowList) {
        for k in &mut self.kernels {
            k.spill_allowed = allow.allows(&k.name);
        }
    }

    /// One message per kernel that keeps values in local memory and is not
    /// allowed to (`mark_allowed` first).
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        for k in &self.kernels {
            let spills = k.spill_store_bytes + k.spill_load_bytes > 0;
            // Out-of-line device functions need a frame for the call ABI; only their spills count.
            let stack = k.entry && k.stack_frame_bytes > 0;
            if !(spills || stack) || k.spill_allowed {
                continue;
            }
            let what = if k.entry { "kernel" } else { "device function" };
            let mut problems = Vec::new();
            if spills {
                problems.push(format!("spills ({} bytes stores, {} bytes loads)", k.spill_store_bytes, k.spill_load_bytes));
            }
            if stack {
                problems.push(format!("has a {}-byte stack frame", k.stack_frame_bytes));
            }
            found.push(format!(
                "{what} `{}` {} (local memory): usually a loop over register fragments that did not unroll, or an array indexed at run time",
                k.name,
                problems.join(" and ")
            ));
        }
        found
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        let mut table = format!("# ptxas -v for {} ({})\n", self.arch, self.ptxas);
        let width = self.kernels.iter().map(|k| k.name.len()).max().unwrap_or(0).max(6);
        let _ = writeln!(table, "{:<width$}  {:>4}  {:>10}  {:>9}  {:>11}  {:>10}  {:>8}", "kernel", "regs", "smem bytes", "stack", "spill store", "spill load", "barriers");
        for k in &self.kernels {
            let name = if k.entry { k.name.clone() } else { format!("{} (function)", k.name) };
            let _ = writeln!(
                table,
                "{name:<width$}  {:>4}  {:>10}  {:>9}  {:>11}  {:>10}  {:>8}",
                k.registers, k.shared_bytes, k.stack_frame_bytes, k.spill_store_bytes, k.spill_load_bytes, k.barriers
            );
        }
        for note in &self.notes {
            let _ = writeln!(table, "note: {note}");
        }
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        for (file, text) in [("resources.txt", table), ("resources.json", json + "\n")] {
            write_if_changed(&dir.join(file), text.as_bytes())?;
        }
        Ok(())
    }
}

/// Kernel-name globs (`*` and `?`) that may spill or use a stack frame.
pub struct AllowList {
    globs: Vec<String>,
}

impl AllowList {
    pub fn read(path: &Path) -> Result<AllowList> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let globs = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        Ok(AllowList { globs })
    }

    pub fn allows(&self, name: &str) -> bool {
        self.globs.iter().any(|g| glob_match(g.as_bytes(), name.as_bytes()))
    }
}

fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.split_first(), name.split_first()) {
        (None, None) => true,
        (Some((b'*', rest)), _) => glob_match(rest, name) || (!name.is_empty() && glob_match(pattern, &name[1..])),
        (Some((b'?', rest)), Some((_, name_rest))) => glob_match(rest, name_rest),
        (Some((p, rest)), Some((n, name_rest))) if p == n => glob_match(rest, name_rest),
        _ => false,
    }
}

/// `cargo xtask sass`: SASS of a built cubin into `sass.txt` beside it.
pub fn sass(tools: &Tools, spec: &BuildSpec, arch: Arch, kernel: Option<&str>) -> Result<()> {
    let Some(nvdisasm) = &tools.nvdisasm else {
        return Err("nvdisasm is not installed; run `cargo xtask setup` (it tries the nvidia-cuda-nvdisasm wheel), \
                    or put nvdisasm from a CUDA toolkit under .tools/nvdisasm/"
            .into());
    };
    let cubins = spec.cubin_paths(arch);
    if cubins.is_empty() {
        return Err(format!("no cubin for {}; run `cargo xtask build --arch {}` first", arch.name(), arch.name()));
    }
    // A kernel lives in its family's cubin.
    let cubins: Vec<PathBuf> = match kernel {
        Some(k) => cubins.into_iter().filter(|c| c.file_name().is_some_and(|n| n.to_string_lossy().contains(&format!(".{}.", family(k))))).collect(),
        None => cubins,
    };
    let cubin = cubins.first().cloned().unwrap_or_else(|| spec.cubin_dir(arch));
    let mut all = String::new();
    for c in &cubins {
        let mut cmd = Command::new(nvdisasm);
        cmd.arg("--print-code").arg(c);
        let out = cmd.output().map_err(|e| format!("could not run {}: {e}", nvdisasm.display()))?;
        if !out.status.success() {
            return Err(format!("nvdisasm failed ({}): {}\n  command: {}", out.status, String::from_utf8_lossy(&out.stderr), show(&cmd)));
        }
        all.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    // nvdisasm selects functions only by symbol index, so one kernel is cut out of the whole listing.
    let sass = match kernel {
        None => all,
        Some(kernel) => function_listing(&all, kernel).ok_or_else(|| {
            format!("no kernel `{kernel}` in {}; see resources.txt beside it for the names", cubin.display())
        })?,
    };
    let path = spec.cubin_dir(arch).join("sass.txt");
    std::fs::write(&path, sass.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    // HGMMA means the wgmma path; a matrix kernel with only HMMA is on the slower mma.sync path.
    let count = |op: &str| sass.matches(op).count();
    println!(
        "==> SASS of {} → {} ({} lines; HGMMA {}, HMMA {}, local LDL/STL {})",
        cubin.display(),
        path.display(),
        sass.lines().count(),
        count("HGMMA"),
        count("HMMA"),
        count("LDL") + count("STL")
    );
    Ok(())
}

/// The part of an nvdisasm listing under `//----- .text.<name> -----`, up to the next such banner.
fn function_listing(listing: &str, name: &str) -> Option<String> {
    let banner = "//---------------------";
    let mut lines = listing.lines().skip_while(|l| {
        !(l.starts_with(banner) && l[banner.len()..].split_whitespace().next() == Some(&format!(".text.{name}")))
    });
    let first = lines.next()?;
    let rest = lines.take_while(|l| !l.starts_with(banner));
    Some(std::iter::once(first).chain(rest).map(|l| format!("{l}\n")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_that_differs_in_comments_and_label_numbers_is_the_same_code() {
        let a = b"// .globl k1\n\t@%p1 bra \t$L__BB12_3; // callseq 4\n$L__BB12_3:\n\tret;\n";
        let b = b"// .globl k1\n// .globl k2\n\t@%p1 bra \t$L__BB13_3; // callseq 9\n$L__BB13_3:\n\tret;\n";
        assert!(same_code(a, b));
        let c = b"\t@%p1 bra \t$L__BB13_4;\n$L__BB13_4:\n\tret;\n";
        assert!(!same_code(a, c), "another block is another program");
        let d = b"\t@%p2 bra \t$L__BB12_3;\n$L__BB12_3:\n\tret;\n";
        assert!(!same_code(a, d));
    }

    const VERBOSE: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_128x128' for 'sm_90a'
ptxas info    : Function properties for gemm_128x128
    576 bytes stack frame, 96 bytes spill stores, 88 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 32768 bytes smem, 384 bytes cmem[0]
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'add' for 'sm_90a'
ptxas info    : Function properties for add
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized in the function 'gemm_128x128'
ptxas info    : Compile time = 10.089 ms
";

    #[test]
    fn shards_keep_every_non_entry_item_and_group_entries_by_family() {
        let ptx = ".version 8.0\n.extern .shared .align 16 .b8 smem[];\n\
                   .visible .entry gemm_k__BM64__bf16(\n.param .u64 p\n)\n{\n\t{ nested }\n\tret;\n}\n\
                   .func helper()\n{\n\tret;\n}\n\
                   .visible .entry add_k__B8__f32(\n)\n{\n\tret;\n}\n\
                   .visible .entry gemm_k__BM128__f16(\n)\n{\n\tret;\n}\n";
        let parts = shard(ptx);
        let families: Vec<&str> = parts.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(families, ["add_k", "gemm_k"]);
        for (family, text) in &parts {
            assert!(text.starts_with(".version 8.0") && text.contains(".extern .shared") && text.contains(".func helper()"), "{family}: {text}");
            assert_eq!(text.matches(".entry").count(), if family == "gemm_k" { 2 } else { 1 }, "{family}: {text}");
            assert!(!text.contains(if family == "gemm_k" { "add_k" } else { "gemm_k" }), "{family}: {text}");
        }
        // The nested braces stay with their entry.
        assert!(parts[1].1.contains("{ nested }"));
    }

    #[test]
    fn reads_ptxas_verbose_output() {
        let (kernels, notes) = parse_verbose(VERBOSE);
        let gemm = Resources {
            name: "gemm_128x128".into(),
            entry: true,
            registers: 255,
            barriers: 1,
            shared_bytes: 32768,
            constant_bytes: 384,
            stack_frame_bytes: 576,
            spill_store_bytes: 96,
            spill_load_bytes: 88,
            spill_allowed: false,
        };
        assert_eq!(kernels[0], gemm);
        assert_eq!((kernels[1].name.as_str(), kernels[1].entry, kernels[1].stack_frame_bytes), ("helper", false, 16));
        assert_eq!((kernels[2].name.as_str(), kernels[2].entry, kernels[2].registers), ("add", true, 12));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("serialized"));
    }

    #[test]
    fn spills_fail_unless_allowed() {
        let (kernels, notes) = parse_verbose(VERBOSE);
        let mut report = Report { arch: "sm_90a".into(), ptxas: String::new(), kernels, notes };
        report.mark_allowed(&AllowList { globs: vec![] });
        let violations = report.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("`gemm_128x128`") && violations[0].contains("576-byte stack frame"));
        report.mark_allowed(&AllowList { globs: vec!["gemm_*".into()] });
        assert!(report.violations().is_empty());
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"gemm_*", b"gemm_128x128"));
        assert!(glob_match(b"*_bwd?", b"attn_bwd2"));
        assert!(!glob_match(b"gemm_?", b"gemm_12"));
        assert!(glob_match(b"add", b"add"));
        assert!(!glob_match(b"add", b"add2"));
    }

    #[test]
    fn cuts_one_function_from_a_listing() {
        let listing = "head\n//--------------------- .text.ab    ----\nab:\n  EXIT ;\n//--------------------- .text.a     ----\na:\n  RET ;\n//--------------------- SYMBOLS ----\n";
        assert_eq!(function_listing(listing, "a").unwrap(), "//--------------------- .text.a     ----\na:\n  RET ;\n");
        assert!(function_listing(listing, "b").is_none());
    }
}
