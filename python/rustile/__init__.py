"""Rustile's GPU kernels on PyTorch tensors and NumPy arrays.

Every op takes CUDA tensors (run on device 0, on PyTorch's current stream,
outputs allocated by PyTorch's allocator) or host arrays and CPU tensors
(run by Rust's CPU interpreter of the same kernel code: slow, for tests and
machines without a GPU). Shapes, dtypes and strides are
checked in Rust; an error there is a ``ValueError`` (bad arguments) or a
``RuntimeError`` (CUDA) with Rust's message.

dtypes: ``bfloat16``, ``float16`` and ``float32`` where an op has them,
``float8_e4m3fn`` and ``float8_e5m2`` for :func:`gemm_fp8` (NumPy's are
``ml_dtypes``'). Inputs must be contiguous:
``.contiguous()`` (or ``numpy.ascontiguousarray``) first.

With PyTorch installed, ``import rustile.torch`` registers the ops as
``torch.library`` custom ops (``torch.ops.rustile.*``), with autograd where
Rust has the backward. ``rustile.trimul.custom_kernel`` is GPU MODE's TriMul
entry point.
"""

import math

from . import _rustile
from . import _arrays
from ._arrays import desc, desc_or_none, empty, stream_of

__all__ = ["softmax", "rms_norm", "layer_norm", "norm_backward", "gemm", "gemm_fp8", "grouped_gemm", "attention", "attention_backward",
           "attention_varlen", "attention_varlen_backward", "cu_seqlens", "dual_gemm", "delta_rule",
           "delta_rule_backward", "conv_silu", "conv_silu_backward", "proj_conv_silu", "gated_out_proj", "gated_rms_norm",
           "gated_rms_norm_backward", "gpu_name"]


def gpu_name():
    """The CUDA device the ops run on, or a ``RuntimeError`` saying why there is none."""
    return _rustile.gpu_name()


def softmax(x):
    """``softmax(x)`` over the last dim of a 2-D ``x``."""
    xd = desc(x)
    y = empty(x, xd[1])
    _rustile.softmax(xd, desc(y), stream_of(x))
    return y


def rms_norm(x, w, eps=1e-6, return_rstd=False):
    """RMSNorm over the last dim of a 2-D ``x``: ``x / sqrt(mean(x²) + eps) · w``.
    With ``return_rstd``, also each row's ``1/sqrt(mean(x²) + eps)`` (float32)."""
    xd = desc(x)
    y, rstd = empty(x, xd[1]), empty(x, xd[1][:1], "f32")
    _rustile.rms_norm(xd, desc(w), float(eps), desc(y), desc(rstd), stream_of(x))
    return (y, rstd) if return_rstd else y


def layer_norm(x, w, b=None, eps=1e-5, return_stats=False):
    """LayerNorm over the last dim of a 2-D ``x`` (``b`` optional). With
    ``return_stats``, also each row's mean and ``1/std`` (float32)."""
    xd = desc(x)
    y, mean, rstd = empty(x, xd[1]), empty(x, xd[1][:1], "f32"), empty(x, xd[1][:1], "f32")
    _rustile.layer_norm(xd, desc(w), desc_or_none(b), float(eps), desc(y), desc(mean), desc(rstd), stream_of(x))
    return (y, mean, rstd) if return_stats else y


def norm_backward(dy, x, w, rstd, mean=None, bias=False):
    """The backward of :func:`rms_norm` (``mean`` None) or :func:`layer_norm`
    (its ``mean``; with ``bias``, ``db`` too): ``(dx, dw, db)``, ``dw`` and
    ``db`` float32 (``db`` None without a bias), from the forward's statistics."""
    xd = desc(x)
    dx, dw = empty(x, xd[1]), empty(x, xd[1][-1:], "f32")
    db = empty(x, xd[1][-1:], "f32") if bias else None
    _rustile.norm_backward(desc(dy), xd, desc(w), desc_or_none(mean), desc(rstd), desc(dx), desc(dw),
                           desc_or_none(db), stream_of(x))
    return dx, dw, db


