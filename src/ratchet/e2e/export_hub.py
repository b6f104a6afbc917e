"""The Hugging Face ``kernels`` side of ``ratchet export``: ``layers.py``, ``hub.py`` and a local layer
repository, so that ``kernels.kernelize`` swaps the exported custom ops into transformers' layers.

What ``kernels`` (0.17) reads, and so what is written here:

- a layer repository is a folder with ``build/<variant>/``: ``metadata.json`` (name, id, version,
  license, python-depends, backend) and ``__init__.py``, which must expose ``layers``, an object whose
  attributes are the layer classes (``getattr(kernel.layers, name)``). The package writes two noarch
  variants, ``torch-cpu`` and ``torch-cuda`` (where Ratchet judges), each importing the installed
  package's ``layers`` module, so the ops are registered once whoever imports them first;
- a layer class may not define ``__init__`` nor any member ``nn.Module`` lacks except
  ``can_torch_compile`` and ``has_backward``, and its ``forward`` takes as many arguments of the same
  kinds as the forward it replaces; ``kernelize`` binds it to the model's own module, so it reads the
  module's ``weight`` and ``variance_epsilon``;
- ``kernels.LocalLayerRepository(repo_path, layer_name=...)`` loads such a folder with no network.

Only the exported ops with a layer name in the ``kernels`` ecosystem get a class: ``rmsnorm`` is
``RMSNorm`` (transformers marks its RMSNorm modules with it), ``silu_mul`` is ``SiluAndMul`` (the
activation layers' name; transformers' gated MLPs have no such hook, ``apply(model)`` covers them).
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template

# Exported op -> the layer name kernels' mappings use for it.
HUB_LAYERS = {"rmsnorm": "RMSNorm", "silu_mul": "SiluAndMul"}
VARIANTS = {"torch-cpu": "cpu", "torch-cuda": "cuda"}  # noarch build variant -> metadata backend
REPOSITORY = "layer_repository"


def write_hub(root: Path, package: str, ops: list[str]) -> list[str]:
    """Write ``layers.py``, ``hub.py`` and the layer repository of ``ops`` under package folder ``root``;
    returns the layer names written."""
    names = [HUB_LAYERS[op] for op in ops if op in HUB_LAYERS]
    classes = "\n\n".join(_CLASSES[name] for name in names)
    (root / "layers.py").write_text(_LAYERS.substitute(classes=classes, names=repr(names)))
    (root / "hub.py").write_text(_HUB.substitute(repository=REPOSITORY))
    kernel_name = package.replace("_", "-")
    for variant, backend in VARIANTS.items():
        folder = root / REPOSITORY / "build" / variant
        folder.mkdir(parents=True, exist_ok=True)
        metadata = {"id": f"{package}_{variant.replace('-', '_')}", "name": kernel_name, "version": 1,
                    "license": "NOASSERTION", "python-depends": [], "backend": {"type": backend}}
        (folder / "metadata.json").write_text(json.dumps(metadata, indent=1))
        (folder / "__init__.py").write_text(_VARIANT_INIT.substitute(package=package))
    return names


_LAYERS = Template('''"""The exported ops as Hugging Face ``kernels`` layers (written by ratchet export).

