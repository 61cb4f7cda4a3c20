//! `rustile-report`: the bench's JSON (default: every run under
//! `bench/runs/`) as a person reads it. Writes the headline table (each
//! op's latest figures beside its best baseline, with date, device and
//! commit) at the top of `bench/RESULTS.md`, and with `--charts`, each
//! run's SVG charts beside its JSON.
//!
//! ```text
//! cargo run -p rustile-bench --bin rustile-report                  # the headline table
//! cargo run -p rustile-bench --bin rustile-report -- --charts bench/runs/2026-11-26-h100-quasar-col-sum-split
//! ```
use std::path::PathBuf;

use clap::Parser;
use rustile_bench::report::{charts, headline, read_reports, with_headline};

#[derive(Parser)]
#[command(about = "The bench's JSON as a headline table in RESULTS.md and SVG charts")]
struct Args {
    /// Bench JSON files or folders (walked).
    #[arg(default_value = "bench/runs")]
    inputs: Vec<PathBuf>,
    /// The results file whose headline table is rewritten.
    #[arg(long, default_value = "bench/RESULTS.md")]
    results: PathBuf,
    /// Also write each run's charts beside its JSON.
    #[arg(long)]
    charts: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let runs = read_reports(&args.inputs);
    if runs.is_empty() {
        return Err(format!("no bench JSON under {:?}", args.inputs).into());
    }
    let reports: Vec<_> = runs.iter().map(|(_, r)| r.clone()).collect();
    let table = headline(&reports);
    let text = std::fs::read_to_string(&args.results).map_err(|e| format!("reading {}: {e}", args.results.display()))?;
    std::fs::write(&args.results, with_headline(&text, &table))?;
    println!("{}: the headline table from {} runs, {} rows", args.results.display(), reports.len(), table.lines().count() - 2);
    if args.charts {
        for (json, report) in &runs {
            for path in charts(report, json)? {
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}
