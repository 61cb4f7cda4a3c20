//! The bench's results as a person reads them: for a run, an SVG chart a
//! op of our time against each baseline (the ratio, > 1 where we are
//! faster) and a roofline of every row that states its work; across runs,
//! one headline table of each op's latest figures, which `rustile-report`
//! writes at the top of `bench/RESULTS.md`.
//!
//! Everything here reads [`Report`]s, the JSON the bench writes, so charts
//! and table can be made again from `bench/runs/` at any time.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::harness::{Report, Row, RUSTILE};

/// The H100 SXM's dense bf16 tensor-core peak (its datasheet's figure): the
/// roofline's flat roof where the run measured none of its own.
pub const SPEC_PEAK_TFLOP_S: f64 = 989.0;

type Failed = Box<dyn std::error::Error>;

/// Each of our rows of one op with the baselines measured beside it: `(shape dtype, [(baseline, its time over ours)])`.
fn ratios<'a>(rows: &'a [Row], op: &str) -> Vec<(String, Vec<(&'a str, f64)>)> {
    rows.iter()
        .filter(|r| r.op == op && r.imp == RUSTILE && r.median_ms > 0.0)
        .map(|ours| {
            let against = rows
                .iter()
                .filter(|b| b.op == ours.op && b.shape == ours.shape && b.dtype == ours.dtype && !b.is_ours() && b.median_ms > 0.0)
                .map(|b| (b.imp.as_str(), b.median_ms / ours.median_ms))
                .collect();
            (format!("{} {}", ours.shape, ours.dtype), against)
        })
        .filter(|(_, against): &(String, Vec<_>)| !against.is_empty())
        .collect()
}

const COLORS: [RGBColor; 6] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40), RGBColor(148, 103, 189), RGBColor(140, 86, 75)];

/// One op's chart: a group of bars a shape, a bar a baseline, its height
/// the baseline's time over ours, and the line of parity at 1.
fn ratio_chart(report: &Report, op: &str, path: &Path) -> Result<bool, Failed> {
    let groups = ratios(&report.rows, op);
    if groups.is_empty() {
        return Ok(false);
    }
    let mut names: Vec<&str> = groups.iter().flat_map(|(_, a)| a.iter().map(|(n, _)| *n)).collect();
    names.sort();
    names.dedup();
    // Headroom above the tallest bar for the legend (upper right).
    let top = groups.iter().flat_map(|(_, a)| a.iter().map(|(_, r)| *r)).fold(1.0f64, f64::max) * 1.2 + 0.15 * names.len() as f64;
    let labels: Vec<String> = groups.iter().map(|(g, _)| g.clone()).collect();
    // A group is wide enough for its bars and for its label written level
    // (about 6 px a character at 10 px): rotated labels ran into the bars.
    let label_px = labels.iter().map(|l| 6 * l.len() + 12).max().unwrap_or(0);
    let width = (100 + groups.len() * (40 + 28 * names.len()).max(label_px)).clamp(640, 2400) as u32;
    let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{op}: baseline time / ours (> 1: ours faster)"), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..groups.len() as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 { labels.get(i).cloned().unwrap_or_default() } else { String::new() }
        })
        .x_label_style(("sans-serif", 10))
        .x_desc(format!("{}, {}", report.device, report.commit))
        .y_desc("ratio")
        .draw()?;
    let slot = 0.8 / names.len() as f64;
    for (k, name) in names.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let bars = groups.iter().enumerate().filter_map(|(i, (_, against))| {
            let &(_, ratio) = against.iter().find(|(n, _)| n == name)?;
            let x0 = i as f64 + 0.1 + slot * k as f64;
            Some(Rectangle::new([(x0, 0.0), (x0 + slot * 0.9, ratio)], color.filled()))
        });
        chart.draw_series(bars)?.label(name.to_string()).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart.draw_series(LineSeries::new([(0.0, 1.0), (groups.len() as f64, 1.0)], BLACK.stroke_width(1)))?;
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).position(SeriesLabelPosition::UpperRight).draw()?;
    root.present()?;
    Ok(true)
}

