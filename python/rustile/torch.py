"""Rustile's ops as PyTorch custom ops: ``torch.ops.rustile.*``, with fake
(meta) implementations so that ``torch.compile(fullgraph=True)`` traces
them, and autograd where Rust has the backward. Importing this module
registers them; the functions below are the friendly entry points.

Each op runs on PyTorch's current stream with outputs from PyTorch's
allocator, so it works inside ``torch.cuda.graph`` capture (after one
warm-up call outside it, as PyTorch asks of every op: the first call loads
the kernels). CPU tensors run in the CPU interpreter.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

import rustile

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


# ---- forward-only ops -------------------------------------------------------------------------
# (Their backward kernels exist in Rust; exposing them is the package's next step.)


@torch.library.custom_op("rustile::softmax", mutates_args=())
def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dim of a 2-D ``x`` (no autograd yet)."""
    return rustile.softmax(x)


@softmax.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("rustile::rms_norm", mutates_args=())
def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dim of a 2-D ``x`` (no autograd yet)."""
    return rustile.rms_norm(x, w, eps)


@rms_norm.register_fake
def _(x, w, eps):
    return torch.empty_like(x)


@torch.library.custom_op("rustile::layer_norm", mutates_args=())
def layer_norm(x: Tensor, w: Tensor, b: Optional[Tensor], eps: float) -> Tensor:
    """LayerNorm over the last dim of a 2-D ``x`` (no autograd yet)."""
    return rustile.layer_norm(x, w, b, eps)


@layer_norm.register_fake
def _(x, w, b, eps):
    return torch.empty_like(x)


@torch.library.custom_op("rustile::linear", mutates_args=())
def linear(x: Tensor, w: Tensor, bias: Optional[Tensor], act: str, residual: Optional[Tensor]) -> Tensor:
    """``act(x·wᵀ + bias) + residual`` in one GEMM with a fused epilogue
    (``w`` as ``nn.Linear`` stores it; no autograd yet)."""
    return rustile.gemm(x, w, bias=bias, act=act, residual=residual)


@linear.register_fake
def _(x, w, bias, act, residual):
    return x.new_empty(tuple(x.shape[:-1]) + (w.shape[0],))
