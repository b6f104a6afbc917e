"""A plain ``torch.nn.Module`` with example inputs as a forward-only workload.

``module:function`` may return any module and the inputs it runs on. Such a module has no decode step
and no KV cache, so it is profiled as one phase, ``forward`` (the module on its example inputs; weighed
like a prefill), with the same adapter as transformers models: the submodules whose math matches a
built-in task (RMSNorms, SiLU-gated MLPs) run through the registry. The gate and the stack need a decode
step; they refuse such a workload with one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ratchet.e2e.workloads.registry import OpRegistry


@dataclass(frozen=True)
class ModuleConfig:
    dtype: torch.dtype
    vocab: int = 0


class ModuleWorkload(nn.Module):
    decodes = False

    def __init__(self, module: nn.Module, inputs: tuple, ops: OpRegistry, *, name: str, adapt: bool = True) -> None:
        super().__init__()
        from ratchet.e2e.models.adapter import adapt as adapt_model

        self.module = module.eval()
        self.inputs = tuple(inputs)
        self.ops = ops
        self.name = name
        param = next(module.parameters(), None)
        first = next((t for t in self.inputs if isinstance(t, torch.Tensor)), None)
        self.device = param.device if param is not None else (first.device if first is not None else torch.device("cpu"))
        self.config = ModuleConfig(dtype=param.dtype if param is not None else torch.float32)
        self.adaptation = adapt_model(module, ops, ("norm", "mlp")) if adapt and param is not None else None

    @torch.inference_mode()
    def run(self):
        """The module on its example inputs."""
        return self.module(*self.inputs)
