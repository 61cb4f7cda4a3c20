"""The TransformerNP in PyTorch: the baseline of `transformer-np` and the
reference its gradients are checked against.

  python3 bench/transformer_np.py --check DIR
      loads what `transformer-np --dump DIR` wrote (sizes, parameters, the
      batch, Rustile's loss and gradients), runs the same model under
      autograd (bf16 autocast over f32 weights, the same math), and prints
      the relative error of the loss and of every parameter's gradient.
      Exit status 1 if any exceeds --tol (2e-2).

  python3 bench/transformer_np.py --bench --shape small|mid|large [--steps N]
      times a training step (forward, backward, fused AdamW) of the model in
      PyTorch eager and torch.compile, each with SDPA forced onto the flash
      backend and then onto cuDNN's (the memory-efficient one only where
      neither runs), and prints one JSON line per variant and backend: step
      time (median of CUDA-event timings), tokens/s, peak memory; then the
      step's attention alone per backend (SDPA forward and backward of
      every layer). The best PyTorch figure is the fastest of these.

The model is the one `train/src/transformer_np.rs` documents. Keys and
values are projected from the context rows only, as Rustile does (a
target is never attended to), so both sides do the same arithmetic.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

SHAPES = {"small": (64, 64, 500), "mid": (4, 10_000, 1_000), "large": (1, 200_000, 5_000)}
TNP = dict(layers=12, d_model=512, heads=8, d_ff=1365, components=10)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def gmm_nll(out, y):
    """out [..., K, 3] (logit, mu, log_sigma), y [...]: the mean negative log-likelihood."""
    out = out.float()
    logit, mu, ls = out[..., 0], out[..., 1], out[..., 2]
    log_w = torch.log_softmax(logit, dim=-1)
    z = (y.unsqueeze(-1) - mu) * torch.exp(-ls)
    log_n = -0.5 * z * z - ls - HALF_LOG_2PI
    return -torch.logsumexp(log_w + log_n, dim=-1).mean()


def forward(p, tokens, y, cfg, context, attn_backend=None):
    """The loss of f32 parameters `p` (a dict of unpadded tensors) on
    tokens [B, S, 3] and targets y [B, N], under bf16 autocast."""
    L, d, H, K = cfg["layers"], cfg["d_model"], cfg["heads"], cfg["components"]
    B, S, _ = tokens.shape
    M, dh = context, d // H
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = tokens @ p["embed.w"].t()
        for l in range(L):
            w = lambda n: p[f"layers.{l}.{n}"]
            x = F.layer_norm(h, (d,), w("ln1.w"), None, 1e-5)
            q = (x @ w("wq").t()).view(B, S, H, dh).transpose(1, 2)
            xc = x[:, :M]
            k = (xc @ w("wk").t()).view(B, M, H, dh).transpose(1, 2)
            v = (xc @ w("wv").t()).view(B, M, H, dh).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v)
            h = h + o.transpose(1, 2).reshape(B, S, d) @ w("wo").t()
            x = F.layer_norm(h, (d,), w("ln2.w"), None, 1e-5)
            h = h + F.silu(x @ w("w1").t()) @ w("w2").t()
        xf = F.layer_norm(h[:, M:], (d,), p["lnf.w"], None, 1e-5)
        hid = F.silu(xf @ p["head.w1"].flatten(0, 1).t())  # [B, N, K·ff]
        hid = hid.view(B, -1, K, p["head.w1"].shape[1])
        out = torch.einsum("bnkf,kjf->bnkj", hid, p["head.w2"])
    return gmm_nll(out, y)


def unpad(name, t, cfg):
    """Rustile's padded parameters as the model's own shapes."""
    d, ff, K = cfg["d_model"], cfg["d_ff"], cfg["components"]
    if name == "embed.w":
        return t[:, :3]
    if name == "head.w1":
        return t.view(K, -1, d)[:, :ff]
    if name == "head.w2":
        return t[:, :, :ff]
    if name.endswith(".w1"):
        return t[:ff]
    if name.endswith(".w2"):
        return t[:, :ff]
    return t


def pad_part(name, t, cfg):
    """The padding of a Rustile parameter (must stay exactly zero), or an empty tensor."""
    d, ff, K = cfg["d_model"], cfg["d_ff"], cfg["components"]
    if name == "embed.w":
        return t[:, 3:]
    if name == "head.w1":
        return t.view(K, -1, d)[:, ff:]
    if name == "head.w2":
        return t[:, :, ff:]
    if name.endswith(".w1"):
        return t[ff:]
    if name.endswith(".w2"):
        return t[:, ff:]
    return t[:0]


def check(args):
    man = json.load(open(os.path.join(args.check, "model.json")))
    cfg = {k: man[k] for k in TNP}
    B, M, N = man["batch"], man["context"], man["targets"]
    read = lambda f: torch.from_numpy(__import__("numpy").fromfile(os.path.join(args.check, f), dtype="<f4"))
    flat, gflat = read("params.f32"), read("grads.f32")
    p, ours, at = {}, {}, 0
    for e in man["params"]:
        n = math.prod(e["shape"])
        full = flat[at:at + n].view(e["shape"]).cuda()
        gfull = gflat[at:at + n].view(e["shape"]).cuda()
        p[e["name"]] = unpad(e["name"], full, cfg).clone().requires_grad_(True)
        pad = torch.cat([pad_part(e["name"], gfull, cfg).flatten(), pad_part(e["name"], full, cfg).flatten()])
        ours[e["name"]] = (unpad(e["name"], gfull, cfg), pad.abs().max().item() if pad.numel() else 0.0)
        at += n
    tokens = read("tokens.f32").view(B, M + N, 8)[..., :3].cuda()
    y = read("y.f32").view(B, N).cuda()
    loss = forward(p, tokens, y, cfg, M)
    loss.backward()
    rows, worst = [], 0.0
    loss_err = abs(loss.item() - man["loss"]) / max(abs(loss.item()), 1e-6)
    rows.append(("loss", loss_err, loss.item(), man["loss"]))
    worst = max(worst, loss_err)
    for name, t in p.items():
        g, pad_mass = ours[name]
        err = ((g - t.grad).norm() / t.grad.norm().clamp_min(1e-30)).item()
        worst = max(worst, err, pad_mass)
        rows.append((name, err, t.grad.norm().item(), pad_mass))
    for r in rows:
        print(f"{r[0]:<22} rel err {r[1]:.3e}   (torch {r[2]:.4e}; " + ("ours" if r[0] == "loss" else "largest |padding| of weight and grad") + f" {r[3]:.4e})")
    ok = worst <= args.tol
    print(json.dumps({"check": "transformer_np", "shape": [B, M, N], "worst_rel_err": worst, "tol": args.tol, "ok": ok}))
    return 0 if ok else 1


def init_params(cfg, device="cuda"):
    d, ff, K, L = cfg["d_model"], cfg["d_ff"], cfg["components"], cfg["layers"]
    g = torch.Generator(device="cpu").manual_seed(0)
    lin = lambda o, i: ((torch.rand(o, i, generator=g) * 2 - 1) / math.sqrt(i)).to(device)
    p = {"embed.w": lin(d, 3)}
    for l in range(L):
        for n, (o, i) in dict(wq=(d, d), wk=(d, d), wv=(d, d), wo=(d, d), w1=(ff, d), w2=(d, ff)).items():
            p[f"layers.{l}.{n}"] = lin(o, i)
        p[f"layers.{l}.ln1.w"] = torch.ones(d, device=device)
        p[f"layers.{l}.ln2.w"] = torch.ones(d, device=device)
    p["lnf.w"] = torch.ones(d, device=device)
    p["head.w1"] = torch.stack([lin(ff, d) for _ in range(K)])
    p["head.w2"] = torch.stack([lin(3, ff) for _ in range(K)])
    return {k: v.requires_grad_(True) for k, v in p.items()}


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def bench(args):
    from torch.nn.attention import sdpa_kernel
    B, M, N = SHAPES[args.shape]
    cfg = dict(TNP)
    p = init_params(cfg)
    # Decay on the matrices only, as Rustile's step.
    groups = [{"params": [t for t in p.values() if t.dim() >= 2], "weight_decay": 0.01},
              {"params": [t for t in p.values() if t.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    x = torch.rand(B, M + N, 3, device="cuda") * 4 - 2
    x[:, M:, 1] = 0
    x[:, M:, 2] = 1
    x[:, :M, 2] = 0
    y = torch.randn(B, N, device="cuda")

    def step(fwd):
        opt.zero_grad(set_to_none=True)
        loss = fwd(p, x, y, cfg, M)
        loss.backward()
        opt.step()
        return loss

    ran = []

    def emit(r):
        # One line as soon as it is known: a long shape cut short keeps what ran.
        print(json.dumps(r), flush=True)

    for variant in args.variants.split(","):
        timed = False
        for name, backend in sdpa_backends():
            # The memory-efficient kernels only where neither fast backend runs.
            if (name == "efficient" and timed) or name not in args.sdpa.split(",") + ["efficient"]:
                continue
            fwd = forward
            if variant != "eager":
                # A compiled step keeps the backend it was traced with: compile anew for each.
                torch._dynamo.reset()
                fwd = torch.compile(forward)
            try:
                with sdpa_kernel([backend]):
                    step(fwd)
            except RuntimeError as e:
                print(f"# {variant}: SDPA {name} refused: {str(e).splitlines()[0]}", file=sys.stderr)
                continue
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            try:
                with sdpa_kernel([backend]):
                    ms = median_ms(lambda: step(fwd), args.steps)
            except torch.cuda.OutOfMemoryError as e:
                emit({"variant": variant, "sdpa": name, "error": f"out of memory: {str(e).splitlines()[0]}"})
                torch.cuda.empty_cache()
                continue
            timed = True
            if (name, backend) not in ran:
                ran.append((name, backend))
            emit({"variant": variant, "sdpa": name, "shape": args.shape, "batch": B, "context": M, "targets": N,
                  "step_ms": ms, "tokens_per_s": B * (M + N) / (ms / 1e3),
                  "peak_gb": torch.cuda.max_memory_allocated() / 1e9, "steps": args.steps})
        if not timed:
            emit({"variant": variant, "error": "no SDPA backend ran"})
    for chosen in ran:
        emit(attention_only(args.shape, cfg, chosen, args.steps))


def median_ms(fn, steps, warmup=2):
    """The median time of `fn` in ms over `steps` calls (CUDA events), after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def attention_only(shape, cfg, chosen, steps):
    """The step's attention alone: SDPA forward and backward once per layer
    at the shape (queries all M + N rows, keys and values the M context
    rows), on the backend the step used. The rest of a step is the step time
    less this."""
    from torch.nn.attention import sdpa_kernel
    B, M, N = SHAPES[shape]
    H, dh = cfg["heads"], cfg["d_model"] // cfg["heads"]
    q = torch.randn(B, H, M + N, dh, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, H, M, dh, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    do = torch.randn(B, H, M + N, dh, device="cuda", dtype=torch.bfloat16)

    def layers():
        for _ in range(cfg["layers"]):
            o = F.scaled_dot_product_attention(q, k, v)
            torch.autograd.grad(o, (q, k, v), do)
    with sdpa_kernel([chosen[1]]):
        ms = median_ms(layers, steps)
    return {"variant": "sdpa fwd+bwd only", "sdpa": chosen[0], "shape": shape, "attention_ms": ms, "layers": cfg["layers"], "steps": steps}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--shape", choices=list(SHAPES), default="small")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--sdpa", default="flash,cudnn", help="the SDPA backends to time (efficient runs where none of these does)")
    args = ap.parse_args()
    if args.check:
        sys.exit(check(args))
    if args.bench:
        bench(args)
        return
    ap.print_help()


if __name__ == "__main__":
    main()
