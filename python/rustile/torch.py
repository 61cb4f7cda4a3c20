"""Rustile's ops as PyTorch custom ops: ``torch.ops.rustile.*``, with fake
(meta) implementations so that ``torch.compile(fullgraph=True)`` traces
them, and autograd where Rust has the backward. Importing this module
registers them; the functions below are the friendly entry points.

Each op runs on PyTorch's current stream with outputs from PyTorch's
allocator, so it works inside ``torch.cuda.graph`` capture, backward
included (after one warm-up step outside it, as PyTorch asks of every op:
the first call loads the kernels, and the grouped GEMM builds the table of
each ``m_sizes`` it sees). Packed sequences come as device offsets
(``cu_seqlens``) with the longest length as an int, so nothing is read
back. CPU tensors run in the CPU interpreter.
``rustile.quasar.QuasarAttention`` is a module built on these ops.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

import rustile


def _save_inputs(ctx, inputs, output):
    """A backward that needs every input and no output saves them all."""
    ctx.save_for_backward(*inputs)


# ---- attention (forward and backward) -------------------------------------------------------


@torch.library.custom_op("rustile::attention", mutates_args=())
def _attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float], keys: Optional[int]) -> Tuple[Tensor, Tensor]:
    return rustile.attention(q, k, v, causal=causal, scale=scale, keys=keys, return_lse=True)


@_attention.register_fake
def _(q, k, v, causal, scale, keys):
    batch, sq, heads, _ = q.shape
    return torch.empty_like(q), q.new_empty((batch, heads, sq), dtype=torch.float32)


@torch.library.custom_op("rustile::attention_backward", mutates_args=())
def _attention_backward(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, causal: bool, scale: Optional[float], keys: Optional[int]
) -> Tuple[Tensor, Tensor, Tensor]:
    return rustile.attention_backward(q, k, v, o, do, lse, causal=causal, scale=scale, keys=keys)


@_attention_backward.register_fake
def _(q, k, v, o, do, lse, causal, scale, keys):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, keys = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.options = (causal, scale, keys)


def _attention_grad(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    # The backward reads dO as stored: a non-contiguous gradient (from a transpose) is copied first.
    dq, dk, dv = torch.ops.rustile.attention_backward(q, k, v, o, do.contiguous(), lse, *ctx.options)
    return dq, dk, dv, None, None, None


_attention.register_autograd(_attention_grad, setup_context=_attention_setup)


def attention(q, k, v, causal=False, scale=None, keys=None):
    """:func:`rustile.attention` on tensors (``[batch, seq, heads, d]``, as
    ``flash_attn_func``), differentiable in ``q``, ``k`` and ``v``."""
    return torch.ops.rustile.attention(q, k, v, causal, scale, keys)[0]


# ---- attention over packed variable-length sequences (forward and backward) ---------------------


@torch.library.custom_op("rustile::attention_varlen", mutates_args=())
def _attention_varlen(
    q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int, causal: bool, scale: Optional[float]
) -> Tuple[Tensor, Tensor]:
    return rustile.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, scale=scale, return_lse=True)


@_attention_varlen.register_fake
def _(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale):
    tokens, heads, _ = q.shape
    return torch.empty_like(q), q.new_empty((heads, tokens), dtype=torch.float32)


@torch.library.custom_op("rustile::attention_varlen_backward", mutates_args=())
def _attention_varlen_backward(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, lse: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int, causal: bool,
    scale: Optional[float]
) -> Tuple[Tensor, Tensor, Tensor]:
    return rustile.attention_varlen_backward(q, k, v, o, do, lse, cu_q, cu_k, max_q, max_k, causal=causal, scale=scale)


@_attention_varlen_backward.register_fake
def _(q, k, v, o, do, lse, cu_q, cu_k, max_q, max_k, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, causal, scale = inputs
    ctx.save_for_backward(q, k, v, cu_q, cu_k, *output)
    ctx.options = (max_q, max_k, causal, scale)


def _varlen_grad(ctx, do, _dlse):
    q, k, v, cu_q, cu_k, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.rustile.attention_varlen_backward(q, k, v, o, do.contiguous(), lse, cu_q, cu_k, *ctx.options)
    return dq, dk, dv, None, None, None, None, None, None


_attention_varlen.register_autograd(_varlen_grad, setup_context=_varlen_setup)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, scale=None):
    """:func:`rustile.attention_varlen` on tensors, as ``flash_attn_varlen_func``
    takes them (``[total, heads, d]``; int32 offsets ``cu_seqlens_*`` on the
    device, :func:`rustile.cu_seqlens`; the longest lengths as ints, so that
    nothing is read back and the call can be captured in a CUDA graph),
    differentiable in ``q``, ``k`` and ``v``."""
    return torch.ops.rustile.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), causal, scale)[0]


# ---- the GEMM with its output cast (forward only) ------------------------------------------------


@torch.library.custom_op("rustile::gemm_cast", mutates_args=("amax",))
def gemm_cast(
    a: Tensor, w: Tensor, bias: Optional[Tensor], act: str, out_dtype: str, out_scale: Optional[Tensor], amax: Optional[Tensor]
) -> Tensor:
    """:func:`rustile.gemm` with its output cast in the epilogue (no
    autograd: an inference or FP8-recipe step): ``out_dtype`` ``"f32"`` or
    ``"e4m3"`` (from bfloat16, times ``out_scale``), the largest |value|
    before the scale raised into ``amax`` (updated in place)."""
    return rustile.gemm(a, w, bias=bias, act=act, out_dtype=out_dtype, out_scale=out_scale, amax=amax)


@gemm_cast.register_fake
def _(a, w, bias, act, out_dtype, out_scale, amax):
    dtype = {"f32": torch.float32, "e4m3": torch.float8_e4m3fn}[out_dtype]
    return a.new_empty(tuple(a.shape[:-1]) + (w.shape[0],), dtype=dtype)


# ---- the dual GEMM (forward in one kernel; backward by GEMMs) --------------------------------


@torch.library.custom_op("rustile::dual_gemm", mutates_args=())
def _dual_gemm(a: Tensor, b1: Tensor, b2: Tensor) -> Tensor:
    return rustile.dual_gemm(a, b1, b2)


@_dual_gemm.register_fake
def _(a, b1, b2):
    return a.new_empty((a.shape[0], b1.shape[0]))


@torch.library.custom_op("rustile::dual_gemm_backward", mutates_args=())
def _dual_gemm_backward(dc: Tensor, a: Tensor, b1: Tensor, b2: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(da, db1, db2)`` of ``c = silu(h1) ⊙ h2``, ``h = a·bᵀ``: the two
    products again (the forward keeps neither), SiLU's derivative in float32,
    then ``da = dh1·b1 + dh2·b2`` (the second GEMM adds the first as its
    residual) and ``db = dhᵀ·a``."""
    h1, h2 = rustile.gemm(a, b1).float(), rustile.gemm(a, b2).float()
    sig, dc32 = torch.sigmoid(h1), dc.float()
    dh2 = (dc32 * h1 * sig).to(a.dtype)
    dh1 = (dc32 * h2 * sig * (1 + h1 * (1 - sig))).to(a.dtype)
    da = rustile.gemm(dh2, b2, w_kn=True, residual=rustile.gemm(dh1, b1, w_kn=True))
    return da, rustile.gemm(dh1, a, a_km=True, w_kn=True), rustile.gemm(dh2, a, a_km=True, w_kn=True)