def gemm(a, w, bias=None, act="none", residual=None, alpha=1.0, w_kn=False, a_km=False, out_dtype=None, out_scale=None, amax=None):
    """``act(alpha·a·wᵀ + bias) + residual`` with the epilogue fused into the
    GEMM: ``a`` ``[m, k]`` (or a batch ``[z, m, k]``; ``[k, m]`` with
    ``a_km``, as a weight gradient ``dyᵀ·x`` reads ``dy``), ``w`` ``[n, k]``
    as ``nn.Linear`` stores it (``[k, n]`` with ``w_kn``), ``bias`` ``[n]``,
    ``residual`` like the output. ``act``: none, relu, relu2, silu, gelu_tanh.

    The output is of ``a``'s dtype, or cast in the epilogue: ``out_dtype``
    ``"f32"``, or ``"e4m3"`` (float8_e4m3fn, from bfloat16, saturating at
    ±448) times ``out_scale`` (one float32: the quantization scale); with
    ``amax`` (one float32, start it at 0), the largest |value| before the
    scale is raised into it, for the next step's scale."""
    ad, wd = desc(a), desc(w)
    if len(wd[1]) != 2 or (a_km and len(ad[1]) != 2):
        raise ValueError(f"gemm: w (and a with a_km) must be 2-D, not of shapes {ad[1]} and {wd[1]}")
    if out_dtype not in (None, "f32", "e4m3"):
        raise ValueError(f"gemm: out_dtype must be None (a's dtype), 'f32' or 'e4m3', not {out_dtype!r}")
    m = ad[1][-1] if a_km else ad[1][-2]
    c = empty(a, tuple(ad[1][:-2]) + (m, wd[1][1] if w_kn else wd[1][0]), out_dtype)
    _rustile.gemm(ad, wd, desc(c), bool(a_km), bool(w_kn), desc_or_none(bias), act,
                  desc_or_none(residual), float(alpha), desc_or_none(out_scale), desc_or_none(amax), stream_of(a))
    return c


def gemm_fp8(a, w, scale_a=None, scale_w=None, bias=None, act="none", residual=None, alpha=1.0):
    """:func:`gemm` on FP8 operands (Hopper's FP8 tensor cores), bf16 out:
    ``act(alpha·(scale_a·a)·(scale_w·w)ᵀ + bias) + residual`` with ``a``
    ``[m, k]`` and ``w`` ``[n, k]`` each float8_e4m3fn or float8_e5m2, ``k``
    a multiple of 16. A scale is float32, one value (per tensor) or one a
    row (``[m]``, ``[n]``), or None; ``bias`` ``[n]`` and ``residual``
    ``[m, n]`` bfloat16."""
    ad, wd = desc(a), desc(w)
    if len(ad[1]) != 2 or len(wd[1]) != 2:
        raise ValueError(f"gemm_fp8: a and w must be 2-D, not of shapes {ad[1]} and {wd[1]}")
    c = empty(a, (ad[1][0], wd[1][0]), "bf16")
    _rustile.gemm_fp8(ad, wd, desc(c), desc_or_none(scale_a), desc_or_none(scale_w), desc_or_none(bias), act,
                      desc_or_none(residual), float(alpha), stream_of(a))
    return c


def grouped_gemm(a, w, m_sizes):
    """A mixture of experts' GEMMs in one launch: ``a`` ``[Σ m_sizes, k]``
    (tokens sorted by expert), ``w`` ``[experts, n, k]``; expert ``g``'s
    ``m_sizes[g]`` rows of ``a`` times ``w[g]ᵀ``, into ``[Σ m_sizes, n]``.
    bfloat16 or float16; ``m_sizes`` a list of ints (zeros allowed). The
    launch's group table is uploaded on the first call with those sizes and
    kept, so later calls with them can be captured in a CUDA graph."""
    ad, wd = desc(a), desc(w)
    if len(ad[1]) != 2 or len(wd[1]) != 3:
        raise ValueError(f"grouped_gemm: a must be [tokens, k] and w [experts, n, k], not of shapes {ad[1]} and {wd[1]}")
    experts, n, k = wd[1]
    m_sizes = [int(m) for m in m_sizes]
    if len(m_sizes) != experts or sum(m_sizes) != ad[1][0] or ad[1][1] != k:
        raise ValueError(f"grouped_gemm: m_sizes {m_sizes} must give one count per expert ({experts}) summing to "
                         f"a's {ad[1][0]} rows, and a's k ({ad[1][1]}) must be w's ({k})")
    c = empty(a, (ad[1][0], n))
    _rustile.grouped_gemm(ad, wd, desc(c), [[m, n, k] for m in m_sizes], stream_of(a))
    return c


