//! CPU-interpreter checks of QuasarAttention's kernels against float64 on
//! the same bf16 inputs, at odd lengths and channel counts.
use super::*;
use crate::testing::*;
use rustile_host::Gpu;

#[test]
fn conv_silu_and_its_backward_match_float64() {
    let gpu = Gpu::interpreter();
    for (batch, tokens, channels) in [(1, 1, 8), (2, 3, 136), (2, 70, 200), (1, 33, 512), (2, 1100, 8), (2, 9, 20)] {
        let (mut rng, seed) = rng();
        let shape = [batch, tokens, channels];
        let n = batch * tokens * channels;
        let x: Vec<rustile::bf16> = normal(&mut rng, n, 0.0, 1.0);
        let dy: Vec<rustile::bf16> = normal(&mut rng, n, 0.0, 1.0);
        let w: Vec<rustile::bf16> = normal(&mut rng, WIDTH * channels, 0.0, 0.5);
        let (xt, dyt, wt) = (gpu.upload(&x, &shape).unwrap(), gpu.upload(&dy, &shape).unwrap(), gpu.upload(&w, &[WIDTH, channels]).unwrap());
        let mut y = gpu.upload(&poisoned::<rustile::bf16>(n), &shape).unwrap();
        conv_silu(&gpu, &xt, &wt, &mut y).unwrap();
        let (xw, ww) = (wide(&x), wide(&w));
        let ctx = format!("conv_silu [{batch}, {tokens}, {channels}] (seed {seed})");
        let err = rel_err(&gpu.download(&y).unwrap(), &crate::reference::conv_silu(&xw, &ww, tokens, channels));
        assert!(err < tolerance::<rustile::bf16>(), "{ctx}: y off by {err:.2e}");
        let mut dx = gpu.upload(&poisoned::<rustile::bf16>(n), &shape).unwrap();
        let mut dw = gpu.upload(&poisoned::<f32>(WIDTH * channels), &[WIDTH, channels]).unwrap();
        let mut scratch = ConvScratch::new(&gpu, &shape).unwrap();
        conv_silu_backward(&gpu, &xt, &wt, &dyt, &mut dx, &mut dw, &mut scratch).unwrap();
        let (want_dx, want_dw) = crate::reference::conv_silu_backward(&xw, &ww, &wide(&dy), tokens, channels);
        let (edx, edw) = (rel_err(&gpu.download(&dx).unwrap(), &want_dx), rel_err(&gpu.download(&dw).unwrap(), &want_dw));
        // da stays f32: dx is off by its own rounding to bf16 (about 1.7e-3), dw by f32 sums' (about 1e-7).
        assert!(edx < 3e-3 && edw < 1e-5, "{ctx}: dx off by {edx:.2e}, dw by {edw:.2e}");
    }
}

/// The projection and the convolution in one kernel, every config, against
/// float64 on the projection rounded to bf16 (as the kernel and the
/// unfused layer round it): blocks across sequences (their halo masked),
/// a second block of a sequence, channels past a block, and a `hidden`
/// the copy engine cannot read (the unfused path).
#[test]
fn proj_conv_silu_matches_float64() {
    let gpu = Gpu::interpreter();
    for (batch, tokens, hidden, channels) in [(1, 1, 64, 16), (2, 130, 72, 136), (3, 127, 128, 264), (1, 7, 20, 24)] {
        let (mut rng, seed) = rng();
        let x: Vec<rustile::bf16> = normal(&mut rng, batch * tokens * hidden, 0.0, 1.0);
        let wp: Vec<rustile::bf16> = normal(&mut rng, channels * hidden, 0.0, 1.0 / (hidden as f32).sqrt());
        let w: Vec<rustile::bf16> = normal(&mut rng, WIDTH * channels, 0.0, 0.5);
        let (pre_want, y_want) = crate::reference::proj_conv_silu(&wide(&x), &wide(&wp), &wide(&w), tokens, hidden, channels);
        let shape = [batch, tokens, channels];
        let (xt, wpt, wt) = (gpu.upload(&x, &[batch, tokens, hidden]).unwrap(), gpu.upload(&wp, &[channels, hidden]).unwrap(), gpu.upload(&w, &[WIDTH, channels]).unwrap());
        for cfg in 0..proj_conv_silu_kernel::CONFIGS.len() {
            let ctx = format!("proj_conv_silu [{batch}, {tokens}, {hidden}] → {channels}, config {cfg} (seed {seed})");
            let n = batch * tokens * channels;
            let (mut pre, mut y) = (gpu.upload(&poisoned::<rustile::bf16>(n), &shape).unwrap(), gpu.upload(&poisoned::<rustile::bf16>(n), &shape).unwrap());
            proj_conv_silu_with_config(&gpu, Some(cfg), &xt, &wpt, &wt, Some(&mut pre), &mut y).unwrap();
            let (ep, ey) = (rel_err(&gpu.download(&pre).unwrap(), &pre_want), rel_err(&gpu.download(&y).unwrap(), &y_want));
            assert!(ep < tolerance::<rustile::bf16>() && ey < tolerance::<rustile::bf16>(), "{ctx}: pre off by {ep:.2e}, y by {ey:.2e}");
            // Without `pre`, the same `y`.
            let mut y2 = gpu.upload(&poisoned::<rustile::bf16>(n), &shape).unwrap();
            proj_conv_silu_with_config(&gpu, Some(cfg), &xt, &wpt, &wt, None, &mut y2).unwrap();
            assert!(gpu.download(&y2).unwrap() == gpu.download(&y).unwrap(), "{ctx}: y without pre differs");
        }
    }
}

