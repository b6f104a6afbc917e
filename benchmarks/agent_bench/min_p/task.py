"""Min-p filtering of decode logits over Llama-3's and Qwen's vocabularies (128256, 151936).

A token survives when its probability is at least ``min_p[b]`` times the row's largest probability,
i.e. when ``logit - max(logit) >= log(min_p[b])``; every other logit becomes ``-inf``. The output is the
filtered logits, so the rule is exact: kept logits must be the input's, bit for bit, and filtered ones
``-inf``. Only tokens whose margin to the cut is under ``_BAND`` (fp32 rounding of exp or of the
product ``min_p * p_max``) may fall either way.
"""

import math

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task

_BAND = 1e-4  # |logit - max - log(min_p)| under this: an honest fp32 kernel may keep or drop the token


def reference(logits, min_p):
    top = logits.max(dim=-1, keepdim=True).values
    keep = (logits - top) >= torch.log(min_p)[:, None]
    return logits.masked_fill(~keep, float("-inf"))


def make_inputs(shape, dtype, device, generator):
    """Logits randn * c * sqrt(2 ln V) with c log-uniform in [0.4, 1.4] per row, so the survivors range
    from one token to thousands; min_p uniform in [0.01, 0.3] (the values servers use), with one row in
    eight at 0 (no filtering: every token survives)."""
    B, V = shape["B"], shape["V"]
    c = torch.exp(torch.empty(B, 1, device=device).uniform_(math.log(0.4), math.log(1.4), generator=generator))
    logits = torch.randn(B, V, device=device, generator=generator) * (c * math.sqrt(2 * math.log(V)))
    u = torch.rand(B, device=device, generator=generator)
    off = torch.rand(B, device=device, generator=generator) < 0.125
    min_p = torch.where(off, torch.zeros_like(u), 0.01 + 0.29 * u)
    return logits.to(dtype), min_p.to(torch.float32)


def check(inputs, outputs, refs, dtype):
    """Exact, against float64: a token whose margin logit - max - log(min_p) is at least 1e-4 must be kept and
    one under -1e-4 dropped (within that band either passes: fp32 rounding); every kept logit equals the
    input's bit for bit, every dropped one is -inf."""
    logits, min_p = inputs[0].to(torch.float64), inputs[1].to(torch.float64)
    out = outputs[0]
    margin = logits - logits.max(dim=-1, keepdim=True).values - torch.log(min_p)[:, None]
    sure_keep, sure_drop = margin >= _BAND, margin < -_BAND
    kept = torch.isfinite(out)
    failures = []
    dropped_wrongly = sure_keep & ~kept
    if dropped_wrongly.any():
        failures.append(f"{int(dropped_wrongly.sum())} tokens above the min-p cut were filtered out")
    kept_wrongly = sure_drop & kept
    if kept_wrongly.any():
        failures.append(f"{int(kept_wrongly.sum())} tokens below the min-p cut were kept")
    changed = kept & (out.to(torch.float64) != logits)
    if changed.any():
        failures.append(f"{int(changed.sum())} kept logits differ from the input's (they must be copied exactly)")
    wrong_fill = ~kept & ~(out == float("-inf"))
    if wrong_fill.any():
        failures.append(f"{int(wrong_fill.sum())} filtered logits are not -inf (NaN or +inf)")
    return failures


def cost(shape, dtype):
    B, V = shape["B"], shape["V"]
    # Read the logits once (the max needs them before the cut, a kernel may hold a row on chip) and write
    # them once; min_p is B floats. A max, a subtract and a compare per logit.
    return Cost(bytes=2 * B * V * 4 + B * 4, flops=3.0 * B * V)


TASK = Task(
    name="min_p",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"B": b, "V": v} for v in (128256, 151936) for b in (1, 16, 64, 256)],
        held_out=ShapeRange(dims={"B": (1, 300), "V": [128256, 151936, 32000, 100003]}),
    ),
    cpu=ShapeSet(
        public=[{"B": 1, "V": 1000}, {"B": 8, "V": 4099}, {"B": 64, "V": 1000}],
        held_out=ShapeRange(dims={"B": (1, 40), "V": (500, 5000)}),
    ),
    dtypes=(torch.float32,),
    cost=cost,
    weight=lambda shape: 2.0 if shape["B"] <= 64 else 1.0,  # decode batches of 1 to 64 dominate
    check=check,
    description=(
        "Min-p filtering of fp32 decode logits [B, V] (vLLM's and SGLang's min_p sampling parameter): a "
        "token survives when softmax(logits)[b, v] >= min_p[b] * max_v softmax(logits)[b, v], which is "
        "logits[b, v] - max(logits[b]) >= log(min_p[b]); every other logit becomes -inf. Returns the "
        "filtered logits [B, V] fp32 as a new tensor (kept logits copied bit for bit); min_p = 0 keeps "
        "every token. Vocabularies of Llama-3 (128256) and Qwen2/3 (151936), odd V in held-out shapes. "
        "Memory-bound: one read and one write of the logits; the row max is the only reduction."
    ),
)
