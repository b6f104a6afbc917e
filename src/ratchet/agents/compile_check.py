"""``ratchet check``: does a candidate compile for the GPU's architecture? Answered on a machine without a GPU.

Triton's interpreter (``TRITON_INTERPRET=1``) runs a kernel's Python on the CPU and accepts code the
compiler refuses: a value shaped differently in the two branches of an ``if`` passed the interpreter and
failed to compile on the H200 (2026-12-01). So this check compiles instead of interpreting:

- In a subprocess of its own (a clean environment without ``TRITON_INTERPRET``, a time limit, the
  candidate's crashes kept out of the caller), the candidate's ``kernel(...)`` is called on the task's CPU
  shapes and dtypes with ``JITFunction.run`` replaced: each launch is not run but compiled, with the
  launch's own argument types, alignment specialization and constexprs, for ``GPUTarget("cuda", CC, 32)``
  through Triton's stages to PTX and then to a cubin with the ``ptxas`` Triton ships. An autotuned kernel
  compiles every config. By default the CPU shapes are launched, so a kernel or a constexpr chosen only
  at the GPU's sizes (a wider block for a larger H, a second path above some T) is not seen; with
  ``shapes="gpu"`` the public GPU shapes are launched, their inputs made in host memory, and then the
  corners of the held-out ranges (every dimension at its lowest, then at its highest), whose paths only
  held-out draws reach (a coding agent's MoE kernel chose a 128-row block only above 64 tokens), as long
  as the task's cost model puts a corner's bytes under ``CORNER_BYTES`` (a 131072-token KV cache is not
  made in host memory for a compile).
- CUDA C++ handed to ``ratchet.cuda_build.load_cached`` or ``torch.utils.cpp_extension.load_inline`` is
  compiled with ``nvcc -arch=sm_XXa`` and torch's headers where ``nvcc`` is installed; else the report says
  plainly that it cannot be checked here.

Since nothing runs on a GPU, the outputs of the launches are garbage: the candidate's own Python after a
launch may raise; the kernels compiled up to then are still reported. This is a tool for the agent's side,
not the judge: it proves nothing about correctness or speed, and its verdict is never recorded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_MARK = "RATCHET-CHECK-RESULT "
MAX_SHARED_BYTES = {90: 227 * 1024, 100: 227 * 1024, 89: 99 * 1024, 86: 99 * 1024, 80: 163 * 1024}


@dataclass(frozen=True)
class KernelResult:
    kernel: str  # the @triton.jit function's name, or "cuda:NAME" for a CUDA C++ extension
    signature: str  # argument types and constexprs, as compiled
    ok: bool
    message: str = ""  # one line: the compiler's message when it failed
    shared_bytes: int | None = None
    # ptxas's own account of the compiled kernel (``ptxas -v``): registers per thread, bytes spilled to
    # local memory (stores), and the blocks of this kernel an SM can hold at once by registers and shared
    # memory; None where ptxas could not be asked
    registers: int | None = None
    spill_bytes: int | None = None
    blocks_per_sm: int | None = None


@dataclass(frozen=True)
class CheckReport:
    arch: str
    kernels: list[KernelResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be checked, and why
    error: str | None = None  # the check itself could not run (bad file, the candidate raised first)

    @property
    def ok(self) -> bool:
        return self.error is None and all(k.ok for k in self.kernels)

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "ok": self.ok, "error": self.error, "notes": self.notes,
                "kernels": [asdict(k) for k in self.kernels]}


class CheckError(ValueError):
    """Bad usage of the check (an unknown architecture); one line."""


def parse_arch(arch: str) -> int:
    """``sm_90`` / ``sm_90a`` / ``90`` -> 90."""
    match = re.fullmatch(r"(?:sm_)?(\d{2,3})a?", arch.strip().lower())
    if not match:
        raise CheckError(f"--arch '{arch}' is not an architecture like sm_90")
    return int(match.group(1))


def check_candidate(task_spec: str, candidate_path: str, arch: str = "sm_90", config: dict | None = None,
                    timeout_s: float = 600.0, shapes: str = "cpu", chosen: tuple[dict, ...] = ()) -> CheckReport:
    """Compile every kernel the candidate launches for ``arch``, on the task's CPU shapes or, with
    ``shapes="gpu"``, on its public GPU shapes (their inputs made in host memory: launches never run, so
    only the wrapper's own torch code touches them; branches taken only at GPU sizes are compiled too).
    ``chosen``: whole shapes of that set to launch instead of the set's own (one path being tuned)."""
    capability = parse_arch(arch)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default, stated: silences its warning
    cmd = [sys.executable, "-m", "ratchet.agents.compile_check", task_spec, candidate_path, str(capability),
           json.dumps(config or {}), shapes, json.dumps(list(chosen))]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return CheckReport(arch, error=f"the check took over {timeout_s:g} s and was stopped")
    for line in done.stdout.splitlines():
        if line.startswith(_MARK):
            data = json.loads(line[len(_MARK):])
            return CheckReport(data["arch"], [KernelResult(**k) for k in data["kernels"]], data["notes"],
                               data["error"])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return CheckReport(arch, error=f"the check's process ended with status {done.returncode}: {tail}")


# -- in the subprocess ---------------------------------------------------------------------------------


REGISTERS_PER_SM = 65536  # every architecture from sm_70 to sm_100
MAX_BLOCKS_PER_SM = {90: 32, 100: 32, 89: 24, 86: 16, 80: 32}
MAX_THREADS_PER_SM = {90: 2048, 100: 2048, 89: 1536, 86: 1536, 80: 2048}


def _ptxas_path(capability: int) -> str | None:
    """The ptxas Triton itself compiles with for ``capability`` (Triton 3.9 ships two, and the older one
    refuses the PTX version it emits for Hopper)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        try:
            tool = get_ptxas(capability)
        except TypeError:  # Triton 3.6: one ptxas, no argument
            tool = get_ptxas()
        path = getattr(tool, "path", tool)
    except Exception:  # a Triton without the helper: the knob
        try:
            from triton import knobs

            path = knobs.nvidia.ptxas.path
        except Exception:
            return None
    return path if isinstance(path, str) and os.path.exists(path) else None


def ptxas_usage(ptx: str | None, capability: int) -> tuple[int, int] | None:
    """(registers per thread, spill-store bytes) of the PTX's kernel, as ``ptxas -v`` reports them for
    ``sm_XX`` (``sm_90a`` on Hopper, as Triton compiles), or None when ptxas cannot be run."""
    ptxas = _ptxas_path(capability)
    if not ptx or not ptxas:
        return None
    arch = f"sm_{capability}{'a' if capability >= 90 else ''}"
    with tempfile.TemporaryDirectory(prefix="ratchet-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        try:
            proc = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(src), "-o", str(Path(tmp) / "k.cubin")],
                                  capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
    registers = re.search(r"Used (\d+) registers", proc.stderr)
    spills = re.search(r"(\d+) bytes spill stores", proc.stderr)
    if proc.returncode != 0 or not registers:
        return None
    return int(registers.group(1)), int(spills.group(1)) if spills else 0


def blocks_per_sm(registers: int, warps: int, shared_bytes: int, capability: int) -> int:
    """How many blocks of a kernel one SM holds at once, bound by registers (allocated per warp in units of
    256), shared memory and the SM's thread and block limits: 1 means one block per SM, so latency is
    hidden only within the block."""
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    by_regs = REGISTERS_PER_SM // (per_warp * warps) if per_warp * warps else 0
    limit = MAX_SHARED_BYTES.get(capability, 99 * 1024)
    by_shared = (limit // shared_bytes) if shared_bytes else MAX_BLOCKS_PER_SM.get(capability, 16)
    by_threads = MAX_THREADS_PER_SM.get(capability, 2048) // (32 * warps)
    return max(0, min(by_regs, by_shared, by_threads, MAX_BLOCKS_PER_SM.get(capability, 16)))


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compiler_message(exc: BaseException, fn) -> str:
    """Triton's CompilationError shows the source around the error; keep its position and the cause."""
    text = str(exc)
    lines = [line for line in text.splitlines() if line.strip()]
    where = ""
    match = re.search(r"at (\d+):(\d+):", text)
    if match:
        where = f"{_def_line(getattr(fn, 'fn', fn), int(match.group(1)))}: "
    cause = lines[-1] if lines else type(exc).__name__
    return _one_line(f"{where}{type(exc).__name__}: {cause}")


def _def_line(function, line_in_source: int) -> str:
    """``file:line`` of a line Triton numbers from the kernel's ``def`` (decorators are not in its source)."""
    import inspect

    try:
        lines, start = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return function.__name__
    offset = next((i for i, line in enumerate(lines) if line.lstrip().startswith("def ")), 0)
    return f"{Path(function.__code__.co_filename).name}:{start + offset + line_in_source - 1}"


class _Capture:
    """Replaces Triton's launch with a compile for the target, and records CUDA C++ builds."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget

        self.capability = capability
        self.target = GPUTarget("cuda", capability, 32)
        self.results: dict[tuple, KernelResult] = {}
        self.cuda_sources: dict[str, dict] = {}

    def install(self) -> None:
        import triton.runtime.autotuner as autotuner
        from triton.runtime.jit import JITFunction

        capture = self

        def run(fn, *args, grid, warmup, **kwargs):
            capture.compile_launch(fn, args, kwargs)
            return None

        def autotuned(tuner, *args, **kwargs):
            tuner.nargs = dict(zip(tuner.arg_names, args))
            configs = tuner.prune_configs(kwargs) if len(tuner.configs) > 1 else tuner.configs
            for cfg in configs:  # every config the tuner would try must compile
                tuner.fn.run(*args, **kwargs, **cfg.all_kwargs())
            tuner.nargs = None

        JITFunction.run = run
        autotuner.Autotuner.run = autotuned
        self._hook_cuda_builds()

    def compile_launch(self, fn, args, kwargs) -> None:
        import triton
        from triton import knobs
        from triton.compiler import ASTSource, make_backend
        from triton.runtime.jit import create_function_from_signature

        name = getattr(fn, "__name__", None) or fn.fn.__name__
        kwargs = dict(kwargs)
        kwargs["debug"] = kwargs.get("debug", getattr(fn, "debug", None)) or knobs.runtime.debug
        backend = make_backend(self.target)
        try:
            binder = create_function_from_signature(fn.signature, fn.params, backend)
            bound, specialization, options = binder(*args, **kwargs)
            options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
        except Exception as exc:  # wrong arguments for the kernel: what the launch would raise on a GPU
            key = (name, "bad launch", _one_line(str(exc)))
            self.results[key] = KernelResult(name, "(launch arguments)", False,
                                             _one_line(f"{type(exc).__name__}: {exc}"))
            return
        shown = ", ".join(f"{k}: {v}" for k, v in signature.items() if v != "constexpr")
        consts = ", ".join(f"{fn.params[p[0]].name}={v}" for p, v in constexprs.items() if len(p) == 1)
        described = f"({shown})" + (f" [{consts}]" if consts else "")
        key = (name, described)
        if key in self.results:
            return
        try:
            compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=self.target,
                                      options=options.__dict__)
        except Exception as exc:
            self.results[key] = KernelResult(name, described, False, _compiler_message(exc, fn))
            return
        shared = int(getattr(compiled.metadata, "shared", 0) or 0)
        limit = MAX_SHARED_BYTES.get(self.capability)
        if limit and shared > limit:
            self.results[key] = KernelResult(name, described, False, f"needs {shared} bytes of shared memory, more "
                                             f"than the {limit} a block may have on sm_{self.capability}", shared)
            return
        usage = ptxas_usage(compiled.asm.get("ptx"), self.capability)
        warps = int(getattr(compiled.metadata, "num_warps", 4) or 4)
        blocks = blocks_per_sm(usage[0], warps, shared, self.capability) if usage else None
        self.results[key] = KernelResult(name, described, True, "", shared, *(usage or (None, None)), blocks)

    def _hook_cuda_builds(self) -> None:
        """Record the sources of CUDA C++ builds, and hand back a module whose functions do nothing."""
        import types

        import torch.utils.cpp_extension as cpp_extension

        import ratchet.cuda_build as cuda_build

        capture = self

        def fake_module(name, functions):
            module = types.ModuleType(name)
            for f in functions or ():
                setattr(module, f, lambda *a, **k: None)
            return module

        def load_cached(name, cuda_src, cpp_src, functions, defines=None, extra_cuda_cflags=(), extra_cflags=(),
                        no_implicit_headers=False):
            if cuda_src is not None:
                capture.cuda_sources.setdefault(f"{name} {sorted((defines or {}).items())}", {
                    "name": name, "source": cuda_src, "defines": dict(defines or {}),
                    "flags": list(extra_cuda_cflags), "implicit_headers": not no_implicit_headers})
            return fake_module(name, functions)

        def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cuda_cflags=None,
                        no_implicit_headers=False, **_):
            sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
            if sources:
                capture.cuda_sources.setdefault(name, {"name": name, "source": "\n".join(sources), "defines": {},
                                                       "flags": list(extra_cuda_cflags or []),
                                                       "implicit_headers": not no_implicit_headers})
            names = [functions] if isinstance(functions, str) else list(functions or [])
            return fake_module(name, names)

        cuda_build.load_cached = load_cached
        cpp_extension.load_inline = load_inline

    def compile_cuda(self, notes: list[str]) -> None:
        if not self.cuda_sources:
            return
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            notes.append(f"{len(self.cuda_sources)} CUDA C++ build(s) not checked: no nvcc on this machine, so CUDA "
                         "C++ cannot be checked here")
            return
        import sysconfig

        import torch.utils.cpp_extension as cpp_extension

        includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
        arch = f"sm_{self.capability}a" if self.capability >= 90 else f"sm_{self.capability}"
        for key, build in self.cuda_sources.items():
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / f"{build['name']}.cu"
                head = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" \
                    if build["implicit_headers"] else ""
                src.write_text(head + build["source"])
                cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-O3", "-c", str(src), "-o", str(Path(tmp) / "out.o"),
                       *[f"-I{p}" for p in includes], *[f"-D{k}={v}" for k, v in build["defines"].items()],
                       *build["flags"]]
                done = subprocess.run(cmd, capture_output=True, text=True)
            errors = [line for line in (done.stderr + done.stdout).splitlines() if "error" in line]
            message = "" if done.returncode == 0 else _one_line(
                (errors[0] if errors else (done.stderr.strip().splitlines() or ["nvcc failed"])[-1]).replace(
                    str(src), f"{build['name']}.cu"))
            defines = "".join(f" -D{k}={v}" for k, v in build["defines"].items())
            self.results[("cuda", key)] = KernelResult(f"cuda:{build['name']}", f" (nvcc -arch={arch}{defines})",
                                                       done.returncode == 0, message)


CORNER_BYTES = 2**31  # the most a held-out corner's inputs may take in host memory (by the task's cost model)


def _held_out_corners(task, notes: list[str]) -> list[dict]:
    """The GPU held-out ranges' two corners (every range and list at its lowest, then at its highest),
    those not already public and whose bytes the cost model puts under CORNER_BYTES."""
    held = task.shape_set("cuda").held_out
    if held is None:
        return []
    public = [dict(s) for s in task.shape_set("cuda").public]
    corners = []
    for pick in (min, max):
        corner = {name: pick(spec) for name, spec in held.dims.items()}
        if corner in public or corner in corners:
            continue
        try:
            moved = max(task.cost(corner, dtype).bytes for dtype in task.dtypes)
        except Exception:  # noqa: BLE001 - a cost model that cannot price a corner: launch it anyway
            moved = 0
        if moved > CORNER_BYTES:
            notes.append(f"held-out corner {corner} not launched: its inputs would take {moved / 2**20:,.0f} MiB "
                         f"of host memory, over {CORNER_BYTES / 2**20:,.0f} MiB")
            continue
        corners.append(corner)
    return corners


def _main(argv: list[str]) -> int:
    import importlib.util

    import torch

    from ratchet.task import load_task

    task_spec, candidate_path, capability, config = argv[0], argv[1], int(argv[2]), json.loads(argv[3])
    shape_device = "cuda" if argv[4:5] == ["gpu"] else "cpu"
    chosen = json.loads(argv[5]) if len(argv) > 5 else []
    notes: list[str] = []
    error = None
    capture = _Capture(capability)
    capture.install()  # before the candidate is imported: triton.jit must give JITFunctions to hook
    try:
        task = load_task(task_spec)
        spec = importlib.util.spec_from_file_location("ratchet_checked_candidate", candidate_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = getattr(module, "kernel", None)
        if not callable(kernel):
            raise ValueError(f"{candidate_path} defines no kernel(...)")
    except Exception as exc:
        error = _one_line(f"cannot load: {type(exc).__name__}: {exc}")
        kernel = task = None
    if kernel is not None:
        shapes = list(task.shape_set(shape_device).public)
        if chosen:
            shapes = chosen
        elif shape_device == "cuda":
            shapes += _held_out_corners(task, notes)
        for dtype in task.dtypes:
            for shape in shapes:
                inputs = task.make_inputs(shape, dtype, "cpu", torch.Generator().manual_seed(0))
                before = len(capture.results) + len(capture.cuda_sources)
                try:
                    kernel(*inputs, **config)
                except Exception as exc:
                    # Outputs of launches that never ran are garbage: code after a launch may trip on them.
                    seen = len(capture.results) + len(capture.cuda_sources) > before
                    text = _one_line(f"{type(exc).__name__}: {exc}", 200)
                    if not seen and not capture.results and not capture.cuda_sources:
                        error = f"kernel(...) raised before any launch at {dict(shape)} {dtype}: {text}"
                        break
                    notes.append(f"kernel(...) raised after its launches at {dict(shape)} "
                                 f"{str(dtype).removeprefix('torch.')} (launches do not run here): {text}")
            if error:
                break
    capture.compile_cuda(notes)
    if error is None and not capture.results:
        where = "GPU" if shape_device == "cuda" else "CPU"
        notes.append(f"no Triton kernel or CUDA C++ build was launched on the {where} shapes: nothing to compile")
    report = CheckReport(f"sm_{capability}", list(capture.results.values()), notes, error)
    print(_MARK + json.dumps(report.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