/// The gated norm in the output projection's prologue, every config:
/// a head or eight, rows past a block, output columns past a block and
/// not a multiple of 8.
#[test]
fn gated_out_proj_matches_float64() {
    let gpu = Gpu::interpreter();
    for (rows, heads, n_out) in [(1, 1, 16), (130, 2, 136), (67, 8, 300)] {
        let (mut rng, seed) = rng();
        let channels = heads * HEAD;
        let o: Vec<rustile::bf16> = normal(&mut rng, rows * channels, 0.0, 2.0);
        let g1: Vec<rustile::bf16> = normal(&mut rng, rows * HEAD, 0.0, 1.0);
        let wg2: Vec<rustile::bf16> = normal(&mut rng, channels * HEAD, 0.0, 0.25);
        let bias: Vec<rustile::bf16> = normal(&mut rng, channels, 0.0, 0.5);
        let w: Vec<rustile::bf16> = normal(&mut rng, HEAD, 1.0, 0.3);
        let wo: Vec<rustile::bf16> = normal(&mut rng, n_out * channels, 0.0, 1.0 / (channels as f32).sqrt());
        let want = crate::reference::gated_out_proj(&wide(&o), &wide(&g1), &wide(&wg2), &wide(&bias), &wide(&w), &wide(&wo), 1e-5, channels);
        let up = |x: &[rustile::bf16], shape: &[usize]| gpu.upload(x, shape).unwrap();
        let (ot, g1t, wg2t) = (up(&o, &[rows, channels]), up(&g1, &[rows, HEAD]), up(&wg2, &[channels, HEAD]));
        let (bt, wt, wot) = (up(&bias, &[channels]), up(&w, &[HEAD]), up(&wo, &[n_out, channels]));
        for cfg in 0..gated_out_proj_kernel::CONFIGS.len() {
            let ctx = format!("gated_out_proj [{rows}, {heads}·64] → {n_out}, config {cfg} (seed {seed})");
            let mut out = up(&poisoned::<rustile::bf16>(rows * n_out), &[rows, n_out]);
            gated_out_proj_with_config(&gpu, Some(cfg), &ot, &g1t, &wg2t, &bt, &wt, &wot, 1e-5, &mut out).unwrap();
            let err = rel_err(&gpu.download(&out).unwrap(), &want);
            assert!(err < tolerance::<rustile::bf16>(), "{ctx}: out off by {err:.2e}");
        }
    }
}

