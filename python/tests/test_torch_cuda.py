"""The torch layer on CUDA tensors: custom-op checks, autograd against
float64, ``torch.compile(fullgraph=True)``, CUDA-graph capture and replay.
Runs where PyTorch and a GPU are (the GPU machine); elsewhere each test
skips, saying why. (The Python call's overhead is measured by
``bench/python_call.py``, not here.)"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here (the GPU machine has it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device here", allow_module_level=True)

import rustile
import rustile.torch as rt


def rel_err(got, want):
    got, want = got.double(), want.double()
    assert torch.isfinite(got).all()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def assert_autograd_close(y, want, leaves, wide, out_tol, grad_tol):
    """Our output `y` against the float64 `want`, then the gradients of our
    `leaves` against those of their float64 copies `wide`, for one random output gradient."""
    assert rel_err(y, want) < out_tol
    dy = torch.randn_like(y)
    y.backward(dy)
    want.backward(dy.double())
    for got, ref in zip(leaves, wide):
        assert rel_err(got.grad, ref.grad) < grad_tol


def qkv(batch, sq, sk, heads, kv_heads, d, grad=False):
    g = torch.Generator(device="cuda").manual_seed(torch.seed() & 0xFFFFFFFF)
    make = lambda s, h: torch.randn(batch, s, h, d, device="cuda", generator=g).bfloat16().requires_grad_(grad)
    return make(sq, heads), make(sk, kv_heads), make(sk, kv_heads)


def reference(q, k, v, causal):
    """float64 SDPA on [batch, heads, seq, d], GQA by repeating heads."""
    rep = q.shape[2] // k.shape[2]
    qd, kd, vd = (t.detach().double().transpose(1, 2).requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(
        qd, kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1), is_causal=causal
    )
    return o.transpose(1, 2), (qd, kd, vd)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dims", [(2, 129, 129, 8, 2, 64), (1, 1000, 1000, 4, 4, 128), (3, 7, 7, 2, 1, 64)])
def test_attention_autograd_matches_float64(causal, dims):
    q, k, v = qkv(*dims, grad=True)
    o = rt.attention(q, k, v, causal=causal)
    want, leaves = reference(q, k, v, causal)
    assert rel_err(o, want) < 8e-3
    do = torch.randn_like(o)
    o.backward(do)
    want.backward(do.double())
    for got, ref in zip((q.grad, k.grad, v.grad), leaves):
        assert rel_err(got, ref.grad.transpose(1, 2)) < 1.5e-2


@pytest.mark.parametrize("kind", ["rms", "layer", "layer_no_bias"])
def test_norm_autograd_matches_float64(kind):
    rows, cols = 37, 768
    x = torch.randn(rows, cols, device="cuda").bfloat16().requires_grad_()
    w = (1 + 0.2 * torch.randn(cols, device="cuda")).bfloat16().requires_grad_()
    b = (0.2 * torch.randn(cols, device="cuda")).bfloat16().requires_grad_() if kind == "layer" else None
    leaves = [t for t in (x, w, b) if t is not None]
    wide = [t.detach().double().requires_grad_() for t in leaves]
    if kind == "rms":
        y, want = rt.rms_norm(x, w, 1e-6), torch.nn.functional.rms_norm(wide[0], (cols,), wide[1], eps=1e-6)
    else:
        y = rt.layer_norm(x, w, b, 1e-5)
        want = torch.nn.functional.layer_norm(wide[0], (cols,), wide[1], wide[2] if b is not None else None, eps=1e-5)
    assert_autograd_close(y, want, leaves, wide, 8e-3, 1.5e-2)


def test_linear_autograd_matches_float64():
    x = torch.randn(3, 41, 64, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(48, 64, device="cuda") / 8).bfloat16().requires_grad_()
    b = torch.randn(48, device="cuda").bfloat16().requires_grad_()
    r = torch.randn(3, 41, 48, device="cuda").bfloat16().requires_grad_()
    leaves = (x, w, b, r)
    wide = [t.detach().double().requires_grad_() for t in leaves]
    y = rt.linear(x, w, b, "none", r)
    want = torch.nn.functional.linear(wide[0], wide[1], wide[2]) + wide[3]
    assert_autograd_close(y, want, leaves, wide, 8e-3, 1.5e-2)


def delta_rule_reference(q, k, v, beta):
    """The per-token recurrence in float64, differentiable (autograd through the loop)."""
    b, t, h, d = q.shape
    s = q.new_zeros(b, h, d, d)
    out = []
    for i in range(t):
        kt, vt, qt = k[:, i], v[:, i], q[:, i]
        lam = (kt * kt).sum(-1, keepdim=True)
        alpha = -torch.expm1(-beta.view(1, h, 1) * lam) / (lam + 1e-8)
        s = s + alpha.unsqueeze(-1) * kt.unsqueeze(-1) * (vt - torch.einsum("bhkv,bhk->bhv", s, kt)).unsqueeze(-2)
        out.append(torch.einsum("bhkv,bhk->bhv", s, qt))
    return torch.stack(out, 1)


def test_delta_rule_autograd_matches_float64():
    batch, tokens, heads = 1, 130, 2
    q, v = (torch.randn(batch, tokens, heads, 64, device="cuda").bfloat16().requires_grad_() for _ in range(2))
    k = (torch.randn(batch, tokens, heads, 64, device="cuda") / 8).bfloat16().requires_grad_()
    beta = torch.tensor([0.5, 2.0], device="cuda").requires_grad_()
    leaves = (q, k, v, beta)
    wide = [t.detach().double().requires_grad_() for t in leaves]
    assert_autograd_close(rt.delta_rule(q, k, v, beta), delta_rule_reference(*wide), leaves, wide, 1e-2, 3e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_varlen_autograd_matches_float64(causal):
    q_lens, k_lens, heads, kv_heads, d = [7, 129, 1], [9, 129, 300], 4, 2, 64
    make = lambda n, h: torch.randn(n, h, d, device="cuda").bfloat16().requires_grad_()
    q, k, v = make(sum(q_lens), heads), make(sum(k_lens), kv_heads), make(sum(k_lens), kv_heads)
    cu_q, cu_k = rustile.cu_seqlens(q_lens, q), rustile.cu_seqlens(k_lens, q)
    o = rt.attention_varlen(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), causal=causal)
    do = torch.randn_like(o)
    o.backward(do)
    # The float64 reference sequence by sequence, assembled: a sequence's
    # gradient can be all zeros (one query over keys it mostly does not see).
    want_o, want_grads = torch.zeros_like(o, dtype=torch.float64), [torch.zeros_like(t, dtype=torch.float64) for t in (q, k, v)]
    q0 = k0 = 0
    for nq, nk in zip(q_lens, k_lens):
        sl = lambda t, at, n: t.detach()[at:at + n].unsqueeze(0)
        want, leaves = reference(sl(q, q0, nq), sl(k, k0, nk), sl(v, k0, nk), causal)
        want.backward(do[q0:q0 + nq].unsqueeze(0).double())
        want_o[q0:q0 + nq] = want[0].detach()
        for full, at, n, leaf in zip(want_grads, (q0, k0, k0), (nq, nk, nk), leaves):
            full[at:at + n] = leaf.grad.transpose(1, 2)[0]
        q0, k0 = q0 + nq, k0 + nk
    assert rel_err(o, want_o) < 8e-3
    for got, ref in zip((q.grad, k.grad, v.grad), want_grads):
        assert rel_err(got, ref) < 1.5e-2


def test_custom_ops_pass_opcheck():
    q, k, v = qkv(1, 65, 65, 4, 2, 64, grad=True)
    torch.library.opcheck(torch.ops.rustile.attention.default, (q, k, v, True, None, None))
    x = torch.randn(9, 300, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(300, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.rustile.softmax.default, (x,))
    torch.library.opcheck(torch.ops.rustile.rms_norm.default, (x.requires_grad_(), w.requires_grad_(), 1e-6))
    torch.library.opcheck(torch.ops.rustile.layer_norm.default, (x, w, w.detach().clone().requires_grad_(), 1e-5))
    a, lw = torch.randn(33, 64, device="cuda", dtype=torch.bfloat16), torch.randn(48, 64, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.rustile.linear.default, (a, lw, None, "silu", None))
    scale, amax = torch.tensor([0.5], device="cuda"), torch.zeros(1, device="cuda")
    torch.library.opcheck(torch.ops.rustile.gemm_cast.default, (a, lw, None, "none", "e4m3", scale, amax),
                          test_utils=("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic"))
    torch.library.opcheck(torch.ops.rustile.dual_gemm.default, (a.requires_grad_(), lw, (lw * 0.5).requires_grad_()))
    a = a.detach()
    qv, kv = torch.randn(20, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True), torch.randn(30, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cu_q, cu_k = rustile.cu_seqlens([5, 15], qv), rustile.cu_seqlens([10, 20], qv)
    torch.library.opcheck(torch.ops.rustile.attention_varlen.default, (qv, kv, kv.detach().clone().requires_grad_(), cu_q, cu_k, 15, 20, True, None))
    dq, dk, dv = qkv(1, 67, 67, 2, 2, 64, grad=True)
    beta = torch.tensor([0.5, 1.0], device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.rustile.delta_rule.default, (dq, dk / 8, dv, beta, None, None, 0))
    s0 = torch.randn(1, 2, 64, 64, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.rustile.delta_rule.default, (dq, dk / 8, dv, beta, s0, None, 0))
    torch.library.opcheck(torch.ops.rustile.delta_rule.default, (dq, dk / 8, dv, beta, None, rustile.cu_seqlens([60, 7], dq), 60))
    x3, cw = torch.randn(2, 37, 136, device="cuda", dtype=torch.bfloat16, requires_grad=True), torch.randn(4, 136, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(torch.ops.rustile.conv_silu.default, (x3, cw))
    o, g = torch.randn(37, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True), torch.randn(37, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(torch.ops.rustile.gated_rms_norm.default, (o, g, w[:64].detach().clone().requires_grad_(), 1e-5))
    a8, w8 = a.to(torch.float8_e4m3fn), lw.to(torch.float8_e4m3fn)
    # Not test_schema: it multiplies the inputs, which torch cannot do in FP8.
    torch.library.opcheck(torch.ops.rustile.gemm_fp8.default, (a8, w8, torch.tensor([0.5], device="cuda"), None, None, "none", None),
                          test_utils=("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic"))
    torch.library.opcheck(torch.ops.rustile.grouped_gemm.default, (a.requires_grad_(), torch.stack([lw, lw * 2]).requires_grad_(), [30, 3]))


def test_dual_gemm_autograd_matches_float64():
    a = torch.randn(77, 96, device="cuda").bfloat16().requires_grad_()
    b1, b2 = ((torch.randn(136, 96, device="cuda") / 8).bfloat16().requires_grad_() for _ in range(2))
    leaves = (a, b1, b2)
    wide = [t.detach().double().requires_grad_() for t in leaves]
    want = torch.nn.functional.silu(wide[0] @ wide[1].T) * (wide[0] @ wide[2].T)
    assert_autograd_close(rt.dual_gemm(a, b1, b2), want, leaves, wide, 1.5e-2, 2e-2)


def test_grouped_gemm_autograd_matches_float64():
    m_sizes, n, k = [40, 0, 7, 130], 72, 64
    a = torch.randn(sum(m_sizes), k, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(len(m_sizes), n, k, device="cuda") / 8).bfloat16().requires_grad_()
    wide = [t.detach().double().requires_grad_() for t in (a, w)]
    rows = torch.repeat_interleave(torch.arange(len(m_sizes), device="cuda"), torch.tensor(m_sizes, device="cuda"))
    want = torch.einsum("mk,mnk->mn", wide[0], wide[1][rows])
    assert_autograd_close(rt.grouped_gemm(a, w, m_sizes), want, (a, w), wide, 1e-2, 2e-2)


def test_delta_rule_over_packed_sequences_under_autograd():
    """Packed sequences (offsets on the device) against each sequence alone, forward and every gradient."""
    lens, heads = [70, 1, 129], 2
    make = lambda s: (torch.randn(1, sum(lens), heads, 64, device="cuda") * s).bfloat16().requires_grad_()
    q, k, v = make(1), make(0.125), make(1)
    beta = torch.tensor([0.5, 2.0], device="cuda").requires_grad_()
    o, final = rt.delta_rule(q, k, v, beta, return_final_state=True, cu_seqlens=rustile.cu_seqlens(lens, q), max_seqlen=max(lens))
    do, dfinal = torch.randn_like(o), torch.randn_like(final)
    torch.autograd.backward((o, final), (do, dfinal))
    got = [t.grad.clone() for t in (q, k, v, beta)]
    for t in (q, k, v, beta):
        t.grad = None
    at = 0
    for i, n in enumerate(lens):
        piece = lambda t: t[:, at:at + n]
        o1, f1 = rt.delta_rule(piece(q).contiguous(), piece(k).contiguous(), piece(v).contiguous(), beta, return_final_state=True)
        assert rel_err(piece(o), o1) < 1e-2 and rel_err(final[i], f1[0]) < 1e-2
        torch.autograd.backward((o1, f1), (piece(do), dfinal[i:i + 1]))
        at += n
    for g, want in zip(got, (q.grad, k.grad, v.grad, beta.grad)):
        assert rel_err(g, want) < 2e-2


def test_delta_rule_in_pieces_carries_its_state_and_gradient():
    """Two calls chained by the state equal one call, forward and backward."""
    batch, tokens, heads, cut = 2, 150, 2, 70
    q, v = (torch.randn(batch, tokens, heads, 64, device="cuda").bfloat16().requires_grad_() for _ in range(2))
    k = (torch.randn(batch, tokens, heads, 64, device="cuda") / 8).bfloat16().requires_grad_()
    beta = torch.tensor([0.5, 2.0], device="cuda").requires_grad_()
    leaves = (q, k, v, beta)
    wide = [t.detach().double().requires_grad_() for t in leaves]
    piece = lambda t, at: (t[:, :cut] if at == 0 else t[:, cut:]).contiguous()
    o1, s1 = rt.delta_rule(piece(q, 0), piece(k, 0), piece(v, 0), beta, return_final_state=True)
    o2 = rt.delta_rule(piece(q, 1), piece(k, 1), piece(v, 1), beta, initial=s1)
    assert_autograd_close(torch.cat([o1, o2], 1), delta_rule_reference(*wide), leaves, wide, 1e-2, 3e-2)


def quasar_reference(layer, x):
    """The layer's math in float64 on copies of its parameters: ``(out, {name: leaf})``."""
    p = {n: t.detach().double().requires_grad_() for n, t in layer.named_parameters()}
    xd = x.detach().double().requires_grad_()
    batch, tokens, hidden = x.shape
    heads = layer.heads

    def conv(y, w):
        a = sum(w[3 - s] * torch.nn.functional.pad(y, (0, 0, s, 0))[:, :tokens] for s in range(4))
        return torch.nn.functional.silu(a)

    q, k, v = (conv(xd @ p[w].T, p[c]).view(batch, tokens, heads, 64)
               for w, c in (("wq", "conv_q"), ("wk", "conv_k"), ("wv", "conv_v")))
    o = delta_rule_reference(q, k, v, torch.nn.functional.softplus(p["beta_log"]))
    g = (xd @ p["wg1"].T) @ p["wg2"].T + p["b_g"]
    o = o.reshape(batch, tokens, heads, 64)
    y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * p["norm_w"]
    y = y.reshape(batch, tokens, hidden) * torch.sigmoid(g)
    p["x"] = xd
    return y @ p["wo"].T, p