``kernels.kernelize`` binds a class's ``forward`` to the model's module of the same layer name, so
``self`` is that module: its own ``weight`` and ``variance_epsilon``. Each forward calls this package's
custom op, which runs the kernel inside the shape ranges the judge passed and the original math
outside them. ``has_backward = False``: the ops have no derivative, so kernelize in ``Mode.TRAINING``
keeps the module's own forward; ``can_torch_compile``: each op is one opaque node with a fake kernel.
"""

import torch

from .ops import OPS

NAMES = $names  # the layer names this package provides


$classes
''')

_CLASSES = {
    "RMSNorm": '''class RMSNorm(torch.nn.Module):
    """For transformers' modules marked ``RMSNorm``: ``weight`` [H] times x / rms(x), eps ``variance_epsilon``."""

    weight: torch.Tensor
    variance_epsilon: float

    can_torch_compile = True
    has_backward = False

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        return OPS["rmsnorm"](x, self.weight.to(x.dtype), self.variance_epsilon).view(shape)
''',
    "SiluAndMul": '''class SiluAndMul(torch.nn.Module):
    """For an activation over the concatenated [gate, up] projection: silu(gate) * up."""

    can_torch_compile = True
    has_backward = False

    def forward(self, x):
        shape = x.shape
        return OPS["silu_mul"](x.reshape(-1, shape[-1])).view(*shape[:-1], shape[-1] // 2)
''',
}

_VARIANT_INIT = Template('''"""A build variant of this package's Hugging Face ``kernels`` layer repository: ``kernels`` imports this
file and reads ``layers``. It is the installed package's own ``layers`` module, so its custom ops are
registered once (written by ratchet export)."""

from $package import layers  # noqa: F401
''')

_HUB = Template('''"""This package through Hugging Face ``kernels``' ``kernelize`` (written by ratchet export).

    from kernels import Mode, kernelize, use_kernel_mapping
    with use_kernel_mapping(pkg.kernel_mapping(), inherit_mapping=False):
        kernelize(model, mode=Mode.INFERENCE, device="cuda")

``kernelize`` swaps the forward of every module whose class is marked with a layer name this package
provides (``layers.NAMES``). transformers marks its classes itself (``use_kernel_forward_from_hub``)
only when a ``kernels`` version it supports is installed; otherwise its decorators do nothing, and
``mark_layers(model)`` marks the classes of ``model``'s modules whose math is the layer's, with kernels'
own ``replace_kernel_forward_from_hub``.
"""

from pathlib import Path

import torch

from . import layers

REPOSITORY = Path(__file__).parent / "$repository"
DEVICES = ("cpu", "cuda")


def kernel_mapping():
    """The kernels mapping of each layer name this package provides to its local layer repository, for
    ``kernels.use_kernel_mapping`` or ``register_kernel_mapping`` (no network is used)."""
    try:
        from kernels import LocalLayerRepository
    except ImportError:
        raise ImportError("kernel_mapping() needs Hugging Face kernels: pip install 'kernels>=0.17'") from None

    return {name: {device: LocalLayerRepository(repo_path=REPOSITORY, layer_name=name) for device in DEVICES}
            for name in layers.NAMES}


def _is_rmsnorm(module):
    """Whether ``module`` computes ``weight * x / rms(x)`` with ``variance_epsilon``: the layer's math,
    checked on random rows against the op's original math (the task's reference)."""
    from ratchet.e2e.models.adapter import close
    from ratchet.e2e.workloads.registry import reference

    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or not isinstance(eps, float):
        return False
    if getattr(module, "bias", None) is not None:
        return False
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.randn(8, weight.shape[0], generator=generator) * 3.0).to(weight.device, weight.dtype)
    with torch.no_grad():
        want = reference("rmsnorm")(x.double(), weight.double(), eps).to(x.dtype)  # the layer returns x's dtype
        got = type(module).forward(module, x)
    return isinstance(got, torch.Tensor) and close(want, got)


_CHECKS = {"RMSNorm": _is_rmsnorm}


def mark_layers(model):
    """Mark the classes of ``model``'s modules that no one marked and whose math is one of this package's
    layers with that layer's name (``kernels.replace_kernel_forward_from_hub``; each module is checked
    again when kernelize runs). Returns {class name: layer name} of the classes marked now."""
    try:
        from kernels import replace_kernel_forward_from_hub
    except ImportError:
        raise ImportError("mark_layers() needs Hugging Face kernels: pip install 'kernels>=0.17'") from None

    marked = {}
    for module in model.modules():
        cls = type(module)
        if hasattr(cls, "kernel_layer_name"):
            continue
        for name in layers.NAMES:
            check = _CHECKS.get(name)
            if check is not None and check(module):
                replace_kernel_forward_from_hub(cls, name, condition=check)
                marked[cls.__name__] = name
                break
    return marked
''')
