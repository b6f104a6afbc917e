"""The program ncu profiles (``ratchet.diagnose.ncu``): one call of a candidate on one input set, on the GPU.

Run as ``python -m ratchet.diagnose.ncu_target --task T --candidate C --kind ratchet --config JSON --shape JSON
--dtype NAME``. It imports the candidate as the judge's worker does (a module from its file; a
KernelBench ``ModelNew`` through ``ratchet.kernelbench``), makes inputs with the task's ``make_inputs``,
calls the kernel once to warm up (compiles, autotuning, allocator), then once more between
``cudaProfilerStart`` and ``cudaProfilerStop``: with ``ncu --profile-from-start off`` only that call's
kernels are profiled. The candidate runs here untrusted as in any worker; nothing this process says
reaches a verdict. A failure prints one ``ratchet-ncu-target: error: ...`` line and exits 3.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import secrets
import sys

EXIT_ERROR = 3


def _import_candidate(path: str):
    spec = importlib.util.spec_from_file_location("ratchet_candidate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run(task_spec: str, candidate: str, kind: str, config: dict, shape: dict, dtype_name: str) -> int:
    import torch

    from ratchet.task import load_task

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible")
    torch.set_grad_enabled(False)
    task = load_task(task_spec)
    module = _import_candidate(candidate)
    if kind == "kernelbench":
        from ratchet.kernelbench import kernel_from_modelnew

        kernel = kernel_from_modelnew(module, task)
    else:
        kernel = getattr(module, "kernel", None)
    if not callable(kernel):
        raise RuntimeError("the candidate defines no callable kernel(...)")
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device="cuda").manual_seed(secrets.randbits(63))
    inputs = task.make_inputs(shape, dtype, "cuda", generator)
    kernel(*inputs, **config)  # warm-up: compiles and autotuning stay out of the profile
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        with torch.cuda.nvtx.range("ratchet_measured_call"):  # names the call in ncu's and nsys's views
            kernel(*inputs, **config)
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ratchet.diagnose.ncu_target")
    parser.add_argument("--task", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--kind", default="ratchet", choices=["ratchet", "kernelbench"])
    parser.add_argument("--config", default="{}")
    parser.add_argument("--shape", required=True)
    parser.add_argument("--dtype", required=True)
    args = parser.parse_args(argv)
    try:
        return run(args.task, args.candidate, args.kind, json.loads(args.config), json.loads(args.shape), args.dtype)
    except BaseException as exc:  # the candidate may raise anything, SystemExit included
        detail = " ".join(str(exc).split())[:300]
        print(f"ratchet-ncu-target: error: {type(exc).__name__}: {detail}", file=sys.stderr, flush=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
