"""``extract_module_tasks(profile, out_dir)``: a task file whose reference is the model's own module.

For each module group ``ratchet profile`` found worth a task of its own (``Profile.modules_no_task``: a
block that runs ops no built-in task or op-family extractor covers, like Qwen3-MoE's sparse MoE block
or Gemma's GELU MLP), write ``DIR/<model>_<Class>/``:
- ``task.py``: the reference imports the module's class from where the model got it (its transformers
  module, or the user's module or file for ``module:function``), builds it from ``config.json`` beside
  the file (a transformers config) and the constructor arguments read off the profiled instance, and
  calls its forward with the kernel's weights put in its parameters' places (cheaper per call than
  ``torch.func.functional_call``, so the baseline is as fast as the module itself). The kernel's
  arguments are the module's tensor inputs, as profiled (shapes, dtypes, integer ranges; the token
  dimensions named, scaled down for the CPU set), then its parameters and floating buffers; the
  weights are drawn from the generator with the mean and spread of the model's own.
- ``seeds/torch_reference.py``: the same module call as a candidate (config inline), the baseline.
The cost model: bytes of the inputs, the parameters (of a stack of experts, the router's top-k: a
call need not read the experts no token reaches) and the outputs; FLOPs counted by ``FlopCounterMode``
on the reference at each public shape. Each file is checked before it is kept: its reference must equal the profiled module's
own forward on the same inputs and weights.
"""

from __future__ import annotations

import inspect
import json
import math
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ratchet.e2e.extract import SHAPE_TABLES, Extracted, _stem, _wrap, workload_label
from ratchet.e2e.models.module_route import call_arguments, kernel_parameters
from ratchet.e2e.narrow import NARROW_ABOVE_BYTES, narrowed_config, narrowed_inputs, narrowed_sizes
from ratchet.e2e.module_times import ArgSpec, CallSpec, layer_of
from ratchet.e2e.profile import PHASE_WEIGHTS, Profile, dtype_name

CPU_TOKENS = 64  # the CPU set's calls hold at most this many tokens (the product of the named dims)
_DIM_NAMES = {1: ("T",), 2: ("B", "S")}
_SCALARS = (bool, int, float, str, type(None))

# Ops that choose on their inputs' values (an MoE router's top-k). A module running one is judged against
# itself at its own dtype: a higher-precision reference picks other experts on near ties, and then every
# element of that token's output differs. On an H100 (2026-12-07) Qwen3-MoE's block in bf16 failed its own
# float32 reference at 1% of the elements of 2048 tokens, so its plain-torch seed could never pass.
DISCRETE_OPS = frozenset({"topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "mode", "multinomial",
                          "searchsorted", "unique", "bucketize"})
# A module chains several ops, each rounding: a bit looser than one op's table.
_TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (5e-3, 5e-3), "bfloat16": (3e-2, 3e-2), "float64": (1e-8, 1e-8)}


def _literal(value) -> bool:
    """A constructor argument a task file can write as a literal: a scalar, or a flat tuple or list of them
    (nn.LayerNorm's ``normalized_shape``, (64,))."""
    return isinstance(value, _SCALARS) or (isinstance(value, (tuple, list))
                                           and all(isinstance(v, _SCALARS) for v in value))


class ModuleExtractError(Exception):
    """Why a module cannot become a task file (one line)."""


@dataclass(frozen=True)
class Skipped:
    """A module group worth a task that was not written, and why."""

    name: str
    why: str


def extract_module_tasks(profile: Profile, out_dir: str | Path, *, force: bool = False,
                         batches: tuple[int, ...] = ()) -> tuple[list, list]:
    """Write a task per module group in ``profile.modules_no_task``; returns (Extracted list, Skipped list).

    ``batches``: decode batches the model will run (a campaign's gate grid): each profiled decode call is
    a public shape again at each of them, so a kernel is timed at every batch it will be gated at (a
    campaign gated at batches 1 and 32 and profiled at 32 had judged one token only for correctness)."""
    written, skipped = [], []
    ranges = profile.module_ranges
    if ranges is None:
        return written, skipped
    for entry in profile.modules_no_task:
        records = [r for r in ranges.records if r.group == entry.name]
        name = module_task_name(profile.workload, entry.name)
        try:
            written.append(_extract_one(profile, entry, records, Path(out_dir) / name, name, force, batches))
        except ModuleExtractError as exc:
            skipped.append(Skipped(entry.name, str(exc)))
    return written, skipped


def module_task_name(workload: str, group: str) -> str:
    """The task written for module group ``group`` (a qualified class, ``#n`` for a variant) of ``workload``."""
    return f"{_stem(workload)}_{group.rsplit('.', 1)[-1].replace('#', '_')}"


