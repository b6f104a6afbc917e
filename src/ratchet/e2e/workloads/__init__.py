"""Workloads: end-to-end model steps that kernels plug into (DESIGN.md, "End-to-end gate and stacking").

``build("llama" | "deepseek", size="full" | "tiny")`` makes a decoder with seeded random weights (no
downloads): ``full`` has the real models' widths with a few layers in bf16 (for a GPU), ``tiny`` small
widths in fp32 (for a CPU). Their ops run through an ``OpRegistry`` (``registry.py``) so a kept kernel
swaps in; ``runner.decode`` / ``runner.prefill`` run them, decode captured in a CUDA graph on CUDA;
``hf_adapter.patch`` routes a transformers Llama-family model's ops through the same registry.
"""

from __future__ import annotations

from ratchet.e2e.workloads.config import SIZES, WORKLOADS, DeepSeekConfig, LlamaConfig, config_for
from ratchet.e2e.workloads.core import Decoder, KVCache
from ratchet.e2e.workloads.deepseek import DeepSeek
from ratchet.e2e.workloads.llama import Llama
from ratchet.e2e.workloads.registry import OPS, REGISTRY, OpCall, OpRegistry, install, load_kernel, record, use
from ratchet.e2e.workloads.runner import DecodeResult, DecodeStep, GraphCaptureError, PrefillResult, decode, prefill

_MODELS = {"llama": Llama, "deepseek": DeepSeek}


def build(name: str, size: str = "full", *, device=None, seed: int = 0, registry: OpRegistry | None = None,
          **overrides) -> Decoder:
    """Workload ``name`` at ``size`` on ``device`` (default: CUDA where present for ``full``, else the
    CPU); ``overrides`` replace config fields (``n_layers=2``, ``dtype=torch.bfloat16``)."""
    import torch

    config = config_for(name, size, **overrides)
    if device is None:
        device = "cuda" if size == "full" and torch.cuda.is_available() else "cpu"
    return _MODELS[name](config, device=device, seed=seed, ops=registry)


__all__ = [
    "OPS", "REGISTRY", "SIZES", "WORKLOADS", "DeepSeek", "DeepSeekConfig", "DecodeResult", "DecodeStep",
    "Decoder", "GraphCaptureError", "KVCache", "Llama", "LlamaConfig", "OpCall", "OpRegistry", "PrefillResult",
    "build", "config_for", "decode", "install", "load_kernel", "prefill", "record", "use",
]
