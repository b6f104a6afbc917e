"""Speculative decoding's acceptance step: the log-probabilities of the draft tokens under the target and
the draft models, from which the acceptance ratio min(1, p_target / p_draft) of rejection sampling follows.

For target logits [B, S, V] and draft logits [B, S, V] (S drafted positions) and draft tokens [B, S],
returns (target_logprob [B, S], draft_logprob [B, S]) = log_softmax(logits)[b, s, token[b, s]], fp32.
Deterministic, so the rule is a tolerance against a float64 reference.
"""

import math

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance


def reference(target_logits, draft_logits, draft_tokens):
    # log_softmax(x)[t] = x[t] - logsumexp(x); written without log_softmax, which candidates may not call.
    index = draft_tokens.unsqueeze(-1)
    target = target_logits.gather(-1, index).squeeze(-1) - torch.logsumexp(target_logits, dim=-1)
    draft = draft_logits.gather(-1, index).squeeze(-1) - torch.logsumexp(draft_logits, dim=-1)
    return target.to(torch.float32), draft.to(torch.float32)


def make_inputs(shape, dtype, device, generator):
    """Logits with per-row temperature spread (c log-uniform in [0.4, 1.4]); the draft model's logits are
    the target's plus noise (a draft agrees with its target, not perfectly); the drafted tokens are drawn
    from the draft's distribution for half the rows and uniformly for the rest (log-probs near -30)."""
    B, S, V = shape["B"], shape["S"], shape["V"]
    c = torch.exp(torch.empty(B, S, 1, device=device).uniform_(math.log(0.4), math.log(1.4), generator=generator))
    target = torch.randn(B, S, V, device=device, generator=generator) * (c * math.sqrt(2 * math.log(V)))
    draft = target + torch.randn(B, S, V, device=device, generator=generator) * c
    sampled = torch.multinomial(torch.softmax(draft.reshape(B * S, V), dim=-1), 1, generator=generator).reshape(B, S)
    uniform = torch.randint(0, V, (B, S), device=device, generator=generator)
    pick = torch.rand(B, S, device=device, generator=generator) < 0.5
    tokens = torch.where(pick, sampled, uniform)
    return target.to(dtype), draft.to(dtype), tokens


def cost(shape, dtype):
    B, S, V = shape["B"], shape["S"], shape["V"]
    # Read both logits tensors once (max and sum of exp in one online pass); tokens in, two fp32 out.
    return Cost(bytes=2 * B * S * V * 4 + B * S * (8 + 8), flops=2 * 4.0 * B * S * V)


TASK = Task(
    name="spec_accept",
    reference=reference,
    make_inputs=make_inputs,
    gpu=ShapeSet(
        public=[{"B": b, "S": s, "V": v} for v in (128256, 151936) for b, s in ((1, 4), (8, 4), (32, 4), (64, 2))],
        held_out=ShapeRange(dims={"B": (1, 80), "S": (1, 7), "V": [128256, 151936, 32000, 100003]}),
    ),
    cpu=ShapeSet(
        public=[{"B": 1, "S": 4, "V": 1000}, {"B": 8, "S": 3, "V": 4099}],
        held_out=ShapeRange(dims={"B": (1, 12), "S": (1, 5), "V": (500, 5000)}),
    ),
    dtypes=(torch.float32,),
    cost=cost,
    weight=lambda shape: 1.0,
    # A log-sum-exp over 152k fp32 terms carries ~1e-5 of relative error in the sum, 1e-5 absolute in the
    # log; computed in bf16 it is off by ~1e-2 and fails.
    tolerances={torch.float32: Tolerance(atol=1e-4, rtol=1e-5)},
    forbidden=("aten::_log_softmax", "aten::log_softmax"),
    description=(
        "Speculative decoding's acceptance step (vLLM's rejection sampler, greedy-free): for fp32 target "
        "logits [B, S, V] and draft logits [B, S, V] at S drafted positions and the drafted tokens [B, S] "
        "int64, return (target_logprob, draft_logprob), each [B, S] fp32: log_softmax over V gathered at the "
        "drafted token; the acceptance ratio is exp(min(0, target - draft)). Only one element per row is "
        "needed, so a kernel needs the row's max and sum of exp (one online pass) and one logit: never the "
        "full log_softmax. Vocabularies of Llama-3 (128256) and Qwen (151936). torch.log_softmax is forbidden."
    ),
)
