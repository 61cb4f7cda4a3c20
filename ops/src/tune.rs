//! Tuned tables: which config of its kernel each op runs, per GPU arch and
//! shape bucket.
//!
//! The tuner (`cargo xtask autotune --arch sm90`; its code is
//! `bench/src/tune.rs`) follows four rules:
//! 1. The candidates are the configs the kernel declares that fit the GPU:
//!    shared memory within its per-block limit, and no local memory (spills)
//!    in the compiled function, as ptxas reports it in the image.
//! 2. Shapes fall into buckets: every dimension rounded up to a power of two
//!    (at least 16). The tuner times one representative shape per bucket.
//! 3. Every candidate's result is checked against a reference before it is
//!    timed; a wrong one is recorded as invalid and never chosen.
//! 4. The winner has the lowest median time (CUDA events, L2 flushed before
//!    each repetition). The candidates' repetitions are interleaved, so that
//!    clock drift during a long comparison shifts them all alike.
//!
//! The tables are `tuned/<arch>.toml`, compiled into this crate. Each op's
//! entry carries its provenance: the hash of the sources its kernels are
//! built from (`build.rs` hashes them again at every build), the toolchain,
//! the device and the date. At dispatch ([`config`]):
//! - a bucket with a valid entry runs its winner;
//! - a bucket with no entry runs the op's heuristic (its `default_config`),
//!   and says so in a `log` record (info level);
//! - an entry whose source hash differs from this build's is refused with a
//!   message to re-tune (on stderr, once per op), and the heuristic runs.
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, OnceLock};

use rustile::KernelConfig;
use serde::{Deserialize, Serialize};

include!(concat!(env!("OUT_DIR"), "/sources.rs"));

/// The hash of the sources `op`'s kernels are built from (see `build.rs`).
pub fn source_hash(op: &str) -> Option<&'static str> {
    SOURCE_HASHES.iter().find(|(o, _)| *o == op).map(|(_, h)| *h)
}

/// One arch's table (`tuned/<arch>.toml`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Table {
    /// `sm90` or `sm80`.
    pub arch: String,
    #[serde(default, rename = "op")]
    pub ops: Vec<OpTable>,
}

/// Every bucket tuned for one op, and where the numbers come from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpTable {
    pub name: String,
    pub kernel: String,
    /// `source_hash(name)` of the build that was tuned.
    pub source_hash: String,
    pub toolchain: String,
    pub device: String,
    pub date: String,
    #[serde(default, rename = "bucket")]
    pub buckets: Vec<Bucket>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Bucket {
    /// The bucket, as `bucket_name` writes it (`4096x4096x4096`).
    pub bucket: String,
    /// The shape that was timed for it.
    pub shape: String,
    /// The winning config's name (`KernelConfig::name`).
    pub best: String,
    pub candidates: Vec<Candidate>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Candidate {
    pub config: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
    /// Why the candidate was not timed or cannot be chosen (a wrong result,
    /// too much shared memory, spills).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

impl Table {
    pub fn parse(text: &str) -> Result<Table, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a table always serializes")
    }
    pub fn op(&self, name: &str) -> Option<&OpTable> {
        self.ops.iter().find(|o| o.name == name)
    }
}

/// The bucket of a shape: each dimension rounded up to a power of two, at least 16.
pub fn bucket_name(shape: &[usize]) -> String {
    bucket(shape).iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

fn bucket(shape: &[usize]) -> Vec<usize> {
    shape.iter().map(|&d| d.max(16).next_power_of_two()).collect()
}

/// The table name for a compute capability: one per family we tune.
pub fn arch_of(cc: (u32, u32)) -> Option<&'static str> {
    match cc {
        (9, 0) => Some("sm90"),
        (8, _) => Some("sm80"),
        _ => None,
    }
}

/// The tables compiled in, by arch.
fn tables() -> &'static [(&'static str, Result<Table, String>)] {
    static TABLES: OnceLock<Vec<(&str, Result<Table, String>)>> = OnceLock::new();
    TABLES.get_or_init(|| {
        vec![
            ("sm90", Table::parse(include_str!("../../tuned/sm90.toml"))),
            ("sm80", Table::parse(include_str!("../../tuned/sm80.toml"))),
        ]
    })
}

/// Why a table names no winner.
#[derive(Debug, Clone, PartialEq)]
pub enum Miss {
    /// The shape's bucket was not tuned: the heuristic serves it, as designed.
    NoBucket(String),
    /// No table for the GPU, no entry for the op, or one tuned for other
    /// kernel sources or configs: the table needs re-tuning.
    Unusable(String),
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Miss::NoBucket(why) | Miss::Unusable(why) => f.write_str(why),
        }
    }
}

