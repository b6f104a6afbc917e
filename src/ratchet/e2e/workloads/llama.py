"""The ``llama`` workload: a Llama-3-style decoder (GQA attention with rotate-half RoPE, SwiGLU MLP)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ratchet.e2e.workloads.config import LlamaConfig
from ratchet.e2e.workloads.core import MLP, Block, Decoder, Init, Step, causal_attention
from ratchet.e2e.workloads.registry import OpRegistry


class GQAttention(nn.Module):
    """Grouped-query attention: q, k, v projections, RoPE on q and k, the KV cache, output projection."""

    def __init__(self, config: LlamaConfig, init: Init, ops: OpRegistry) -> None:
        super().__init__()
        self.ops = ops
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        # Separate projections rather than one merged qkv: each output is contiguous as it goes into the
        # rope op, which a kernel judged on contiguous inputs may assume, with no copy to make it so.
        self.wq = init.linear(config.n_heads * config.head_dim, config.hidden)
        self.wk = init.linear(config.n_kv_heads * config.head_dim, config.hidden)
        self.wv = init.linear(config.n_kv_heads * config.head_dim, config.hidden)
        self.wo = init.linear(config.hidden, config.n_heads * config.head_dim)

    def forward(self, x: torch.Tensor, step: Step, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        T, D = x.shape[0], self.head_dim
        q = F.linear(x, self.wq).view(T, self.n_heads, D)
        k = F.linear(x, self.wk).view(T, self.n_kv_heads, D)
        v = F.linear(x, self.wv).view(T, self.n_kv_heads, D)
        q, k = self.ops.rope(q, k, step.cos, step.sin)
        k_cache, v_cache = kv
        if step.decode:
            # Row b's new token goes to position positions[b]: an index_put, no host sync.
            k_cache[step.rows, :, step.positions] = k
            v_cache[step.rows, :, step.positions] = v
            out = self.ops.decode_attention(q, k_cache, v_cache, step.attn_lens)
        else:
            B, S = step.batch, step.seq
            k_cache[:, :, :S] = k.view(B, S, self.n_kv_heads, D).transpose(1, 2)
            v_cache[:, :, :S] = v.view(B, S, self.n_kv_heads, D).transpose(1, 2)
            out = causal_attention(q, k, v, step)
        return F.linear(out.reshape(T, self.n_heads * D), self.wo)


class Llama(Decoder):
    name = "llama"

    def __init__(self, config: LlamaConfig, device="cpu", seed: int = 0, ops: OpRegistry | None = None) -> None:
        self.rope_dim = config.head_dim
        super().__init__(config, device, seed, ops)

    def make_layer(self, index: int) -> Block:
        c = self.config
        return Block(GQAttention(c, self.init, self.ops), MLP(c.hidden, c.ffn, self.init, self.ops), c.hidden,
                     self.init)

    def cache_shapes(self, batch: int, max_len: int):
        c = self.config
        return [((batch, c.n_kv_heads, max_len, c.head_dim), False)] * c.n_layers