def attention(q, k, v, causal=False, scale=None, keys=None, return_lse=False):
    """Softmax attention, FlashAttention's layout: ``q`` ``[batch, sq, heads,
    d]``, ``k`` and ``v`` ``[batch, sk, kv_heads, d]`` (``heads`` a multiple
    of ``kv_heads``: GQA). ``causal``: query ``i`` sees keys ``j ≤ i``;
    ``scale`` defaults to ``1/sqrt(d)``; ``keys``: only the first ``keys``
    keys of each sequence. With ``return_lse``, also the log-sum-exp of each
    query's scores, ``[batch, heads, sq]`` float32 (what the backward needs)."""
    qd = desc(q)
    if len(qd[1]) != 4:
        raise ValueError(f"attention: q must be [batch, sq, heads, d], not of shape {qd[1]}")
    batch, sq, heads, _ = qd[1]
    o, lse = empty(q, qd[1]), empty(q, (batch, heads, sq), "f32")
    _rustile.attention(qd, desc(k), desc(v), desc(o), desc(lse), bool(causal), _scale(scale), keys, stream_of(q))
    return (o, lse) if return_lse else o


def attention_backward(q, k, v, o, do, lse, causal=False, scale=None, keys=None):
    """``(dq, dk, dv)`` of :func:`attention` from the output's gradient ``do``
    and the forward's ``o`` and ``lse``."""
    qd, kd, vd = desc(q), desc(k), desc(v)
    dq, dk, dv = empty(q, qd[1]), empty(k, kd[1]), empty(v, vd[1])
    _rustile.attention_backward(qd, kd, vd, desc(o), desc(do), desc(lse), desc(dq), desc(dk), desc(dv),
                                bool(causal), _scale(scale), keys, stream_of(q))
    return dq, dk, dv


def cu_seqlens(lens, like):
    """The int32 offsets ``[0, n0, n0+n1, …]`` of sequences of ``lens``
    tokens, beside ``like`` (a tensor or array: its library and device), as
    :func:`attention_varlen` and :func:`delta_rule` take them. Build them
    once per batch layout, outside a captured CUDA graph (this uploads)."""
    offsets = [0]
    for n in lens:
        if int(n) < 0:
            raise ValueError(f"cu_seqlens: lengths must be non-negative, not {list(lens)}")
        offsets.append(offsets[-1] + int(n))
    if offsets[-1] >= 2**31:
        raise ValueError(f"cu_seqlens: {offsets[-1]} tokens do not fit int32 offsets")
    desc(like)  # a TypeError for what is neither a tensor nor an array
    if hasattr(like, "new_tensor"):
        return like.new_tensor(offsets, dtype=_arrays._torch.int32)
    import numpy as np

    return np.array(offsets, dtype=np.int32)


def _longest(cu, given):
    """``given``, or the longest sequence the offsets ``cu`` hold (reading
    them: a device sync on CUDA, which a captured graph cannot do)."""
    if given is not None:
        return int(given)
    if len(cu) < 2:
        return 0
    return int((cu[1:] - cu[:-1]).max())


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=False, scale=None,
                     return_lse=False):
    """:func:`attention` over sequences of different lengths packed back to
    back, as ``flash_attn_varlen_func`` takes them: ``q`` ``[total_q, heads,
    d]``, ``k``, ``v`` ``[total_k, kv_heads, d]``; sequence ``i``'s queries
    are rows ``cu_seqlens_q[i] .. cu_seqlens_q[i+1]`` of ``q`` and its keys
    likewise (int32 offsets on ``q``'s device, :func:`cu_seqlens`); causal
    masks are per sequence. ``max_seqlen_q``, ``max_seqlen_k``: the longest
    sequence's queries and keys; given, nothing is read back, so the call
    can be captured in a CUDA graph (left out, they are read from the
    offsets). The offsets are trusted: rows of a sequence longer than its
    max are not computed, and offsets past ``q``'s or ``k``'s rows are cut
    to them. With ``return_lse``, also the log-sum-exp, ``[heads, total_q]`` float32."""
    qd = desc(q)
    if len(qd[1]) != 3:
        raise ValueError(f"attention_varlen: q must be [tokens, heads, d], not of shape {qd[1]}")
    o, lse = empty(q, qd[1]), empty(q, (qd[1][1], qd[1][0]), "f32")
    _rustile.attention_packed(qd, desc(k), desc(v), desc(cu_seqlens_q), desc(cu_seqlens_k), _longest(cu_seqlens_q, max_seqlen_q),
                              _longest(cu_seqlens_k, max_seqlen_k), desc(o), desc(lse), bool(causal), _scale(scale), stream_of(q))
    return (o, lse) if return_lse else o


