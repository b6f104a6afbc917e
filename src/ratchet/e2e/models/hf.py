"""A transformers causal LM as a workload: the same face the built-in decoders show to profile, gate, stack.

``HFDecoder`` wraps a ``...ForCausalLM`` whose ops the adapter (``adapter.adapt``) routed through an
``OpRegistry``. It gives what ``ratchet.e2e.workloads.core.Decoder`` gives: ``ops``, ``config`` (``vocab``,
``dtype``, ``eps``), ``device``, ``new_cache`` (transformers' ``StaticCache``, allocated up front, its
tensors also exposed as a ``KVCache``), ``prefill`` and ``decode_step`` (static shapes, no host read of a
device value, so a decode step can be captured in a CUDA graph), and ``cache_shapes``.

transformers' static cache layers write where their own ``cumulative_length`` (a device tensor) says, one
position for the whole batch; each step sets it from ``seq_lens`` (a device copy, so graph-safe). Every
row of a batch therefore holds the same number of tokens; the built-in benches always decode that way.

Hybrid models (Qwen3-Next's gated delta net, other linear-attention layers) keep a conv and a recurrent
state per linear layer instead of keys and values. Those states are zeroed in place with the cache, a
prefill starts them afresh, and a decode step updates them where they lie (graph-safe too). The
``KVCache`` view holds the attention layers only: the linear states do not grow with the context.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ratchet.e2e.workloads.core import CACHE_ALIGN, KVCache
from ratchet.e2e.workloads.registry import OpRegistry


@dataclass(frozen=True)
class HFConfigView:
    """The fields of a workload config that profile, gate and stack read."""

    vocab: int
    dtype: torch.dtype
    eps: float
    model_type: str
    n_layers: int


@dataclass
class HFCache(KVCache):
    """A KVCache whose tensors are those of a transformers StaticCache (``static``)."""

    static: Any = None
    # The position the next step writes, as the host last knew it. Sliding-window layers choose their
    # write (fill or roll) and their mask's width in Python from a host count of their own.
    host_len: int = 0
    # The positions the cache was made for: a sliding-window layer holds only its window.
    capacity: int = 0

    @property
    def max_len(self) -> int:
        return self.capacity


class HFDecoder(nn.Module):
    """A transformers causal LM, adapted, as a Ratchet workload (see the module's docstring)."""

    decodes = True

    def __init__(self, model: nn.Module, ops: OpRegistry, *, name: str, adaptation=None) -> None:
        super().__init__()
        self.hf = model
        self.ops = ops
        self.name = name
        self.adaptation = adaptation
        param = next(model.parameters())
        self.device = param.device
        text = model.config.get_text_config(decoder=True)
        eps = next((getattr(text, k) for k in ("rms_norm_eps", "layer_norm_eps", "norm_eps") if hasattr(text, k)), 1e-6)
        self.config = HFConfigView(vocab=text.vocab_size, dtype=param.dtype, eps=float(eps),
                                   model_type=getattr(text, "model_type", "model"), n_layers=text.num_hidden_layers)
        self._layer_dims: list[tuple[int, int, int]] | None = None
        # transformers 5.24 names the cache argument ``cache`` (``past_key_values`` deprecated); 5.17 has
        # only ``past_key_values``, and there a ``cache=`` is swallowed by ``**kwargs``, unused.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    # -- the cache -------------------------------------------------------------------------------------
    def _static_cache(self, batch: int, max_len: int):
        from transformers import StaticCache

        cache = StaticCache(config=self.hf.config, max_cache_len=max_len)
        # Allocate every layer now (transformers allocates on the first write): a CUDA graph must not
        # see allocations, and the KVCache view needs the tensors. One token through the model does it.
        with torch.no_grad():  # not inference mode: fill_random and the gate write these tensors later
            tokens = torch.zeros(batch, 1, dtype=torch.long, device=self.device)
            self.hf(input_ids=tokens, **{self._cache_arg: cache}, use_cache=True,
                    cache_position=torch.zeros(1, dtype=torch.long, device=self.device))
        for layer in cache.layers:
            if _holds_keys(layer):
                layer.keys.zero_()
                layer.values.zero_()
            for state in _linear_states(layer):
                state.zero_()  # the warm-up token left has_previous_state set: decode steps take the recurrent path
            for name in ("cumulative_length", "cumulative_length_linear"):  # 5.24's write positions (5.17 has none)
                if isinstance(getattr(layer, name, None), torch.Tensor):
                    getattr(layer, name).zero_()
            if hasattr(layer, "cumulative_length_int"):  # a sliding window's host count
                layer.cumulative_length_int = 0
        if not any(_holds_keys(layer) for layer in cache.layers):
            raise ValueError(f"{self.name}: no layer of this model keeps keys and values in a static cache "
                             "(all linear attention, or a cache transformers does not make static)")
        return cache

    def layer_dims(self) -> list[tuple[int, int, int]]:
        """Per layer (kv heads, key width, value width), read from a one-position cache once."""
        if self._layer_dims is None:
            cache = self._static_cache(1, 1)
            self._layer_dims = [(l.keys.shape[1], l.keys.shape[-1], l.values.shape[-1])
                                for l in cache.layers if _holds_keys(l)]
        return self._layer_dims

    def cache_shapes(self, batch: int, max_len: int):
        # The values may be narrower than the keys (MLA); the keys' shape over-counts them, which only
        # makes a memory check stricter. Linear-attention states (a few per layer, whatever the context)
        # are left out.
        return [((batch, heads, max_len, dk), False) for heads, dk, _dv in self.layer_dims()]

    def new_cache(self, batch: int, max_len: int) -> HFCache:
        max_len = -(-max_len // CACHE_ALIGN) * CACHE_ALIGN  # as the built-in decoders round (core.new_cache)
        static = self._static_cache(batch, max_len)
        layers = [(layer.keys, layer.values) for layer in static.layers if _holds_keys(layer)]
        return HFCache(layers=layers, seq_lens=torch.zeros(batch, device=self.device, dtype=torch.int32),
                       static=static, capacity=max_len)

    # -- forward passes --------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, cache: HFCache, all_logits: bool = False) -> torch.Tensor:
        B, S = tokens.shape
        if S > cache.max_len:
            raise ValueError(f"prefill of {S} tokens does not fit a cache of {cache.max_len}")
        positions = torch.arange(S, device=tokens.device)
        _set_write_position(cache, 0, 0)
        out = self.hf(input_ids=tokens, **{self._cache_arg: cache.static}, use_cache=True, cache_position=positions,
                      position_ids=positions[None].expand(B, S), logits_to_keep=0 if all_logits else 1)
        cache.seq_lens.fill_(S)
        cache.host_len = S
        logits = out.logits.float()
        return logits if all_logits else logits[:, -1]

    @torch.inference_mode()
    def decode_step(self, tokens: torch.Tensor, cache: HFCache) -> torch.Tensor:
        """One token per row ([B] int64) at the cache's next position; advances seq_lens in place."""
        positions = cache.seq_lens.long()
        host = _host_position(cache)
        _set_write_position(cache, cache.seq_lens[0], host)
        out = self.hf(input_ids=tokens[:, None], **{self._cache_arg: cache.static}, use_cache=True,
                      cache_position=positions[:1], position_ids=positions[:, None])
        cache.seq_lens.add_(1)
        cache.host_len = host + 1
        return out.logits[:, -1].float()

    def forward(self, tokens: torch.Tensor, cache: HFCache) -> torch.Tensor:
        return self.decode_step(tokens, cache)


def _holds_keys(layer) -> bool:
    """Whether a cache layer keeps keys and values (attention), allocated."""
    return isinstance(getattr(layer, "keys", None), torch.Tensor)


def _linear_states(layer) -> list[torch.Tensor]:
    """A linear-attention cache layer's allocated conv and recurrent states (none for attention layers)."""
    states = []
    for name in ("conv_states", "recurrent_states"):
        table = getattr(layer, name, None)
        if isinstance(table, dict):
            states += [t for t in table.values() if isinstance(t, torch.Tensor)]
    return states


def _host_position(cache: HFCache) -> int:
    """The position a decode step writes, on the host: read from ``seq_lens`` (one synchronisation) when
    a sliding-window layer needs it and no graph is being captured, else the host's own count (a
    captured step replays what its capture chose: a full window rolls on every replay)."""
    sliding = any(hasattr(layer, "cumulative_length_int") for layer in cache.static.layers)
    capturing = cache.seq_lens.is_cuda and torch.cuda.is_current_stream_capturing()
    if sliding and not capturing:
        cache.host_len = int(cache.seq_lens[0])  # after fill_random, which sets seq_lens alone
    return cache.host_len


def _set_write_position(cache: HFCache, position, host_position: int) -> None:
    """Point every static layer's write position at ``position`` (an int or a 0-d device tensor; a
    sliding-window layer's Python count at ``host_position``). A prefill (the int 0) also starts every
    linear-attention layer's states afresh."""
    for layer in cache.static.layers:
        if hasattr(layer, "cumulative_length_int"):
            layer.cumulative_length_int = host_position
        if isinstance(position, int) and position == 0 and isinstance(getattr(layer, "has_previous_state", None), dict):
            for state in _linear_states(layer):
                state.zero_()
            for index in layer.has_previous_state:
                layer.has_previous_state[index] = False
            if isinstance(getattr(layer, "cumulative_length_linear", None), torch.Tensor):
                layer.cumulative_length_linear.zero_()
        length = getattr(layer, "cumulative_length", None)
        if isinstance(length, torch.Tensor):
            if isinstance(position, torch.Tensor):
                length.copy_(position)
            else:
                length.fill_(position)
