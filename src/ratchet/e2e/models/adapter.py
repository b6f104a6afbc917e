"""Route a transformers model's ops through the op registry, each swap checked by its math.

``adapt(model, registry)`` looks at every module of a (causal LM) transformers model and, for each kind
of op the campaign can swap, proposes the registry op that would compute it. A swap is made only when
the module and the proposed replacement give the same outputs on the same random inputs (in the
module's own dtype, within the built-in task's tolerance for it): the match is by the module's math,
never by its class name, and a module whose math differs (Gemma's ``1 + weight`` norm where a plain
weight is proposed, a GELU MLP where SiLU is) keeps its own forward. What is covered:

- norms: any module with a 1-D ``weight`` and an ``eps``/``variance_epsilon`` whose forward is
  RMSNorm with ``weight`` or with ``1 + weight`` (Gemma) -> ``rmsnorm``;
- gated MLPs: ``gate_proj``/``up_proj``/``down_proj`` whose forward is ``down(act(gate) * up)`` with
  SiLU -> one merged gate_up GEMM and ``silu_mul``;
- RoPE: the modeling module's ``apply_rotary_pos_emb`` (rotate-half) -> ``rope`` (module-wide while
  the adaptation holds; an interleaved variant does not match and stays);
- attention: through transformers' attention-function registry (``AttentionInterface``): a "ratchet"
  implementation runs the registry's ``decode_attention`` for decode steps (one query per row over the
  static cache) and the model's original implementation (sdpa or eager, with its own mask) otherwise;
- MoE routing: DeepSeek-V3's grouped sigmoid router -> ``moe_route``; softmax top-k routers (Mixtral,
  Qwen3-MoE) -> their softmax as ``softmax``;
- MoE experts: transformers' grouped-GEMM experts implementation (sorted token-slots, ``grouped_mm``,
  no data-dependent shapes, so CUDA graphs can capture it) with the gate's SiLU-and-multiply as
  ``silu_mul``.

``Adaptation.restore()`` puts every module back. Merged weights (gate_up, Gemma's ``1 + weight``) are
copies made when adapting: a weight changed afterwards is not seen.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
import types
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ratchet.e2e.workloads.registry import OpRegistry
from ratchet.e2e.workloads.swaps import (Undoable, gated_mlp_forward, merged_gate_up, rmsnorm_forward, rope_wrapper,
                                         set_forward)

KINDS = ("norm", "mlp", "rope", "attention", "router", "experts")
ATTENTION_PREFIX = "ratchet_"  # + the original implementation's name, e.g. "ratchet_sdpa"
PROBE_ROWS = 5

# How close a replacement's output must be to the module's own on the probe inputs, per dtype: the
# built-in tasks' tolerances (fp32 tight, bf16 at its rounding), relative to the output's scale.
_PROBE_TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-8, 1e-8), torch.float16: (2e-2, 2e-2),
              torch.bfloat16: (6e-2, 6e-2)}


@dataclass
class Adaptation(Undoable):
    """What ``adapt`` did: modules swapped per op kind, modules checked and left alone (with why);
    ``restore()`` puts every module back."""

    swapped: dict = field(default_factory=lambda: {k: 0 for k in KINDS})
    kept: list = field(default_factory=list)  # (module name, kind, why it was not swapped)
    _undo: list = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        return {"swapped": dict(self.swapped), "kept": [list(k) for k in self.kept]}


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``b`` matches ``a`` within the probe tolerance of ``a``'s dtype, relative to its scale."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    atol, rtol = _PROBE_TOL.get(a.dtype, (1e-3, 1e-3))
    wide_a, wide_b = a.double(), b.double()
    scale = float(wide_a.abs().max()) if a.numel() else 0.0
    return bool(torch.isfinite(wide_b).all()) and bool(((wide_a - wide_b).abs() <= atol * max(scale, 1.0)
                                                        + rtol * wide_a.abs()).all())


def _probe(original: Callable, replacement: Callable, *inputs) -> str | None:
    """None when both give the same outputs on ``inputs``; else why not (one line)."""
    try:
        with torch.no_grad():
            want, got = original(*inputs), replacement(*inputs)
    except Exception as exc:  # a replacement that cannot even run these inputs does not match
        return f"replacement raised {type(exc).__name__}: {exc}"
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    if len(want) != len(got):
        return "different number of outputs"
    for w, g in zip(want, got):
        if isinstance(w, torch.Tensor) and not (isinstance(g, torch.Tensor) and close(w, g)):
            return "outputs differ on the same inputs"
    return None


def _randn(*shape, like: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=like.device, dtype=like.dtype)


def _takes_more_than_its_input(module: nn.Module) -> bool:
    """Whether the module's forward has parameters beyond its one input, optional ones too: a probe on
    the input alone would miss what the model passes there (a gated norm's ``gate``)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return True
    named = [p for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    return len(named) > 1  # none named: a wrapper's (*args, **kwargs), which says nothing; the probe decides


# -- the kinds of op -------------------------------------------------------------------------------------
def _norm_eps(module: nn.Module) -> float | None:
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or getattr(module, "bias", None) is not None:
        return None
    for name in ("variance_epsilon", "eps"):
        eps = getattr(module, name, None)
        if isinstance(eps, float):
            return eps
    return None


def _try_norm(result: Adaptation, name: str, module: nn.Module, ops: OpRegistry) -> None:
    eps = _norm_eps(module)
    if eps is None:
        return
    if _takes_more_than_its_input(module):
        result.kept.append((name, "norm", "its forward takes more than the input"))
        return
    w = module.weight.detach()
    x = _randn(PROBE_ROWS, w.shape[0], like=w, seed=1) * 3.0
    for label, weight in (("weight", w), ("1 + weight", (1.0 + w.float()).to(w.dtype))):
        forward = rmsnorm_forward(ops, weight, eps)
        why = _probe(module.forward, lambda t: forward(module, t), x)
        if why is None:
            set_forward(result, module, forward)
            result.swapped["norm"] += 1
            return
    result.kept.append((name, "norm", "not RMSNorm with weight or 1 + weight"))


def _is_gated_mlp(module: nn.Module) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in ("gate_proj", "up_proj", "down_proj"))


def _try_mlp(result: Adaptation, name: str, module: nn.Module, ops: OpRegistry) -> None:
    if _takes_more_than_its_input(module):
        result.kept.append((name, "mlp", "its forward takes more than the input"))
        return
    forward = gated_mlp_forward(ops, *merged_gate_up(module))
    gate = module.gate_proj
    x = _randn(PROBE_ROWS, gate.in_features, like=gate.weight, seed=2)
    why = _probe(module.forward, lambda t: forward(module, t), x)
    if why is None:
        set_forward(result, module, forward)
        result.swapped["mlp"] += 1
    else:
        result.kept.append((name, "mlp", f"not down(silu(gate) * up): {why}"))


def _try_rope(result: Adaptation, modeling, ops: OpRegistry, like: torch.Tensor, head_dim: int) -> None:
    original = modeling.apply_rotary_pos_emb
    wrapper = rope_wrapper(ops, original)
    B, S, Hq, Hkv, D = 2, 3, 4, 2, head_dim
    q, k = _randn(B, Hq, S, D, like=like, seed=3), _randn(B, Hkv, S, D, like=like, seed=4)
    angles = _randn(1, S, D // 2, like=like, seed=5).float() * 3.0
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(like.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(like.dtype)
    why = _probe(original, wrapper, q, k, cos, sin)
    if why is not None:
        result.kept.append((modeling.__name__, "rope", f"apply_rotary_pos_emb is not rotate-half: {why}"))
        return
    modeling.apply_rotary_pos_emb = wrapper
    result._undo.append(lambda: setattr(modeling, "apply_rotary_pos_emb", original))
    result.swapped["rope"] += 1


# -- attention through transformers' attention registry --------------------------------------------------
def _original_attention(module: nn.Module, implementation: str) -> Callable:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    modeling = sys.modules.get(type(module).__module__)
    eager = getattr(modeling, "eager_attention_forward", None)
    return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager)


def _decode_lens(query: torch.Tensor, kwargs: dict) -> torch.Tensor | None:
    """How many cached positions each row attends to in a decode step: its position + 1 (no host sync)."""
    positions = kwargs.get("position_ids")
    if isinstance(positions, torch.Tensor) and positions.dim() == 2 and positions.shape[-1] == 1:
        return (positions[:, -1] + 1).to(torch.int32).expand(query.shape[0]).contiguous()
    cache_position = kwargs.get("cache_position")
    if isinstance(cache_position, torch.Tensor) and cache_position.numel() == 1:
        return (cache_position.reshape(1) + 1).to(torch.int32).expand(query.shape[0]).contiguous()
    return None


def ratchet_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, *,
                      _fallback: str = "sdpa", **kwargs):
    """The "ratchet_*" attention implementation: decode steps through the module's registry's
    ``decode_attention``; everything else (prefill, sliding windows, softcaps) through the implementation
    the model had, and a module that was not adapted (a second model sharing the config) through
    ``_fallback``, the implementation the name was registered for."""
    state = getattr(module, "_ratchet_attention", None)
    if state is None:
        state = (None, _original_attention(module, _fallback), False)
    ops, original, matched = state
    D = query.shape[-1]
    decodable = (matched and query.dim() == 4 and query.shape[2] == 1 and key.shape[-1] == D and dropout == 0.0
                 and kwargs.get("sliding_window") is None and kwargs.get("softcap") is None
                 and _task_scale(scaling, D)
                 and query.shape[1] % key.shape[1] == 0)
    lens = _decode_lens(query, kwargs) if decodable else None
    if lens is None:
        return original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    out = ops.decode_attention(query[:, :, 0].contiguous(), key, value, lens)  # [B, Hq, Dv]
    return out[:, None], None  # transformers' attention output layout: [B, S, H, Dv]


def _register_attention(implementation: str) -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    name = ATTENTION_PREFIX + implementation
    AttentionInterface.register(name, functools.partial(ratchet_attention, _fallback=implementation))
    # The prefill path runs the original implementation, so it gets the original's kind of mask.
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[implementation])
    return name


