"""A module task's CPU set at narrow widths: the same class built from its config with the widths cut.

A module task at the model's own widths can be too big to check on a CPU: Qwen3-30B-A3B's sparse MoE
block holds 2.4 GB of expert weights in fp32, and one judged call there took 13 s to draw its inputs and
7 s to fingerprint them (2026-12-05), so the judge's first-call limit stopped the reference itself, and
Triton's interpreter would take far longer. When a module's weights pass ``NARROW_ABOVE_BYTES``, its task's
CPU shapes name the module built from a narrowed copy of its config instead (dimension ``W``: the hidden
width), so a kernel's math and odd sizes are checked in seconds; the GPU shapes keep the model's widths.
A kernel must then take its widths from its arguments' shapes, as it must for any model of the family.

What is cut: the hidden width to ``NARROW_HIDDEN``, the MLP and expert widths by the same factor, the
expert count to enough for the router's top-k, and the vocabulary. Heads, head widths, top-k and every
flag stay, so the routing and the attention layout are the model's own.
"""

from __future__ import annotations

NARROW_ABOVE_BYTES = 64 << 20  # the module's weights, in the task's dtype, from which its CPU set is narrowed
NARROW_HIDDEN = 128
NARROW_VOCAB = 1024
_MLP_WIDTHS = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size", "ffn_dim")
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")


def narrowed_config(config: dict) -> dict:
    """The overrides that narrow a transformers config (as a dict): {} when it is narrow already."""
    hidden = config.get("hidden_size")
    if not isinstance(hidden, int) or hidden <= NARROW_HIDDEN:
        return {}
    factor = hidden / NARROW_HIDDEN
    out = {"hidden_size": NARROW_HIDDEN}
    for key in _MLP_WIDTHS:
        if isinstance(config.get(key), int) and config[key] > 0:
            out[key] = max(16, round(config[key] / factor / 16) * 16)
    top_k = config.get("num_experts_per_tok") or config.get("top_k") or 1
    groups = config.get("n_group") or 1  # DeepSeek's grouped router: the experts split evenly into groups
    for key in _EXPERT_COUNTS:
        if isinstance(config.get(key), int) and config[key] > 0:
            want = max(16, 2 * top_k)
            want = -(-want // groups) * groups
            out[key] = min(config[key], want)
    if isinstance(config.get("vocab_size"), int) and config["vocab_size"] > NARROW_VOCAB:
        out["vocab_size"] = NARROW_VOCAB
    return {k: v for k, v in out.items() if v != config.get(k)}


def narrowed_sizes(config: dict, overrides: dict) -> dict[int, int]:
    """Each literal size of the inputs that narrowing changes: the model's value -> the narrow one (the
    hidden width first when two fields share a value)."""
    sizes: dict[int, int] = {}
    for key in ("hidden_size", *_MLP_WIDTHS, *_EXPERT_COUNTS, "vocab_size"):
        if key in overrides and isinstance(config.get(key), int):
            sizes.setdefault(config[key], overrides[key])
    return sizes


def narrowed_inputs(inputs: list[dict], sizes: dict[int, int], vocab: int | None) -> list[dict]:
    """The task's input specs at narrow widths: literal sizes mapped, id ranges kept within ``vocab``."""
    out = []
    for item in inputs:
        item = dict(item)
        if "shape" in item:
            item["shape"] = [sizes.get(d, d) if isinstance(d, int) else d for d in item["shape"]]
        if vocab is not None and "high" in item and item["high"] >= vocab:
            item["high"] = vocab - 1
            item["low"] = min(item["low"], item["high"])
        out.append(item)
    return out