#[test]
fn gated_rms_norm_and_its_backward_match_float64() {
    let gpu = Gpu::interpreter();
    // 2200 rows of 8 heads: 552 shares of dw, summed in two passes.
    for (rows, heads) in [(1, 1), (37, 8), (70, 3), (1100, 1), (2200, 8)] {
        let (mut rng, seed) = rng();
        let shape = [rows, heads * HEAD];
        let n = rows * heads * HEAD;
        let o: Vec<rustile::bf16> = normal(&mut rng, n, 0.0, 2.0);
        let g: Vec<rustile::bf16> = normal(&mut rng, n, 0.0, 2.0);
        let dy: Vec<rustile::bf16> = normal(&mut rng, n, 0.0, 1.0);
        let w: Vec<rustile::bf16> = normal(&mut rng, HEAD, 1.0, 0.3);
        let up = |x: &[rustile::bf16]| gpu.upload(x, &shape).unwrap();
        let (ot, gt, dyt, wt) = (up(&o), up(&g), up(&dy), gpu.upload(&w, &[HEAD]).unwrap());
        let mut y = up(&poisoned(n));
        let mut rstd = gpu.upload(&poisoned::<f32>(rows * heads), &[heads, rows]).unwrap();
        gated_rms_norm(&gpu, &ot, &gt, &wt, 1e-5, &mut y, &mut rstd).unwrap();
        let (ow, gw, ww) = (wide(&o), wide(&g), wide(&w));
        let ctx = format!("gated_rms_norm [{rows}, {heads}·64] (seed {seed})");
        let err = rel_err(&gpu.download(&y).unwrap(), &crate::reference::gated_rms_norm(&ow, &gw, &ww, 1e-5));
        assert!(err < tolerance::<rustile::bf16>(), "{ctx}: y off by {err:.2e}");
        let (mut d_o, mut dg) = (up(&poisoned(n)), up(&poisoned(n)));
        let mut dw = gpu.upload(&poisoned::<f32>(HEAD), &[HEAD]).unwrap();
        let mut dg_sum = gpu.upload(&poisoned::<f32>(heads * HEAD), &[heads * HEAD]).unwrap();
        let mut scratch = NormScratch::new(&gpu, rows, heads).unwrap();
        gated_rms_norm_backward(&gpu, &dyt, &ot, &gt, &wt, &rstd, &mut d_o, &mut dg, &mut dw, Some(&mut dg_sum), &mut scratch).unwrap();
        let (want_do, want_dg, want_dw) = crate::reference::gated_rms_norm_backward(&ow, &gw, &ww, 1e-5, &wide(&dy));
        let want_sum: Vec<f64> = (0..heads * HEAD).map(|c| (0..rows).map(|r| want_dg[r * heads * HEAD + c]).sum()).collect();
        let got = [gpu.download(&d_o).unwrap(), gpu.download(&dg).unwrap()];
        let errs = [rel_err(&got[0], &want_do), rel_err(&got[1], &want_dg), rel_err(&gpu.download(&dw).unwrap(), &want_dw), rel_err(&gpu.download(&dg_sum).unwrap(), &want_sum)];
        assert!(errs.iter().all(|&e| e < tolerance::<rustile::bf16>()), "{ctx}: [do, dg, dw, Σdg] off by {errs:?}");
    }
}

#[test]
fn refuses_bad_shapes() {
    let gpu = Gpu::interpreter();
    let x = gpu.alloc::<rustile::bf16>(&[1, 5, 16]).unwrap();
    let mut y = gpu.alloc::<rustile::bf16>(&[1, 5, 16]).unwrap();
    let bad_w = gpu.alloc::<rustile::bf16>(&[3, 16]).unwrap();
    assert!(conv_silu(&gpu, &x, &bad_w, &mut y).unwrap_err().to_string().contains("w"));
    let flat = gpu.alloc::<rustile::bf16>(&[80]).unwrap();
    let w = gpu.alloc::<rustile::bf16>(&[WIDTH, 16]).unwrap();
    assert!(conv_silu(&gpu, &flat, &w, &mut y).unwrap_err().to_string().contains("[batch, tokens, channels]"));
    let o = gpu.alloc::<rustile::bf16>(&[3, 100]).unwrap();
    let (mut yo, mut rstd) = (gpu.alloc::<rustile::bf16>(&[3, 100]).unwrap(), gpu.alloc::<f32>(&[1, 3]).unwrap());
    let wn = gpu.alloc::<rustile::bf16>(&[HEAD]).unwrap();
    assert!(gated_rms_norm(&gpu, &o, &o, &wn, 1e-5, &mut yo, &mut rstd).unwrap_err().to_string().contains("heads·64"));
}