def _attention_probe(module, ops, original, like: torch.Tensor) -> str | None:
    """Run the original implementation and the registry's decode attention on one decode step's inputs."""
    config = module.config
    Hq = getattr(config, "num_attention_heads")
    head_dim = module.head_dim if hasattr(module, "head_dim") else getattr(module, "qk_head_dim", None)
    if head_dim is None:
        return "no head_dim"
    Hkv = getattr(module, "num_key_value_groups", 1)
    Hkv = Hq // Hkv if Hkv else Hq
    Dv = getattr(module, "v_head_dim", head_dim)
    B, L = 2, 12
    q = _randn(B, Hq, 1, head_dim, like=like, seed=6)
    k = _randn(B, Hkv, L, head_dim, like=like, seed=7)
    v = _randn(B, Hkv, L, Dv, like=like, seed=8)
    positions = torch.tensor([[4], [11]], device=like.device)
    lens = (positions[:, 0] + 1)
    mask = torch.arange(L, device=like.device)[None, :] < lens[:, None]
    scaling = getattr(module, "scaling", None)
    float_mask = torch.zeros(B, 1, 1, L, device=like.device, dtype=like.dtype).masked_fill(
        ~mask[:, None, None, :], torch.finfo(like.dtype).min)

    def want(q, k, v):
        # The original with the mask transformers builds for it (bool for sdpa, additive float for eager).
        m = mask[:, None, None, :] if original.__name__.startswith("sdpa") else float_mask
        out, _ = original(module, q, k, v, m, dropout=0.0, scaling=scaling, position_ids=positions)
        return out

    def got(q, k, v):
        out, _ = ratchet_attention(module, q, k, v, None, dropout=0.0, scaling=scaling, position_ids=positions)
        return out

    return _probe(want, got, q, k, v)


