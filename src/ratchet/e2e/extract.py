"""``extract_tasks(profile, out_dir)`` writes a task file for each op family with no built-in task that it
knows how to rebuild (GEMMs run as ``F.linear``, ``torch.bmm``, the MoE experts' grouped GEMM, causal
prefill attention): the reference calls the same torch op the model's module calls, the public shapes
and dtypes are the ones profiled, the weights their share of the steps, plus a cost model, a
scaled-down CPU set and a seed that runs the reference, so ``ratchet eval`` and ``ratchet run`` take the
file as it is.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Sequence

import torch

from ratchet.e2e.profile import _DTYPES, PHASE_WEIGHTS, Profile, _ratio, _thaw, dtype_name


# -- extraction: a task file for an op with no built-in task ---------------------------------------------
@dataclass(frozen=True)
class Extracted:
    name: str
    path: str
    seed: str
    family: str
    shapes: list  # the public (profiled) shapes
    cpu_shapes: list
    dtype: str
    written: bool  # False: the file existed and was kept (force=False)


def extractor_for(op: str) -> str | None:
    for family, spec in _EXTRACTORS.items():
        if op in spec["ops"]:
            return family
    return None


def op_covered(event) -> bool:
    """Whether a profiler op event is a call an op-family extractor rebuilds (so a module spending its
    time there is covered by that family's task)."""
    family = extractor_for(event.name)
    if family is None:
        return False
    shapes = [list(s) if isinstance(s, (list, tuple)) else s for s in (event.input_shapes or ())]
    try:
        return _EXTRACTORS[family]["read"](shapes, getattr(event, "concrete_inputs", None)) is not None
    except (IndexError, TypeError):
        return False


def _linear_dims(shapes, concrete):
    x, w = shapes[0], shapes[1]
    if len(shapes) > 2 and shapes[2]:
        return None  # with a bias: not the workloads' F.linear
    if len(w) != 2 or not x:
        return None
    return {"M": math.prod(x[:-1]), "N": w[0], "K": w[1]}


def _bmm_dims(shapes, concrete):
    a, b = shapes[0], shapes[1]
    if len(a) != 3 or len(b) != 3:
        return None
    return {"G": a[0], "M": a[1], "N": b[2], "K": a[2]}


def _sdpa_dims(shapes, concrete):
    q, k, v = shapes[0], shapes[1], shapes[2]
    concrete = list(concrete or [])
    mask = shapes[3] if len(shapes) > 3 else []
    causal = concrete[5] if len(concrete) > 5 else True
    scale = concrete[6] if len(concrete) > 6 else None
    if mask or causal is False or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None  # the template rebuilds causal attention without a mask only
    if scale is not None and abs(scale - q[3] ** -0.5) > 1e-9 * scale:
        return None  # a custom scale: not 1/sqrt(D)
    return {"B": q[0], "Hq": q[1], "Hkv": k[1], "S": q[2], "D": q[3], "Dv": v[3]}


def _grouped_dims(shapes, concrete):
    a, b = shapes[0], shapes[1]
    offs = shapes[2] if len(shapes) > 2 else []
    if len(a) != 2 or len(b) != 3 or offs != [b[0]]:
        return None  # only the 2D x 3D form with group ends (the MoE experts' form)
    return {"R": a[0], "E": b[0], "K": a[1], "N": b[2]}


GROUPED_B_BYTES_MAX = 2 << 30  # per call, in the task's dtype: the judge holds several copies of b


def _grouped_gpu(s, elt):
    """The real rows, in and out widths; experts cut to what the rows can touch (at most R) and to
    GROUPED_B_BYTES_MAX of weights, so the judge's copies fit on one GPU."""
    fit = max(GROUPED_B_BYTES_MAX // (s["K"] * s["N"] * elt), 1)
    return {**s, "E": max(min(s["E"], s["R"], fit), 1)}


def _grouped_cpu(s):
    def width(v):  # torch's grouped GEMM wants 16-byte aligned strides: multiples of 16 elements
        return max(16, min(v, 64) // 16 * 16)

    return {"R": min(s["R"], 64), "E": min(s["E"], 16), "K": width(s["K"]), "N": width(s["N"])}


def _linear_cpu(s):
    return {"M": min(s["M"], 64), "N": min(s["N"], 256), "K": min(s["K"], 256)}


def _bmm_cpu(s):
    return {"G": min(s["G"], 8), "M": min(s["M"], 64), "N": min(s["N"], 128), "K": min(s["K"], 128)}


def _sdpa_cpu(s):
    group = max(s["Hq"] // max(s["Hkv"], 1), 1)
    hkv = min(s["Hkv"], 2)
    return {"B": 1, "Hq": hkv * min(group, 4), "Hkv": hkv, "S": min(s["S"], 64), "D": s["D"], "Dv": s["Dv"]}


_EXTRACTORS: dict[str, dict] = {
    "linear": {"ops": ("aten::linear",), "dims": ("M", "N", "K"), "read": _linear_dims, "cpu": _linear_cpu},
    "bmm": {"ops": ("aten::bmm",), "dims": ("G", "M", "N", "K"), "read": _bmm_dims, "cpu": _bmm_cpu},
    "prefill_attention": {"ops": ("aten::scaled_dot_product_attention",), "dims": ("B", "Hq", "Hkv", "S", "D", "Dv"),
                          "read": _sdpa_dims, "cpu": _sdpa_cpu},
    "grouped_mm": {"ops": ("aten::_grouped_mm", "aten::grouped_mm"), "dims": ("R", "E", "K", "N"),
                   "read": _grouped_dims, "cpu": _grouped_cpu, "gpu": _grouped_gpu},
}


def extract_tasks(profile: Profile, out_dir: str | Path, *, force: bool = False,
                  families: Sequence[str] | None = None) -> list[Extracted]:
    """Write DIR/<workload>_<family>[_<dtype>]/task.py (and seeds/torch_reference.py) for each extractable
    op family the profile found (or only ``families``), largest share first. An existing file is kept
    unless ``force``."""
    gathered = _gather(profile, families)
    out = []
    for (family, dtype), shapes in sorted(gathered.items(), key=lambda kv: -sum(kv[1].values())):
        dtypes_of_family = {d for f, d in gathered if f == family}
        name = f"{_stem(profile.workload)}_{family}" + (f"_{dtype}" if len(dtypes_of_family) > 1 else "")
        out.append(_write_task(profile, family, dtype, shapes, Path(out_dir) / name, name, force))
    return out


def _stem(workload: str) -> str:
    """A task-name prefix for MODEL ``workload``: a built-in name as it is, a path or module:function by its
    ``model_key`` (letters, digits, underscores)."""
    from ratchet.e2e.models import ModelError, model_key

    try:
        return model_key(workload)
    except ModelError:
        return workload


def _gather(profile: Profile, families) -> dict:
    """(family, dtype) -> {shape tuple: weight}: weight = sum over phases of phase weight x share."""
    gathered: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    for phase in profile.phases:
        for key, (time_us, concrete) in profile.raw.get(phase.name, {}).items():
            if key[0] != "op":
                continue
            family = extractor_for(key[1])
            if family is None or (families and family not in families):
                continue
            spec = _EXTRACTORS[family]
            try:
                dims = spec["read"](_thaw(key[2]), concrete)
            except (IndexError, TypeError):  # a call of the op in a form the template does not rebuild
                dims = None
            dtype = _op_dtype(profile, key)
            if dims is None or dtype not in (torch.float32, torch.float16, torch.bfloat16):
                continue
            share = _ratio(time_us, phase.step_us)
            if "gpu" in spec:
                dims = spec["gpu"](dims, torch.empty((), dtype=dtype).element_size())
            shape = tuple(dims[d] for d in spec["dims"])
            gathered[family, dtype_name(dtype)][shape] += PHASE_WEIGHTS[phase.name] * share
    return gathered


def _op_dtype(profile: Profile, key: tuple) -> torch.dtype:
    """The dtype the profiler recorded for the op's first input; else that of the model weight its second
    input is (as stored, or transposed); else the model's."""
    recorded = next(iter(key[3]), None)
    if recorded in _DTYPES:
        return _DTYPES[recorded]
    second = list(key[2][1]) if len(key[2]) > 1 else []
    for shape in (second, second[:-2] + second[-2:][::-1]):
        if tuple(shape) in profile.param_dtypes:
            return profile.param_dtypes[tuple(shape)]
    return getattr(torch, profile.dtype)


def _write_task(profile, family, dtype, shapes: dict, folder: Path, name: str, force: bool) -> Extracted:
    spec = _EXTRACTORS[family]
    dims = spec["dims"]
    public = [dict(zip(dims, s)) for s in sorted(shapes, key=lambda s: -shapes[s])]
    weights = {s: round(max(w, 1e-6), 6) for s, w in shapes.items()}
    cpu = []  # a CPU shape weighs what the heaviest shape it was scaled from weighs
    for s in public:
        small = spec["cpu"](s)
        key = tuple(small[d] for d in dims)
        weights[key] = round(max(weights.get(key, 0.0), weights[tuple(s[d] for d in dims)]), 6)
        if small not in cpu:
            cpu.append(small)
    source = _task_source(profile, family, name, dtype, public, cpu, weights)
    seed = _seed_source(family)
    task_path, seed_path = folder / "task.py", folder / "seeds" / "torch_reference.py"
    written = force or not task_path.exists()
    if written:
        seed_path.parent.mkdir(parents=True, exist_ok=True)
        task_path.write_text(source)
        seed_path.write_text(seed)
    return Extracted(name=name, path=str(task_path), seed=str(seed_path), family=family, shapes=public,
                     cpu_shapes=cpu, dtype=dtype, written=written)


# The task files are written from the templates below: the reference is the torch call the model's module
# makes (named in a comment), so the baseline a candidate must beat is what the workload runs today.
_PREAMBLE = Template('''"""$title

$about$extra

Nothing is forbidden: the reference is the library op itself, so a candidate that calls it only ties.
Add `forbidden` if candidates must bring their own.
"""

import torch
import torch.nn.functional as F

from ratchet.task import Cost, ShapeRange, ShapeSet, Task, Tolerance, tensor_bytes

''')

# The shape lists and their weights as a generated task file declares them (module task files too).
SHAPE_TABLES = '''_GPU_SHAPES = [
$gpu_shapes
]
_CPU_SHAPES = [
$cpu_shapes
]
# ($dims_text) -> weight: $weight_note
_WEIGHTS = {
$weights
}


def weight(shape):
    return _WEIGHTS.get(tuple(shape[d] for d in $dims), min(_WEIGHTS.values()))
'''

_TAIL = Template('''

# As profiled, heaviest first.
''' + SHAPE_TABLES + '''

TASK = Task(
    name=$name,
    reference=reference,
    make_inputs=make_inputs,
    # $held_out_note
    gpu=ShapeSet(public=_GPU_SHAPES, held_out=ShapeRange(
        $gpu_held, count=2)),
    cpu=ShapeSet(public=_CPU_SHAPES, held_out=ShapeRange(
        $cpu_held, count=2)),
    dtypes=(torch.$dtype,),
    cost=cost,
    weight=weight,
    tolerances=$tolerances,
    reference_dtype=$reference_dtype,
    description=(
$description
    ),
)
''')

_LINEAR = '''def reference(x, w):
    # ratchet.e2e.workloads (every projection and the LM head): F.linear with nn.Linear's [out, in] weight, no bias.
    return F.linear(x, w)


def make_inputs(shape, dtype, device, generator):
    M, N, K = shape["M"], shape["N"], shape["K"]
    # Rows of varied magnitude (x0.3 to x3); weights drawn as the model draws them, std 1/sqrt(K), so the
    # outputs are O(1) whatever K.
    scale = 10.0 ** (torch.rand(M, 1, generator=generator, device=device) - 0.5)
    x = torch.randn(M, K, generator=generator, device=device) * scale
    w = torch.randn(N, K, generator=generator, device=device) * K ** -0.5
    return x.to(dtype), w.to(dtype)


def cost(shape, dtype):
    M, N, K = shape["M"], shape["N"], shape["K"]
    # Read x and w once, write out once; 2 FLOPs per multiply-add.
    moved = tensor_bytes((M, K), dtype) + tensor_bytes((N, K), dtype) + tensor_bytes((M, N), dtype)
    return Cost(bytes=moved, flops=2.0 * M * N * K)
'''

_BMM = '''def reference(a, b):
    # ratchet.e2e.workloads.deepseek (MLA decode): torch.bmm absorbs the key and value up-projections per head.
    return torch.bmm(a, b)


def make_inputs(shape, dtype, device, generator):
    G, M, N, K = shape["G"], shape["M"], shape["N"], shape["K"]
    scale = 10.0 ** (torch.rand(G, M, 1, generator=generator, device=device) - 0.5)
    a = torch.randn(G, M, K, generator=generator, device=device) * scale
    b = torch.randn(G, K, N, generator=generator, device=device) * K ** -0.5
    return a.to(dtype), b.to(dtype)


def cost(shape, dtype):
    G, M, N, K = shape["G"], shape["M"], shape["N"], shape["K"]
    moved = tensor_bytes((G, M, K), dtype) + tensor_bytes((G, K, N), dtype) + tensor_bytes((G, M, N), dtype)
    return Cost(bytes=moved, flops=2.0 * G * M * N * K)
'''

_SDPA = '''def reference(q, k, v):
    # ratchet.e2e.workloads.core.causal_attention: causal, scale 1/sqrt(D), query head h reads kv head
    # h // (Hq // Hkv).
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def make_inputs(shape, dtype, device, generator):
    B, Hq, Hkv, S, D, Dv = (shape[d] for d in ("B", "Hq", "Hkv", "S", "D", "Dv"))
    # Scores spread over a few units (peaked and flat rows both occur); values with a per-head offset so
    # a wrong weighting shows.
    q = torch.randn(B, Hq, S, D, generator=generator, device=device) * 1.5
    k = torch.randn(B, Hkv, S, D, generator=generator, device=device) * 1.5
    v = torch.randn(B, Hkv, S, Dv, generator=generator, device=device)
    v = v + torch.randn(B, Hkv, 1, Dv, generator=generator, device=device)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def cost(shape, dtype):
    B, Hq, Hkv, S, D, Dv = (shape[d] for d in ("B", "Hq", "Hkv", "S", "D", "Dv"))
    moved = (tensor_bytes((B, Hq, S, D), dtype) + tensor_bytes((B, Hkv, S, D + Dv), dtype)
             + tensor_bytes((B, Hq, S, Dv), dtype))
    pairs = B * Hq * S * (S + 1) / 2  # causal: each query sees itself and the ones before it
    return Cost(bytes=moved, flops=2.0 * pairs * (D + Dv))
'''

_GROUPED_FN = '''# torch's grouped GEMM takes these dtypes here (on CUDA bf16 only, so an fp32 check never meets TF32).
_LIBRARY_DTYPES = {"cpu": (torch.float32, torch.bfloat16, torch.float16), "cuda": (torch.bfloat16,)}
_GROUPED_MM = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def $fn(a, b, offs):
    # ratchet.e2e.workloads.deepseek.grouped_mm: rows offs[e-1]:offs[e] of a times b[e], empty groups allowed.
    # torch's grouped GEMM where it takes the dtype, as the model runs it; else (float64, unaligned
    # widths) the same product one group at a time.
    if _GROUPED_MM is not None and a.dtype in _LIBRARY_DTYPES.get(a.device.type, ()):
        try:
            return _GROUPED_MM(a, b, offs=offs)
        except RuntimeError:  # strides not 16-byte aligned
            pass
    out = a.new_zeros(a.shape[0], b.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end] @ b[e]
        start = end
    return out
'''

_GROUPED = Template(_GROUPED_FN).substitute(fn="reference") + '''

def make_inputs(shape, dtype, device, generator):
    R, E, K, N = shape["R"], shape["E"], shape["K"], shape["N"]
    # Rows go to experts of uneven popularity, as a trained router sends them: some hot, some empty (empty
    # groups must work); rows come sorted by expert, as the model sorts its token-slots.
    popularity = torch.softmax(torch.randn(E, generator=generator, device=device), 0)
    expert = torch.multinomial(popularity, R, replacement=True, generator=generator)
    offs = torch.bincount(expert, minlength=E).cumsum(0).to(torch.int32)
    scale = 10.0 ** (torch.rand(R, 1, generator=generator, device=device) - 0.5)
    a = torch.randn(R, K, generator=generator, device=device) * scale
    # nn.Linear's layout per expert, [E, N, K], handed over transposed as the model does: b is column-major,
    # the layout torch's grouped GEMM kernels take.
    w = torch.randn(E, N, K, generator=generator, device=device) * K ** -0.5
    return a.to(dtype), w.to(dtype).transpose(1, 2), offs


def cost(shape, dtype):
    R, E, K, N = shape["R"], shape["E"], shape["K"], shape["N"]
    # A floor whatever the routing: read a, write out, and at least one expert's weights (an expert no row
    # reaches need not be read); every row does K x N multiply-adds.
    moved = tensor_bytes((R, K), dtype) + tensor_bytes((R, N), dtype) + tensor_bytes((K, N), dtype)
    return Cost(bytes=moved, flops=2.0 * R * K * N)
'''

_SEED_DOC = '"""The reference as a candidate: $what, the op the model runs (the baseline to beat)."""\n\n'
_SEEDS = {
    "linear": ("F.linear", "import torch.nn.functional as F\n\n\ndef kernel(x, w):\n    return F.linear(x, w)\n"),
    "bmm": ("torch.bmm", "import torch\n\n\ndef kernel(a, b):\n    return torch.bmm(a, b)\n"),
    "prefill_attention": ("torch's SDPA", "import torch.nn.functional as F\n\n\ndef kernel(q, k, v):\n"
                          "    return F.scaled_dot_product_attention(q, k, v, is_causal=True,\n"
                          "                                          enable_gqa=q.shape[1] != k.shape[1])\n"),
    "grouped_mm": ("torch's grouped GEMM", "import torch\nimport torch.nn.functional as F\n\n"
                   + Template(_GROUPED_FN).substitute(fn="kernel")),
}


def _seed_source(family: str) -> str:
    what, body = _SEEDS[family]
    return Template(_SEED_DOC).substitute(what=what) + body


def _held(dims: dict) -> str:
    return "dims={" + ", ".join(f"{k!r}: {v!r}" for k, v in dims.items()) + "}"


def _family_text(family, profile, dtype, public, cpu) -> dict:
    """What differs per family: title, body, held-out ranges, description."""
    wl = profile.workload

    def values(dim):
        return sorted({s[dim] for s in public})

    def upto(dim, cap=4096):  # a range up to the largest profiled size (held-out draws are odd)
        return (1, max(min(max(values(dim)), cap), 2))

    if family == "linear":
        return dict(
            title=f"{workload_label(profile)[0]}: the GEMMs the model runs as F.linear, out [M, N] = x [M, K] @ w [N, K]^T, "
                  f"{dtype}.", body=_LINEAR,
            held_out_note="Held out: odd M (partial tiles) with the model's own N and K.",
            gpu_held={"M": upto("M"), "N": values("N"), "K": values("K")},
            cpu_held={"M": (1, 64), "N": (17, 300), "K": (17, 300)},
            description=f"The GEMMs of {wl} as F.linear runs them: x [M, K] times the transpose of w [N, K], "
                        f"{dtype} in and out with fp32 (or better) accumulation. Decode rows M are the batch: "
                        "skinny, memory-bound on reading w. Any M, N, K must work.")
    if family == "bmm":
        return dict(
            title=f"{workload_label(profile)[0]}: the batched GEMMs the model runs as torch.bmm, out [G, M, N] = "
                  f"a [G, M, K] @ b [G, K, N], {dtype}.", body=_BMM,
            held_out_note="Held out: odd M with the model's own G, N and K.",
            gpu_held={"G": values("G"), "M": upto("M"), "N": values("N"), "K": values("K")},
            cpu_held={"G": (1, 9), "M": (1, 64), "N": (17, 130), "K": (17, 130)},
            description=f"Batched GEMM as {wl} runs it (torch.bmm), {dtype} with fp32 (or better) accumulation; "
                        "any G, M, N, K must work.")
    if family == "prefill_attention":
        first, small = public[0], cpu[0]
        heads = ("Hq", "Hkv", "D", "Dv")
        return dict(
            title=f"{workload_label(profile)[0]}: causal prefill attention as the model runs it "
                  f"(F.scaled_dot_product_attention), {dtype}.", body=_SDPA,
            held_out_note="Held out: odd prompt lengths and batches with the model's own heads.",
            gpu_held={"B": (1, 2), **{h: [first[h]] for h in heads}, "S": upto("S", 1 << 20)},
            cpu_held={"B": (1, 2), **{h: [small[h]] for h in heads}, "S": (1, 80)},
            description=f"Causal self-attention over a prompt as {wl}'s prefill runs it: q [B, Hq, S, D], "
                        "k [B, Hkv, S, D], v [B, Hkv, S, Dv]; query head h reads kv head h // (Hq // Hkv); "
                        "out [B, Hq, S, Dv] = softmax(q k^T / sqrt(D), causal) v with fp32 softmax and "
                        "accumulation.")
    return dict(
        title=f"{workload_label(profile)[0]}: the MoE experts' grouped GEMM as the model runs it (torch's grouped_mm "
              f"over token-slots sorted by expert), {dtype}.", body=_GROUPED,
        extra="On the GPU set E is cut to at most R experts (R rows touch no more) and to 2 GiB of expert "
              "weights per call, so the judge's copies of b fit on one GPU; R, K and N are as profiled.",
        held_out_note="Held out: odd row counts (a fresh routing at every call) with the model's widths.",
        gpu_held={"R": upto("R", 1 << 20), "E": values("E"), "K": values("K"), "N": values("N")},
        cpu_held={"R": (1, 80), "E": [3, 16], "K": [16, 32], "N": [16, 48]},
        description="Grouped GEMM of MoE experts: a [R, K] holds token-slots sorted by expert, offs [E] int32 "
                    "the end of each expert's rows (offs[-1] = R; a group may be empty), b [E, K, N] the "
                    "experts' weights, column-major (a transposed [E, N, K]); out [R, N] = rows "
                    "offs[e-1]:offs[e] of a times b[e], with fp32 accumulation. Decode gives each expert a few "
                    "rows: memory-bound on reading b.")


def _tolerances(dtype: str, attention: bool) -> str:
    # bf16 attention: decode_attention's table (flash kernels round P to bf16 for the P.V dot).
    if dtype == "bfloat16":
        return f"{{torch.bfloat16: Tolerance(atol={2e-2 if attention else 1e-2}, rtol=1e-2)}}"
    if dtype == "float16":
        return "{torch.float16: Tolerance(atol=2e-3, rtol=1e-3)}"
    return "{torch.float32: Tolerance(atol=1e-5, rtol=1e-5)}"


def workload_label(profile) -> tuple[str, str]:
    """(the workload as a title names it, the ``ratchet profile`` flags that wrote it): ``--size`` only for
    a built-in workload (a transformers config or a user's module says its own widths)."""
    from ratchet.e2e.models import kind_of

    if kind_of(profile.workload) == "builtin":
        return f"{profile.workload} ({profile.size})", f"{profile.workload} --size {profile.size}"
    return profile.workload, profile.workload


def _wrap(text: str, width: int = 104) -> str:
    return "\n".join(textwrap.wrap(text, width))


def _task_source(profile, family, name, dtype, public, cpu, weights) -> str:
    text = _family_text(family, profile, dtype, public, cpu)
    dims = _EXTRACTORS[family]["dims"]
    setting = "; ".join(f"{p.name}: {', '.join(f'{k} {v}' for k, v in p.setting.items())}" for p in profile.phases)
    preamble = _PREAMBLE.substitute(
        title=_wrap(text["title"]),
        about=_wrap(f"Extracted by `ratchet profile {workload_label(profile)[1]} --device "
                    f"{profile.device} --extract` ({setting}). The public shapes are the ones that workload ran; "
                    "each weighs its share of the steps (decode x 1, prefill x 0.5). The CPU set is scaled down "
                    "from them."),
        extra="\n\n" + _wrap(text["extra"]) if text.get("extra") else "")
    # Adjacent string literals, each chunk keeping its trailing space, so the description reads as one line.
    chunks = textwrap.wrap(text["description"], 96, drop_whitespace=False)
    tail = _TAIL.substitute(
        gpu_shapes="\n".join(f"    {s!r}," for s in public), cpu_shapes="\n".join(f"    {s!r}," for s in cpu),
        dims_text=", ".join(dims), dims=repr(dims), name=repr(name), dtype=dtype,
        weights="\n".join(f"    {k!r}: {v!r}," for k, v in weights.items()),
        weight_note="the shape's share of the workload's steps.",
        held_out_note=text["held_out_note"], gpu_held=_held(text["gpu_held"]), cpu_held=_held(text["cpu_held"]),
        tolerances=_tolerances(dtype, family == "prefill_attention"),
        reference_dtype="torch.float64" if dtype == "float32" else "torch.float32",
        description="\n".join(f"        {c!r}" for c in chunks))
    return preamble + "\n" + text["body"] + tail