@_dual_gemm_backward.register_fake
def _(dc, a, b1, b2):
    return torch.empty_like(a), torch.empty_like(b1), torch.empty_like(b2)


def _dual_grad(ctx, dc):
    return torch.ops.rustile.dual_gemm_backward(dc.contiguous(), *ctx.saved_tensors)


_dual_gemm.register_autograd(_dual_grad, setup_context=_save_inputs)


def dual_gemm(a, b1, b2):
    """:func:`rustile.dual_gemm` on tensors (``silu(a·b1ᵀ) ⊙ (a·b2ᵀ)`` in one
    kernel), differentiable in ``a``, ``b1`` and ``b2``."""
    return torch.ops.rustile.dual_gemm(a, b1, b2)


# ---- the FP8 GEMM (forward only: inference) and the grouped GEMM (forward and backward) ----------


@torch.library.custom_op("rustile::gemm_fp8", mutates_args=())
def gemm_fp8(
    a: Tensor, w: Tensor, scale_a: Optional[Tensor], scale_w: Optional[Tensor], bias: Optional[Tensor], act: str, residual: Optional[Tensor]
) -> Tensor:
    """:func:`rustile.gemm_fp8`: FP8 ``a`` ``[m, k]`` and ``w`` ``[n, k]``, bf16 out (no autograd)."""
    return rustile.gemm_fp8(a, w, scale_a=scale_a, scale_w=scale_w, bias=bias, act=act, residual=residual)