def _try_attention(result: Adaptation, name: str, module: nn.Module, ops: OpRegistry, implementation: str,
                   like: torch.Tensor) -> bool:
    why = _scaling_differs(module) or _sliding(module)
    if why:  # every decode call would take the original path (ratchet_attention's check): say so here
        result.kept.append((name, "attention", why))
        return False
    original = _original_attention(module, implementation)
    module._ratchet_attention = (ops, original, True)
    why = _attention_probe(module, ops, original, like)
    if why is not None:
        module._ratchet_attention = (ops, original, False)  # every call keeps the original path
        result.kept.append((name, "attention", f"decode attention differs: {why}"))
        result._undo.append(lambda: _drop_attr(module, "_ratchet_attention"))
        return False
    result._undo.append(lambda: _drop_attr(module, "_ratchet_attention"))
    result.swapped["attention"] += 1
    return True


def _task_scale(scaling, head_dim: int) -> bool:
    """Does ``scaling`` scale scores as decode_attention does, by 1/sqrt(head_dim)?"""
    return scaling is not None and math.isclose(scaling, head_dim ** -0.5, rel_tol=1e-6)


def _scaling_differs(module) -> str | None:
    """Why decode_attention cannot compute this module's attention, if its scale says so: the task scales
    scores by 1/sqrt(head_dim), and some models choose their own (Granite's attention_multiplier)."""
    scaling, head_dim = getattr(module, "scaling", None), getattr(module, "head_dim", None)
    if not isinstance(scaling, (int, float)) or not isinstance(head_dim, int) or head_dim <= 0:
        return None
    if _task_scale(scaling, head_dim):
        return None
    return (f"its scores are scaled by {scaling:g}, not 1/sqrt(head_dim) = {head_dim ** -0.5:g} as "
            "decode_attention's are")