#[test]
fn softplus_and_its_backward() {
    let gpu = Gpu::interpreter();
    let x: Vec<rustile::bf16> = [-30.0f32, -2.0, -0.1, 0.0, 0.5, 3.0, 40.0].iter().map(|&v| rustile::bf16::from_f32(v)).collect();
    let xt = gpu.upload(&x, &[x.len()]).unwrap();
    let mut y = gpu.alloc::<f32>(&[x.len()]).unwrap();
    softplus(&gpu, &xt, &mut y).unwrap();
    let dy: Vec<f32> = (0..x.len()).map(|i| 1.0 + i as f32).collect();
    let mut dx = gpu.alloc::<f32>(&[x.len()]).unwrap();
    softplus_backward(&gpu, &xt, &gpu.upload(&dy, &[x.len()]).unwrap(), &mut dx).unwrap();
    let (y, dx) = (gpu.download(&y).unwrap(), gpu.download(&dx).unwrap());
    for i in 0..x.len() {
        let v = x[i].to_f32() as f64;
        let (want, want_d) = (v.exp().ln_1p(), dy[i] as f64 / (1.0 + (-v).exp()));
        assert!((y[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "softplus({v}) = {}, not {want}", y[i]);
        assert!((dx[i] as f64 - want_d).abs() <= 1e-6 * (1.0 + want_d.abs()), "softplus'({v})·{} = {}, not {want_d}", dy[i], dx[i]);
    }
}

#[test]
fn every_conv_config_agrees_with_the_first() {
    let gpu = Gpu::interpreter();
    // Blocks of 32 to 128 rows: a sequence shorter than one, and one past several.
    let (batch, tokens, channels) = (2, 275, 200);
    let (mut rng, seed) = rng();
    let shape = [batch, tokens, channels];
    let n = batch * tokens * channels;
    let up = |v: &[rustile::bf16], s: &[usize]| gpu.upload(v, s).unwrap();
    let (x, dy) = (up(&normal(&mut rng, n, 0.0, 1.0), &shape), up(&normal(&mut rng, n, 0.0, 1.0), &shape));
    let w = up(&normal(&mut rng, WIDTH * channels, 0.0, 0.5), &[WIDTH, channels]);
    let mut scratch = ConvScratch::new(&gpu, &shape).unwrap();
    // y, dx and dw of config `cfg` of each kernel (its last where it has fewer).
    let mut run = |cfg: usize| {
        let mut y = up(&poisoned(n), &shape);
        let mut dx = up(&poisoned(n), &shape);
        let mut dw = gpu.upload(&poisoned::<f32>(WIDTH * channels), &[WIDTH, channels]).unwrap();
        conv_silu_kernel::launch(&gpu, cfg.min(conv_silu_kernel::CONFIGS.len() - 1), &x, &w, &mut y, tokens, channels, batch).unwrap();
        conv_silu_backward_with_config(&gpu, Some(cfg.min(conv_silu_bwd_kernel::CONFIGS.len() - 1)), &x, &w, &dy, &mut dx, &mut dw, &mut scratch).unwrap();
        let f = |t: &rustile_host::Tensor<rustile::bf16>| wide(&gpu.download(t).unwrap());
        (f(&y), f(&dx), gpu.download(&dw).unwrap())
    };
    let first = run(0);
    let most = conv_silu_kernel::CONFIGS.len().max(conv_silu_bwd_kernel::CONFIGS.len());
    for cfg in 1..most {
        let got = run(cfg);
        let ctx = format!("config {cfg} of each kernel (seed {seed})");
        // Each value of y and dx is the same sum in the same order; dw's shares cover other rows.
        assert!(got.0 == first.0 && got.1 == first.1, "{ctx}: y or dx differ from the first config's");
        let err = rel_err(&got.2, &first.2.iter().map(|&v| v as f64).collect::<Vec<_>>());
        assert!(err < 1e-5, "{ctx}: dw differs by {err:.2e}");
    }
    assert!(conv_silu_backward_with_config(&gpu, Some(most), &x, &w, &dy, &mut up(&poisoned(n), &shape), &mut gpu.alloc::<f32>(&[WIDTH, channels]).unwrap(), &mut scratch).is_err());
}
