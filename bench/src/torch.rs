//! PyTorch baselines: runs `torch_baselines.py` in a subprocess and reads its
//! rows back, so every op is compared on the same GPU in the same run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::harness::Row;

/// Whether `python -c 'import torch'` works here.
pub fn available(python: &str) -> bool {
    Command::new(python)
        .args(["-c", "import torch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The script, compiled into the binary, so the bench finds it from any
/// working directory and on a machine that has only the binary.
const SCRIPT: &str = include_str!("../torch_baselines.py");

/// Writes the embedded script to a private temporary file and returns its
/// path (the caller removes it); `--torch-script` runs another copy instead.
pub fn embedded_script() -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!("rustile-torch-baselines-{}.py", std::process::id()));
    std::fs::write(&path, SCRIPT).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// What the script is asked to time.
pub struct Request<'a> {
    pub ops: &'a [String],
    pub rows: usize,
    pub cols: usize,
    pub numel: usize,
    pub dtype: &'a str,
    /// Attention shapes, as `attention::spec` writes them.
    pub attn: &'a str,
    /// TriMul shapes, as `trimul::spec` writes them.
    pub trimul: &'a str,
    /// Delta-rule lengths, as `delta_rule::spec` writes them.
    pub delta: &'a str,
    /// Where `delta_rule::write_check` left the inputs and our outputs for FLA's check.
    pub delta_check: &'a Path,
}

#[derive(Deserialize)]
struct Output {
    rows: Vec<Row>,
}

/// Runs the script and returns its rows; the error says what went wrong.
pub fn run(python: &str, script: &Path, req: &Request) -> Result<Vec<Row>, String> {
    let out = std::env::temp_dir().join(format!("rustile-torch-{}.json", std::process::id()));
    let status = Command::new(python)
        .arg(script)
        .args(["--ops", &req.ops.join(",")])
        .args(["--rows", &req.rows.to_string(), "--cols", &req.cols.to_string()])
        .args(["--numel", &req.numel.to_string(), "--dtype", req.dtype])
        .args(["--attn", req.attn])
        .args(["--trimul", req.trimul])
        .args(["--delta", req.delta])
        .arg("--delta-check")
        .arg(req.delta_check)
        .arg("--json")
        .arg(&out)
        // The script's progress goes to our stderr; our stdout stays the table.
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("could not start {python}: {e}"))?;
    if !status.success() {
        return Err(format!("{} exited with {status}", script.display()));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("reading {}: {e}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    let parsed: Output = serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", out.display()))?;
    Ok(parsed.rows)
}