def attention_varlen_backward(q, k, v, o, do, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=False,
                              scale=None):
    """``(dq, dk, dv)`` of :func:`attention_varlen`."""
    qd, kd, vd = desc(q), desc(k), desc(v)
    dq, dk, dv = empty(q, qd[1]), empty(k, kd[1]), empty(v, vd[1])
    _rustile.attention_packed_backward(qd, kd, vd, desc(o), desc(do), desc(lse), desc(cu_seqlens_q), desc(cu_seqlens_k),
                                       _longest(cu_seqlens_q, max_seqlen_q), _longest(cu_seqlens_k, max_seqlen_k),
                                       desc(dq), desc(dk), desc(dv), bool(causal), _scale(scale), stream_of(q))
    return dq, dk, dv


def dual_gemm(a, b1, b2):
    """``silu(a·b1ᵀ) ⊙ (a·b2ᵀ)`` in one kernel (a SwiGLU's gate and up
    projections): ``a`` ``[m, k]``, ``b1``, ``b2`` ``[n, k]`` as ``nn.Linear`` stores them."""
    ad, b1d = desc(a), desc(b1)
    c = empty(a, (ad[1][0], b1d[1][0]))
    _rustile.dual_gemm(ad, b1d, desc(b2), desc(c), stream_of(a))
    return c


def delta_rule(q, k, v, beta, initial=None, return_final_state=False, cu_seqlens=None, max_seqlen=None):
    """The delta rule of QuasarAttention, chunked: ``q``, ``k``, ``v``
    ``[batch, tokens, heads, 64]``, ``beta`` ``[heads]`` float32 (each head's
    step size β: ``α_t = (1 − e^{−β‖k_t‖²}) / (‖k_t‖² + 1e-8)``,
    ``S_t = S_{t−1} + α_t·k_t·(v_t − S_{t−1}ᵀk_t)ᵀ``, ``o_t = S_tᵀ·q_t``), from
    ``initial`` ``[seqs, heads, 64, 64]`` float32 or zeros. With
    ``return_final_state``, also the state after the last token.

    Packed sequences: ``cu_seqlens`` (int32 ``[seqs + 1]`` on ``q``'s
    device, :func:`cu_seqlens`) with ``batch`` 1, sequence ``i`` the tokens
    ``cu_seqlens[i] .. cu_seqlens[i+1]``, each from its own state;
    ``max_seqlen`` the longest (given, nothing is read back and the call can
    be captured in a CUDA graph). The offsets are trusted as in :func:`attention_varlen`."""
    qd = desc(q)
    batch, _, heads, d = qd[1]
    seqs, longest, cu = _packed(cu_seqlens, max_seqlen, batch)
    o = empty(q, qd[1])
    final = empty(q, (seqs, heads, d, d), "f32") if return_final_state else None
    _rustile.delta_rule(qd, desc(k), desc(v), desc(beta), desc(o), desc_or_none(initial),
                        desc_or_none(final), cu, longest, stream_of(q))
    return (o, final) if return_final_state else o


def _packed(cu_seqlens, max_seqlen, batch):
    """``(sequences, longest, offsets' description)`` of the delta rule's
    packed sequences, or ``(batch, 0, None)`` without them."""
    if cu_seqlens is None:
        return batch, 0, None
    return len(cu_seqlens) - 1, _longest(cu_seqlens, max_seqlen), desc(cu_seqlens)


def delta_rule_backward(q, k, v, beta, do, initial=None, d_final=None, want_d_initial=False, cu_seqlens=None, max_seqlen=None):
    """``(dq, dk, dv, dbeta, d_initial)`` of :func:`delta_rule` from ``do``
    (and the final state's gradient ``d_final``); ``d_initial`` is None
    unless ``want_d_initial``."""
    qd, kd, vd = desc(q), desc(k), desc(v)
    batch, _, heads, d = qd[1]
    seqs, longest, cu = _packed(cu_seqlens, max_seqlen, batch)
    dq, dk, dv, dbeta = empty(q, qd[1]), empty(k, kd[1]), empty(v, vd[1]), empty(q, (heads,), "f32")
    d_initial = empty(q, (seqs, heads, d, d), "f32") if want_d_initial else None
    _rustile.delta_rule_backward(qd, kd, vd, desc(beta), desc(do), desc_or_none(initial), desc_or_none(d_final), desc(dq), desc(dk), desc(dv),
                                 desc(dbeta), desc_or_none(d_initial), cu, longest, stream_of(q))
    return dq, dk, dv, dbeta, d_initial


