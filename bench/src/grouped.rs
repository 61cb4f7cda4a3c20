//! The grouped GEMM's bench: G heads sharing one input (`grouped_gemm::heads_mlp`,
//! two launches) beside the loop of cuBLAS calls a user would write (two a
//! head, each reading and writing the same strided head slices in place).
use crate::cublas::Blas;
use crate::gemm::{baseline, close, sample_rows};
use crate::harness::{measure, MeasureCfg, Row, Stats, RUSTILE};
use rustile::Elem;
use rustile_host::{Gpu, Result};
use rustile_ops::gemm::Act;
use rustile_ops::grouped_gemm::{heads_mlp, heads_plans};
use rustile_ops::reference;
use rustile_ops::testing::{heads_inputs, rng, wide};

/// (rows, d, G, h, out): ten heads of 512 → 1365 → 3 on 16k and 65k rows.
pub const HEADS_SHAPES: &[[usize; 5]] = &[[16384, 512, 10, 1365, 3], [65536, 512, 10, 1365, 3]];

/// Checks, then (unless `check_only`) times ours and the cuBLAS loop at
/// `HEADS_SHAPES`; both are plain products (no bias, no activation), and
/// ours with a bias and GELU is timed beside them.
pub fn bench_heads<T: Elem>(gpu: &Gpu, mcfg: &MeasureCfg, blas: Option<&Blas>, check_only: bool) -> Result<Vec<Row>> {
    let mut rows_out = vec![];
    for &dims in HEADS_SHAPES {
        let [rows, d, g, h, out] = dims;
        let (mut rng, seed) = rng();
        let say = |line: String| eprintln!("grouped {rows}x{d} → {g}×({h} → {out}): {line} (seed {seed})");
        let [x, w1, b1, w2, b2] = heads_inputs::<T>(&mut rng, dims);
        let dx = gpu.upload(&x, &[rows, d])?;
        let (dw1, dw2) = (gpu.upload(&w1, &[g, h, d])?, gpu.upload(&w2, &[g, out, h])?);
        let (db1, db2) = (gpu.upload(&b1, &[g, h])?, gpu.upload(&b2, &[g, out])?);
        let mut y = gpu.alloc::<T>(&[rows, g, out])?;
        // The fused variant first, so that a profiler's first launches are its two.
        let zeros = (vec![0.0; g * h], vec![0.0; g * out]);
        for (name, fused) in [("bias+GELU", true), ("plain", false)] {
            let (act, bias) = if fused { (Act::GeluTanh, (Some(&db1), Some(&db2))) } else { (Act::None, (None, None)) };
            let (b1, b2) = if fused { (wide(&b1), wide(&b2)) } else { zeros.clone() };
            gpu.fill_bytes(&mut y, 0xFF)?;
            heads_mlp(gpu, &dx, &dw1, bias.0, act, &dw2, bias.1, &mut y)?;
            let got = gpu.download(&y)?;
            for r in sample_rows(rows, 4) {
                let xr = wide(&x[r.start * d..r.end * d]);
                let round = |v: f64| T::from_f32(v as f32).to_f32() as f64;
                let want = reference::heads_mlp(&xr, &wide(&w1), &b1, act, &wide(&w2), &b2, [r.len(), d, g, h, out], round);
                say(close(&format!("{name}, sampled rows vs float64"), &got[r.start * g * out..r.end * g * out], &want)?);
            }
        }
        let got = gpu.download(&y)?;
        let flops = 2.0 * (rows * g * (d * h + h * out)) as f64;
        let bytes = ((rows * d + g * h * d + g * out * h + rows * g * out) * std::mem::size_of::<T>()) as f64;
        let mut base_stats = None;
        if let Some(blas) = blas {
            let (_, _, hp) = heads_plans(rows, d, g, h, out);
            let mut hidden = gpu.alloc::<T>(&[rows, g * hp])?;
            let mut base = gpu.alloc::<T>(&[rows, g, out])?;
            let (line, stats) = baseline(gpu, mcfg, "a loop of cuBLAS calls", &got, &mut base, check_only, |yb| {
                for head in 0..g {
                    blas.gemm_nt_view([rows, h, d], (&dx, 0, d), (&dw1, head * h * d, d), (&mut hidden, head * hp, g * hp))?;
                    blas.gemm_nt_view([rows, out, h], (&hidden, head * hp, g * hp), (&dw2, head * out * h, h), (yb, head * out, g * out))?;
                }
                Ok(())
            })?;
            say(line);
            base_stats = stats;
        }
        if check_only {
            continue;
        }
        let shape = [rows, g * h, d];
        let row = |imp: &str, stats: Stats| Row::new("grouped", &shape, T::NAME, imp, stats).flops(flops).bytes(bytes);
        rows_out.push(row(RUSTILE, measure(gpu, mcfg, || heads_mlp(gpu, &dx, &dw1, None, Act::None, &dw2, None, &mut y))?));
        let fused = measure(gpu, mcfg, || heads_mlp(gpu, &dx, &dw1, Some(&db1), Act::GeluTanh, &dw2, Some(&db2), &mut y))?;
        rows_out.push(row("rustile +bias+gelu", fused));
        if let Some(stats) = base_stats {
            rows_out.push(row(&format!("cublas loop ×{}", 2 * g), stats));
        }
    }
    Ok(rows_out)
}
