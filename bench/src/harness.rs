//! Measuring and reporting, shared by every op's bench.
//!
//! The rules (docs: "Measuring honestly"): warm up first, time each repetition
//! on its own with CUDA events, flush L2 before each one so inputs come from
//! DRAM, report the median, and put every figure next to the best baseline
//! measured in the same run.

use std::path::Path;
use std::process::Command;

use rustile_host::{Gpu, Result, Tensor};
use serde::{Deserialize, Serialize};

/// Our own implementation's name in the `impl` column.
pub const RUSTILE: &str = "rustile";

#[derive(Clone, Debug)]
pub struct MeasureCfg {
    /// Untimed runs before timing: at least this many...
    pub warmup: usize,
    /// ...and at least this long in total, so clocks and caches settle.
    pub warmup_ms: f64,
    /// Timed repetitions.
    pub reps: usize,
    /// Overwrite a buffer of twice the L2 size before each repetition.
    pub flush_l2: bool,
}

impl Default for MeasureCfg {
    fn default() -> Self {
        MeasureCfg { warmup: 5, warmup_ms: 25.0, reps: 100, flush_l2: true }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    pub median_ms: f64,
    pub min_ms: f64,
    pub p20_ms: f64,
    pub p80_ms: f64,
    pub reps: usize,
}

impl Stats {
    pub fn from_times(mut ms: Vec<f64>) -> Stats {
        assert!(!ms.is_empty(), "no timings to summarise");
        ms.sort_by(f64::total_cmp);
        Stats {
            median_ms: percentile(&ms, 0.5),
            min_ms: ms[0],
            p20_ms: percentile(&ms, 0.2),
            p80_ms: percentile(&ms, 0.8),
            reps: ms.len(),
        }
    }
}

/// Linear interpolation between the two nearest ranks of sorted data.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Times the GPU work that `run` issues.
///
/// All repetitions are queued before waiting on any: each is flush, start
/// event, `run`, end event. While the flush runs, the host is already queuing
/// the kernel, so the start event does not also time the launch latency.
pub fn measure(gpu: &Gpu, cfg: &MeasureCfg, mut run: impl FnMut() -> Result<()>) -> Result<Stats> {
    Ok(measure_each(gpu, cfg, 1, |_| run())?.remove(0))
}

/// `measure` of `run(0)`, …, `run(count − 1)`, their repetitions interleaved
/// (rep r of every candidate before rep r + 1 of any), so that clock drift
/// over a long comparison shifts them all alike (the tuner compares configs).
pub fn measure_each(gpu: &Gpu, cfg: &MeasureCfg, count: usize, mut run: impl FnMut(usize) -> Result<()>) -> Result<Vec<Stats>> {
    let mut flush = if cfg.flush_l2 { Some(l2_flush_buffer(gpu)?) } else { None };

    for i in 0..count {
        // The first call may load modules; keep it out of the estimate.
        run(i)?;
        gpu.sync()?;
        let once_ms = gpu.time(|| run(i))? as f64;
        let warmup = cfg.warmup.max((cfg.warmup_ms / once_ms.max(1e-3)).ceil() as usize).min(100_000);
        for _ in 0..warmup {
            run(i)?;
        }
    }

    let reps = cfg.reps.max(1);
    let events = (0..reps * count).map(|_| gpu.event_pair()).collect::<Result<Vec<_>>>()?;
    for (at, (start, end)) in events.iter().enumerate() {
        if let Some(buf) = flush.as_mut() {
            gpu.fill_bytes(buf, 0)?;
        }
        gpu.record(start)?;
        run(at % count)?;
        gpu.record(end)?;
    }
    let mut times = vec![Vec::with_capacity(reps); count];
    for (at, (s, e)) in events.iter().enumerate() {
        times[at % count].push(s.elapsed_ms(e)? as f64);
    }
    Ok(times.into_iter().map(Stats::from_times).collect())
}

/// A buffer of twice the L2 size: writing it evicts whatever a rep left behind.
fn l2_flush_buffer(gpu: &Gpu) -> Result<Tensor<f32>> {
    let bytes = 2 * gpu.l2_bytes().max(1 << 20);
    gpu.alloc::<f32>(&[bytes / 4])
}

/// Device-to-device copy bandwidth in GB/s (1e9 bytes/s), counting the bytes
/// read and the bytes written: the ceiling a memory-bound op can aim at.
pub fn copy_bandwidth(gpu: &Gpu, cfg: &MeasureCfg) -> Result<f64> {
    const BYTES: usize = 1 << 30;
    let mut src = gpu.alloc::<f32>(&[BYTES / 4])?;
    gpu.fill_bytes(&mut src, 0x3C)?;
    let mut dst = gpu.alloc::<f32>(&[BYTES / 4])?;
    let stats = measure(gpu, cfg, || gpu.copy_d2d(&src, &mut dst))?;
    Ok(gb_per_s(2.0 * BYTES as f64, stats.median_ms))
}

pub fn gb_per_s(bytes: f64, ms: f64) -> f64 {
    bytes / (ms * 1e-3) / 1e9
}

/// "8192x8192"; the torch script writes shapes the same way, which is how
/// its rows are matched with ours.
pub fn shape_str(shape: &[usize]) -> String {
    shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

/// One line of the table: one implementation of one op at one size.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Row {
    pub op: String,
    pub shape: String,
    pub dtype: String,
    #[serde(rename = "impl")]
    pub imp: String,
    pub median_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// Bytes the op must move at least (for GB/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<f64>,
    /// Floating-point operations (for TFLOP/s); preferred over bytes when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<f64>,
    // Filled in by `Report::finish`:
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gb_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflop_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pct_of_copy: Option<f64>,
    /// Best baseline's time over ours, on our rows only; > 1 means we are faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_best_baseline: Option<f64>,
}

impl Row {
    pub fn new(op: &str, shape: &[usize], dtype: &str, imp: &str, stats: Stats) -> Row {
        Row {
            op: op.into(),
            shape: shape_str(shape),
            dtype: dtype.into(),
            imp: imp.into(),
            median_ms: stats.median_ms,
            stats: Some(stats),
            ..Row::default()
        }
    }
    /// Ours: the default config (`rustile`) or one of a sweep (`rustile cfg=…`).
    pub fn is_ours(&self) -> bool {
        self.imp.starts_with(RUSTILE)
    }

