"""QuasarAttention as a ``torch.nn.Module`` on Rustile's custom ops: the
layer of the linear-attention contest (hidden 512, 8 heads of 64 by
default), every step differentiable, in the order the math reads::

    q, k, v = silu(conv(x·Wqᵀ)), silu(conv(x·Wkᵀ)), silu(conv(x·Wvᵀ))   causal, width 4, per channel
    β       = softplus(β_log)                                         per head
    o       = delta_rule(q, k, v, β)                                  heads of 64, f32 state
    g       = (x·Wg1ᵀ)·Wg2ᵀ + b_g                                     hidden → rank → hidden
    out     = (RMSNorm(o)·w ⊙ sigmoid(g))·Woᵀ                         per head, eps 1e-5

Parameters are kept in ``dtype`` (float32 by default: master weights, as
under autocast) and cast to bfloat16 where the kernels read them, so their
gradients arrive in ``dtype``. The convolutions' weights are ``[4,
hidden]``: ``conv_q[3]`` multiplies the current token, ``conv_q[0]`` the
one three back (``nn.Conv1d``'s ``[hidden, 1, 4]`` transposed).
"""

import math

import torch
import torch.nn.functional as F

from . import torch as rt

HEAD = 64


class QuasarAttention(torch.nn.Module):
    """The layer; ``forward(x)`` takes ``[batch, tokens, hidden]`` (any
    float dtype; run in bfloat16) and returns bfloat16 of the same shape.
    With ``initial_state`` (``[batch, heads, 64, 64]`` float32) the delta
    rule starts from it; ``return_final_state`` also returns the state after
    the last token, so a long sequence can be run in pieces."""

    def __init__(self, hidden=512, heads=8, gate_rank=64, eps=1e-5, device=None, dtype=torch.float32):
        super().__init__()
        if heads * HEAD != hidden:
            raise ValueError(f"QuasarAttention: {heads} heads of {HEAD} make {heads * HEAD} channels, not the hidden {hidden}")
        self.hidden, self.heads, self.eps = hidden, heads, eps
        make = lambda *shape: torch.nn.Parameter(torch.empty(*shape, device=device, dtype=dtype))
        self.wq, self.wk, self.wv, self.wo = (make(hidden, hidden) for _ in range(4))
        self.wg1, self.wg2, self.b_g = make(gate_rank, hidden), make(hidden, gate_rank), make(hidden)
        self.conv_q, self.conv_k, self.conv_v = (make(4, hidden) for _ in range(3))
        self.beta_log, self.norm_w = make(heads), make(HEAD)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """``nn.Linear``'s and ``nn.Conv1d``'s default draws; β_log = 0 (β = ln 2), the norm's weight 1."""
        for w in (self.wq, self.wk, self.wv, self.wo, self.wg1, self.wg2):
            bound = 1 / math.sqrt(w.shape[1])
            w.uniform_(-bound, bound)
        for w in (self.conv_q, self.conv_k, self.conv_v):
            w.uniform_(-0.5, 0.5)  # fan-in 4
        self.b_g.uniform_(-1 / math.sqrt(self.wg1.shape[0]), 1 / math.sqrt(self.wg1.shape[0]))
        self.beta_log.zero_()
        self.norm_w.fill_(1.0)

    def forward(self, x, initial_state=None, return_final_state=False):
        batch, tokens, hidden = x.shape
        if hidden != self.hidden:
            raise ValueError(f"QuasarAttention: x has {hidden} channels, the layer {self.hidden}")
        bf = lambda t: t.to(torch.bfloat16)
        xb = bf(x).contiguous()
        q, k, v = (rt.conv_silu(rt.linear(xb, bf(w), None, "none", None), bf(c))
                   for w, c in ((self.wq, self.conv_q), (self.wk, self.conv_k), (self.wv, self.conv_v)))
        per_head = lambda t: t.view(batch, tokens, self.heads, HEAD)
        o, final = rt.delta_rule(per_head(q), per_head(k), per_head(v), F.softplus(self.beta_log.float()),
                                 initial=initial_state, return_final_state=True)
        g = rt.linear(rt.linear(xb, bf(self.wg1), None, "none", None), bf(self.wg2), bf(self.b_g), "none", None)
        y = rt.gated_rms_norm(o.view(batch, tokens, hidden), g, bf(self.norm_w), self.eps)
        out = rt.linear(y, bf(self.wo), None, "none", None)
        return (out, final) if return_final_state else out
