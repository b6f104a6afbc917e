"""Route a Hugging Face transformers Llama-family model's ops through the op registry.

``patch(model)`` changes one model instance: every Llama-style RMSNorm module (a ``weight`` and a
``variance_epsilon``; Gemma's ``1 + weight`` norms are left alone) runs the registry's ``rmsnorm``, and
every SwiGLU MLP (``gate_proj``, ``up_proj``, ``down_proj``, a SiLU activation) runs one merged
gate_up GEMM and the registry's ``silu_mul``. With ``"rope"`` in ``ops`` the modeling module's
``apply_rotary_pos_emb`` is replaced for as long as the patch holds; that function is looked up by
name at call time, so this one is module-wide, not per instance. ``restore()`` (or leaving the
``with`` block) puts everything back.

The merged gate_up weight is a copy made when patching (the MLP's own two weights stay, for
``state_dict`` and for ``restore``): it costs the memory of those weights again, and a weight changed
after patching is not seen.
"""

from __future__ import annotations

import sys
import types
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ratchet.e2e.workloads.registry import REGISTRY, OpRegistry

PATCHABLE = ("rmsnorm", "silu_mul", "rope")


def _is_rmsnorm(module: nn.Module) -> bool:
    name = type(module).__name__
    return (name.endswith("RMSNorm") and "Gemma" not in name and hasattr(module, "variance_epsilon")
            and isinstance(getattr(module, "weight", None), torch.Tensor))


def _is_swiglu(module: nn.Module) -> bool:
    if not all(isinstance(getattr(module, n, None), nn.Linear) for n in ("gate_proj", "up_proj", "down_proj")):
        return False
    act = getattr(module, "act_fn", None)
    hidden_act = getattr(getattr(module, "config", None), "hidden_act", None)
    return isinstance(act, nn.SiLU) or hidden_act in ("silu", "swish")


def _rmsnorm_forward(ops: OpRegistry):
    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        return ops.rmsnorm(x, self.weight.to(x.dtype), self.variance_epsilon).view(shape)

    return forward


def _swiglu_forward(ops: OpRegistry, weight: torch.Tensor, bias: torch.Tensor | None):
    def forward(self, x):
        gate_up = F.linear(x, weight, bias)
        act = ops.silu_mul(gate_up.reshape(-1, gate_up.shape[-1]))
        return self.down_proj(act.view(*x.shape[:-1], -1))

    return forward


def _rotary(ops: OpRegistry, original):
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        # HF layout: q [B, Hq, S, D], k [B, Hkv, S, D], cos/sin [B or 1, S, D] = cat(freqs, freqs) in q's dtype.
        unsqueeze_dim = kwargs.get("unsqueeze_dim", args[0] if args else 1)
        if unsqueeze_dim != 1 or q.dim() != 4 or cos.dim() != 3 or cos.shape[-1] != q.shape[-1]:
            return original(q, k, cos, sin, *args, **kwargs)  # a layout this adapter does not map
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


class HFPatch:
    """What ``patch`` returns: counts of patched modules per op, and ``restore()``."""

    def __init__(self) -> None:
        self.counts = {name: 0 for name in PATCHABLE}
        self._undo: list = []

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __enter__(self) -> "HFPatch":
        return self

    def __exit__(self, *exc) -> None:
        self.restore()


def patch(model: nn.Module, ops: Iterable[str] = ("rmsnorm", "silu_mul"),
          registry: OpRegistry | None = None) -> HFPatch:
    """Route ``ops`` of a transformers Llama-family ``model`` through ``registry`` (default: the
    workloads' registry). Raises ValueError when an asked-for op finds nothing to patch."""
    registry = registry or REGISTRY
    wanted = tuple(ops)
    unknown = [o for o in wanted if o not in PATCHABLE]
    if unknown:
        raise ValueError(f"cannot patch {unknown} (patchable: {', '.join(PATCHABLE)})")
    result = HFPatch()
    modeling_modules = {}
    try:
        for module in model.modules():
            if "rmsnorm" in wanted and _is_rmsnorm(module):
                _set_forward(result, module, _rmsnorm_forward(registry))
                result.counts["rmsnorm"] += 1
            elif "silu_mul" in wanted and _is_swiglu(module):
                weight = torch.cat([module.gate_proj.weight, module.up_proj.weight]).detach()
                bias = None
                if module.gate_proj.bias is not None:
                    bias = torch.cat([module.gate_proj.bias, module.up_proj.bias]).detach()
                _set_forward(result, module, _swiglu_forward(registry, weight, bias))
                result.counts["silu_mul"] += 1
            if "rope" in wanted and hasattr(module, "q_proj") and hasattr(module, "k_proj"):
                mod = sys.modules.get(type(module).__module__)
                if mod is not None and callable(getattr(mod, "apply_rotary_pos_emb", None)):
                    modeling_modules[mod.__name__] = mod
        for mod in modeling_modules.values():
            original = mod.apply_rotary_pos_emb
            mod.apply_rotary_pos_emb = _rotary(registry, original)
            result._undo.append(lambda mod=mod, original=original: setattr(mod, "apply_rotary_pos_emb", original))
            result.counts["rope"] += 1
        missing = [o for o in wanted if result.counts[o] == 0]
        if missing:
            raise ValueError(f"{type(model).__name__}: found nothing to patch for {missing}")
    except Exception:
        result.restore()
        raise
    return result


def _set_forward(result: HFPatch, module: nn.Module, forward) -> None:
    had_own = "forward" in module.__dict__
    previous = module.__dict__.get("forward")
    module.forward = types.MethodType(forward, module)

    def undo():
        if had_own:
            module.forward = previous
        else:
            del module.forward

    result._undo.append(undo)