/// What the table for `arch` says `op` should run in `bucket` (a GEMM's is
/// [`bucket_name`] of its shape): the index of its winner in `configs`, or
/// why there is none.
pub fn lookup(arch: &str, op: &str, configs: &[KernelConfig], bucket: &str) -> Result<usize, Miss> {
    let Some((_, table)) = tables().iter().find(|(a, _)| *a == arch) else {
        return Err(Miss::Unusable(format!("no tuned table for {arch}")));
    };
    let table = table.as_ref().map_err(|e| Miss::Unusable(format!("tuned/{arch}.toml does not parse ({e})")))?;
    pick(table, op, source_hash(op).unwrap_or("?"), configs, bucket)
}

/// `lookup` in one table, for sources that hash to `want`.
fn pick(table: &Table, op: &str, want: &str, configs: &[KernelConfig], bucket: &str) -> Result<usize, Miss> {
    let arch = &table.arch;
    let entry = table.op(op).ok_or_else(|| Miss::Unusable(format!("tuned/{arch}.toml has no entry for {op}")))?;
    if entry.source_hash != want {
        return Err(Miss::Unusable(format!(
            "tuned/{arch}.toml was tuned for {op} sources {}, these are {want}: refused; re-tune with \
             `cargo xtask autotune --arch {arch} --op {op}`",
            entry.source_hash
        )));
    }
    let b = entry.buckets.iter().find(|b| b.bucket == bucket).ok_or_else(|| Miss::NoBucket(format!("tuned/{arch}.toml has no {op} bucket {bucket}")))?;
    configs.iter().position(|c| c.name == b.best).ok_or_else(|| {
        Miss::Unusable(format!("tuned/{arch}.toml picks {} for {op} bucket {bucket}, which the kernel no longer has", b.best))
    })
}

/// The config `op` runs at `shape` on a GPU of compute capability `cc`: the
/// tuned winner, else `heuristic()`. Every launch asks, so the table's answer
/// is looked up once per (GPU, op, bucket) and remembered. A shape outside
/// the tuned buckets is normal (the heuristic serves it), so that miss is a
/// `log` record at info level (`RUST_LOG=rustile_ops=info` shows it where
/// the program installs a logger, as the bench does); a table tuned for other
/// kernel sources needs the user to re-tune, so that is said on stderr, once
/// per GPU and op.
pub fn config(cc: (u32, u32), op: &'static str, configs: &[KernelConfig], shape: &[usize], heuristic: impl FnOnce() -> usize) -> usize {
    config_in_bucket(cc, op, configs, bucket_name(shape), heuristic)
}

