"""The ``deepseek`` workload: a DeepSeek-V3-style decoder with MLA attention and MoE layers.

MLA (multi-head latent attention): the cache holds, per token, the RMS-normalized KV latent
(kv_lora_rank wide) and one roped key shared by all heads (qk_rope_dim), [B, 1, L, latent + rope].
Prefill expands the latent into per-head keys and values and runs causal attention. Decode absorbs the
key up-projection into the query and the value up-projection into the output, so it is multi-query
attention over the cache as it is: the ``decode_attention`` op with Hkv = 1, keys of latent + rope
(the whole cache) and values of the latent alone (a view of the same cache, its first kv_lora_rank
channels), so the output is the attention-weighted latent, as DeepSeek-V3 runs it (no product over the
rope channels, which a value of the whole cache would compute and throw away). That op scales scores by
1/sqrt(its head size); the query is pre-scaled so the product is MLA's 1/sqrt(qk_nope + qk_rope). RoPE is rotate-half (the rope task's convention;
DeepSeek's checkpoints interleave pairs, which with random weights is only a permutation of columns),
without YaRN scaling.

MoE: router logits in fp32, the ``moe_route`` op (sigmoid scores plus correction bias, 8 groups, top 4
groups, top 8 of 256 experts, renormalized, x2.5), routed experts through grouped GEMMs over the
token-slots sorted by expert (static shapes: capturable), plus a shared expert.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ratchet.e2e.workloads.config import DeepSeekConfig
from ratchet.e2e.workloads.core import MLP, Block, Decoder, Init, Step, causal_attention
from ratchet.e2e.workloads.registry import OpRegistry

_GROUPED_MM = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


class MLAttention(nn.Module):
    def __init__(self, config: DeepSeekConfig, init: Init, ops: OpRegistry) -> None:
        super().__init__()
        c = self.config = config
        self.ops = ops
        self.wq_a = init.linear(c.q_lora_rank, c.hidden)
        self.q_norm = init.norm(c.q_lora_rank)
        self.wq_b = init.linear(c.n_heads * c.qk_head_dim, c.q_lora_rank)
        self.wkv_a = init.linear(c.kv_lora_rank + c.qk_rope_dim, c.hidden)
        self.kv_norm = init.norm(c.kv_lora_rank)
        # Per head: qk_nope_dim rows of key up-projection, then v_head_dim rows of value up-projection.
        self.wkv_b = init.linear(c.n_heads * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank)
        self.wo = init.linear(c.hidden, c.n_heads * c.v_head_dim)
        self.scale = c.qk_head_dim ** -0.5

    def forward(self, x: torch.Tensor, step: Step, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        c, ops = self.config, self.ops
        T, H, dn, dr, R = x.shape[0], c.n_heads, c.qk_nope_dim, c.qk_rope_dim, c.kv_lora_rank
        q = F.linear(ops.rmsnorm(F.linear(x, self.wq_a), self.q_norm, c.eps), self.wq_b).view(T, H, dn + dr)
        ckv = F.linear(x, self.wkv_a)
        latent = ops.rmsnorm(ckv[:, :R].contiguous(), self.kv_norm, c.eps)
        q_pe, k_pe = ops.rope(q[..., dn:].contiguous(), ckv[:, None, R:].contiguous(), step.cos, step.sin)
        entry = torch.cat([latent, k_pe[:, 0]], dim=-1)  # [T, R + dr]: what the cache keeps per token
        cache = kv[0]
        q_nope = q[..., :dn]
        w_kv = self.wkv_b.view(H, dn + c.v_head_dim, R)
        if step.decode:
            # A slice, not the index 0, for the one kv head: Inductor copied the whole cache per layer for
            # the index_put through that select view (found 2026-11-30, session 5; docs/NOTES.md).
            cache[step.rows, :, step.positions] = entry[:, None]
            # Absorb: q_nope . (W_uk latent) = (W_uk^T q_nope) . latent, per head.
            q_lat = torch.bmm(q_nope.transpose(0, 1), w_kv[:, :dn])  # [H, T, R]
            q_abs = torch.cat([q_lat, q_pe.transpose(0, 1)], dim=-1).transpose(0, 1)  # [T, H, R + dr]
            q_abs = (q_abs * (self.scale * math.sqrt(R + dr))).contiguous()
            o = ops.decode_attention(q_abs, cache, cache[..., :R], step.attn_lens)  # [T, H, R]
            out = torch.bmm(o.transpose(0, 1), w_kv[:, dn:].transpose(1, 2))  # [H, T, dv]
            out = out.transpose(0, 1)
        else:
            B, S = step.batch, step.seq
            cache[:, :, :S] = entry.view(B, 1, S, -1)
            kv_up = F.linear(latent, self.wkv_b).view(T, H, dn + c.v_head_dim)
            k = torch.cat([kv_up[..., :dn], k_pe.expand(T, H, dr)], dim=-1)
            q_full = torch.cat([q_nope, q_pe], dim=-1)
            out = causal_attention(q_full, k, kv_up[..., dn:], step, scale=self.scale)
        return F.linear(out.reshape(T, H * c.v_head_dim), self.wo)


class MoE(nn.Module):
    """Routed experts (grouped GEMMs over token-slots sorted by expert) plus the shared expert."""

    def __init__(self, config: DeepSeekConfig, init: Init, ops: OpRegistry) -> None:
        super().__init__()
        c = self.config = config
        self.ops = ops
        # The router in fp32, as DeepSeek-V3 runs it; bias ~ N(0, 0.1^2) like a trained correction bias.
        self.gate = init.normal(c.n_experts, c.hidden, std=c.hidden ** -0.5, dtype=torch.float32)
        self.bias = init.normal(c.n_experts, std=0.1, dtype=torch.float32)
        # [E, 2I, H] and [E, H, I]: nn.Linear's layout per expert; passed transposed (column-major) to the
        # grouped GEMM, the layout its CUDA kernels take.
        self.w_gate_up = init.normal(c.n_experts, 2 * c.expert_ffn, c.hidden, std=c.hidden ** -0.5)
        self.w_down = init.normal(c.n_experts, c.hidden, c.expert_ffn, std=c.expert_ffn ** -0.5)
        self.shared = MLP(c.hidden, c.expert_ffn * c.n_shared_experts, init, ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = F.linear(x.float(), self.gate)
        weights, ids = self.ops.moe_route(logits, self.bias)
        return self.experts(x, weights, ids) + self.shared(x)

    def experts(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        T, K = ids.shape
        E = self.config.n_experts
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)  # token-slots grouped by expert
        # offs[e] = end of expert e's rows = number of slots routed to experts <= e.
        offs = torch.searchsorted(flat[order], torch.arange(E, device=x.device, dtype=flat.dtype), right=True,
                                  out_int32=True)
        xs = x.index_select(0, order // K)
        h = grouped_mm(xs, self.w_gate_up.transpose(1, 2), offs)
        y = grouped_mm(self.ops.silu_mul(h), self.w_down.transpose(1, 2), offs)
        back = torch.empty_like(y).index_copy_(0, order, y)  # slot order again: row t * K + k
        # The weighted sum of a token's 8 expert outputs in fp32, with no atomics: deterministic.
        out = (back.view(T, K, -1).float() * weights.unsqueeze(-1).float()).sum(dim=1)
        return out.to(x.dtype)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows offs[e-1]:offs[e] of ``a`` times ``b[e]``. torch's grouped GEMM where it exists (CUDA bf16 on
    sm80+, and CPU), else a loop over the groups (reads offs on the host: not capturable)."""
    if _GROUPED_MM is not None:
        return _GROUPED_MM(a, b, offs=offs)
    out = a.new_empty(a.shape[0], b.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end] @ b[e]
        start = end
    return out


class DeepSeek(Decoder):
    name = "deepseek"

    def __init__(self, config: DeepSeekConfig, device="cpu", seed: int = 0, ops: OpRegistry | None = None) -> None:
        self.rope_dim = config.qk_rope_dim
        super().__init__(config, device, seed, ops)

    def make_layer(self, index: int) -> Block:
        c = self.config
        if index < c.n_dense_layers:
            mlp = MLP(c.hidden, c.dense_ffn, self.init, self.ops)
        else:
            mlp = MoE(c, self.init, self.ops)
        return Block(MLAttention(c, self.init, self.ops), mlp, c.hidden, self.init)

    def cache_shapes(self, batch: int, max_len: int):
        c = self.config
        return [((batch, 1, max_len, c.cache_dim), True)] * c.n_layers