# -- what the task must remake --------------------------------------------------------------------------
def _template(calls: list[tuple[str, CallSpec]]):
    """The call's template from its first recorded call: tensor shapes with the token dims (the first
    tensor's leading dims, and the same leading dims of the other tensors) named; plus each call's
    values of those dims. Calls of another structure are left out."""
    first = calls[0][1]
    tensors = [a for a in first.args if a.kind == "tensor"]
    lead = tensors[0].shape[:-1] if len(tensors[0].shape) > 1 else tensors[0].shape
    names = _DIM_NAMES.get(len(lead), tuple(f"D{i}" for i in range(len(lead))))
    if not lead:
        raise ModuleExtractError("its first tensor input is a scalar")
    layout = []
    for a in first.args:
        if a.kind != "tensor":
            layout.append(None)
            continue
        named = tuple(a.shape[:len(lead)]) == tuple(lead)
        layout.append([names[i] if named and i < len(lead) else d for i, d in enumerate(a.shape)])
    shapes = []
    for phase, call in calls:
        dims = dict(zip(names, (next(a for a in call.args if a.kind == "tensor").shape)))
        if len(call.args) != len(first.args) or any(
                (a.key, a.kind, a.dtype, a.value if a.kind == "const" else None)
                != (b.key, b.kind, b.dtype, b.value if b.kind == "const" else None)
                or (a.kind == "tensor" and tuple(dims.get(d, d) if isinstance(d, str) else d for d in lay) != a.shape)
                for a, b, lay in zip(call.args, first.args, layout)):
            continue
        shapes.append((phase, dims))
    return names, layout, shapes


