"""Undoable swaps of a transformers model's forwards for registry ops: the pieces that both
``hf_adapter.patch`` (swaps chosen by module names) and ``ratchet.e2e.models.adapter`` (swaps checked by
the module's math) build from.

Each swap appends its undo to the owner's ``_undo`` list; :class:`Undoable` gives the owner
``restore()`` (undo in reverse order) and the ``with`` block that calls it.
"""

from __future__ import annotations

import types
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ratchet.e2e.workloads.registry import OpRegistry


class Undoable:
    """A set of swaps made on a model (``_undo``, filled by the swaps), put back by ``restore()``."""

    _undo: list

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.restore()


def set_forward(owner: Undoable, module: nn.Module, forward) -> None:
    """Bind ``forward`` as ``module``'s own forward; the undo puts back what was there (an instance
    forward, or none, so the class's applies again)."""
    had_own = "forward" in module.__dict__
    previous = module.__dict__.get("forward")
    module.forward = types.MethodType(forward, module)

    def undo():
        if had_own:
            module.forward = previous
        else:
            del module.forward

    owner._undo.append(undo)


def rmsnorm_forward(ops: OpRegistry, weight: torch.Tensor, eps: float):
    """A norm module's forward as the registry's ``rmsnorm`` over the rows of the last dimension."""
    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        return ops.rmsnorm(x, weight.to(x.dtype), eps).view(shape)

    return forward


def merged_gate_up(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight (and bias, if any) of ``gate_proj`` and ``up_proj`` stacked into one GEMM's: a copy."""
    gate, up = module.gate_proj, module.up_proj
    weight = torch.cat([gate.weight, up.weight]).detach()
    bias = None if gate.bias is None else torch.cat([gate.bias, up.bias]).detach()
    return weight, bias


def gated_mlp_forward(ops: OpRegistry, weight: torch.Tensor, bias: torch.Tensor | None):
    """A gated MLP's forward as one merged gate_up GEMM, the registry's ``silu_mul``, and ``down_proj``."""
    def forward(self, x):
        gate_up = F.linear(x, weight, bias)
        act = ops.silu_mul(gate_up.reshape(-1, gate_up.shape[-1]))
        return self.down_proj(act.view(*x.shape[:-1], -1))

    return forward


def rope_wrapper(ops: OpRegistry, original: Callable) -> Callable:
    """``apply_rotary_pos_emb`` through the registry's ``rope`` for transformers' rotate-half layout;
    any other layout (or call) goes to ``original``."""
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        # transformers' layout: q [B, Hq, S, D], k [B, Hkv, S, D], cos/sin [B or 1, S, D] = cat(f, f).
        unsqueeze_dim = kwargs.get("unsqueeze_dim", args[0] if args else 1)
        if (unsqueeze_dim != 1 or len(args) > 1 or q.dim() != 4 or k.dim() != 4 or cos.dim() != 3
                or cos.shape[-1] != q.shape[-1] or k.shape[-1] != q.shape[-1]):
            return original(q, k, cos, sin, *args, **kwargs)  # a layout this wrapper does not map
        B, Hq, S, D = q.shape
        Hkv = k.shape[1]
        tokens = q.transpose(1, 2).reshape(B * S, Hq, D)
        keys = k.transpose(1, 2).reshape(B * S, Hkv, D)
        # cos/sin may carry a batch of 1 (one position_ids row for the whole batch): expand first.
        c = cos[..., : D // 2].expand(B, S, D // 2).reshape(B * S, D // 2).float()
        s = sin[..., : D // 2].expand(B, S, D // 2).reshape(B * S, D // 2).float()
        q_out, k_out = ops.rope(tokens, keys, c, s)
        return q_out.view(B, S, Hq, D).transpose(1, 2), k_out.view(B, S, Hkv, D).transpose(1, 2)

    return apply_rotary_pos_emb