def _sliding(module) -> str | None:
    """Why a sliding-window layer keeps its own attention: decode_attention attends to every cached
    position, and such a layer to the last ``sliding_window`` only (transformers passes the window per call)."""
    config, index = getattr(module, "config", None), getattr(module, "layer_idx", None)
    types = getattr(config, "layer_types", None)
    if isinstance(types, (list, tuple)) and isinstance(index, int) and index < len(types):
        # The config's layer types decide: EXAONE-4 gives every layer the window and uses it on the sliding
        # ones only; OLMo-3's modules carry none.
        window = getattr(config, "sliding_window", None) if types[index] == "sliding_attention" else None
    else:
        window = getattr(module, "sliding_window", None)
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        return (f"sliding-window attention (the last {window} positions), where decode_attention attends to the "
                "whole cache")
    return None


def _drop_attr(module, attr: str) -> None:
    if attr in module.__dict__:
        delattr(module, attr)


# -- MoE routers and experts ----------------------------------------------------------------------------
def _grouped_router_forward(ops: OpRegistry):
    def forward(self, hidden_states):
        x = hidden_states.view(-1, self.hidden_dim)
        logits = F.linear(x.float(), self.weight.float())
        weights, ids = ops.moe_route(logits, self.e_score_correction_bias.float())
        return logits, weights, ids

    return forward


def _softmax_router_forward(ops: OpRegistry):
    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, self.hidden_dim)
        logits = F.linear(x, self.weight)
        probs = ops.softmax(logits.float())
        top, ids = torch.topk(probs, self.top_k, dim=-1)
        if getattr(self, "norm_topk_prob", True):
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top.to(self.weight.dtype if self.weight.dtype != torch.float32 else top.dtype), ids

    return forward


def _routing_equal(want, got) -> bool:
    """Router outputs equal up to the order of each row's experts (moe_route's order is free)."""
    (_, w_weights, w_ids), (_, g_weights, g_ids) = want, got
    if w_ids.shape != g_ids.shape:
        return False
    w_ids_s, w_order = w_ids.sort(dim=-1)
    g_ids_s, g_order = g_ids.sort(dim=-1)
    return bool(torch.equal(w_ids_s, g_ids_s)) and close(w_weights.gather(1, w_order).float(),
                                                         g_weights.gather(1, g_order).float())


def _try_router(result: Adaptation, name: str, module: nn.Module, ops: OpRegistry) -> None:
    weight = module.weight
    grouped = hasattr(module, "e_score_correction_bias") and hasattr(module, "num_group")
    forward = _grouped_router_forward(ops) if grouped else _softmax_router_forward(ops)
    x = _randn(PROBE_ROWS * 3, module.hidden_dim, like=weight, seed=9)
    try:
        with torch.no_grad():
            want, got = module.forward(x), forward(module, x)
        same = _routing_equal(want, got)
    except Exception as exc:
        same, want = False, exc
    if same:
        set_forward(result, module, forward)
        result.swapped["router"] += 1
    else:
        what = "moe_route (DeepSeek-V3's grouping)" if grouped else "softmax top-k"
        result.kept.append((name, "router", f"not {what}"))