def _cpu_dims(dims: dict) -> dict:
    small = dict(dims)
    while math.prod(small.values()) > CPU_TOKENS:
        biggest = max(small, key=lambda k: small[k])
        small[biggest] = max(small[biggest] // 2, 1)
    return small


def _import_source(obj) -> dict:
    """Where the task imports ``obj``'s class from: its module by name, or the user's file by path."""
    cls = obj if isinstance(obj, type) else type(obj)
    module = sys.modules.get(cls.__module__)
    if "<locals>" in cls.__qualname__:
        raise ModuleExtractError(f"{cls.__qualname__} is defined inside a function; a task cannot import it")
    if cls.__module__.startswith("ratchet_user_model_"):  # a model file loaded by path (models._load_function)
        return {"file": str(Path(module.__file__).resolve()), "name": cls.__qualname__}
    if cls.__module__ == "__main__":
        raise ModuleExtractError(f"{cls.__qualname__} lives in __main__; a task cannot import it")
    return {"module": cls.__module__, "name": cls.__qualname__}


def _config_of(module: nn.Module, model) -> object | None:
    from transformers import PretrainedConfig

    own = getattr(module, "config", None)
    if isinstance(own, PretrainedConfig):
        return own
    hf = getattr(model, "hf", None) or getattr(model, "module", None)
    config = getattr(hf, "config", None)
    if isinstance(config, PretrainedConfig):
        text = config.get_text_config(decoder=True)
        return text
    return None


# Set on a model's config when it is loaded or adapted, and left out of its config.json: which experts and
# attention implementations its modules dispatch to. A module rebuilt without them runs another path
# (Qwen3-MoE's experts: the eager per-expert loop, where the model ran grouped_mm at 2-3x the speed on a
# CPU, 2026-12-04), and every speedup over that reference would be inflated.
_IMPLEMENTATIONS = ("_experts_implementation", "_attn_implementation")


def _implementations(config) -> dict:
    from ratchet.e2e.models.adapter import ATTENTION_PREFIX

    if config is None:
        return {}
    # Ratchet's own attention ("ratchet_sdpa": the registry's decode attention, else sdpa) exists only where
    # the adapter registered it; the task file, run anywhere, takes the implementation it wraps.
    return {k: v.removeprefix(ATTENTION_PREFIX) for k in _IMPLEMENTATIONS
            if isinstance(v := getattr(config, k, None), str)}


def _init_kwargs(module: nn.Module, path: str, config) -> dict:
    """The constructor's arguments, read off the instance: ``config`` the model's config, ``layer_idx``
    the layer the instance sits in, any other one the instance's attribute of that name, else its
    default, else the config's field of that name."""
    try:
        params = list(inspect.signature(type(module).__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        raise ModuleExtractError(f"{type(module).__name__}'s constructor has no signature") from None
    kwargs = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name == "config" and config is not None:
            kwargs["config"] = "<config>"
        elif p.name == "layer_idx" and (getattr(module, "layer_idx", None) is not None or layer_of(path) is not None):
            kwargs["layer_idx"] = getattr(module, "layer_idx", None) if getattr(module, "layer_idx", None) is not None \
                else layer_of(path)
        elif hasattr(module, p.name) and _literal(getattr(module, p.name)) and not isinstance(
                getattr(type(module), p.name, None), property):
            # hasattr first: None is a scalar here, and a missing attribute (Embedding's `_weight`) is not one
            kwargs[p.name] = getattr(module, p.name)
        elif p.default is not p.empty:
            continue
        elif config is not None and hasattr(config, p.name) and _literal(getattr(config, p.name)):
            # hasattr first: the config has no field of every argument's name (nn.LayerNorm's normalized_shape)
            kwargs[p.name] = getattr(config, p.name)
        else:
            raise ModuleExtractError(f"cannot tell {type(module).__name__}'s constructor argument '{p.name}'")
    return kwargs


def _weights(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The kernel's weight arguments: parameters, then floating buffers, by name."""
    out = [(n, p) for n, p in module.named_parameters()]
    out += [(n, b) for n, b in module.named_buffers() if b.is_floating_point()]
    return out


def _stats(t: torch.Tensor) -> tuple[float, float]:
    """Mean and spread to draw a weight with (a constant weight gets a little spread: never constants)."""
    wide = t.detach().double()
    mean = float(wide.mean()) if t.numel() else 0.0
    std = float(wide.std()) if t.numel() > 1 else 0.0
    return round(mean, 6), round(max(std, 0.02 * abs(mean), 1e-3), 6)


# -- writing --------------------------------------------------------------------------------------------
def _at_batches(shapes: list, names: tuple, profiled_batch: int | None, batches: tuple[int, ...]) -> list:
    """``shapes`` and, for each decode shape, the same call at each of ``batches`` rows: its first token
    dim scaled from the profiled batch (B of (B, S), or T = rows x tokens per row)."""
    out, lead = list(shapes), names[0]
    for phase, dims in shapes:
        if phase != "decode" or not profiled_batch or dims[lead] % profiled_batch:
            continue
        for b in batches:
            again = {**dims, lead: b * (dims[lead] // profiled_batch)}
            if all(again != d for _, d in out):
                out.append(("decode", again))
    return out


def _extract_one(profile: Profile, entry, records, folder: Path, name: str, force: bool,
                 batches: tuple[int, ...] = ()) -> Extracted:
    if not records:
        raise ModuleExtractError("no instance recorded")
    first = records[0]
    module = first.module
    calls = [(ph, c) for ph in ("decode", "prefill") for c in first.calls.get(ph, []) if not c.why]
    if not calls:
        raise ModuleExtractError("no call of it was recorded")
    names, layout, shapes = _template(calls)
    decode = next((p for p in profile.phases if p.name == "decode"), None)
    shapes = _at_batches(shapes, names, decode.setting.get("batch") if decode else None, tuple(batches))
    tensors = [a for a in calls[0][1].args if a.kind == "tensor"]
    floats = [a for a in tensors if a.dtype in ("float32", "float16", "bfloat16", "float64")]
    dtype = floats[0].dtype if floats else dtype_name(next(module.parameters()).dtype)
    config = _config_of(module, profile.model)
    init = _init_kwargs(module, first.path, config)
    source = _import_source(module)
    config_source = _import_source(config) if config is not None else None
    weights = _weights(module)
    # The public shapes: each weighs its phase's weight x the group's share there.
    weight_of: dict[tuple, float] = {}
    for phase, dims in shapes:
        key = tuple(dims[d] for d in names)
        weight_of[key] = weight_of.get(key, 0.0) + PHASE_WEIGHTS[phase] * entry.shares.get(phase, 0.0)
    public = [dict(zip(names, k)) for k in sorted(weight_of, key=lambda k: -weight_of[k])]
    cpu = []
    for s in public:
        small = _cpu_dims(s)
        key = tuple(small[d] for d in names)
        weight_of[key] = max(weight_of.get(key, 0.0), weight_of[tuple(s[d] for d in names)])
        if small not in cpu:
            cpu.append(small)
    spec = {
        "source": source, "config_source": config_source, "init": init, "names": list(names),
        **({"implementations": _implementations(config)} if _implementations(config) else {}),
        "inputs": [_input_spec(a, lay, dtype) for a, lay in zip(calls[0][1].args, layout)],
        "weights": [(n, list(t.shape), "task" if dtype_name(t.dtype) == dtype else dtype_name(t.dtype), *_stats(t))
                    for n, t in weights],
        "param_floor": _param_floor(weights, dtype, _experts_per_token(module)),
    }
    config_json = config.to_json_string(use_diff=False) if config is not None else None
    narrow = _narrow_spec(module, config, config_json, init, spec, dtype)
    if narrow is not None:
        spec["narrow"] = narrow
        cpu = [{**s, "W": narrow["W"]} for s in cpu]
    task_path, seed_path = folder / "task.py", folder / "seeds" / "torch_reference.py"
    written = force or not task_path.exists()
    if not written:
        return Extracted(name=name, path=str(task_path), seed=str(seed_path), family="module", shapes=public,
                         cpu_shapes=cpu, dtype=dtype, written=False)
    seed_path.parent.mkdir(parents=True, exist_ok=True)
    if config_json is not None:
        (folder / "config.json").write_text(config_json)
    try:
        return _write_and_check(profile, entry, module, folder, name, dtype, names, public, cpu, weight_of, spec,
                                config_json, task_path, seed_path)
    except _NarrowFails:
        del spec["narrow"]
        cpu = [{k: v for k, v in s.items() if k != "W"} for s in cpu]
        return _write_and_check(profile, entry, module, folder, name, dtype, names, public, cpu, weight_of, spec,
                                config_json, task_path, seed_path)


def _write_and_check(profile, entry, module, folder, name, dtype, names, public, cpu, weight_of, spec, config_json,
                     task_path, seed_path) -> Extracted:
    """Write the task and its seed, check them against the profiled module, then write the task again with
    the costs counted; the first reference dtype (float64 for fp32, else float32) the module runs in, or the
    module's own dtype where it makes discrete choices on values (``chooses_on_values``)."""
    costs = {}
    if chooses_on_values(entry):
        dtypes = (dtype,)
    else:
        dtypes = ("float64", "float32") if dtype == "float32" else ("float32",)
    for reference_dtype in dtypes:
        text = dict(profile=profile, entry=entry, name=name, dtype=dtype, public=public, cpu=cpu,
                    forward=_forward_source(module) + _constants_text(module),
                    weights={tuple(s[d] for d in names): round(max(weight_of[tuple(s[d] for d in names)], 1e-6), 6)
                             for s in public + cpu}, spec=spec, reference_dtype=reference_dtype, costs=costs)
        task_path.write_text(_task_source(**text))
        seed_path.write_text(_seed_source(spec, config_json, entry.name))
        try:
            costs = _check_and_count(task_path, module, spec, public + cpu, dtype, reference_dtype, profile.device)
        except _ReferenceDtype:
            continue
        except ModuleExtractError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        task_path.write_text(_task_source(**{**text, "costs": costs}))
        return Extracted(name=name, path=str(task_path), seed=str(seed_path), family="module", shapes=public,
                         cpu_shapes=cpu, dtype=dtype, written=True)
    shutil.rmtree(folder, ignore_errors=True)
    raise ModuleExtractError("its forward runs in neither float64 nor float32")


def _discrete_ops(entry) -> set[str]:
    return {op.rsplit("::", 1)[-1] for ops in entry.uncovered_ops.values() for op in ops} & DISCRETE_OPS


def chooses_on_values(entry) -> bool:
    """Whether the module group's own ops (those no task covers) include one in ``DISCRETE_OPS``."""
    return bool(_discrete_ops(entry))


def _narrow_spec(module: nn.Module, config, config_json: str | None, init: dict, spec: dict,
                 dtype: str) -> dict | None:
    """The call spec of the module built at narrow widths (``ratchet.e2e.narrow``), for the CPU set, when
    its weights pass NARROW_ABOVE_BYTES and it has a transformers config; else None."""
    if config_json is None or "config" not in init:
        return None
    elt = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    if sum(math.prod(shape) * elt for _n, shape, *_ in spec["weights"]) < NARROW_ABOVE_BYTES:
        return None
    full = json.loads(config_json)
    overrides = narrowed_config(full)
    if "hidden_size" not in overrides:
        return None
    config = type(config).from_dict({**full, **overrides})
    for attr, value in spec.get("implementations", {}).items():
        setattr(config, attr, value)
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            small = type(module)(**{**init, "config": config})
    except Exception:  # the cut widths do not fit this class: the CPU set keeps the model's widths
        return None
    full_weights = {n: (kind, mean, std) for n, _shape, kind, mean, std in spec["weights"]}
    small_weights = _weights(small)
    if [n for n, _t in small_weights] != list(full_weights):
        return None
    weights = [(n, list(t.shape), *full_weights[n]) for n, t in small_weights]  # the model's kinds and spreads
    if [w[1] for w in weights] == [w[1] for w in spec["weights"]]:
        return None  # nothing to gain, and the reference tells the widths apart by its weights' shapes
    real = [(n, torch.empty(shape, device="meta", dtype=getattr(torch, dtype if kind == "task" else kind)))
            for n, shape, kind, *_ in weights]
    return {"W": overrides["hidden_size"], "config": overrides,
            "inputs": narrowed_inputs(spec["inputs"], narrowed_sizes(full, overrides), overrides.get("vocab_size")),
            "weights": weights, "param_floor": _param_floor(real, dtype, _experts_per_token(module))}


def _input_spec(a: ArgSpec, layout, dtype: str) -> dict:
    if a.kind == "const":
        return {"key": a.key, "const": a.value}
    kind = "task" if a.dtype == dtype else a.dtype
    out = {"key": a.key, "shape": layout, "dtype": kind}
    if a.low is not None:
        out.update(low=a.low, high=a.high)
    return out


_TOP_K_NAMES = ("top_k", "num_experts_per_tok")  # the router's experts per token, as transformers names it


def _experts_per_token(module: nn.Module) -> int:
    """How many distinct experts a single token reaches: the router's ``top_k`` (or the config's
    ``num_experts_per_tok``) found on the module or a child; 1 when none is found."""
    found = [getattr(m, n) for m in module.modules() for n in _TOP_K_NAMES
             if isinstance(getattr(m, n, None), int) and not isinstance(getattr(m, n), bool)]
    config = getattr(module, "config", None)
    found += [getattr(config, n) for n in _TOP_K_NAMES if isinstance(getattr(config, n, None), int)]
    return max([k for k in found if k > 0], default=1)


def _param_floor(weights, dtype: str, experts_per_token: int = 1) -> int:
    """Bytes of weights any call must read: every parameter, but of a stack of 3 or more dims (experts)
    only the slices one token reaches (its router's top-k are distinct experts; a call need not read the
    experts no row reaches): for Qwen3-MoE's block 8 of 128, 8x the single slice this counted before."""
    total = 0
    for _name, t in weights:
        if t.dim() >= 3 and t.shape[0]:
            count = t.numel() // t.shape[0] * min(experts_per_token, t.shape[0])
        else:
            count = t.numel()
        elt = torch.empty((), dtype=getattr(torch, dtype) if dtype_name(t.dtype) == dtype else t.dtype).element_size()
        total += count * elt
    return total


class _ReferenceDtype(Exception):
    pass


class _NarrowFails(Exception):
    """The narrowed module does not run (its config's widths do not fit together): the CPU set keeps the
    model's widths."""


def _check_and_count(task_path: Path, module: nn.Module, spec: dict, shapes: list, dtype: str,
                     reference_dtype: str, device: str) -> dict:
    """Load the written task; at its first CPU shape its reference must equal the profiled module's own
    forward on the same inputs and weights, and run upcast to ``reference_dtype`` (else
    ``_ReferenceDtype``). Returns per shape (output bytes, FLOPs counted on the reference)."""
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    from ratchet.task import TaskError, load_task

    try:
        task = load_task(str(task_path))
    except TaskError as exc:
        raise ModuleExtractError(f"the written task does not load: {exc}") from None
    torch_dtype = getattr(torch, dtype)
    dev = next(module.parameters()).device if any(True for _ in module.parameters()) else torch.device(device)
    n_in = sum(1 for i in spec["inputs"] if "const" not in i)
    shape = {k: v for k, v in task.cpu.public[0].items() if k != "W"}  # the model's own widths
    inputs = task.make_inputs(shape, torch_dtype, str(dev), torch.Generator(device=dev).manual_seed(0))
    with torch.no_grad():
        try:
            got = _tensors(task.reference(*inputs))
            want = _tensors(_module_call(functional_call, module, spec, inputs, n_in))
        except Exception as exc:
            raise ModuleExtractError(f"the rebuilt module does not run: {type(exc).__name__}: "
                                     f"{' '.join(str(exc).split())[:200]}") from None
    # Close, not equal: the profiled instance may run adapted (its ops through the registry, matched
    # to the same math within this tolerance); the constants compared apart catch an eps that differs.
    atol, rtol = _TOLERANCES.get(dtype, (1e-3, 1e-3))
    if len(got) != len(want) or not all(g.shape == w.shape and torch.allclose(g.double(), w.double(), atol=atol,
                                                                              rtol=rtol) for g, w in zip(got, want)):
        raise ModuleExtractError("the rebuilt module's output differs from the model's own module")
    differs = _constants_differ(_module_for_check(task), module)
    if differs:
        raise ModuleExtractError(f"the rebuilt module differs from the model's own: {differs}")
    upcast = tuple(x.to(getattr(torch, reference_dtype)) if x.is_floating_point() else x for x in inputs)
    try:
        with torch.no_grad():
            task.reference(*upcast)
    except Exception:
        raise _ReferenceDtype() from None
    if "narrow" in spec:  # the narrowed module runs at the CPU set's shape, at the task's dtype and upcast
        narrow = task.make_inputs(task.cpu.public[0], torch_dtype, "cpu", torch.Generator().manual_seed(0))
        try:
            with torch.no_grad():
                for args in (narrow, tuple(x.to(getattr(torch, reference_dtype)) if x.is_floating_point() else x
                                           for x in narrow)):
                    task.reference(*args)
        except Exception as exc:
            raise _NarrowFails(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    costs = {}
    for s in shapes:
        inputs = task.make_inputs(s, torch_dtype, str(dev), torch.Generator(device=dev).manual_seed(1))
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            outs = _tensors(task.reference(*inputs))
        key = tuple(s[d] for d in spec["names"]) + ((s["W"],) if "W" in s else ())
        costs[key] = (sum(o.numel() * o.element_size() for o in outs), int(counter.get_total_flops()))
    return costs


def _module_for_check(task) -> nn.Module:
    built = sys.modules[task.reference.__module__]._BUILT
    return next(m for (_device, narrow), m in built.items() if not narrow)


def _constants_differ(rebuilt: nn.Module, original: nn.Module) -> str | None:
    """The first plain attribute (eps, top_k, widths) of a submodule that differs, as 'path.attr'."""
    mine = dict(rebuilt.named_modules())
    for path, theirs in original.named_modules():
        if path not in mine:
            return f"{path or 'the module'} is missing"
        for attr, value in vars(theirs).items():
            if attr.startswith("_") or not isinstance(value, _SCALARS):
                continue
            if vars(mine[path]).get(attr, value) != value:
                return f"{(path + '.') if path else ''}{attr} is {vars(mine[path])[attr]!r}, not {value!r}"
    return None


def _module_call(functional_call, module, spec, inputs, n_in):
    state = {n: w for (n, *_rest), w in zip(spec["weights"], inputs[n_in:])}
    args, kwargs = call_arguments(spec["inputs"], inputs[:n_in])
    return functional_call(module, state, tuple(args), kwargs)


def _tensors(out) -> tuple:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return tuple(t for o in out for t in _tensors(o))
    return ()


# -- the files ------------------------------------------------------------------------------------------
# One block shared by the task and its seed: rebuild the module once per device, call it with the
# arguments' weights in place.
_MODULE_CODE = '''
def _import(source):
    if "file" in source:  # the user's model file, by path
        spec = importlib.util.spec_from_file_location("ratchet_module_" + str(abs(hash(source["file"]))),
                                                      source["file"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(source["module"])
    obj = module
    for part in source["name"].split("."):
        obj = getattr(obj, part)
    return obj


_BUILT = {}


def _module(device, narrow=False):
    """The model's module class, built once per device (and width: the model's own, or narrowed for the
    CPU set) from the config with weights from a fixed seed (every weight is replaced by the call's
    arguments)."""
    key = (str(device), narrow)
    if key not in _BUILT:
        kwargs = dict(_SPEC["init"])
        if "config" in kwargs:
            config = _config_dict()
            if narrow:
                config.update(_SPEC["narrow"]["config"])
            kwargs["config"] = _import(_SPEC["config_source"]).from_dict(config)
            # The experts and attention implementations the model's modules ran (not in config.json).
            for attr, value in _SPEC.get("implementations", {}).items():
                setattr(kwargs["config"], attr, value)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            module = _import(_SPEC["source"])(**kwargs)
        _BUILT[key] = module.to(device).eval()
    return _BUILT[key]


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return tuple(t for o in out for t in _tensors(o))
    return ()


_SLOTS = {}


def _slots(module):
    """Where each weight of the call goes: (its owner's parameter or buffer dict, its name there)."""
    if id(module) not in _SLOTS:
        slots = []
        for name, *_rest in _SPEC["weights"]:
            owner, _, leaf = name.rpartition(".")
            sub = module.get_submodule(owner) if owner else module
            slots.append((sub._parameters if leaf in sub._parameters else sub._buffers, leaf))
        _SLOTS[id(module)] = slots
    return _SLOTS[id(module)]


def _run(*arguments):
    """The module's forward on the profiled call: the tensor inputs in order, constants as profiled, and
    the weights (after the inputs) in place of the module's own. They are put straight into the module's
    parameter slots: torch.func.functional_call costs more per call than a small module's own forward
    (118 against 47 us for a tiny Gemma MLP on one CPU thread, 2026-12-04), and the reference is the
    baseline every speedup is measured against."""
    n_in = sum(1 for item in _SPEC["inputs"] if "const" not in item)
    tensors, weights = list(arguments[:n_in]), arguments[n_in:]
    narrow = "narrow" in _SPEC and [list(w.shape) for w in weights] == [w[1] for w in _SPEC["narrow"]["weights"]]
    module = _module(arguments[0].device, narrow)
    for (slot, leaf), weight in zip(_slots(module), weights):
        slot[leaf] = weight
    args, kwargs = [], {}
    for item in _SPEC["inputs"]:
        value = item["const"] if "const" in item else tensors.pop(0)
        if item["key"] is None:
            args.append(value)
        else:
            kwargs[item["key"]] = value
    with torch.no_grad():
        out = _tensors(module(*args, **kwargs))
    return out[0] if len(out) == 1 else out
'''

_TASK = '''"""$title

$about

$body
"""

import importlib
import importlib.util
import json
import math
from pathlib import Path

import torch

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance, tensor_bytes

# The call as profiled: inputs (tensor shapes with the token dims named, "task" for the task's dtype,
# integer ranges) and constants; then the weights: (name, shape, dtype, mean, std of the model's own).
_SPEC = $spec


def _config_dict():
    return json.loads((Path(__file__).resolve().parent / "config.json").read_text())

$module_code

def reference(*arguments):
    return _run(*arguments)


def _dtype(kind, dtype):
    return dtype if kind == "task" else getattr(torch, kind)


def _at_width(shape):
    """The call spec at the shape's width: the model's own, or (W in the shape) the narrowed module's."""
    return _SPEC["narrow"] if "W" in shape else _SPEC


def make_inputs(shape, dtype, device, generator):
    out = []
    spec = _at_width(shape)
    for item in spec["inputs"]:
        if "const" in item:
            continue
        dims = [shape[d] if isinstance(d, str) else d for d in item["shape"]]
        kind = _dtype(item["dtype"], dtype)
        if "low" in item:  # ids and positions: within the profiled range
            out.append(torch.randint(item["low"], item["high"] + 1, dims, generator=generator, device=device,
                                     dtype=kind))
        elif kind == torch.bool:
            out.append(torch.rand(dims, generator=generator, device=device) < 0.5)
        else:
            out.append(torch.randn(dims, generator=generator, device=device).to(kind))
    for _name, dims, kind, mean, std in spec["weights"]:
        w = torch.randn(dims, generator=generator, device=device) * std + mean
        out.append(w.to(_dtype(kind, dtype)))
    return tuple(out)


# Per shape ($dims_text, and W for a narrowed one): output bytes and FLOPs (FlopCounterMode on the
# reference), measured when the file was written; other shapes scale them per token at their width.
_COSTS = $costs
# Bytes of weights every call reads (of a stack of experts: those one token reaches); a narrowed
# module's are in _SPEC["narrow"].
_PARAM_FLOOR = $param_floor


def cost(shape, dtype):
    tokens_key = tuple(shape[d] for d in $dims)
    key = tokens_key + ((shape["W"],) if "W" in shape else ())
    tokens = math.prod(tokens_key)
    if key in _COSTS:
        out_bytes, flops = _COSTS[key]
    else:
        per = [(b / math.prod(k[:len(tokens_key)]), f / math.prod(k[:len(tokens_key)]))
               for k, (b, f) in _COSTS.items() if len(k) == len(key)] or [(0.0, 0.0)]
        out_bytes, flops = min(p[0] for p in per) * tokens, min(p[1] for p in per) * tokens
    spec = _at_width(shape)
    moved = out_bytes + (spec["param_floor"] if spec is not _SPEC else _PARAM_FLOOR)
    for item in spec["inputs"]:
        if "const" not in item:
            dims = [shape[d] if isinstance(d, str) else d for d in item["shape"]]
            moved += tensor_bytes(dims, _dtype(item["dtype"], dtype))
    return Cost(bytes=moved, flops=float(flops))


# As profiled, heaviest first; the CPU set scaled down to at most $cpu_tokens tokens a call.$cpu_width
''' + SHAPE_TABLES + '''

TASK = Task(
    name=$name,
    reference=reference,
    make_inputs=make_inputs,
    # Held out: other token counts (odd) with the module's own widths (the CPU set's at its W).
    gpu=ShapeSet(public=_GPU_SHAPES, held_out=ShapeRange($gpu_held, count=2)),
    cpu=ShapeSet(public=_CPU_SHAPES, held_out=ShapeRange($cpu_held, count=2)),
    dtypes=(torch.$dtype,),
    cost=cost,
    weight=weight,
    # atol is a fraction of the output's RMS: a module's output scale is its own (and the CPU set's
    # narrowed module's is far smaller than the model's).
    tolerances={torch.$dtype: Tolerance(atol=$atol, rtol=$rtol, atol_of_rms=True)},
    reference_dtype=torch.$reference_dtype,
    description=(
$description
    ),
)
'''

_SEED = '''"""The reference as a candidate: the model's own $klass called with the kernel's weights (the
baseline to beat). The config is inline so this file stands alone wherever it is copied."""

import importlib
import importlib.util
import json

import torch

_SPEC = $spec
_CONFIG = $config


def _config_dict():
    return json.loads(_CONFIG)

$module_code

def kernel(*arguments):
    return _run(*arguments)
'''


def _substitute(template: str, **values) -> str:
    from string import Template

    return Template(template).substitute(**values)


def _signature(spec: dict) -> str:
    return ", ".join(kernel_parameters(spec))


def _constants_text(module: nn.Module) -> str:
    """The module's and its children's plain settings (top-k, widths, flags, eps) as docstring lines: the
    numbers its forward reads from ``self`` and a kernel must take as given; '' when it has none."""
    lines = []
    for path, sub in module.named_modules():
        values = {k: v for k, v in vars(sub).items()
                  if not k.startswith("_") and k != "training" and isinstance(v, (bool, int, float, str))}
        if values:
            lines += textwrap.wrap(f"{path or 'self'}: " + ", ".join(f"{k}={v!r}" for k, v in values.items()),
                                   100, initial_indent="    ", subsequent_indent="        ")
    if not lines:
        return ""
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', "'''")
    return f"\n\nIts settings (self and its children, as the model built them):\n\n{text}"


def _forward_source(module: nn.Module, most: int = 120) -> str:
    """The forwards of the module's class and of its children's classes (those not from torch.nn) as
    source, indented for the task's docstring: what a kernel must compute, without reading the model's
    library; at most ``most`` lines, '' when Python has no source."""
    classes = [type(module)] + [type(c) for _, c in module.named_children()]
    seen, parts = set(), []
    for cls in classes:
        if cls in seen or cls.__module__.startswith("torch.nn"):
            continue
        seen.add(cls)
        try:
            lines = inspect.getsource(cls.forward).splitlines()
        except (OSError, TypeError):
            continue
        indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
        parts.append([f"# {cls.__module__}.{cls.__qualname__}"] + [line[indent:] for line in lines])
    body = [line for part in parts for line in part + [""]][:most]
    if not body:
        return ""
    text = "\n".join("    " + line if line.strip() else "" for line in body).rstrip()
    text = text.replace("\\", "\\\\").replace('"""', "'''")  # stays inside the docstring as written
    return f"\n\nIts forward, and its children's (the kernel computes it, the weights as arguments):\n\n{text}"


def _task_source(profile, entry, name, dtype, public, cpu, weights, spec, reference_dtype, costs, forward="") -> str:
    names = spec["names"]
    klass = entry.name.rsplit(".", 1)[-1].split("#")[0]
    setting = "; ".join(f"{p.name}: {', '.join(f'{k} {v}' for k, v in p.setting.items())}" for p in profile.phases)
    shares = ", ".join(f"{ph} {100 * s:.1f}%" for ph, s in entry.shares.items())
    atol, rtol = _TOLERANCES.get(dtype, (1e-3, 1e-3))
    gpu_held = {d: (1, max(max(s[d] for s in public), 2)) for d in names}
    cpu_held = {d: (1, max(max(s[d] for s in cpu), 2)) for d in names}
    if "narrow" in spec:
        cpu_held["W"] = [spec["narrow"]["W"]]
    description = (f"{klass} of {profile.workload} ({', '.join(entry.paths[:3])}"
                   f"{', ...' if len(entry.paths) > 3 else ''}) as the model runs it, {dtype}: the module's own "
                   f"forward on its profiled inputs with the weights as arguments. Any token count must work.")
    chunks = textwrap.wrap(description, 96, drop_whitespace=False)
    return _substitute(
        _TASK,
        title=_wrap(f"{workload_label(profile)[0]}: the model's own {klass} ({len(entry.paths)} "
                    f"instance{'s' if len(entry.paths) != 1 else ''}), {dtype}."),
        about=_wrap(f"Extracted by `ratchet profile {workload_label(profile)[1]} --device "
                    f"{profile.device} --extract` ({setting}): it took {shares} of the steps, running ops no "
                    "built-in task or op extractor covers. The public shapes are the calls profiled; the CPU set "
                    "is scaled down from them."),
        body=_wrap(f"The reference is the model's own module, {entry.name.split('#')[0]}, imported from where "
                   "the model has it, built from config.json beside this file (when the model has a config), its "
                   "forward called with the kernel's weight arguments in its parameters' places: "
                   f"kernel({_signature(spec)}) returns the module's tensor outputs. Nothing is forbidden: a "
                   "candidate that runs the module itself only ties."
                   + (f" It chooses on its values ({', '.join(sorted(_discrete_ops(entry)))}), so the judge runs it "
                      f"at the model's own {dtype}, not in a higher precision: a kernel must make the same "
                      f"choices as the module does in {dtype}"
                      + (f" (a router's logits rounded to {dtype} before its top-k, say)." if dtype != "float32" else ".")
                      + " Equal values are common at low precision, and which of them torch's top-k or sort takes "
                      "is its own (undocumented) choice; the surest way to make the module's is to call the same "
                      "torch op on the same values."
                      if reference_dtype == dtype and chooses_on_values(entry) else "")
                   + (" The model's modules ran, and the reference runs, with "
                      + ", ".join(f"{k.strip('_').replace('_', ' ')} '{v}'"
                                  for k, v in spec.get("implementations", {}).items()) + "."
                      if spec.get("implementations") else "")) + forward,
        spec=_pretty(spec), module_code=_MODULE_CODE,
        dims_text=", ".join(names), dims=repr(tuple(names)), costs=repr(costs), param_floor=spec["param_floor"],
        cpu_tokens=CPU_TOKENS, cpu_width=(
            f"\n# Its module is narrowed to hidden width W = {spec['narrow']['W']} (ratchet.e2e.narrow; the config's "
            "overrides are in\n# _SPEC['narrow']): a kernel takes its widths from its arguments' shapes."
            if "narrow" in spec else ""), gpu_shapes="\n".join(f"    {s!r}," for s in public),
        cpu_shapes="\n".join(f"    {s!r}," for s in cpu),
        weights="\n".join(f"    {k!r}: {v!r}," for k, v in weights.items()), name=repr(name),
        weight_note="the module's share of the model's steps (decode x 1, prefill x 0.5).",
        gpu_held=_held(gpu_held), cpu_held=_held(cpu_held), dtype=dtype, atol=atol, rtol=rtol,
        reference_dtype=reference_dtype, description="\n".join(f"        {c!r}" for c in chunks))


def _seed_source(spec: dict, config_json: str | None, klass: str) -> str:
    return _substitute(_SEED, klass=klass.rsplit(".", 1)[-1].split("#")[0], spec=_pretty(spec),
                       config=repr(json.dumps(json.loads(config_json)) if config_json else "{}"),
                       module_code=_MODULE_CODE)


def _held(dims: dict) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in dims.items()) + "}"


def _pretty(spec: dict) -> str:
    """The spec as a Python literal, one input or weight a line."""
    lines = ["{"]
    for key, value in spec.items():
        if isinstance(value, list) and value and key in ("inputs", "weights"):
            lines.append(f"    {key!r}: [")
            lines += [f"        {v!r}," for v in value]
            lines.append("    ],")
        else:
            lines.append(f"    {key!r}: {value!r},")
    lines.append("}")
    return "\n".join(lines)