@gemm_fp8.register_fake
def _(a, w, scale_a, scale_w, bias, act, residual):
    return a.new_empty((a.shape[0], w.shape[0]), dtype=torch.bfloat16)


@torch.library.custom_op("rustile::grouped_gemm", mutates_args=())
def _grouped_gemm(a: Tensor, w: Tensor, m_sizes: List[int]) -> Tensor:
    return rustile.grouped_gemm(a, w, m_sizes)


@_grouped_gemm.register_fake
def _(a, w, m_sizes):
    return a.new_empty((a.shape[0], w.shape[1]))


@torch.library.custom_op("rustile::grouped_gemm_backward", mutates_args=())
def _grouped_gemm_backward(dc: Tensor, a: Tensor, w: Tensor, m_sizes: List[int]) -> Tuple[Tensor, Tensor]:
    """``da`` by one grouped launch over each ``w[g]`` transposed (a copy
    of the weights), ``dw[g] = dc_gᵀ·a_g`` by one GEMM an expert (reading
    ``dc_g`` transposed in place; an expert without tokens gets zeros)."""
    da = rustile.grouped_gemm(dc, w.transpose(1, 2).contiguous(), m_sizes)
    dw = torch.zeros_like(w)
    start = 0
    for g, m in enumerate(m_sizes):
        if m > 0:
            dw[g] = rustile.gemm(dc[start:start + m], a[start:start + m], a_km=True, w_kn=True)
        start += m
    return da, dw


@_grouped_gemm_backward.register_fake
def _(dc, a, w, m_sizes):
    return torch.empty_like(a), torch.empty_like(w)


def _grouped_setup(ctx, inputs, output):
    a, w, m_sizes = inputs
    ctx.save_for_backward(a, w)
    ctx.m_sizes = m_sizes


def _grouped_grad(ctx, dc):
    a, w = ctx.saved_tensors
    da, dw = torch.ops.rustile.grouped_gemm_backward(dc.contiguous(), a, w, ctx.m_sizes)
    return da, dw, None


_grouped_gemm.register_autograd(_grouped_grad, setup_context=_grouped_setup)


def grouped_gemm(a, w, m_sizes):
    """:func:`rustile.grouped_gemm` on tensors (each expert's rows of ``a``
    times its ``w[g]ᵀ``; ``m_sizes`` a list of ints), differentiable in ``a``
    and ``w``. A CUDA graph captures it for sizes already seen outside the
    capture (a warm-up step: their tables are uploaded on first use)."""
    return torch.ops.rustile.grouped_gemm(a, w, [int(m) for m in m_sizes])


# ---- QuasarAttention's convolution and gated norm (forward and backward) ------------------------


@torch.library.custom_op("rustile::conv_silu", mutates_args=())
def _conv_silu(x: Tensor, w: Tensor) -> Tensor:
    return rustile.conv_silu(x, w)


@_conv_silu.register_fake
def _(x, w):
    return torch.empty_like(x)


@torch.library.custom_op("rustile::conv_silu_backward", mutates_args=())
def _conv_silu_backward(x: Tensor, w: Tensor, dy: Tensor) -> Tuple[Tensor, Tensor]:
    return rustile.conv_silu_backward(x, w, dy)


@_conv_silu_backward.register_fake
def _(x, w, dy):
    return torch.empty_like(x), w.new_empty(w.shape, dtype=torch.float32)