def test_quasar_module_matches_float64():
    from rustile.quasar import QuasarAttention

    layer = QuasarAttention(hidden=128, heads=2, gate_rank=16, device="cuda")
    with torch.no_grad():
        layer.beta_log.uniform_(-1, 1)
        layer.norm_w.add_(0.3 * torch.randn_like(layer.norm_w))
    x = torch.randn(2, 97, 128, device="cuda").requires_grad_()
    out = layer(x)
    want, leaves = quasar_reference(layer, x)
    cos = lambda a, b: torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()
    assert out.dtype == torch.bfloat16 and cos(out, want) >= 0.999 and rel_err(out, want) < 1e-2
    d_out = torch.randn_like(want)
    out.backward(d_out.bfloat16())
    want.backward(d_out)
    got = dict(layer.named_parameters())
    got["x"] = x
    for name, ref in leaves.items():
        assert got[name].grad is not None and got[name].grad.dtype == torch.float32, name
        assert cos(got[name].grad, ref.grad) >= 0.999 and rel_err(got[name].grad, ref.grad) < 3e-2, (name, cos(got[name].grad, ref.grad))


def test_attention_under_torch_compile_fullgraph():
    q, k, v = qkv(2, 256, 256, 8, 8, 64)

    @torch.compile(fullgraph=True)
    def block(q, k, v):
        return rt.attention(q * 0.5, k, v, causal=True).float().square().sum()

    want = rt.attention(q * 0.5, k, v, causal=True).float().square().sum()
    assert abs(block(q, k, v).item() - want.item()) <= 1e-3 * abs(want.item())


