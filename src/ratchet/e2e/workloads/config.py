"""Sizes of the built-in workloads: frozen configs for ``llama`` and ``deepseek`` at ``full`` or ``tiny``.

``full`` keeps the real models' widths (every GEMM and every op at the shapes production runs) with
only a few layers, in bf16, for a GPU; ``tiny`` shrinks every width for the CPU, in fp32. Real widths
come from the models' public configs (Llama-3-8B; DeepSeek-V3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

SIZES = ("full", "tiny")


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama-3-style decoder: GQA attention with RoPE, SwiGLU MLP, RMSNorm, untied LM head."""

    vocab: int = 128256
    hidden: int = 4096
    n_layers: int = 4  # Llama-3-8B has 32; a few full-width layers measure the same ops
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int = 128
    ffn: int = 14336
    rope_theta: float = 500000.0
    eps: float = 1e-5
    dtype: torch.dtype = torch.bfloat16

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (rotate-half RoPE)")


@dataclass(frozen=True)
class DeepSeekConfig:
    """A DeepSeek-V3-style decoder: MLA attention, MoE layers (grouped sigmoid router with a correction
    bias, shared expert) after ``n_dense_layers`` dense SwiGLU layers. The router is the moe_route task's
    op, which is DeepSeek-V3's own: 256 experts in 8 groups, top 4 groups, top 8 experts, scale 2.5,
    so every size keeps those numbers and only the widths shrink."""

    vocab: int = 129280
    hidden: int = 7168
    n_layers: int = 3  # DeepSeek-V3 has 61 (3 dense, then MoE); here 1 dense, then MoE
    n_dense_layers: int = 1
    n_heads: int = 128
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_dim: int = 128
    qk_rope_dim: int = 64
    v_head_dim: int = 128
    dense_ffn: int = 18432
    n_experts: int = 256
    n_groups: int = 8
    topk_groups: int = 4
    topk: int = 8
    expert_ffn: int = 2048
    n_shared_experts: int = 1
    route_scale: float = 2.5
    rope_theta: float = 10000.0
    eps: float = 1e-6
    dtype: torch.dtype = torch.bfloat16

    def __post_init__(self):
        route = (self.n_experts, self.n_groups, self.topk_groups, self.topk, self.route_scale)
        if route != (256, 8, 4, 8, 2.5):
            # moe_route's reference (and every kernel judged against it) is DeepSeek-V3's router.
            raise ValueError(f"the moe_route op routes 256 experts, 8 groups, top 4, top 8, scale 2.5; got {route}")
        if not 0 <= self.n_dense_layers <= self.n_layers:
            raise ValueError("n_dense_layers must lie in [0, n_layers]")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim

    @property
    def cache_dim(self) -> int:
        """Width of one cached token: the normalized KV latent and the roped shared key."""
        return self.kv_lora_rank + self.qk_rope_dim


TINY_LLAMA = LlamaConfig(vocab=512, hidden=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn=128,
                         dtype=torch.float32)
TINY_DEEPSEEK = DeepSeekConfig(vocab=512, hidden=64, n_layers=2, n_dense_layers=1, n_heads=4, q_lora_rank=32,
                               kv_lora_rank=32, qk_nope_dim=16, qk_rope_dim=8, v_head_dim=16, dense_ffn=128,
                               expert_ffn=16, dtype=torch.float32)

_CONFIGS = {
    ("llama", "full"): LlamaConfig(),
    ("llama", "tiny"): TINY_LLAMA,
    ("deepseek", "full"): DeepSeekConfig(),
    ("deepseek", "tiny"): TINY_DEEPSEEK,
}
WORKLOADS = ("llama", "deepseek")


def config_for(name: str, size: str = "full", **overrides) -> LlamaConfig | DeepSeekConfig:
    """The config of workload ``name`` at ``size``, with fields replaced by ``overrides``
    (e.g. ``n_layers=2``, ``dtype=torch.bfloat16``)."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload '{name}' (workloads: {', '.join(WORKLOADS)})")
    if size not in SIZES:
        raise KeyError(f"unknown size '{size}' (sizes: {', '.join(SIZES)})")
    return replace(_CONFIGS[name, size], **overrides)
