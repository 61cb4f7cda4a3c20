"""Does ptxas give a `setmaxnreg.inc` region more registers than the kernel's
launch bound allows? (No GPU needed: it reads ptxas's report and the SASS.)

A warp-specialized Hopper GEMM runs three warpgroups (384 threads): one issues
copies, two multiply. 65536 registers over 384 threads is 168 each, too few
for two 64×128 f32 accumulators; `setmaxnreg` moves registers from the copy
warpgroup (down to 40) to the others (up to 232). That only helps if ptxas
allocates the code after `setmaxnreg.inc` against the raised budget.

This writes a 384-thread kernel whose first 256 threads keep 200 values live
(bounded to 168 registers a thread by `.maxnreg`, as our build does, or by
`.maxntid`), builds it with and without the `setmaxnreg` pair, and prints
ptxas's report and the SASS's highest register.

Usage here: `python3 bench/probes/setmaxnreg_ptxas.py` (after `cargo xtask setup`,
which puts ptxas and nvdisasm under `.tools/`).
"""
import pathlib
import re
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIVE = 200


def tool(name):
    found = [p for p in (ROOT / ".tools").rglob(name) if p.is_file()]
    if not found:
        raise SystemExit(f"no {name} under .tools/: run `cargo xtask setup` first")
    return str(found[0])


def kernel(with_setmaxnreg, bound):
    inc = "  setmaxnreg.inc.sync.aligned.u32 232;" if with_setmaxnreg else ""
    dec = "  setmaxnreg.dec.sync.aligned.u32 40;" if with_setmaxnreg else ""
    body = [
        ".version 8.0", ".target sm_90a", ".address_size 64",
        ".visible .entry k(.param .u64 p)", bound, "{",
        "  .reg .pred %q;", "  .reg .b32 %t;", "  .reg .b64 %p, %a;", f"  .reg .f32 %f<{LIVE}>;", "  .reg .f32 %x;",
        "  ld.param.u64 %p, [p];", "  mov.u32 %t, %tid.x;", "  setp.ge.u32 %q, %t, 256;", "  @%q bra COPIER;",
        inc, "  mul.wide.u32 %a, %t, 4;", "  add.u64 %a, %p, %a;",
    ]
    body += [f"  ld.global.f32 %f{i}, [%a+{i * 1536}];" for i in range(LIVE)]
    body += ["  ld.global.f32 %x, [%a+999936];"]
    # Every value depends on its neighbour, eight times over: all stay live.
    body += [f"  fma.rn.f32 %f{i}, %f{i}, %x, %f{(i + 1) % LIVE};" for _ in range(8) for i in range(LIVE)]
    body += [f"  st.global.f32 [%a+{i * 1536}], %f{i};" for i in range(LIVE)]
    body += ["  ret;", "COPIER:", dec, "  ret;", "}"]
    return "\n".join(body) + "\n"


def main():
    ptxas, nvdisasm = tool("ptxas"), tool("nvdisasm")
    with tempfile.TemporaryDirectory() as d:
        # `.maxnreg` is what `cargo xtask build` gives each entry (xtask/src/bounds.rs).
        for flag, bound in ((True, ".maxnreg 168"), (True, ".maxntid 384, 1, 1\n.minnctapersm 1"), (False, ".maxnreg 168")):
            ptx, cubin = pathlib.Path(d, "k.ptx"), pathlib.Path(d, "k.cubin")
            ptx.write_text(kernel(flag, bound))
            report = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(ptx), "-o", str(cubin)], capture_output=True, text=True, check=True).stderr
            sass = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True).stdout
            regs = max((int(r) for r in re.findall(r"\bR(\d+)\b", sass)), default=0)
            used = re.search(r"Used (\d+) registers", report).group(1)
            stack = re.search(r"(\d+) bytes cumulative stack size", report)
            print(f"{'with' if flag else 'without'} setmaxnreg, {bound.splitlines()[0]}: ptxas says {used} registers, "
                  f"{stack.group(1) if stack else 0} bytes of stack; highest register in the SASS R{regs}; "
                  f"USETMAXREG in SASS: {'USETMAXREG' in sass}")


if __name__ == "__main__":
    main()