    pub fn bytes(mut self, bytes: f64) -> Row {
        self.bytes = Some(bytes);
        self
    }
    #[allow(dead_code)] // for the matrix ops, which report TFLOP/s
    pub fn flops(mut self, flops: f64) -> Row {
        self.flops = Some(flops);
        self
    }
    fn key(&self) -> (&str, &str, &str) {
        (&self.op, &self.shape, &self.dtype)
    }
}

/// Everything one bench run produced, with where and how it was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub device: String,
    pub date_utc: String,
    pub commit: String,
    pub command: String,
    pub copy_gb_s: Option<f64>,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn new(device: &str, copy_gb_s: Option<f64>) -> Report {
        Report {
            device: device.into(),
            date_utc: utc_now(),
            commit: git_commit(),
            command: command_line(),
            copy_gb_s,
            rows: vec![],
        }
    }

    /// Derives throughput and ratios, and groups each op's rows: ours first,
    /// then the baselines from fastest to slowest.
    pub fn finish(&mut self) {
        let mut order: Vec<(String, String, String)> = vec![];
        for r in &self.rows {
            let k = r.key();
            if !order.iter().any(|o| (o.0.as_str(), o.1.as_str(), o.2.as_str()) == k) {
                order.push((k.0.into(), k.1.into(), k.2.into()));
            }
        }
        let group = |r: &Row| order.iter().position(|o| (o.0.as_str(), o.1.as_str(), o.2.as_str()) == r.key());
        self.rows.sort_by(|a, b| {
            (group(a), !a.is_ours(), a.median_ms).partial_cmp(&(group(b), !b.is_ours(), b.median_ms)).unwrap()
        });

        let best_baseline: Vec<Option<f64>> = self
            .rows
            .iter()
            .map(|r| {
                self.rows
                    .iter()
                    .filter(|b| b.key() == r.key() && !b.is_ours() && b.median_ms > 0.0)
                    .map(|b| b.median_ms)
                    .min_by(f64::total_cmp)
            })
            .collect();
        for (r, best) in self.rows.iter_mut().zip(best_baseline) {
            r.tflop_s = r.flops.map(|f| f / (r.median_ms * 1e-3) / 1e12);
            r.gb_s = r.bytes.map(|b| gb_per_s(b, r.median_ms));
            r.pct_of_copy = match (r.gb_s, self.copy_gb_s) {
                (Some(g), Some(c)) if c > 0.0 => Some(100.0 * g / c),
                _ => None,
            };
            r.vs_best_baseline = match best {
                Some(b) if r.is_ours() && r.median_ms > 0.0 => Some(b / r.median_ms),
                _ => None,
            };
        }
    }

