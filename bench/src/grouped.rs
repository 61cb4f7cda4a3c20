//! The grouped GEMM's bench: G heads sharing one input (`grouped_gemm::heads_mlp`,
//! two launches) beside the loop of cuBLAS calls a user would write (two a
//! head, each reading and writing the same strided head slices in place);
//! then groups of different sizes (`grouped_gemm::gemm_groups`, one launch)
//! beside one cuBLAS call a group.
use crate::cublas::Blas;
use crate::gemm::{baseline, close, sample_rows};
use crate::harness::{measure, MeasureCfg, Row, Stats, RUSTILE};
use rustile::Elem;
use rustile_host::{Gpu, Result};
use rustile_ops::gemm::Act;
use rustile_ops::grouped_gemm::{gemm_groups, heads_mlp, heads_plans, packed_offsets, Groups};
use rustile_ops::reference;
use rustile_ops::testing::{heads_inputs, normal, rng, wide};

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

/// Groups of different sizes, `[m, n, k]` each: a mixture of experts'
/// up-projection (8 experts of 4096 → 14336, unequal token counts), and 64
/// small products of 16 to 1024 rows.
pub fn group_shapes() -> Vec<Vec<[usize; 3]>> {
    let experts = [384, 1024, 128, 640, 896, 256, 512, 768].map(|m| [m, 14336, 4096]).to_vec();
    let small = (0..64).map(|g| [16 + (g * 37) % 1009, 1024, 1024]).collect();
    vec![experts, small]
}

/// `gemm_groups` at [`group_shapes`]: every element checked against the
/// cuBLAS loop (one call a group, on views of the same packed tensors),
/// sampled groups against float64, then both timed.
pub fn bench_groups<T: Elem>(gpu: &Gpu, mcfg: &MeasureCfg, blas: Option<&Blas>, check_only: bool) -> Result<Vec<Row>> {
    let mut rows_out = vec![];
    for sizes in group_shapes() {
        let (mut rng, seed) = rng();
        let g = sizes.len();
        let say = |line: String| eprintln!("grouped {g} groups of different sizes: {line} (seed {seed})");
        crate::harness::status(format!("grouped {g} groups"));
        let groups = Groups::new(gpu, &sizes)?;
        let [la, lb, lc] = groups.lens();
        let (a, b): (Vec<T>, Vec<T>) = (normal(&mut rng, la, 0.0, 1.0), normal(&mut rng, lb, 0.0, 1.0));
        let (da, db) = (gpu.upload(&a, &[la])?, gpu.upload(&b, &[lb])?);
        let mut c = gpu.alloc::<T>(&[lc])?;
        gpu.fill_bytes(&mut c, 0xFF)?;
        gemm_groups(gpu, &groups, &da, &db, &mut c)?;
        let got = gpu.download(&c)?;
        let at = packed_offsets(&sizes);
        for i in [0, g / 2, g - 1] {
            let ([m, n, k], [oa, ob, oc]) = (sizes[i], at[i]);
            let rows = m.min(4);
            let want = reference::matmul_nt(&wide(&a[oa..oa + rows * k]), &wide(&b[ob..ob + n * k]), rows, n, k);
            say(close(&format!("group {i}, first rows vs float64"), &got[oc..oc + rows * n], &want)?);
        }
        let mut base_stats = None;
        if let Some(blas) = blas {
            let mut base = gpu.alloc::<T>(&[lc])?;
            let (line, stats) = baseline(gpu, mcfg, "a loop of cuBLAS calls", &got, &mut base, check_only, |cb| {
                for (&[m, n, k], &[oa, ob, oc]) in sizes.iter().zip(&at) {
                    blas.gemm_nt_view([m, n, k], (&da, oa, k), (&db, ob, k), (cb, oc, n))?;
                }
                Ok(())
            })?;
            say(line);
            base_stats = stats;
        }
        if check_only {
            continue;
        }
        let flops: f64 = sizes.iter().map(|&[m, n, k]| 2.0 * (m * n * k) as f64).sum();
        let bytes = ((la + lb + lc) * std::mem::size_of::<T>()) as f64;
        let [m_total, n, k] = [sizes.iter().map(|s| s[0]).sum(), sizes[0][1], sizes[0][2]];
        let row = |imp: &str, stats: Stats| Row::new("grouped_sizes", &[m_total, n, k], T::NAME, imp, stats).flops(flops).bytes(bytes);
        rows_out.push(row(&format!("{RUSTILE} ({g} groups)"), measure(gpu, mcfg, || gemm_groups(gpu, &groups, &da, &db, &mut c))?));
        if let Some(stats) = base_stats {
            rows_out.push(row(&format!("cublas loop ×{g}"), stats));
        }
    }
    Ok(rows_out)
}
