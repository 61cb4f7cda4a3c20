//! The Python package's part of `cargo xtask test`: a virtual environment
//! in `.tools/py` with the pinned build and test tools, `pip install
//! ./python` (maturin builds the extension, kernels inside, in this
//! workspace's `target/`), then its tests on NumPy arrays in the CPU
//! interpreter. PyTorch is not installed here (its wheel pulls gigabytes of
//! CUDA libraries); the torch layer is tested on the GPU machine, which has it.

use std::process::Command;

use crate::{run_step, Repo, Result};

/// What the environment holds, pinned; a change re-installs it.
const TOOLS: &[&str] = &["maturin==1.16.0", "numpy==2.4.6", "pytest==9.2.0", "ml_dtypes==0.6.0"];
const STAMP: &str = ".rustile-installed";

pub fn test(repo: &Repo) -> Result<()> {
    let venv = repo.root.join(".tools/py");
    let python = venv.join("bin/python");
    let want = TOOLS.join("\n") + "\n";
    if std::fs::read_to_string(venv.join(STAMP)).ok().as_deref() != Some(want.as_str()) || !python.is_file() {
        let mut make = Command::new("python3");
        make.arg("-m").arg("venv").arg(&venv);
        run_step("a Python environment for the package's tests", make)?;
        let mut tools = Command::new(&python);
        tools.env("PIP_DISABLE_PIP_VERSION_CHECK", "1").args(["-m", "pip", "install", "--quiet"]).args(TOOLS);
        run_step("installing maturin, numpy, pytest and ml_dtypes", tools)?;
        std::fs::write(venv.join(STAMP), &want).map_err(|e| format!("writing {}: {e}", venv.join(STAMP).display()))?;
    }
    let mut install = Command::new(&python);
    // The venv's maturin, not an isolated build environment's download of it.
    install.env("PIP_DISABLE_PIP_VERSION_CHECK", "1").args(["-m", "pip", "install", "--quiet", "--no-build-isolation", "--force-reinstall", "--no-deps"]);
    install.env("PATH", format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default()));
    install.arg(repo.root.join("python"));
    run_step("pip install ./python", install)?;
    let mut pytest = Command::new(&python);
    // From the root: `python -m` puts the working directory first on the path, and
    // `python/rustile` there is the package's source, without its extension.
    pytest.current_dir(&repo.root).args(["-m", "pytest", "-q", "python/tests"]);
    run_step("the Python package's tests (NumPy arrays, CPU interpreter)", pytest)
}