/// Our rows that state both their FLOPs and their bytes, on the roofline:
/// achieved TFLOP/s against FLOPs per byte, under the run's measured copy
/// bandwidth and the tensor-core peak (the best TFLOP/s any row of the run
/// reached, if above the datasheet's, else the datasheet's).
fn roofline(report: &Report, path: &Path) -> Result<bool, Failed> {
    let points: Vec<(&Row, f64, f64)> = report
        .rows
        .iter()
        .filter(|r| r.imp == RUSTILE && r.median_ms > 0.0)
        .filter_map(|r| Some((r, r.flops? / r.bytes?, r.flops? / (r.median_ms * 1e-3) / 1e12)))
        .collect();
    let Some(copy) = report.copy_gb_s.filter(|_| !points.is_empty()) else { return Ok(false) };
    let peak = report.rows.iter().filter_map(|r| r.tflop_s).fold(SPEC_PEAK_TFLOP_S, f64::max);
    let (x_lo, x_hi) = points.iter().fold((1.0f64, 1000.0f64), |(lo, hi), p| (lo.min(p.1 / 2.0), hi.max(p.1 * 2.0)));
    let y_lo = points.iter().map(|p| p.2 / 2.0).fold(1.0f64, f64::min);
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("roofline, {}, {} (copy {copy:.0} GB/s measured; peak {peak:.0} TFLOP/s)", report.device, report.commit), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..peak * 1.5).log_scale())?;
    chart.configure_mesh().x_desc("FLOPs per byte").y_desc("TFLOP/s").draw()?;
    let roof = (0..=64).map(|i| {
        let x = x_lo * (x_hi / x_lo).powf(i as f64 / 64.0);
        (x, (x * copy / 1e3).min(peak))
    });
    chart.draw_series(LineSeries::new(roof, BLACK.stroke_width(2)))?.label("roof").legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
    let mut ops: Vec<&str> = points.iter().map(|p| p.0.op.as_str()).collect();
    ops.sort();
    ops.dedup();
    for (k, op) in ops.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mine = points.iter().filter(|p| p.0.op == *op).map(|p| Circle::new((p.1, p.2), 4, color.filled()));
        chart.draw_series(mine)?.label(op.to_string()).legend(move |(x, y)| Circle::new((x + 5, y), 4, color.filled()));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).position(SeriesLabelPosition::LowerRight).draw()?;
    root.present()?;
    Ok(true)
}

/// The charts of one run, beside its JSON: `<stem>-<op>.svg` for each op
/// with a baseline, `<stem>-roofline.svg`. Returns the files written.
pub fn charts(report: &Report, json: &Path) -> Result<Vec<PathBuf>, Failed> {
    let dir = json.parent().unwrap_or(Path::new("."));
    let stem = json.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
    let mut ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
    ops.sort();
    ops.dedup();
    let mut written = vec![];
    for op in ops {
        let path = dir.join(format!("{stem}-{}.svg", op.replace(['/', ' '], "_")));
        if ratio_chart(report, op, &path)? {
            written.push(path);
        }
    }
    let path = dir.join(format!("{stem}-roofline.svg"));
    if roofline(report, &path)? {
        written.push(path);
    }
    Ok(written)
}

/// The best baseline measured beside `row` in its run.
fn best_beside<'a>(report: &'a Report, row: &Row) -> Option<&'a Row> {
    report
        .rows
        .iter()
        .filter(|b| b.op == row.op && b.shape == row.shape && b.dtype == row.dtype && !b.is_ours() && b.median_ms > 0.0)
        .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
}

/// One line a (op, shape, dtype): our latest row across `reports` (by the
/// run's date) that was measured beside a baseline, else our latest, with
/// the best baseline of that same run.
pub fn headline(reports: &[Report]) -> String {
    let mut latest: BTreeMap<(String, String, String), (&Report, &Row)> = BTreeMap::new();
    for report in reports {
        for row in report.rows.iter().filter(|r| r.imp == RUSTILE) {
            let key = (row.op.clone(), row.shape.clone(), row.dtype.clone());
            let rank = |r: &Report, row: &Row| (best_beside(r, row).is_some(), r.date_utc.clone());
            if latest.get(&key).is_none_or(|(kept, kept_row)| rank(kept, kept_row) < rank(report, row)) {
                latest.insert(key, (report, row));
            }
        }
    }
    let mut out = String::from(
        "| op | shape | dtype | ours (ms) | throughput | best baseline (ms) | ratio | date | device | commit |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for ((op, shape, dtype), (report, row)) in &latest {
        let best = best_beside(report, row);
        let throughput = match (row.tflop_s, row.gb_s) {
            (Some(t), _) => format!("{t:.0} TFLOP/s"),
            (None, Some(g)) => format!("{g:.0} GB/s"),
            _ => String::new(),
        };
        let (base, ratio) = match best {
            Some(b) => (format!("{} {:.4}", b.imp, b.median_ms), format!("{:.2}×", b.median_ms / row.median_ms)),
            None => (String::new(), String::new()),
        };
        let date = report.date_utc.get(..10).unwrap_or(&report.date_utc);
        out += &format!("| {op} | {shape} | {dtype} | {:.4} | {throughput} | {base} | {ratio} | {date} | {} | {} |\n", row.median_ms, report.device, report.commit);
    }
    out
}

