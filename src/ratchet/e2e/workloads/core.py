"""What the two decoders share: random init, RoPE tables, the static KV cache, the step context, the
SwiGLU MLP and the decoder skeleton (embedding, layers with fused residual norms, final norm, LM head).

Every op that a built-in task optimizes runs through the model's ``OpRegistry``; the GEMMs, the
embedding, cache writes and prefill attention (no task of its own) are plain torch. The decode step
uses only static shapes and never reads a device value on the host, so it can be captured in a CUDA
graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ratchet.e2e.workloads.registry import REGISTRY, OpRegistry

# Static caches hold a multiple of this many positions (new_cache says why).
CACHE_ALIGN = 64


class Init:
    """Seeded random weights drawn on the model's device (a full-width MoE layer is ~22 GB in bf16:
    drawing it on the CPU and copying would take minutes)."""

    def __init__(self, seed: int, device: torch.device, dtype: torch.dtype) -> None:
        self.device, self.dtype = device, dtype
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def normal(self, *shape: int, std: float, dtype: torch.dtype | None = None) -> nn.Parameter:
        t = torch.randn(shape, generator=self.generator, device=self.device, dtype=dtype or self.dtype)
        return nn.Parameter(t.mul_(std), requires_grad=False)

    def linear(self, out_features: int, in_features: int) -> nn.Parameter:
        # std 1/sqrt(fan_in): a projection keeps its input's scale, so activations stay O(1) and finite.
        return self.normal(out_features, in_features, std=in_features ** -0.5)

    def norm(self, size: int) -> nn.Parameter:
        # Near 1 but varied per channel, as trained norms are: a kernel that drops the weight shows.
        w = self.normal(size, std=0.1)
        w.data.add_(1.0)
        return w


def rope_tables(n_positions: int, dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 cos and sin [n_positions, dim/2] for rotate-half RoPE; the angles in float64 (an fp32 angle
    at position 1e5 keeps only ~1e-2 rad), rounded once, as the rope task's inputs are."""
    inv_freq = theta ** (-torch.arange(dim // 2, dtype=torch.float64, device=device) * 2.0 / dim)
    angles = torch.arange(n_positions, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


@dataclass
class KVCache:
    """The static cache: per layer a (keys, values) pair of [B, Hkv, max_len, D] tensors (MLA: one
    [B, 1, max_len, latent + rope] tensor, the same object twice), and ``seq_lens`` [B] int32, the
    number of valid positions of each row. Nothing is reallocated between steps."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    seq_lens: torch.Tensor

    @property
    def batch(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def max_len(self) -> int:
        return self.layers[0][0].shape[2]

    def tensors(self) -> list[torch.Tensor]:
        """Each distinct cache tensor once."""
        seen: dict[int, torch.Tensor] = {}
        for pair in self.layers:
            for t in pair:
                seen.setdefault(id(t), t)
        return list(seen.values())


@dataclass
class Step:
    """What every layer needs to know about the tokens of one forward pass.

    prefill: ``batch`` rows of ``seq`` new tokens at positions 0 .. seq-1, rows flattened b-major.
    decode: one token per row at position ``positions[b]`` (= the cache's seq_lens before the step);
    attention reads ``attn_lens`` = positions + 1 cached tokens.
    """

    decode: bool
    batch: int
    seq: int
    cos: torch.Tensor  # [T, rope_dim / 2] fp32
    sin: torch.Tensor
    positions: torch.Tensor | None = None  # [B] int64, decode only
    attn_lens: torch.Tensor | None = None  # [B] int32, decode only
    rows: torch.Tensor | None = None  # [B] int64 arange, decode only: the cache rows to write


class MLP(nn.Module):
    """SwiGLU on a merged gate_up projection: down(silu_mul(x @ gate_up^T))."""

    def __init__(self, hidden: int, ffn: int, init: Init, ops: OpRegistry) -> None:
        super().__init__()
        self.ops = ops
        self.w_gate_up = init.linear(2 * ffn, hidden)  # rows [0, ffn): gate; [ffn, 2 ffn): up
        self.w_down = init.linear(hidden, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ops.silu_mul(F.linear(x, self.w_gate_up)), self.w_down)


class Block(nn.Module):
    """One decoder layer: attention and MLP sublayers, each after an RMSNorm."""

    def __init__(self, attn: nn.Module, mlp: nn.Module, hidden: int, init: Init) -> None:
        super().__init__()
        self.attn_norm = init.norm(hidden)
        self.attn = attn
        self.mlp_norm = init.norm(hidden)
        self.mlp = mlp


class Decoder(nn.Module):
    """Embedding, layers, final norm, LM head. Subclasses build the layers, the cache and the RoPE dim.

    The residual stream is fused into the norms as vLLM does it: the first layer's input norm is
    ``rmsnorm``; every later norm is ``add_rmsnorm(sublayer_out, residual)``, which also returns the
    new residual.
    """

    name = "decoder"

    def __init__(self, config, device, seed: int, ops: OpRegistry | None) -> None:
        super().__init__()
        self.config = config
        self.ops = ops or REGISTRY
        self.device = torch.device(device)
        self.init = Init(seed, self.device, config.dtype)
        # Embedding rows ~ N(0, 1): the residual stream starts at unit scale.
        self.embed = self.init.normal(config.vocab, config.hidden, std=1.0)
        self.layers = nn.ModuleList([self.make_layer(i) for i in range(config.n_layers)])
        self.final_norm = self.init.norm(config.hidden)
        self.lm_head = self.init.linear(config.vocab, config.hidden)
        del self.init  # the generator is only for building
        self._cos = self._sin = None

    # -- what a subclass provides ----------------------------------------------------------------------
    rope_dim: int

    def make_layer(self, index: int) -> Block:
        raise NotImplementedError

    def cache_shapes(self, batch: int, max_len: int) -> list[tuple[tuple[int, ...], bool]]:
        """Per layer (shape of the keys cache, whether the values share that one tensor)."""
        raise NotImplementedError

    # -- cache and tables ------------------------------------------------------------------------------
    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty static cache (zeros, seq_lens 0) for ``batch`` rows of up to ``max_len`` tokens, its
        length rounded up to a multiple of CACHE_ALIGN.

        Why: a bench asks for context + a few steps of slack (32768 + 5), and at 32773 positions the rows of
        the reference's attention scores are not 16-byte aligned: on the H200 (2026-12-01, session 14,
        docs/measurements/2026-12-01-h200-session14) the reference under torch.compile then took 3496 us for
        DeepSeek's MLA at B = 32 and 6262 us for Llama-3-8B's heads, against 1043 and 1155 us at 32768. A
        baseline slowed by our own padding is not one a user would run (gpt-fast rounds its cache up too)."""
        layers = []
        max_len = -(-max_len // CACHE_ALIGN) * CACHE_ALIGN
        for shape, shared in self.cache_shapes(batch, max_len):
            k = torch.zeros(shape, device=self.device, dtype=self.config.dtype)
            layers.append((k, k if shared else torch.zeros_like(k)))
        self.rope_table(max_len)
        return KVCache(layers, torch.zeros(batch, device=self.device, dtype=torch.int32))

    def rope_table(self, n_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or self._cos.shape[0] < n_positions:
            self._cos, self._sin = rope_tables(n_positions, self.rope_dim, self.config.rope_theta, self.device)
        return self._cos, self._sin

    # -- forward passes --------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, cache: KVCache, all_logits: bool = False) -> torch.Tensor:
        """Run ``tokens`` [B, S] from position 0 into an empty ``cache`` (sets its seq_lens to S).

        Returns fp32 logits of the last position [B, V], or of every position [B, S, V].
        """
        B, S = tokens.shape
        if S > cache.max_len:
            raise ValueError(f"prefill of {S} tokens does not fit a cache of {cache.max_len}")
        cos, sin = self.rope_table(S)
        step = Step(decode=False, batch=B, seq=S, cos=cos[:S].repeat(B, 1), sin=sin[:S].repeat(B, 1))
        h, residual = self._layers(tokens.reshape(-1), step, cache)
        cache.seq_lens.fill_(S)
        if not all_logits:  # only the last position's row goes through the final norm and the LM head
            h, residual = h.view(B, S, -1)[:, -1], residual.view(B, S, -1)[:, -1]
        logits = self._head(h.contiguous(), residual.contiguous())
        return logits.view(B, S, -1) if all_logits else logits

    @torch.inference_mode()
    def decode_step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One token per row ([B] int64) at each row's next position; writes the cache, advances
        seq_lens by one in place and returns fp32 logits [B, V]. Static shapes, no host sync."""
        B = tokens.shape[0]
        positions = cache.seq_lens.long()
        cos, sin = self.rope_table(cache.max_len)
        step = Step(decode=True, batch=B, seq=1, cos=cos[positions], sin=sin[positions], positions=positions,
                    attn_lens=cache.seq_lens + 1, rows=torch.arange(B, device=tokens.device))
        h, residual = self._layers(tokens, step, cache)
        cache.seq_lens.add_(1)
        return self._head(h, residual)

    def _layers(self, tokens: torch.Tensor, step: Step, cache: KVCache):
        eps, ops = self.config.eps, self.ops
        h = F.embedding(tokens, self.embed)
        residual = None
        for layer, kv in zip(self.layers, cache.layers):
            if residual is None:
                residual, x = h, ops.rmsnorm(h, layer.attn_norm, eps)
            else:
                x, residual = ops.add_rmsnorm(h, residual, layer.attn_norm, eps)
            h = layer.attn(x, step, kv)
            x, residual = ops.add_rmsnorm(h, residual, layer.mlp_norm, eps)
            h = layer.mlp(x)
        return h, residual

    def _head(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x, _ = self.ops.add_rmsnorm(h, residual, self.final_norm, self.config.eps)
        return F.linear(x, self.lm_head).float()


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, step: Step, scale: float | None = None):
    """Prefill attention (no task of its own, so plain torch SDPA): q [T, Hq, Dq], k [T, Hkv, Dq],
    v [T, Hkv, Dv] with rows b-major; returns [T, Hq, Dv]. A narrower v is zero-padded to Dq so the
    fused (flash) kernels, which want one head size, can run it."""
    B, S = step.batch, step.seq
    Dv = v.shape[-1]
    if Dv < q.shape[-1]:
        v = F.pad(v, (0, q.shape[-1] - Dv))

    def heads(t):
        return t.view(B, S, t.shape[1], t.shape[2]).transpose(1, 2)

    out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True, scale=scale,
                                         enable_gqa=q.shape[1] != k.shape[1])
    return out.transpose(1, 2).reshape(B * S, q.shape[1], -1)[..., :Dv]
