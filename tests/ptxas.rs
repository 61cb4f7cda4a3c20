//! Every kernel entry (each config × dtype the `#[kernel]` macro declared)
//! was assembled by ptxas for sm_80 and sm_90a, with no spills and no stack
//! frame, except the entries the build allowed (ops/allow-spills.txt, as
//! recorded in each report's `spill_allowed`). `cargo xtask test` builds
//! these before running the tests; the reports come from `cargo xtask build`
//! (target/cubins/<arch>/resources.json).
use rustile_ops::{dual_gemm, gemm, gemm_fp8, norm, softmax, vector};
use std::path::PathBuf;

/// The entries `arch`'s build must hold (sm_90a-only kernels on sm_90a only).
fn expected_entries(arch: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut add = |kernel: &str, configs: &[rustile::KernelConfig], dtypes: &[&str]| {
        for c in configs {
            for d in dtypes {
                names.push(format!("{kernel}__{}__{d}", c.name));
            }
        }
    };
    add("add_kernel", vector::add_kernel::CONFIGS, vector::add_kernel::DTYPES);
    add("swiglu_kernel", vector::swiglu_kernel::CONFIGS, vector::swiglu_kernel::DTYPES);
    add("softmax_kernel", softmax::softmax_kernel::CONFIGS, softmax::softmax_kernel::DTYPES);
    add("layer_norm_kernel", norm::layer_norm_kernel::CONFIGS, norm::layer_norm_kernel::DTYPES);
    add("rms_norm_kernel", norm::rms_norm_kernel::CONFIGS, norm::rms_norm_kernel::DTYPES);
    add("gemm_nt_kernel", gemm::gemm_nt_kernel::CONFIGS, gemm::gemm_nt_kernel::DTYPES);
    add("gemm_nn_kernel", gemm::gemm_nn_kernel::CONFIGS, gemm::gemm_nn_kernel::DTYPES);
    add("gemm_tn_kernel", gemm::gemm_tn_kernel::CONFIGS, gemm::gemm_tn_kernel::DTYPES);
    add("gemm_tt_kernel", gemm::gemm_tt_kernel::CONFIGS, gemm::gemm_tt_kernel::DTYPES);
    add("gemm_softcap_kernel", gemm::gemm_softcap_kernel::CONFIGS, gemm::gemm_softcap_kernel::DTYPES);
    add("dual_gemm_kernel", dual_gemm::dual_gemm_kernel::CONFIGS, dual_gemm::dual_gemm_kernel::DTYPES);
    if arch == "sm_90a" {
        add("gemm_wgmma_kernel", gemm::gemm_wgmma_kernel::CONFIGS, gemm::gemm_wgmma_kernel::DTYPES);
        add("gemm_tma_kernel", gemm::gemm_tma_kernel::CONFIGS, gemm::gemm_tma_kernel::DTYPES);
        add("dual_gemm_tma_kernel", dual_gemm::dual_gemm_tma_kernel::CONFIGS, dual_gemm::dual_gemm_tma_kernel::DTYPES);
        add("gemm_fp8_kernel", gemm_fp8::gemm_fp8_kernel::CONFIGS, gemm_fp8::gemm_fp8_kernel::DTYPES);
    }
    names
}

#[test]
fn every_kernel_assembles_without_spills() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/cubins");
    for arch in ["sm_80", "sm_90a"] {
        let path = root.join(arch).join("resources.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("no ptxas report at {} ({e}): run `cargo xtask build --arch all` first (`cargo xtask test` does)", path.display())
        });
        let report: serde_json::Value = serde_json::from_str(&text).expect("resources.json is JSON");
        let kernels = report["kernels"].as_array().expect("resources.json has a `kernels` list");
        // `arch = sm_90a` kernels are left out of the other builds.
        if arch != "sm_90a" {
            let hopper = kernels.iter().find(|k| k["name"].as_str().is_some_and(|n| ["gemm_wgmma_kernel", "gemm_tma_kernel", "dual_gemm_tma_kernel", "gemm_fp8_kernel"].iter().any(|h| n.starts_with(h))));
            assert!(hopper.is_none(), "{arch}: holds {}, which is sm_90a only", hopper.unwrap()["name"]);
        }
        for name in expected_entries(arch) {
            let k = kernels
                .iter()
                .find(|k| k["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{arch}: kernel {name} is missing from the cubin"));
            if k["spill_allowed"] == true {
                continue;
            }
            for field in ["spill_store_bytes", "spill_load_bytes", "stack_frame_bytes"] {
                assert_eq!(k[field].as_u64(), Some(0), "{arch}: {name} has {field} = {}", k[field]);
            }
        }
    }
}
