"""Models as the user has them: ``load_model(spec, ...)`` turns a MODEL argument into a workload.

MODEL is one of
- a built-in workload name (``llama``, ``deepseek``): ``ratchet.e2e.workloads.build``;
- a transformers model directory, or its ``config.json``: the weights are loaded when the directory holds
  safetensors (``from_pretrained(local_files_only=True)``), else the model is built from the config with
  seeded random weights; nothing is ever downloaded (``HF_HUB_OFFLINE=1`` on this path);
- ``module:function`` (a dotted module on the path, or a ``.py`` file): the function returns a
  ``torch.nn.Module`` (or the pair ``(module, example_inputs)``). A transformers causal LM becomes a
  decoder like the others; a plain module is a forward-only workload (``ModuleWorkload``), which
  ``ratchet profile`` times on its example inputs.

A transformers model is adapted (``adapter.adapt``): the ops whose math matches a built-in task run
through the workload's op registry, so a kept kernel swaps in exactly as in the built-in decoders.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ratchet.e2e.workloads import WORKLOADS, OpRegistry, build


class ModelError(Exception):
    """A MODEL argument that cannot be loaded; the message is one line for the user."""


def kind_of(spec: str) -> str:
    """``builtin``, ``transformers`` (a directory or a config.json) or ``module`` (module:function)."""
    if spec in WORKLOADS:
        return "builtin"
    path = Path(spec)
    if path.is_dir() or (path.suffix == ".json" and path.exists()):
        return "transformers"
    if ":" in spec and not path.exists():
        return "module"
    raise ModelError(f"MODEL '{spec}' is neither a built-in workload ({', '.join(WORKLOADS)}), a transformers model "
                     f"directory or config.json, nor module:function")


def check_spec(spec: str) -> str:
    """``kind_of(spec)``, and what can be told before anything is built or imported (so a command can
    refuse in one line before it says it is starting): a transformers model's config.json is there; a
    module:function names a Python file that exists or a module that can be found, and a function name."""
    kind = kind_of(spec)
    if kind == "transformers":
        path = Path(spec)
        config_file = path if path.suffix == ".json" else path / "config.json"
        if not config_file.exists():
            raise ModelError(f"{path.parent if path.suffix == '.json' else path} holds no config.json")
    elif kind == "module":
        module_name, _, function_name = spec.rpartition(":")
        if not function_name.isidentifier():
            raise ModelError(f"{spec}: '{function_name}' is not a function name (module:function)")
        if module_name.endswith(".py"):
            if not Path(module_name).is_file():
                raise ModelError(f"{spec}: no file {module_name}")
        elif not all(part.isidentifier() for part in module_name.split(".")) or not _findable(module_name):
            raise ModelError(f"{spec}: cannot import {module_name} (no such module)")
    return kind


def _findable(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # a parent package that is missing or not a package
        return False


def model_key(spec: str) -> str:
    """A short name for file names (gate outcomes): the built-in name, or a readable stem and a hash."""
    if spec in WORKLOADS:
        return spec
    if kind_of(spec) == "transformers":
        path = Path(spec).resolve()
        stem = (path.parent if path.suffix == ".json" else path).name
        ident = str(path)
    else:
        stem, ident = spec.split(":", 1)[0].rsplit(".", 1)[-1].rsplit("/", 1)[-1], spec
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_") or "model"
    return f"{stem}_{hashlib.sha256(ident.encode()).hexdigest()[:8]}"


def default_dtype(device: str, config_dtype: torch.dtype | None = None) -> torch.dtype:
    """A transformers model's dtype when none is asked: fp32 on the CPU, else its config's, else bf16."""
    if str(device).startswith("cpu"):
        return torch.float32
    return config_dtype if config_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def load_model(spec: str, *, size: str = "tiny", device: str = "cpu", dtype: torch.dtype | None = None,
               seed: int = 0, registry: OpRegistry | None = None, adapt: bool = True):
    """The workload for MODEL ``spec`` (see the module's docstring) on ``device``, its ops on ``registry``
    (default: a fresh one). ``size`` applies to built-in workloads only (a transformers config says its
    own widths). Raises ModelError with one line for what cannot be loaded."""
    registry = registry or OpRegistry()
    kind = kind_of(spec)
    if kind == "builtin":
        overrides = {"dtype": dtype} if dtype is not None else {}
        return build(spec, size, device=device, seed=seed, registry=registry, **overrides)
    if kind == "transformers":
        model, name = _load_transformers(Path(spec), device, dtype, seed), None
    else:
        model, inputs = _load_function(spec)
        if not isinstance(model, nn.Module):
            raise ModelError(f"{spec} returned a {type(model).__name__}, not a torch.nn.Module")
        if hasattr(model, "decode_step") and hasattr(model, "ops"):
            return model  # a Ratchet decoder already
        if not _is_causal_lm(model):
            from ratchet.e2e.models.module import ModuleWorkload

            return ModuleWorkload(model.to(device), inputs, registry, name=spec, adapt=adapt)
        model = model.to(device)
        if dtype is not None:
            model = model.to(dtype)
        name = spec
    return wrap(model, registry, name=name, adapt=adapt)


def wrap(model: nn.Module, registry: OpRegistry, *, name: str | None = None, adapt: bool = True):
    """A transformers causal LM (already on its device and dtype) as an adapted ``HFDecoder``."""
    from ratchet.e2e.models.adapter import adapt as adapt_model
    from ratchet.e2e.models.hf import HFDecoder

    model.eval()
    adaptation = adapt_model(model, registry) if adapt else None
    return HFDecoder(model, registry, name=name or model.config.model_type, adaptation=adaptation)


def _is_causal_lm(model: nn.Module) -> bool:
    return hasattr(model, "config") and hasattr(model, "get_output_embeddings") and hasattr(
        model.config, "vocab_size")


def _load_transformers(path: Path, device: str, dtype: torch.dtype | None, seed: int) -> nn.Module:
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded on this path, whatever the files say
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = path.parent if path.suffix == ".json" else path
    config_file = path if path.suffix == ".json" else folder / "config.json"
    if not config_file.exists():
        raise ModelError(f"{folder} holds no config.json")
    try:
        config = AutoConfig.from_pretrained(str(config_file), local_files_only=True)
    except Exception as exc:
        raise ModelError(f"{config_file}: not a transformers config ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    dtype = dtype or default_dtype(device, getattr(config, "dtype", None) or getattr(config, "torch_dtype", None))
    weights = sorted(folder.glob("*.safetensors"))
    try:
        if weights and path.suffix != ".json":
            model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=dtype)
            return model.to(device)
        torch.manual_seed(seed)  # random weights, the same ones for the same seed
        with torch.device(device):
            return AutoModelForCausalLM.from_config(config, dtype=dtype)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{folder}: transformers cannot build this model ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


def _load_function(spec: str) -> tuple[nn.Module, Any]:
    module_name, _, function_name = spec.rpartition(":")
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            if not file.exists():
                raise ModelError(f"{spec}: no file {file}")
            unique = "ratchet_user_model_" + hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]
            mod_spec = importlib.util.spec_from_file_location(unique, file)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[unique] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{spec}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ModelError(f"{spec}: {module_name} has no function {function_name}")
    try:
        out = function()
    except Exception as exc:
        raise ModelError(f"{spec}: {function_name}() raised {type(exc).__name__}: {exc}") from None
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], nn.Module):
        model, inputs = out
        return model, tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    return out, ()


__all__ = ["ModelError", "default_dtype", "kind_of", "load_model", "model_key", "wrap"]


def model_failure(exc: BaseException) -> str:
    """``Type: message (file:line)``, at the innermost frame outside torch, transformers and Ratchet: the
    line of the user's own model that failed, where there is one."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    # the user's file first; else the model's own code in transformers (its modeling file), not torch's
    own = ([f for f in frames if not any(part in f.filename for part in ("/torch/", "/transformers/", "/ratchet/"))]
           or [f for f in frames if not any(part in f.filename for part in ("/torch/", "/ratchet/"))] or frames)
    at = f" ({own[-1].filename}:{own[-1].lineno})" if own else ""
    message = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {message}{at}"
