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
from typing import Iterable

import torch
from torch import nn

from ratchet.e2e.workloads.registry import REGISTRY, OpRegistry
from ratchet.e2e.workloads.swaps import (Undoable, gated_mlp_forward, merged_gate_up, rmsnorm_forward, rope_wrapper,
                                         set_forward)

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


class HFPatch(Undoable):
    """What ``patch`` returns: counts of patched modules per op, and ``restore()``."""

    def __init__(self) -> None:
        self.counts = {name: 0 for name in PATCHABLE}
        self._undo: list = []


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
                set_forward(result, module, rmsnorm_forward(registry, module.weight, module.variance_epsilon))
                result.counts["rmsnorm"] += 1
            elif "silu_mul" in wanted and _is_swiglu(module):
                set_forward(result, module, gated_mlp_forward(registry, *merged_gate_up(module)))
                result.counts["silu_mul"] += 1
            if "rope" in wanted and hasattr(module, "q_proj") and hasattr(module, "k_proj"):
                mod = sys.modules.get(type(module).__module__)
                if mod is not None and callable(getattr(mod, "apply_rotary_pos_emb", None)):
                    modeling_modules[mod.__name__] = mod
        for mod in modeling_modules.values():
            original = mod.apply_rotary_pos_emb
            mod.apply_rotary_pos_emb = rope_wrapper(registry, original)
            result._undo.append(lambda mod=mod, original=original: setattr(mod, "apply_rotary_pos_emb", original))
            result.counts["rope"] += 1
        missing = [o for o in wanted if result.counts[o] == 0]
        if missing:
            raise ValueError(f"{type(model).__name__}: found nothing to patch for {missing}")
    except Exception:
        result.restore()
        raise
    return result