def _conv_grad(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw = torch.ops.rustile.conv_silu_backward(x, w, dy.contiguous())
    return dx, dw.to(w.dtype)


_conv_silu.register_autograd(_conv_grad, setup_context=_save_inputs)


def conv_silu(x, w):
    """:func:`rustile.conv_silu` on tensors, differentiable in ``x`` and ``w``."""
    return torch.ops.rustile.conv_silu(x, w)


@torch.library.custom_op("rustile::gated_rms_norm", mutates_args=())
def _gated_rms_norm(o: Tensor, g: Tensor, w: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    return rustile.gated_rms_norm(o, g, w, eps, return_rstd=True)


@_gated_rms_norm.register_fake
def _(o, g, w, eps):
    heads, tokens = o.shape[-1] // 64, o.numel() // max(o.shape[-1], 1)
    return torch.empty_like(o), o.new_empty((heads, tokens), dtype=torch.float32)


@torch.library.custom_op("rustile::gated_rms_norm_backward", mutates_args=())
def _gated_rms_norm_backward(dy: Tensor, o: Tensor, g: Tensor, w: Tensor, rstd: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    d_o, dg, dw, _ = rustile.gated_rms_norm_backward(dy, o, g, w, rstd)
    return d_o, dg, dw


@_gated_rms_norm_backward.register_fake
def _(dy, o, g, w, rstd):
    return torch.empty_like(o), torch.empty_like(g), w.new_empty(w.shape, dtype=torch.float32)


def _gated_setup(ctx, inputs, output):
    o, g, w, _eps = inputs
    ctx.save_for_backward(o, g, w, output[1])


def _gated_grad(ctx, dy, _drstd):
    o, g, w, rstd = ctx.saved_tensors
    d_o, dg, dw = torch.ops.rustile.gated_rms_norm_backward(dy.contiguous(), o, g, w, rstd)
    return d_o, dg, dw.to(w.dtype), None


_gated_rms_norm.register_autograd(_gated_grad, setup_context=_gated_setup)


def gated_rms_norm(o, g, w, eps=1e-5):
    """:func:`rustile.gated_rms_norm` on tensors, differentiable in ``o``, ``g`` and ``w``."""
    return torch.ops.rustile.gated_rms_norm(o, g, w, eps)[0]


# ---- the delta rule (QuasarAttention's op; forward and backward) -------------------------------


@torch.library.custom_op("rustile::delta_rule", mutates_args=())
def _delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, initial: Optional[Tensor], cu_seqlens: Optional[Tensor], max_seqlen: int
) -> Tuple[Tensor, Tensor]:
    return rustile.delta_rule(q, k, v, beta, initial=initial, return_final_state=True, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen)


def _seqs(q, cu_seqlens):
    return q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


@_delta_rule.register_fake
def _(q, k, v, beta, initial, cu_seqlens, max_seqlen):
    _, _, heads, d = q.shape
    return torch.empty_like(q), q.new_empty((_seqs(q, cu_seqlens), heads, d, d), dtype=torch.float32)


@torch.library.custom_op("rustile::delta_rule_backward", mutates_args=())
def _delta_rule_backward(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, do: Tensor, initial: Optional[Tensor], d_final: Optional[Tensor], cu_seqlens: Optional[Tensor],
    max_seqlen: int
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(dq, dk, dv, dβ, d_initial)``; ``d_initial`` is empty without an initial state."""
    dq, dk, dv, dbeta, d_initial = rustile.delta_rule_backward(q, k, v, beta, do, initial=initial, d_final=d_final,
                                                               want_d_initial=initial is not None, cu_seqlens=cu_seqlens,
                                                               max_seqlen=max_seqlen)
    return dq, dk, dv, dbeta, d_initial if d_initial is not None else dbeta.new_empty(0)


@_delta_rule_backward.register_fake
def _(q, k, v, beta, do, initial, d_final, cu_seqlens, max_seqlen):
    d_initial = torch.empty_like(initial) if initial is not None else beta.new_empty(0, dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), beta.new_empty(beta.shape, dtype=torch.float32), d_initial


def _delta_setup(ctx, inputs, output):
    *tensors, max_seqlen = inputs
    ctx.save_for_backward(*tensors)
    ctx.max_seqlen = max_seqlen


def _delta_grad(ctx, do, d_final):
    q, k, v, beta, initial, cu_seqlens = ctx.saved_tensors
    d_final = d_final.contiguous() if d_final is not None else None
    dq, dk, dv, dbeta, d_initial = torch.ops.rustile.delta_rule_backward(q, k, v, beta, do.contiguous(), initial, d_final, cu_seqlens,
                                                                         ctx.max_seqlen)
    return dq, dk, dv, dbeta.to(beta.dtype), d_initial if initial is not None else None, None, None


_delta_rule.register_autograd(_delta_grad, setup_context=_delta_setup)


def delta_rule(q, k, v, beta, initial=None, return_final_state=False, cu_seqlens=None, max_seqlen=None):
    """:func:`rustile.delta_rule` on tensors (``[batch, tokens, heads, 64]``
    bf16, ``beta`` ``[heads]`` float32, from ``initial`` ``[seqs, heads,
    64, 64]`` float32 or a zero state), differentiable in ``q``, ``k``,
    ``v``, ``beta``, the initial state and, through ``return_final_state``,
    the final one (chunks of a long sequence, carried across calls).
    Packed sequences: ``cu_seqlens`` (int32 on the device) with ``max_seqlen``
    (an int: given, the call can be captured in a CUDA graph; left out, it is read from the offsets)."""
    if cu_seqlens is not None and max_seqlen is None:
        max_seqlen = rustile._longest(cu_seqlens, None)
    o, final = torch.ops.rustile.delta_rule(q, k, v, beta, initial, cu_seqlens, int(max_seqlen or 0))
    return (o, final) if return_final_state else o


# ---- TriMul (forward only: GPU MODE's task; Rust has no backward for it) ---------------------


@torch.library.custom_op("rustile::trimul", mutates_args=())
def trimul(x: Tensor, mask: Optional[Tensor], weights: List[Tensor]) -> Tensor:
    """AlphaFold3's outgoing triangle multiplicative update of ``x``
    ``[batch, n, n, dim]`` fp32 under ``mask`` (``[batch, n, n]`` or None),
    the ten parameters in :data:`rustile.trimul.WEIGHTS` order, as
    :func:`rustile.trimul.custom_kernel` runs it (no autograd)."""
    from rustile.trimul import WEIGHTS, custom_kernel

    return custom_kernel((x, mask, dict(zip(WEIGHTS, weights)), None))


@trimul.register_fake
def _(x, mask, weights):
    return torch.empty_like(x)


# ---- softmax (forward only: Rust has no softmax backward yet) ---------------------------------


@torch.library.custom_op("rustile::softmax", mutates_args=())
def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dim of a 2-D ``x`` (no autograd yet)."""
    return rustile.softmax(x)


@softmax.register_fake
def _(x):
    return torch.empty_like(x)


# ---- norms (forward and backward) --------------------------------------------------------------


@torch.library.custom_op("rustile::rms_norm", mutates_args=())
def _rms_norm(x: Tensor, w: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
    return rustile.rms_norm(x, w, eps, return_rstd=True)


@_rms_norm.register_fake
def _(x, w, eps):
    return torch.empty_like(x), x.new_empty(x.shape[:1], dtype=torch.float32)


@torch.library.custom_op("rustile::layer_norm", mutates_args=())
def _layer_norm(x: Tensor, w: Tensor, b: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor, Tensor]:
    return rustile.layer_norm(x, w, b, eps, return_stats=True)


@_layer_norm.register_fake
def _(x, w, b, eps):
    stat = lambda: x.new_empty(x.shape[:1], dtype=torch.float32)
    return torch.empty_like(x), stat(), stat()


@torch.library.custom_op("rustile::norm_backward", mutates_args=())
def _norm_backward(dy: Tensor, x: Tensor, w: Tensor, mean: Optional[Tensor], rstd: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(dx, dw, db)``; ``db`` is computed with ``mean`` (LayerNorm) and empty for RMSNorm."""
    dx, dw, db = rustile.norm_backward(dy, x, w, rstd, mean=mean, bias=mean is not None)
    return dx, dw, db if db is not None else dw.new_empty(0)


@_norm_backward.register_fake
def _(dy, x, w, mean, rstd):
    cols = x.shape[-1]
    return torch.empty_like(x), x.new_empty((cols,), dtype=torch.float32), x.new_empty((cols if mean is not None else 0,), dtype=torch.float32)


def _rms_setup(ctx, inputs, output):
    x, w, _eps = inputs
    ctx.save_for_backward(x, w, output[1])


def _rms_grad(ctx, dy, _drstd):
    x, w, rstd = ctx.saved_tensors
    dx, dw, _ = torch.ops.rustile.norm_backward(dy.contiguous(), x, w, None, rstd)
    return dx, dw.to(w.dtype), None


def _layer_setup(ctx, inputs, output):
    x, w, b, _eps = inputs
    ctx.save_for_backward(x, w, output[1], output[2])
    ctx.has_bias = b is not None


def _layer_grad(ctx, dy, _dmean, _drstd):
    x, w, mean, rstd = ctx.saved_tensors
    dx, dw, db = torch.ops.rustile.norm_backward(dy.contiguous(), x, w, mean, rstd)
    return dx, dw.to(w.dtype), db.to(w.dtype) if ctx.has_bias else None, None


_rms_norm.register_autograd(_rms_grad, setup_context=_rms_setup)
_layer_norm.register_autograd(_layer_grad, setup_context=_layer_setup)


def rms_norm(x, w, eps=1e-6):
    """:func:`rustile.rms_norm` on tensors, differentiable in ``x`` and ``w``."""
    return torch.ops.rustile.rms_norm(x, w, eps)[0]


def layer_norm(x, w, b=None, eps=1e-5):
    """:func:`rustile.layer_norm` on tensors, differentiable in ``x``, ``w`` and ``b``."""
    return torch.ops.rustile.layer_norm(x, w, b, eps)[0]


# ---- the linear layer: one GEMM with its fused epilogue --------------------------------------------


@torch.library.custom_op("rustile::linear", mutates_args=())
def linear(x: Tensor, w: Tensor, bias: Optional[Tensor], act: str, residual: Optional[Tensor]) -> Tensor:
    """``act(x·wᵀ + bias) + residual`` in one GEMM with a fused epilogue
    (``w`` as ``nn.Linear`` stores it). Differentiable where ``act`` is
    ``"none"`` (the others would need the pre-activation kept)."""
    return rustile.gemm(x, w, bias=bias, act=act, residual=residual)


@linear.register_fake
def _(x, w, bias, act, residual):
    return x.new_empty(tuple(x.shape[:-1]) + (w.shape[0],))


@torch.library.custom_op("rustile::linear_backward", mutates_args=())
def _linear_backward(dy: Tensor, x: Tensor, w: Tensor) -> Tuple[Tensor, Tensor]:
    """``dx = dy·w`` and ``dw = dyᵀ·x`` (over every leading dim), two GEMMs."""
    n, k = w.shape
    dy2, x2 = dy.reshape(-1, n), x.reshape(-1, k)
    dx = rustile.gemm(dy2, w, w_kn=True).reshape(x.shape)
    return dx, rustile.gemm(dy2, x2, a_km=True, w_kn=True)


@_linear_backward.register_fake
def _(dy, x, w):
    return torch.empty_like(x), torch.empty_like(w)


def _linear_setup(ctx, inputs, output):
    x, w, bias, act, residual = inputs
    ctx.save_for_backward(x, w)
    ctx.act, ctx.has = act, (bias is not None, residual is not None)


def _linear_grad(ctx, dy):
    if ctx.act != "none":
        raise NotImplementedError(f"rustile.torch.linear: the backward covers act='none', not {ctx.act!r}")
    x, w = ctx.saved_tensors
    dy = dy.contiguous()
    dx, dw = torch.ops.rustile.linear_backward(dy, x, w)
    has_bias, has_residual = ctx.has
    dbias = dy.reshape(-1, w.shape[0]).sum(0) if has_bias else None
    return dx, dw, dbias, None, dy if has_residual else None


linear.register_autograd(_linear_grad, setup_context=_linear_setup)