def _is_router(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (isinstance(weight, torch.Tensor) and weight.dim() == 2 and hasattr(module, "top_k")
            and hasattr(module, "hidden_dim") and hasattr(module, "num_experts") and not isinstance(module, nn.Linear))


def _is_experts(module: nn.Module) -> bool:
    return (isinstance(getattr(module, "gate_up_proj", None), torch.Tensor) and getattr(module, "has_gate", False)
            and getattr(module, "is_concatenated", False) and not getattr(module, "is_transposed", True)
            and not getattr(module, "has_bias", True))


def _experts_gate(ops: OpRegistry):
    def apply_gate(self, gate_up_out):
        return ops.silu_mul(gate_up_out.contiguous())

    return apply_gate


def _try_experts(result: Adaptation, name: str, module: nn.Module, ops: OpRegistry) -> None:
    from transformers.integrations.moe import grouped_mm_experts_forward

    E, H = module.num_experts, module.hidden_dim
    T, k = PROBE_ROWS, min(2, E)
    x = _randn(T, H, like=module.gate_up_proj, seed=10)
    g = torch.Generator(device="cpu").manual_seed(11)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(x.device)
    weights = torch.rand(T, k, generator=g).to(device=x.device, dtype=x.dtype)
    gate = _experts_gate(ops)

    def replaced(x, ids, weights):
        saved = module.__dict__.get("_apply_gate")
        module._apply_gate = types.MethodType(gate, module)
        try:
            return grouped_mm_experts_forward(module, x, ids, weights)
        finally:
            if saved is None:
                del module._apply_gate
            else:
                module._apply_gate = saved

    original = type(module).forward.__wrapped__ if hasattr(type(module).forward, "__wrapped__") else None
    reference = (lambda *a: original(module, *a)) if original else module.forward
    why = _probe(reference, replaced, x, ids, weights)
    if why is not None:
        result.kept.append((name, "experts", f"not SiLU-gated experts: {why}"))
        return
    module._apply_gate = types.MethodType(gate, module)
    result._undo.append(lambda: _drop_attr(module, "_apply_gate"))
    forward = types.MethodType(lambda self, *a, **kw: grouped_mm_experts_forward(self, *a, **kw), module)
    previous = module.__dict__.get("forward")
    module.forward = forward
    result._undo.append(lambda: (setattr(module, "forward", previous) if previous else _drop_attr(module, "forward")))
    result.swapped["experts"] += 1


# -- the whole model ------------------------------------------------------------------------------------
def adapt(model: nn.Module, registry: OpRegistry, kinds: Iterable[str] = KINDS) -> Adaptation:
    """Route ``kinds`` of ``model``'s ops through ``registry`` where the math matches (see the module)."""
    wanted = set(kinds)
    unknown = wanted - set(KINDS)
    if unknown:
        raise ValueError(f"unknown op kinds {sorted(unknown)} (kinds: {', '.join(KINDS)})")
    result = Adaptation()
    config = getattr(model, "config", None)
    like = next(model.parameters()).detach()
    try:
        modeling_modules, attention_modules = {}, []
        for name, module in model.named_modules():
            if "norm" in wanted and _norm_eps(module) is not None:
                _try_norm(result, name, module, registry)
            elif "mlp" in wanted and _is_gated_mlp(module):
                _try_mlp(result, name, module, registry)
            elif "router" in wanted and _is_router(module):
                _try_router(result, name, module, registry)
            elif "experts" in wanted and _is_experts(module):
                _try_experts(result, name, module, registry)
            if hasattr(module, "q_proj") or hasattr(module, "q_a_proj") or hasattr(module, "q_b_proj"):
                attention_modules.append((name, module))
                modeling = sys.modules.get(type(module).__module__)
                if modeling is not None and callable(getattr(modeling, "apply_rotary_pos_emb", None)):
                    modeling_modules[modeling.__name__] = (modeling, module)
        if "rope" in wanted:
            for modeling, module in modeling_modules.values():
                head_dim = getattr(module, "head_dim", None) or getattr(module, "qk_rope_head_dim", None)
                if head_dim:
                    _try_rope(result, modeling, registry, like, head_dim)
        if "attention" in wanted and config is not None and attention_modules:
            implementation = config._attn_implementation or "eager"
            if implementation.startswith(ATTENTION_PREFIX):
                implementation = implementation[len(ATTENTION_PREFIX):]
            name = _register_attention(implementation)
            for mod_name, module in attention_modules:
                _try_attention(result, mod_name, module, registry, implementation, like)
            _set_attention(result, model, name)
    except Exception:
        result.restore()
        raise
    return result


def _set_attention(result: Adaptation, model: nn.Module, name: str) -> None:
    """Point every config of the model at attention implementation ``name`` (transformers reads it from
    the config each call), restoring the previous on undo."""
    configs = {id(m.config): m.config for m in model.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")}
    for config in configs.values():
        previous = config._attn_implementation
        config._attn_implementation = name
        result._undo.append(lambda c=config, p=previous: setattr(c, "_attn_implementation", p))