def _bf16(*shape, scale=1.0, grad=True):
    return (torch.randn(*shape, device="cuda") * scale).bfloat16().requires_grad_(grad)


def _offsets(*cu):
    return torch.tensor(cu, device="cuda", dtype=torch.int32)


def _beta():
    return torch.tensor([0.5, 2.0], device="cuda").requires_grad_()


def _w64():
    return (1 + 0.1 * torch.randn(64, device="cuda")).bfloat16().requires_grad_()


def _attention_varlen_case():
    cu_q, cu_k = _offsets(0, 70, 71, 300), _offsets(0, 90, 91, 250)
    return (_bf16(300, 4, 128), _bf16(250, 4, 128), _bf16(250, 4, 128)), lambda q, k, v: rt.attention_varlen(q, k, v, cu_q, cu_k, 229, 159)


def _delta_rule_varlen_case():
    cu = _offsets(0, 100, 101, 230)
    inputs = (_bf16(1, 230, 2, 64), _bf16(1, 230, 2, 64, scale=0.125), _bf16(1, 230, 2, 64), _beta())
    return inputs, lambda q, k, v, b: rt.delta_rule(q, k, v, b, cu_seqlens=cu, max_seqlen=129)


# Each op as a training step would call it: a maker of `(inputs, forward)`;
# the inputs that require grad get gradients in the captured step too.
CAPTURE_CASES = {
    "attention": lambda: ((_bf16(2, 300, 4, 64), _bf16(2, 300, 2, 64), _bf16(2, 300, 2, 64)), lambda q, k, v: rt.attention(q, k, v, causal=True)),
    "attention_varlen": _attention_varlen_case,
    "softmax": lambda: ((_bf16(64, 512, grad=False),), rt.softmax),
    "gemm_cast": lambda: ((_bf16(41, 64, grad=False), _bf16(48, 64, scale=0.125, grad=False)),
                          lambda x, w: rt.gemm_cast(x, w, None, "silu", "f32", None, None)),
    "gemm_fp8": lambda: ((_bf16(33, 64, grad=False), _bf16(48, 64, grad=False)),
                         lambda a, w: rt.gemm_fp8(a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), None, None, None, "none", None)),
    "rms_norm": lambda: ((_bf16(37, 768), _w64().repeat(12).detach().requires_grad_()), lambda x, w: rt.rms_norm(x, w)),
    "layer_norm": lambda: ((_bf16(37, 768), _bf16(768), _bf16(768)), lambda x, w, b: rt.layer_norm(x, w, b)),
    "linear": lambda: ((_bf16(41, 64), _bf16(48, 64, scale=0.125), _bf16(48)), lambda x, w, b: rt.linear(x, w, b, "none", None)),
    "dual_gemm": lambda: ((_bf16(77, 96), _bf16(136, 96, scale=0.125), _bf16(136, 96, scale=0.125)), rt.dual_gemm),
    "grouped_gemm": lambda: ((_bf16(177, 64), _bf16(4, 72, 64, scale=0.125)), lambda a, w: rt.grouped_gemm(a, w, [40, 0, 7, 130])),
    "delta_rule": lambda: ((_bf16(1, 230, 2, 64), _bf16(1, 230, 2, 64, scale=0.125), _bf16(1, 230, 2, 64), _beta()),
                           lambda q, k, v, b: rt.delta_rule(q, k, v, b)),
    "delta_rule_varlen": _delta_rule_varlen_case,
    "conv_silu": lambda: ((_bf16(2, 37, 136), _bf16(4, 136)), rt.conv_silu),
    "gated_rms_norm": lambda: ((_bf16(37, 128), _bf16(37, 128), _w64()), lambda o, g, w: rt.gated_rms_norm(o, g, w)),
}


