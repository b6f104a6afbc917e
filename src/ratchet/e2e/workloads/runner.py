"""Running a workload: prefill, and decode steps over a static KV cache, captured in a CUDA graph on CUDA.

``DecodeStep`` is one decode step on static buffers (the tokens fed, the cache, the logits), eager or
as a CUDA graph replay; the next token (greedy, or the registry's ``top_p_sampling``) is chosen inside
the step and written back into the tokens buffer, so a replay needs nothing from the host. A capture
that an op breaks (a host sync, an allocation the graph cannot hold) raises ``GraphCaptureError``
naming the op: that is what ``ratchet gate`` relies on. Timing belongs to the gate, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ratchet.e2e.workloads.core import Decoder, KVCache


class GraphCaptureError(RuntimeError):
    """A decode step could not be captured in a CUDA graph; ``op`` is the registry op that was running
    (None when the failure was outside the registry's ops)."""

    def __init__(self, message: str, op: str | None) -> None:
        super().__init__(message)
        self.op = op


@dataclass
class PrefillResult:
    logits: torch.Tensor  # [B, V] fp32 (last position), or [B, S, V] with all_logits
    tokens: torch.Tensor  # [B, S] the prompt
    cache: KVCache


@dataclass
class DecodeResult:
    prompt: torch.Tensor  # [B, context_len] (empty when the cache was filled at random)
    fed: torch.Tensor  # [B, steps]: the token each step consumed, at positions context_len + i
    next_tokens: torch.Tensor  # [B]: the token chosen after the last step
    logits: torch.Tensor  # [steps, B, V] fp32 (or [1, B, V]: only the last step, keep_logits="last")
    cache: KVCache
    cuda_graph: bool  # whether the steps ran as graph replays


def random_tokens(model: Decoder, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, model.config.vocab, (batch, length), generator=g).to(model.device)


def prefill(model: Decoder, batch: int, seq_len: int, *, tokens: torch.Tensor | None = None,
            cache_len: int | None = None, all_logits: bool = False, seed: int = 0) -> PrefillResult:
    """Prefill ``batch`` prompts of ``seq_len`` tokens (random unless ``tokens`` [B, S] is given) into a
    fresh cache of ``cache_len`` positions (default ``seq_len``)."""
    if tokens is None:
        tokens = random_tokens(model, batch, seq_len, seed)
    cache = model.new_cache(batch, cache_len or seq_len)
    logits = model.prefill(tokens, cache, all_logits=all_logits)
    return PrefillResult(logits=logits, tokens=tokens, cache=cache)


def fill_random(model: Decoder, cache: KVCache, context_len: int, seed: int = 0) -> None:
    """Fill the first ``context_len`` positions of every cache row with N(0, 1) values and set seq_lens:
    for timing long contexts without prefilling them (the values do not change the work)."""
    g = torch.Generator(device=model.device).manual_seed(seed)
    for t in cache.tensors():
        # In place: a full-size temporary would be 17 GB per tensor at 128k x batch 32.
        t[:, :, :context_len].normal_(generator=g)
    cache.seq_lens.fill_(context_len)


class DecodeStep:
    """One decode step on static buffers. ``tokens`` [B] int64 is read by the step and overwritten with
    the next token; ``top_p`` [B] fp32 switches from greedy to the registry's top-p sampling.
    ``step()`` returns the step's logits: under a graph the same static tensor every time (copy it to
    keep it). Swap registry ops before building one: a graph holds the kernels it captured."""

    def __init__(self, model: Decoder, cache: KVCache, tokens: torch.Tensor, *, cuda_graph: bool,
                 top_p: torch.Tensor | None = None, warmup: int = 2) -> None:
        self.model, self.cache, self.tokens, self.top_p = model, cache, tokens, top_p
        self.graph = None
        self.logits = None
        if cuda_graph:
            if model.device.type != "cuda":
                raise ValueError("CUDA graphs need a model on a CUDA device")
            self._capture(warmup)

    def _eager(self) -> torch.Tensor:
        logits = self.model.decode_step(self.tokens, self.cache)
        with torch.inference_mode():
            if self.top_p is None:
                nxt = logits.argmax(dim=-1)
            else:
                nxt = self.model.ops.top_p_sampling(logits, self.top_p)
            self.tokens.copy_(nxt)
        return logits

    def _capture(self, warmup: int) -> None:
        # Warm-up on a side stream (lazy init, autotuning, allocator) as torch asks before a capture. It
        # moves seq_lens and the tokens on; put them back. What it wrote into the cache lies beyond the
        # restored seq_lens, where each real step overwrites its position before reading it.
        lens, toks = self.cache.seq_lens.clone(), self.tokens.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                self._eager()
        torch.cuda.current_stream().wait_stream(stream)
        self.cache.seq_lens.copy_(lens)
        self.tokens.copy_(toks)
        graph = torch.cuda.CUDAGraph()
        ops = self.model.ops
        ops.active = None
        try:
            with torch.cuda.graph(graph):
                self.logits = self._eager()
        except Exception as exc:
            op = ops.active
            where = f"in op '{op}' ({ops.get(op)!r})" if op else "outside the registry's ops"
            raise GraphCaptureError(f"CUDA graph capture of the {self.model.name} decode step failed {where}: "
                                    f"{type(exc).__name__}: {exc}", op) from exc
        self.graph = graph

    def step(self) -> torch.Tensor:
        if self.graph is None:
            return self._eager()
        self.graph.replay()
        return self.logits


def decode(model: Decoder, batch: int, context_len: int, steps: int, cuda_graphs: bool = True, *,
           fill: str = "prefill", prompt: torch.Tensor | None = None, top_p: float | None = None,
           keep_logits: str = "all", seed: int = 0) -> DecodeResult:
    """``steps`` decode steps for ``batch`` rows after ``context_len`` cached tokens.

    fill: "prefill" runs the model over a prompt (random tokens, or ``prompt`` [B, context_len]) and
    starts from its next token; "random" fills the cache with random values and starts from random
    tokens (for timing long contexts). cuda_graphs: capture one step and replay it (on CUDA only; on a
    CPU model it is ignored). top_p: sample with the registry's top_p_sampling instead of greedy.
    """
    if fill not in ("prefill", "random"):
        raise ValueError(f"fill must be 'prefill' or 'random', not {fill!r}")
    if keep_logits not in ("all", "last"):
        raise ValueError(f"keep_logits must be 'all' or 'last', not {keep_logits!r}")
    if steps < 1:
        raise ValueError("steps must be at least 1")
    device = model.device
    cache = model.new_cache(batch, context_len + steps)
    top_p_t = None if top_p is None else torch.full((batch,), float(top_p), device=device)
    if fill == "prefill" and context_len > 0:
        if prompt is None:
            prompt = random_tokens(model, batch, context_len, seed)
        logits = model.prefill(prompt, cache)
        with torch.inference_mode():
            first = logits.argmax(-1) if top_p_t is None else model.ops.top_p_sampling(logits, top_p_t)
    else:
        if fill == "random":
            fill_random(model, cache, context_len, seed)
        prompt = torch.empty(batch, 0, dtype=torch.int64, device=device)
        first = random_tokens(model, batch, 1, seed + 1)[:, 0]
    tokens = first.clone()  # the static input buffer of the step
    graphed = cuda_graphs and device.type == "cuda"
    runner = DecodeStep(model, cache, tokens, cuda_graph=graphed, top_p=top_p_t)
    fed, kept = [], []
    for i in range(steps):
        fed.append(tokens.clone())
        logits = runner.step()
        if keep_logits == "all" or i == steps - 1:
            kept.append(logits.clone())
    return DecodeResult(prompt=prompt, fed=torch.stack(fed, dim=1), next_tokens=tokens.clone(),
                        logits=torch.stack(kept), cache=cache, cuda_graph=graphed)