def conv_silu(x, w):
    """QuasarAttention's short convolution: ``silu`` of the causal width-4
    convolution of each channel of ``x`` ``[batch, tokens, channels]``
    (bfloat16; each sequence from its own start), weights ``w`` ``[4, channels]``
    (``w[3]`` multiplies the current token, ``w[0]`` the one three back)."""
    xd = desc(x)
    y = empty(x, xd[1])
    _rustile.conv_silu(xd, desc(w), desc(y), stream_of(x))
    return y


def conv_silu_backward(x, w, dy):
    """``(dx, dw)`` of :func:`conv_silu`; ``dw`` float32."""
    xd, wd = desc(x), desc(w)
    dx, dw = empty(x, xd[1]), empty(x, wd[1], "f32")
    _rustile.conv_silu_backward(xd, wd, desc(dy), desc(dx), desc(dw), stream_of(x))
    return dx, dw


def proj_conv_silu(x, wp, w, return_pre=False):
    """QuasarAttention's projection and short convolution in one launch:
    :func:`conv_silu` of ``x·wpᵀ`` with ``x`` ``[batch, tokens, hidden]``,
    ``wp`` ``[channels, hidden]`` and ``w`` ``[4, channels]`` (bfloat16).
    With ``return_pre``, also ``x·wpᵀ``, what :func:`conv_silu_backward` needs."""
    xd, wpd = desc(x), desc(wp)
    y = empty(x, (*xd[1][:-1], wpd[1][0]))
    pre = empty(x, (*xd[1][:-1], wpd[1][0])) if return_pre else None
    _rustile.proj_conv_silu(xd, wpd, desc(w), desc_or_none(pre), desc(y), stream_of(x))
    return (y, pre) if return_pre else y


def gated_out_proj(o, g1, wg2, bias, w, wo, eps=1e-5):
    """QuasarAttention's gate, output norm and output projection in one
    launch where the GPU has ``wgmma`` (the three steps elsewhere):
    ``(RMSNorm(o)·w ⊙ sigmoid(g1·wg2ᵀ + bias))·woᵀ`` per 64-wide head, with
    ``o`` ``[..., heads·64]``, ``g1`` ``[..., rank]``, ``wg2`` ``[heads·64,
    rank]``, ``bias`` ``[heads·64]``, ``w`` ``[64]``, ``wo`` ``[n_out,
    heads·64]`` (bfloat16)."""
    od, wod = desc(o), desc(wo)
    out = empty(o, (*od[1][:-1], wod[1][0]))
    _rustile.gated_out_proj(od, desc(g1), desc(wg2), desc(bias), desc(w), wod, float(eps), desc(out), stream_of(o))
    return out


def gated_rms_norm(o, g, w, eps=1e-5, return_rstd=False):
    """QuasarAttention's output norm, per 64-wide head: ``RMSNorm(o)·w ⊙
    sigmoid(g)`` with ``o``, ``g`` ``[..., heads·64]`` bfloat16 and ``w``
    ``[64]``. With ``return_rstd``, also ``1/rms`` ``[heads, tokens]``
    float32 (tokens over every leading dim), what the backward needs."""
    od = desc(o)
    heads = od[1][-1] // 64
    y, rstd = empty(o, od[1]), empty(o, (heads, math.prod(od[1][:-1])), "f32")
    _rustile.gated_rms_norm(od, desc(g), desc(w), float(eps), desc(y), desc(rstd), stream_of(o))
    return (y, rstd) if return_rstd else y


def gated_rms_norm_backward(dy, o, g, w, rstd, want_dg_sum=False):
    """``(d_o, dg, dw, dg_sum)`` of :func:`gated_rms_norm` (``dw`` float32);
    ``dg_sum`` (``Σ dg`` over tokens, float32: a bias's gradient) is None
    unless ``want_dg_sum``."""
    od = desc(o)
    d_o, dg, dw = empty(o, od[1]), empty(o, od[1]), empty(o, (64,), "f32")
    dg_sum = empty(o, od[1][-1:], "f32") if want_dg_sum else None
    _rustile.gated_rms_norm_backward(desc(dy), od, desc(g), desc(w), desc(rstd), desc(d_o), desc(dg), desc(dw),
                                     desc_or_none(dg_sum), stream_of(o))
    return d_o, dg, dw, dg_sum


def _scale(scale):
    if scale is None:
        return None
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"attention: the scale must be positive and finite, not {scale}")
    return scale
