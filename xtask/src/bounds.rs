//! Launch bounds for ptxas. rustc's nvptx backend has no way to say how many
//! threads a kernel is launched with, so ptxas would size registers for any
//! block and a 1024-thread kernel could ask for more registers than the SM
//! has (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES at launch). `#[kernel]` names
//! every entry `fn__..._WARPS{n}_...__dtype`; we give each such entry
//! `.maxnreg min(255, 65536 / (32·n·OCC))`, so `OCC` programs (1 unless the
//! config sets it) always fit the SM's register file, and a kernel that then
//! does not fit spills, which the build reports. (`.maxntid` was tried: ptxas reads it as a wish for occupancy and
//! squeezed a 256-thread kernel to 48 registers, with spills.)

/// Threads that must fit one SM together for a `#[kernel]` entry, from its
/// name: 32·WARPS threads a program, times OCC programs.
pub fn threads_of(entry: &str) -> Option<u32> {
    let config = entry.split("__").nth(1)?;
    let value = |key: &str| config.split('_').find_map(|part| part.strip_prefix(key)?.parse::<u32>().ok());
    Some(value("WARPS")? * 32 * value("OCC").unwrap_or(1))
}

/// Registers per thread that let `threads` threads share the 64K-register
/// file (allocation is in units of 8 per thread).
pub fn max_registers(threads: u32) -> u32 {
    (65536 / threads / 8 * 8).min(255)
}

/// The PTX with a `.maxnreg` directive after the parameter list of every entry whose thread count is known.
pub fn annotate(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 4096);
    let mut pending: Option<u32> = None;
    for line in ptx.lines() {
        if let Some(rest) = line.trim_start().strip_prefix(".visible .entry ") {
            let name = rest.split('(').next().unwrap_or("").trim();
            pending = threads_of(name);
        }
        out.push_str(line);
        out.push('\n');
        // The list closes with `)`, which LLVM follows with a `// @name` comment.
        let closes = line.trim_start().strip_prefix(')').is_some_and(|rest| rest.trim().is_empty() || rest.trim_start().starts_with("//"));
        if closes {
            if let Some(threads) = pending.take() {
                out.push_str(&format!(".maxnreg {}\n", max_registers(threads)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_count_comes_from_the_config_in_the_name() {
        assert_eq!(threads_of("softmax_kernel__BM1_BN8192_WARPS16_RP4__bf16"), Some(512));
        assert_eq!(threads_of("add_kernel__BLOCK2048_WARPS8"), Some(256));
        assert_eq!(threads_of("softmax_kernel__BM1_BN8192_WARPS16_RP2_OCC2__bf16"), Some(1024));
        assert_eq!(threads_of("handwritten"), None);
    }

    #[test]
    fn directive_follows_the_parameter_list() {
        let ptx = ".visible .entry k__BN8_WARPS2__f32(\n\t.param .u64 k_param_0\n)   // @k__BN8_WARPS2__f32\n{\n\tret;\n}\n\
                   .visible .entry j__BN8_WARPS4__f32(\n)\n{\n}\n";
        let out = annotate(ptx);
        assert!(out.contains("@k__BN8_WARPS2__f32\n.maxnreg 255\n{"), "{out}");
        assert!(out.contains(")\n.maxnreg 255\n{"), "{out}");
        assert_eq!(annotate(".visible .entry other(\n)\n{\n}\n").matches(".maxnreg").count(), 0);
        assert_eq!((max_registers(512), max_registers(1024), max_registers(128)), (128, 64, 255));
    }
}