@pytest.mark.parametrize("name", list(CAPTURE_CASES))
def test_op_and_its_backward_replay_in_a_cuda_graph(name):
    """A step (the op, then the gradients of every input that wants one)
    captured into a CUDA graph, replayed on new inputs, equals the same
    step run eagerly: nothing uploads, reads back or runs outside the graph."""
    inputs, forward = CAPTURE_CASES[name]()
    leaves = [t for t in inputs if t.requires_grad]
    d_out = torch.randn_like(forward(*inputs).float()).to(inputs[0].dtype)

    def step():
        out = forward(*inputs)
        return (out, *torch.autograd.grad(out, leaves, d_out)) if leaves else (out,)

    # Warm-up on a side stream (PyTorch's recipe): loads the kernels before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for _ in range(2):
        with torch.no_grad():
            for t in inputs:  # new values of the same sign and size
                t.mul_(1 + 0.1 * torch.randn_like(t.float()))
        graph.replay()
        want = step()
        torch.cuda.synchronize()
        for i, (got, ref) in enumerate(zip(captured, want)):
            assert rel_err(got, ref) < 1e-3, (name, i)


def test_attention_backward_on_a_side_stream_waits_for_it():
    """dK/dV and dQ run on two streams; both must follow the caller's stream:
    a do made just before on that stream (a long chain of torch work) is the one read."""
    q, k, v = qkv(2, 1000, 1000, 8, 8, 64, grad=True)
    o = rt.attention(q, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        do = torch.ones_like(o, dtype=torch.float32)
        for _ in range(200):
            do = do * 1.0001
        do = do.bfloat16()
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.current_stream().wait_stream(side)
    want, leaves = reference(q, k, v, False)
    want.backward(do.double())
    for got, ref in zip((dq, dk, dv), leaves):
        assert rel_err(got, ref.grad.transpose(1, 2)) < 1.5e-2


def trimul_reference(x, mask, w):
    """The update as the math reads, in float64."""
    F = torch.nn.functional
    x, mask, w = x.double(), mask.double(), {k: v.double() for k, v in w.items()}
    dim, hidden = x.shape[-1], w["to_out_norm.weight"].shape[0]
    x = F.layer_norm(x, (dim,), w["norm.weight"], w["norm.bias"], eps=1e-5)
    m = mask.unsqueeze(-1)
    left = F.linear(x, w["left_proj.weight"]) * m * torch.sigmoid(F.linear(x, w["left_gate.weight"]))
    right = F.linear(x, w["right_proj.weight"]) * m * torch.sigmoid(F.linear(x, w["right_gate.weight"]))
    t = torch.einsum("bikd,bjkd->bijd", left, right)
    u = F.layer_norm(t, (hidden,), w["to_out_norm.weight"], w["to_out_norm.bias"], eps=1e-5) * torch.sigmoid(F.linear(x, w["out_gate.weight"]))
    return F.linear(u, w["to_out.weight"])


@pytest.mark.parametrize("masked", [False, True])
def test_trimul_custom_kernel_as_gpu_mode_calls_it(masked):
    from rustile.trimul import custom_kernel, random_data

    data = random_data(2, 67, 128, 128, masked=masked)
    out = custom_kernel(data)
    want = trimul_reference(*data[:3])
    # GPU MODE's check: rtol = atol = 2e-2 elementwise.
    assert torch.allclose(out.double(), want, rtol=2e-2, atol=2e-2)
    # The same as a custom op, under opcheck and inside torch.compile(fullgraph=True).
    from rustile.trimul import WEIGHTS

    ws = [data[2][k] for k in WEIGHTS]
    torch.library.opcheck(torch.ops.rustile.trimul.default, (data[0], data[1], ws))
    compiled = torch.compile(lambda x, m, w: rt.trimul(x, m, w) * 2, fullgraph=True)
    assert torch.allclose(compiled(data[0], data[1], ws).double(), 2 * want, rtol=4e-2, atol=4e-2)
    # The prepared weights follow an in-place change of one of them.
    data[2]["to_out.weight"].mul_(-1)
    assert torch.allclose(custom_kernel(data).double(), -want, rtol=2e-2, atol=2e-2)