/// [`config`] for an op whose buckets are not its shape rounded up (the
/// attention forward's: head dim, mask and lengths, named by the op).
pub fn config_in_bucket(cc: (u32, u32), op: &'static str, configs: &[KernelConfig], bucket: String, heuristic: impl FnOnce() -> usize) -> usize {
    type Key = ((u32, u32), &'static str, String);
    static CHOSEN: OnceLock<Mutex<HashMap<Key, Option<usize>>>> = OnceLock::new();
    static REFUSED: OnceLock<Mutex<HashSet<((u32, u32), &'static str)>>> = OnceLock::new();
    let mut chosen = CHOSEN.get_or_init(Default::default).lock().unwrap();
    // Every launch asks: the key is built once, and copied only the first time.
    let key = (cc, op, bucket);
    let tuned = match chosen.get(&key) {
        Some(&tuned) => tuned,
        None => {
            let arch = arch_of(cc).unwrap_or("this GPU");
            let tuned = lookup(arch, op, configs, &key.2)
                .map_err(|why| match why {
                    Miss::NoBucket(why) => log::info!("{why}; {op} runs its heuristic (default_config)"),
                    Miss::Unusable(why) => {
                        if REFUSED.get_or_init(Default::default).lock().unwrap().insert((cc, op)) {
                            eprintln!("rustile: {why}; {op} runs its heuristic (default_config)");
                        }
                    }
                })
                .ok();
            chosen.insert(key, tuned);
            tuned
        }
    };
    drop(chosen);
    tuned.unwrap_or_else(heuristic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_each_dimension_up_to_a_power_of_two() {
        assert_eq!(bucket_name(&[4096, 4096, 4096]), "4096x4096x4096");
        assert_eq!(bucket_name(&[8192, 11008, 4096]), "8192x16384x4096");
        assert_eq!(bucket_name(&[1, 17, 1365]), "16x32x2048");
    }

    #[test]
    fn the_committed_tables_parse_and_name_real_configs() {
        let kernels: [(&str, &[KernelConfig]); 9] = [
            ("gemm_nt", crate::gemm::gemm_nt_kernel::CONFIGS),
            ("gemm_wgmma", crate::gemm::gemm_wgmma_kernel::CONFIGS),
            ("gemm_tma", crate::gemm::gemm_tma_kernel::CONFIGS),
            ("dual_gemm", crate::dual_gemm::dual_gemm_kernel::CONFIGS),
            ("dual_gemm_tma", crate::dual_gemm::dual_gemm_tma_kernel::CONFIGS),
            ("gemm_fp8", crate::gemm_fp8::gemm_fp8_kernel::CONFIGS),
            ("attention", crate::attention::attention_fwd_wgmma_kernel::CONFIGS),
            ("dual_gemm_nvfp4", crate::dual_gemm_nvfp4::dual_gemm_nvfp4_ws_kernel::CONFIGS),
            ("gemm_nvfp4", crate::dual_gemm_nvfp4::gemm_nvfp4_ws_kernel::CONFIGS),
        ];
        for (arch, table) in tables() {
            let table = table.as_ref().unwrap_or_else(|e| panic!("tuned/{arch}.toml: {e}"));
            assert_eq!(table.arch, *arch);
            for op in &table.ops {
                let (_, configs) = kernels.iter().find(|(k, _)| *k == op.name).unwrap_or_else(|| panic!("unknown op {}", op.name));
                for b in &op.buckets {
                    assert!(configs.iter().any(|c| c.name == b.best), "{arch} {} {}: no config {}", op.name, b.bucket, b.best);
                    let best = b.candidates.iter().find(|c| c.config == b.best).expect("the winner is a candidate");
                    assert!(best.invalid.is_none(), "{arch} {} {}: the winner was invalid", op.name, b.bucket);
                    let fastest = b.candidates.iter().filter(|c| c.invalid.is_none()).filter_map(|c| c.median_ms).fold(f64::INFINITY, f64::min);
                    assert_eq!(best.median_ms, Some(fastest), "{arch} {} {}: the winner is not the fastest valid candidate", op.name, b.bucket);
                }
            }
        }
    }

    #[test]
    fn a_table_round_trips_through_toml() {
        let t = Table {
            arch: "sm90".into(),
            ops: vec![OpTable {
                name: "gemm_nt".into(),
                kernel: "gemm_nt_kernel".into(),
                source_hash: "abc".into(),
                buckets: vec![Bucket {
                    bucket: "16x16x16".into(),
                    shape: "16x16x16".into(),
                    best: "X".into(),
                    candidates: vec![
                        Candidate { config: "X".into(), median_ms: Some(1.0), invalid: None },
                        Candidate { config: "Y".into(), median_ms: None, invalid: Some("wrong".into()) },
                    ],
                }],
                ..OpTable::default()
            }],
        };
        let back = Table::parse(&t.to_toml()).unwrap();
        assert_eq!(back.to_toml(), t.to_toml());
    }

    #[test]
    fn a_stale_entry_is_refused() {
        let configs = crate::gemm::gemm_nt_kernel::CONFIGS;
        // No table for this arch, and an op nobody tuned: both fall back with a reason.
        assert!(lookup("sm70", "gemm_nt", configs, "64x64x64").unwrap_err().to_string().contains("no tuned table"));
        assert!(lookup("sm90", "no_such_op", configs, "64x64x64").unwrap_err().to_string().contains("no entry"));
        let best = configs[2].name;
        let table = Table {
            arch: "sm90".into(),
            ops: vec![OpTable {
                name: "gemm_nt".into(),
                source_hash: "old".into(),
                buckets: vec![Bucket { bucket: "4096x4096x4096".into(), best: best.into(), ..Bucket::default() }],
                ..OpTable::default()
            }],
        };
        assert_eq!(pick(&table, "gemm_nt", "old", configs, &bucket_name(&[4000, 4096, 3000])), Ok(2));
        assert!(matches!(pick(&table, "gemm_nt", "old", configs, &bucket_name(&[64, 64, 64])), Err(Miss::NoBucket(why)) if why.contains("no gemm_nt bucket 64x64x64")));
        let stale = pick(&table, "gemm_nt", "new", configs, &bucket_name(&[4096, 4096, 4096])).unwrap_err();
        assert!(matches!(&stale, Miss::Unusable(why) if why.contains("refused") && why.contains("cargo xtask autotune")), "{stale}");
    }
}
