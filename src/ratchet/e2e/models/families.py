"""Configs of the decoder families Ratchet is tested on, tiny (for a CPU) or full width (for a GPU).

``config(family, size)`` is a transformers config; ``write(family, folder, size)`` writes it as
``folder/config.json`` (no weights), which ``ratchet profile folder`` takes as a MODEL (random weights).
Tiny configs are 2 layers of width 64; the MoE routers keep the numbers their built-in task routes
(DeepSeek-V3: 256 experts, 8 groups, top 4 groups, top 8). Full-width configs follow the public
configs of Llama-3.1-8B and Qwen3-30B-A3B, with ``n_layers`` layers.
"""

from __future__ import annotations

import json
from pathlib import Path

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma", "mixtral", "qwen3_moe", "deepseek_v3")
# Families whose cache is not one full-length pair of keys and values per layer: sliding-window layers
# beside full ones (Gemma-2, gpt-oss; a window of 4 positions, so a short decode crosses it) and
# linear-attention layers with conv and recurrent states (Qwen3-Next: three gated delta nets, then one
# full attention layer).
CACHE_LAYOUTS = ("gemma2", "gpt_oss", "qwen3_next")

_TINY_ATTENTION = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=128, max_position_embeddings=4096)

_TINY = {
    "llama": dict(_TINY_ATTENTION),
    "qwen2": dict(_TINY_ATTENTION),
    "qwen3": dict(_TINY_ATTENTION),
    "mistral": dict(_TINY_ATTENTION, sliding_window=None),
    "gemma": dict(_TINY_ATTENTION, hidden_activation="gelu_pytorch_tanh"),
    "mixtral": dict(_TINY_ATTENTION, num_local_experts=4, num_experts_per_tok=2, intermediate_size=32),
    "qwen3_moe": dict(_TINY_ATTENTION, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      decoder_sparse_step=1, norm_topk_prob=True),
    "deepseek_v3": dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=16,
                        n_routed_experts=256, n_group=8, topk_group=4, num_experts_per_tok=8,
                        routed_scaling_factor=2.5, n_shared_experts=1, first_k_dense_replace=1,
                        q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                        v_head_dim=16, rope_interleave=False, rope_scaling=None, max_position_embeddings=4096),
    "gemma2": dict(_TINY_ATTENTION, hidden_activation="gelu_pytorch_tanh", sliding_window=4),
    "gpt_oss": dict(_TINY_ATTENTION, num_local_experts=4, num_experts_per_tok=2, sliding_window=4),
    "qwen3_next": dict(_TINY_ATTENTION, num_hidden_layers=4, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32, shared_expert_intermediate_size=32,
                       layer_types=["linear_attention"] * 3 + ["full_attention"]),
}

_FULL = {
    # Llama-3.1-8B's widths (rope scaling left out: random weights make no use of it).
    "llama": dict(vocab_size=128256, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  intermediate_size=14336, rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072),
    # Qwen3-30B-A3B's widths: 128 experts, 8 per token.
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
                      head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                      num_experts_per_tok=8, decoder_sparse_step=1, norm_topk_prob=True, rope_theta=1000000.0,
                      rms_norm_eps=1e-6, max_position_embeddings=40960),
}


def config(family: str, size: str = "tiny", n_layers: int | None = None):
    """The transformers config of ``family`` at ``size`` (``tiny``; ``full`` for llama and qwen3_moe)."""
    from transformers import AutoConfig

    table = _TINY if size == "tiny" else _FULL
    if family not in table:
        raise KeyError(f"no {size} config for family '{family}' ({', '.join(table)})")
    fields = dict(table[family])
    if n_layers is not None:
        fields["num_hidden_layers"] = n_layers
    fields.setdefault("num_hidden_layers", 2)
    return AutoConfig.for_model(family, **fields)


def write(family: str, folder: str | Path, size: str = "tiny", n_layers: int | None = None) -> Path:
    """``folder/config.json`` for ``family``; returns the folder (a MODEL argument)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = config(family, size, n_layers).to_dict()
    (folder / "config.json").write_text(json.dumps(data, indent=1, default=str))
    return folder