/// The bench JSON files under `paths` (files, or folders walked), each with
/// its report; files that are not a bench report are named on stderr and skipped.
pub fn read_reports(paths: &[PathBuf]) -> Vec<(PathBuf, Report)> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| e.path()).collect();
            entries.sort();
            for e in entries {
                walk(&e, out);
            }
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p.to_path_buf());
        }
    }
    let mut files = vec![];
    for p in paths {
        walk(p, &mut files);
    }
    files
        .into_iter()
        .filter_map(|f| match std::fs::read_to_string(&f).map_err(|e| e.to_string()).and_then(|t| serde_json::from_str::<Report>(&t).map_err(|e| e.to_string())) {
            Ok(mut r) => {
                r.finish();
                Some((f, r))
            }
            Err(e) => {
                eprintln!("skipped {} (not a bench report: {e})", f.display());
                None
            }
        })
        .collect()
}

/// Markers around the headline table in RESULTS.md.
pub const BEGIN: &str = "<!-- headline: begin (written by `cargo run -p rustile-bench --bin rustile-report`) -->";
pub const END: &str = "<!-- headline: end -->";

/// `results` with the headline table between [`BEGIN`] and [`END`] (put
/// after the first paragraph's heading when they are not there yet).
pub fn with_headline(results: &str, table: &str) -> String {
    let block = format!(
        "{BEGIN}\n## Current figures\n\nEach op and shape's latest run measured beside a baseline (else its latest run), with the best baseline of that same run; the dated log of every run follows.\n\n{table}{END}"
    );
    match (results.find(BEGIN), results.find(END)) {
        (Some(b), Some(e)) if b < e => format!("{}{block}{}", &results[..b], &results[e + END.len()..]),
        _ => {
            let at = results.find("\n## ").map_or(results.len(), |i| i + 1);
            format!("{}{block}\n\n{}", &results[..at], &results[at..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Stats;

    fn row(op: &str, imp: &str, ms: f64) -> Row {
        let mut r = Row::new(op, &[64, 64], "bf16", imp, Stats { median_ms: ms, min_ms: ms, p20_ms: ms, p80_ms: ms, reps: 1 });
        r.flops = Some(1e12 * ms);
        r.bytes = Some(1e9);
        r
    }

    fn report(date: &str, rows: Vec<Row>) -> Report {
        let mut r = Report { device: "H100".into(), date_utc: date.into(), commit: "abc".into(), command: "bench".into(), copy_gb_s: Some(3000.0), rows };
        r.finish();
        r
    }

    #[test]
    fn the_headline_takes_each_ops_latest_run() {
        let old = report("2026-11-01T00:00:00Z", vec![row("gemm", "rustile", 2.0), row("gemm", "cublas", 1.0)]);
        let new = report("2026-11-02T00:00:00Z", vec![row("gemm", "rustile", 1.0), row("gemm", "cublas", 1.5)]);
        let table = headline(&[new, old]);
        assert!(table.contains("| gemm | 64x64 | bf16 | 1.0000 |") && table.contains("cublas 1.5000 | 1.50× | 2026-11-02"), "{table}");
        assert_eq!(table.lines().count(), 3, "{table}");
        // A later run without a baseline does not displace one with.
        let alone = report("2026-11-03T00:00:00Z", vec![row("gemm", "rustile", 0.9)]);
        let old = report("2026-11-01T00:00:00Z", vec![row("gemm", "rustile", 2.0), row("gemm", "cublas", 1.0)]);
        assert!(headline(&[alone, old]).contains("| 2.0000 |"));
        // Replaced in place, the rest of the file kept.
        let results = with_headline("# Measured\n\nintro\n\n## Older run\n\ntext\n", &table);
        assert!(results.starts_with("# Measured\n\nintro\n\n<!-- headline") && results.ends_with("## Older run\n\ntext\n"), "{results}");
        let again = with_headline(&results, "| new |\n");
        assert!(again.contains("| new |") && !again.contains("cublas 1.5000") && again.ends_with("## Older run\n\ntext\n"), "{again}");
    }

    #[test]
    fn charts_are_written_beside_the_json() {
        let r = report("2026-11-02T00:00:00Z", vec![row("gemm", "rustile", 1.0), row("gemm", "cublas", 1.5), row("softmax", "rustile", 0.1)]);
        let dir = std::env::temp_dir().join(format!("rustile-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = charts(&r, &dir.join("run.json")).unwrap();
        // A chart for gemm (softmax has no baseline) and the roofline.
        assert_eq!(written.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect::<Vec<_>>(), ["run-gemm.svg", "run-roofline.svg"]);
        let svg = std::fs::read_to_string(&written[0]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("cublas") && svg.contains("<rect"), "{svg:.300}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