    pub fn print_table(&self) {
        println!("device: {}   copy bandwidth: {}", self.device, fmt_opt(self.copy_gb_s, "GB/s", 0));
        println!(
            "{:<11} {:<18} {:<6} {:<15} {:>12} {:>16} {:>8} {:>10}",
            "op", "shape", "dtype", "impl", "median (us)", "throughput", "% copy", "vs best"
        );
        let mut last = None;
        for r in &self.rows {
            if last.is_some() && last != Some(r.key()) {
                println!();
            }
            last = Some(r.key());
            let throughput = match (r.tflop_s, r.gb_s) {
                (Some(t), _) => format!("{t:.1} TFLOP/s"),
                (None, Some(g)) => format!("{g:.0} GB/s"),
                _ => "-".into(),
            };
            println!(
                "{:<11} {:<18} {:<6} {:<15} {:>12.1} {:>16} {:>8} {:>10}",
                r.op,
                r.shape,
                r.dtype,
                r.imp,
                r.median_ms * 1e3,
                throughput,
                fmt_opt(r.pct_of_copy, "%", 1),
                fmt_opt(r.vs_best_baseline, "x", 2),
            );
        }
    }

    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

fn fmt_opt(x: Option<f64>, unit: &str, digits: usize) -> String {
    match x {
        Some(v) if unit == "x" || unit == "%" => format!("{v:.digits$}{unit}"),
        Some(v) => format!("{v:.digits$} {unit}"),
        None => "-".into(),
    }
}

/// RUSTILE_COMMIT wins (the GPU machine gets a copy of the tree without .git).
fn git_commit() -> String {
    if let Ok(c) = std::env::var("RUSTILE_COMMIT") {
        return c;
    }
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn command_line() -> String {
    std::env::args()
        .map(|a| if a.contains(char::is_whitespace) { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Now as "YYYY-MM-DDTHH:MM:SSZ".
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc_string(secs)
}

fn utc_string(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's well-known algorithm, in eras of 400 years).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let s = Stats::from_times(vec![5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!((s.min_ms, s.median_ms, s.reps), (1.0, 3.0, 5));
        assert!((s.p20_ms - 1.8).abs() < 1e-12 && (s.p80_ms - 4.2).abs() < 1e-12);
        assert_eq!(Stats::from_times(vec![7.0]).p80_ms, 7.0);
    }

    #[test]
    fn dates() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_string(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    fn row(imp: &str, ms: f64) -> Row {
        let stats = Stats { median_ms: ms, min_ms: ms, p20_ms: ms, p80_ms: ms, reps: 1 };
        Row::new("softmax", &[8192, 8192], "bf16", imp, stats).bytes(2e9)
    }

    #[test]
    fn ratios_and_order() {
        let mut rep = Report::new("test", Some(2000.0));
        rep.rows = vec![row("torch eager", 2.0), row(RUSTILE, 1.0), row("torch.compile", 1.5)];
        rep.finish();
        let imps: Vec<_> = rep.rows.iter().map(|r| r.imp.as_str()).collect();
        assert_eq!(imps, [RUSTILE, "torch.compile", "torch eager"]);
        let ours = &rep.rows[0];
        assert_eq!(ours.vs_best_baseline, Some(1.5));
        assert_eq!(ours.gb_s, Some(2000.0));
        assert_eq!(ours.pct_of_copy, Some(100.0));
        assert_eq!(rep.rows[1].vs_best_baseline, None);
        rep.print_table();

        let json = serde_json::to_string(&rep).unwrap();
        assert!(json.contains("\"impl\":\"rustile\""));
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.rows.len(), 3);
    }

    #[test]
    fn status_writes_to_the_latest_bar() {
        let (_, bar) = (progress(2, "first"), progress(3, "second"));
        status("gemm 4096x4096x4096: config BM128_BN256".into());
        assert_eq!(bar.message(), "gemm 4096x4096x4096: config BM128_BN256");
    }

    #[test]
    fn reads_torch_rows() {
        let text = r#"{"op":"add","shape":"268435456","dtype":"bf16","impl":"torch eager","median_ms":0.6,"bytes":1.6e9}"#;
        let r: Row = serde_json::from_str(text).unwrap();
        assert_eq!((r.imp.as_str(), r.bytes), ("torch eager", Some(1.6e9)));
    }
}

/// A progress bar on stderr over `len` steps of `what` (the op being tuned
/// or benched), its message saying what runs now. Drawn only on a terminal,
/// so logs written to a file stay plain lines. It is the bar [`status`]
/// writes to until the next one is made.
pub fn progress(len: usize, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len as u64);
    let style = indicatif::ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} {wide_msg} ({elapsed})").expect("a valid template");
    bar.set_style(style.progress_chars("=> "));
    bar.set_prefix(what.to_string());
    *CURRENT_BAR.lock().unwrap() = Some(bar.clone());
    bar
}

static CURRENT_BAR: std::sync::Mutex<Option<indicatif::ProgressBar>> = std::sync::Mutex::new(None);

/// What is being measured now (op, shape, config), on the latest
/// [`progress`] bar: the benches deep inside a run say it without being
/// handed the bar.
pub fn status(what: String) {
    if let Some(bar) = CURRENT_BAR.lock().unwrap().as_ref() {
        bar.set_message(what);
    }
}
