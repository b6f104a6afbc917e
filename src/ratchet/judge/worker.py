"""The worker: the only process in which candidate code runs. TRUSTED harness, untrusted guest.

Started by the judge with one socket (``--fd``) and nothing else worth finding: no reference outputs,
no seeds beyond the call at hand. It makes each call's inputs from the seed that comes with that call
(refilling the same buffers in place), runs the kernel, and answers with times and flags. Outputs go
back as plain descriptions (type name, dtype, shape, bytes), so the judge never unpickles an object
the candidate made. Run as ``python -m ratchet.judge.worker --fd N``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import threading
import traceback
from multiprocessing.connection import Connection

import torch

from ratchet.judge import guards, timing  # saves the primitives before any candidate import
from ratchet.judge.check import POISON_BYTE, as_tuple, fingerprinted, input_fingerprint, owns_storage
from ratchet.judge.process import CRASH_PREFIX
from ratchet.task import Task, load_task


POISON_COPIES = 4


class Harness:
    def __init__(self):
        self.task: Task | None = None
        self.kernel = None
        self.config: dict = {}
        self.device = "cpu"
        self.buffers: dict = {}  # (shape, dtype) -> input tuple, refilled in place every call
        self.last_outputs: tuple = ()
        self.last_inputs: tuple = ()
        self.flusher = None
        self.graphs: dict = {}
        self.census = None
        self.snapshot: tuple = ()
        self.output_sizes: set[int] = set()
        self.timed_batch: list[tuple] = []  # (outputs, snapshot) of each call of the last timed batch
        self.hold_cycles = 0

    # -- loading ---------------------------------------------------------------------------------
    def load(self, msg: dict) -> dict:
        self.device = msg["device"]
        torch.set_grad_enabled(False)
        if self.device == "cuda":
            torch.cuda.init()
            torch.cuda.set_per_process_memory_fraction(msg.get("memory_fraction", 0.4))
            self.flusher = timing.L2Flusher(torch.device("cuda"))
            # The judge's number, the same in both workers (calibrated here only when none is given).
            self.hold_cycles = int(msg.get("hold_cycles") or timing.cycles_for_us(timing.LAUNCH_HOLD_US))
        self.task = load_task(msg["task"])
        if msg.get("candidate") is None:
            self.kernel = self.task.reference  # the reference, timed in a worker of its own
        else:
            if self.task.forbidden:
                # torch.profiler (the first call's check of forbidden ops, only for a candidate of a task
                # that forbids some) imports torch._dynamo on first use: ~1.2 s of its module code inside
                # the call, which the heartbeat would take for a compile and so let a hang right after it
                # run on as one. Imported here, before any call, it is not in a call at all; a worker that
                # never profiles (the reference's, or any of a task without forbidden ops) skips its
                # 1.8 s (CPU, 2026-12-02).
                importlib.import_module("torch._dynamo")  # not `import torch._dynamo`: that binds a local torch
            module = _import_candidate(msg["candidate"])
            if msg.get("kind") == "kernelbench":
                from ratchet.kernelbench import kernel_from_modelnew

                self.kernel = kernel_from_modelnew(module, self.task)
            else:
                self.kernel = getattr(module, "kernel", None)
            if not callable(self.kernel):
                return {"error": "missing_kernel", "detail": "the candidate defines no callable kernel(...)"}
        self.config = dict(msg.get("config") or {})
        self.census = guards.Census()
        return {"ok": True, "pid": os.getpid()}

    # -- one call --------------------------------------------------------------------------------
    def inputs_for(self, shape: dict, dtype: torch.dtype, seed: int) -> tuple:
        """Fresh inputs from ``seed``, written into the same buffers as the last call of this shape."""
        generator = torch.Generator(device=self.device).manual_seed(seed)
        fresh = self.task.make_inputs(shape, dtype, self.device, generator)
        key = (tuple(sorted(shape.items())), str(dtype))
        old = self.buffers.get(key)
        if old is not None and _same_layout(old, fresh):
            for dst, src in zip(old, fresh):
                if isinstance(dst, torch.Tensor):
                    dst.copy_(src)
            merged = tuple(d if isinstance(d, torch.Tensor) else s for d, s in zip(old, fresh))
        else:
            merged = fresh
        self.buffers = {key: merged}  # one shape at a time: free the previous shape's memory
        return merged

    def call(self, msg: dict) -> dict:
        # Host time of each part of the call (host_us in the reply): where a timed call's wall time goes.
        marks = [timing.perf_counter_ns()]
        dtype = getattr(torch, msg["dtype"])
        inputs = self.inputs_for(msg["shape"], dtype, msg["seed"])
        self.last_inputs = inputs
        self.last_outputs = self.snapshot = ()
        guarded = msg.get("guards", True)  # off only to measure what the guards cost (benchmarks/)
        if msg.get("poison") and guarded:
            self._poison(inputs)
        marks.append(timing.perf_counter_ns())
        cuda = self.device == "cuda"
        if cuda and msg.get("flush", True):
            self.flusher()
        # The CPU generator and this device's: torch.manual_seed also walks every other backend, ~70-110 us
        # per call on the CPU (2026-11-30), a share of each timed call's host time.
        torch.random.default_generator.manual_seed(msg["rng_seed"])
        if cuda:
            torch.cuda.manual_seed(msg["rng_seed"])
        self.census.before()
        graph = self.graphs.get(msg.get("graph_key")) if msg.get("mode") == "graph" else None
        ops = None
        if msg.get("profile") and self.task.forbidden and guarded:
            marks.append(timing.perf_counter_ns())
            outs, ops = self._profiled(inputs)  # its "launch" part holds the profiler's own cost
            marks.append(timing.perf_counter_ns())
            timer = None
        else:
            marks.append(timing.perf_counter_ns())
            if cuda:  # the launch below is queued before the GPU reaches the start event
                self.gpu_hold(msg.get("hold_scale", 1))
            queued = timing.perf_counter_ns()
            timer = timing.Timer(self.device)
            if graph is not None:
                graph[0].replay()
                outs = graph[1]
            else:
                outs = self.kernel(*inputs, **self.config)
            timer.stop()
            marks.append(timing.perf_counter_ns())
            launch_us = (marks[-1] - queued) / 1000.0
        outs = as_tuple(outs)
        # Deferred work: what the caller could read right at return (copied on the current stream,
        # before any device-wide sync) must equal what is there once every stream and thread is done;
        # fetch() compares again, so a thread that writes later still shows.
        self.snapshot = tuple(o.clone() if type(o) is torch.Tensor else o for o in outs) if guarded else outs
        if cuda:
            timing.synchronize()
        result = timer.read() if timer else {"us": None}
        if timer and cuda:
            result["launch_us"] = launch_us  # checked against the hold by the judge (timing.launch_exposed)
        self.last_outputs = outs
        marks.append(timing.perf_counter_ns())
        if not guarded:
            marks.append(marks[-1])
            return {**result, "deferred": False, "flags": [], "ops": ops, **_host_us(marks)}
        self.census.settle()
        flags = self.census.after()
        deferred = not _all_equal(self.snapshot, outs)
        flags = flags + guards.tampered_primitives() + guards.precision_flags_changed()
        marks.append(timing.perf_counter_ns())
        return {**result, "deferred": deferred, "flags": flags, "ops": ops, **_host_us(marks)}

    def gpu_hold(self, scale: float = 1):
        """Keep the GPU busy while the CPU launches the kernel, so its time excludes launch overhead."""
        torch.cuda._sleep(int(self.hold_cycles * max(1, min(scale, timing.MAX_HOLD_SCALE))))

    def _profiled(self, inputs: tuple):
        """One call under torch.profiler: the ATen ops that really ran, on every thread.

        Host-side activity only: forbidden calls are named as ATen ops, which the dispatcher records on
        the host whatever the device. Adding CUDA activity (CUPTI) named no more of them and cost 4.9 s
        per evaluation on the H200 to start (docs/NOTES.md, 2026-11-30)."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        try:
            from torch._C._profiler import _ExperimentalConfig

            extra = {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
        except (ImportError, TypeError):  # older torch: the calling thread only (docs/judge.md)
            extra = {}
        with profile(activities=activities, **extra) as prof:
            self.census.before()  # threads the profiler starts are its own, not the kernel's
            outs = self.kernel(*inputs, **self.config)
            if self.device == "cuda":
                timing.synchronize()
        return outs, sorted({evt.name for evt in prof.events()})

    def capture(self, msg: dict) -> dict:
        """Capture the kernel into a CUDA graph on the current buffers; later calls replay it."""
        dtype = getattr(torch, msg["dtype"])
        inputs = self.inputs_for(msg["shape"], dtype, msg["seed"])
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.kernel(*inputs, **self.config)  # warm-up on a side stream, as capture requires
            torch.cuda.current_stream().wait_stream(stream)
            timing.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = as_tuple(self.kernel(*inputs, **self.config))
            timing.synchronize()
        except Exception as exc:  # not capturable: a fact to report, not a verdict
            torch.cuda.synchronize()
            return {"captured": False, "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        self.graphs = {msg["graph_key"]: (g, outs)}
        return {"captured": True}

    def _poison(self, inputs: tuple):
        """Fill free memory with 0xFF so an output that is allocated but never written shows it.

        Allocators hand back a freed block of the same size first (the caching allocator's best fit,
        malloc's bins), so the poison is freed in blocks the size of each input and of the last
        outputs: an output the size of any of them lands on poison.
        """
        sizes = {t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)}
        sizes |= self.output_sizes
        if self.device == "cuda":
            torch.cuda.empty_cache()
        else:
            guards.keep_freed_memory_in_heap()
        junk, spacers = [], []
        for n in sorted(sizes):
            for _ in range(POISON_COPIES):
                junk.append(torch.empty(n, dtype=torch.uint8, device=self.device).fill_(POISON_BYTE))
                # A small live block between poisoned ones keeps malloc from merging them into one
                # free chunk that a later allocation of another size would split up.
                spacers.append(torch.empty(64, dtype=torch.uint8, device=self.device))
        junk.append(torch.empty(1 << 20, dtype=torch.uint8, device=self.device).fill_(POISON_BYTE))
        del junk
        self.spacers = spacers  # freed at the next poisoning, after the kernel ran

    def fetch(self, msg: dict) -> dict:
        if self.device == "cuda":
            timing.synchronize()
        index = msg.get("index")
        if index is not None and index < len(self.timed_batch) - 1:
            # An earlier call of the last timed batch: what the caller saw at its return (its snapshot) is
            # judged. The later-write comparison below is for the last call only: a kernel may reuse one
            # output buffer across calls, and its own checks compared that call's snapshot once already.
            outputs, snapshot = self.timed_batch[index]
            outs = describe_outputs(outputs, self.last_inputs, msg.get("sample"), snapshot)
            return {"outputs": outs, "inputs_after": None}
        # Outputs that changed since the kernel returned: work still running after return (a thread
        # started at import writes late). The caller saw the snapshot, so the snapshot is judged.
        if not _all_equal(self.snapshot, self.last_outputs):
            return {"error": "deferred_write", "detail": "an output changed after the kernel returned"}
        self.output_sizes = {o.numel() * o.element_size() for o in self.snapshot if type(o) is torch.Tensor}
        outs = describe_outputs(self.last_outputs, self.last_inputs, msg.get("sample"), self.snapshot)
        ins = [describe_input(t, msg.get("fingerprint_seed")) if isinstance(t, torch.Tensor) else None
               for t in self.last_inputs] if msg.get("inputs") else None
        return {"outputs": outs, "inputs_after": ins}


def describe_tensor(t: torch.Tensor) -> dict:
    data = t.detach().contiguous().cpu()
    return {"dtype": str(data.dtype), "shape": list(data.shape), "data_shape": list(data.shape), "data": data.reshape(-1).view(torch.uint8).numpy().tobytes()
            if data.numel() else b""}


def describe_input(t: torch.Tensor, fingerprint_seed: int | None) -> dict:
    """An input after the call: its bytes, or for a large one its keyed fingerprint (check.py)."""
    if fingerprint_seed is None or not fingerprinted(t):
        return describe_tensor(t)
    return {"shape": list(t.shape), "fingerprint": input_fingerprint(t, fingerprint_seed)}


def sample_indices(numel: int, sample: dict) -> torch.Tensor:
    """The flat indices the judge asked to see; the judge draws the same ones from the same seed."""
    generator = torch.Generator().manual_seed(sample["seed"])
    return torch.randint(0, numel, (min(sample["count"], numel),), generator=generator)


def describe_outputs(outs: tuple, inputs: tuple, sample: dict | None = None, values: tuple | None = None) -> list[dict]:
    """Plain facts about each output. Subclasses are named, never touched: touching runs their code.

    Type, density and aliasing are read from ``outs`` as the kernel returned them; the values from
    ``values`` (the snapshot taken at return) where given. With ``sample`` only the elements at the
    judge's random indices travel (timed calls of large shapes), chosen after the call returned.
    """
    values = values if values is not None else outs
    descs = []
    storages = {}
    for t in inputs:
        if type(t) is torch.Tensor:
            storages[t.untyped_storage().data_ptr()] = "an input"
    for i, o in enumerate(outs):
        kind = type(o)
        name = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "torch" else f"torch.{kind.__qualname__}"
        if kind is not torch.Tensor:
            descs.append({"type": name, "is_tensor": isinstance(o, torch.Tensor)})
            continue
        dense = owns_storage(o)  # before this function holds a reference to its storage (check.py)
        storage = o.untyped_storage()
        desc = {"type": "torch.Tensor", "dense": dense, "device": str(o.device),
                "aliases": storages.get(storage.data_ptr()) if o.numel() else None}
        storages[storage.data_ptr()] = f"output {i}"
        value = values[i]
        if sample is not None and o.numel():
            picked = value.detach().flatten()[sample_indices(value.numel(), sample).to(value.device)]
            desc.update(describe_tensor(picked), shape=list(o.shape), sampled=True)
        else:
            desc.update(describe_tensor(value))
        descs.append(desc)
    return descs


def _same_layout(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype)
        or (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor))
        for x, y in zip(a, b)
    )


def _all_equal(snapshot: tuple, outs: tuple) -> bool:
    return len(snapshot) == len(outs) and all(
        s is o or (type(s) is torch.Tensor and type(o) is torch.Tensor and _bitwise_equal(s, o))
        for s, o in zip(snapshot, outs))


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    # reshape(-1): a 0-dim tensor cannot be viewed as bytes of another size (a module's scalar buffer)
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _import_candidate(path: str):
    name = "ratchet_candidate"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, innermost last."""
    seen = []
    while exc is not None and exc not in seen and len(seen) < 20:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def box_refusal(exc: BaseException) -> str | None:
    """What the box refused, where ``exc`` (or one it came from) is the box's EACCES/EPERM on a file
    write or a socket (judge/box.py), else None."""
    for e in _chain(exc):
        if isinstance(e, PermissionError):
            what = f" {e.filename!r}" if e.filename else " (a socket or signal)"
            return f"the box refused{what}: {type(e).__name__}: {e}"
    return None


def classify_exception(exc: BaseException, first_call: bool) -> tuple[str, str]:
    raw = f"{type(exc).__name__}: {exc}".strip()
    text = " ".join(raw.split())[:2000]
    names = {c.__name__ for c in type(exc).__mro__}
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in raw:
        return "out_of_memory", text
    refused = box_refusal(exc)
    if refused:
        return "box_violation", " ".join(refused.split())[:2000]
    if names & {"CompilationError", "CompileTimeAssertionFailure", "BuildExtensionError"} or (
        isinstance(exc, RuntimeError) and "Error building extension" in str(exc)):
        # torch's build failure is mostly compiler command lines, each printed twice (nvcc's alone can
        # fill the 2000 characters): keep its headline and the compiler's own "error:" lines.
        head, *rest = raw.splitlines()
        errors = [" ".join(line.split()) for line in rest if "error:" in line]
        if "Error building extension" in head and errors:
            text = " | ".join([head.split(": [")[0], *errors])[:2000]
        return "compile_error", text
    if isinstance(exc, TypeError) and "argument" in str(exc) and first_call:
        return "bad_signature", text
    return ("kernel_exception" if first_call else "shape_unsupported"), _in_candidate(exc) + text


def _in_candidate(exc: BaseException) -> str:
    """"FILE:LINE in FUNCTION: " of the innermost frame in the candidate's own file, so the user sees where
    their kernel raised; "" when no frame of the traceback is in it."""
    path = getattr(sys.modules.get("ratchet_candidate"), "__file__", None)
    if not path:
        return ""
    # Down the chain of causes too: Triton's interpreter raises its own error from the launch line, with the
    # kernel body's failing line only in the error it wraps.
    own, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        own += [(frame.f_code.co_name, line) for frame, line in traceback.walk_tb(exc.__traceback__)
                if os.path.abspath(frame.f_code.co_filename) == os.path.abspath(path)]
        exc = exc.__cause__ or exc.__context__
    return f"{path}:{own[-1][1]} in {own[-1][0]}: " if own else ""


def serve(conn: Connection, heartbeat: "Heartbeat | None" = None):
    harness = Harness()
    calls = 0
    # Bound before any candidate import: a kernel that replaces conn.send or Connection.send cannot
    # swallow the harness's replies, and harness_flags() names what it replaced.
    send, recv = conn.send, conn.recv
    integrity = guards.HarnessIntegrity([Harness, sys.modules[__name__], guards, timing, Connection], conn)
    while True:
        try:
            msg = recv()
        except EOFError:
            return
        op, nonce = msg["op"], msg.get("nonce")
        if heartbeat is not None:
            heartbeat.arm(msg.get("beat", False))
        try:
            if op == "exit":
                return
            if op == "load":
                try:
                    reply = harness.load(msg)
                except Exception as exc:
                    code = "reference_error" if msg.get("candidate") is None else "import_error"
                    refused = box_refusal(exc) if code == "import_error" else None
                    if isinstance(exc, MemoryError) and code == "import_error":
                        code = "out_of_memory"
                    reply = {"error": "box_violation" if refused else code, "detail": refused or _one_line(exc)}
            elif op == "call":
                (reply,), calls = _calls_in_bulk(harness, {**msg, "calls": [{}]}, calls, lambda result, sub: None)
            elif op == "batch":
                # Correctness calls in bulk (sampling tasks need thousands of draws): each call still
                # has its own seed, poisoned memory and checks; outputs come back with the replies.
                def with_outputs(result, sub):
                    started = timing.perf_counter_ns()
                    result.update(harness.fetch({"inputs": True, "fingerprint_seed": sub.get("fingerprint_seed")}))
                    if "host_us" in result:  # copying and describing what the judge checks
                        result["host_us"]["fetch"] = (timing.perf_counter_ns() - started) / 1000.0

                results, calls = _calls_in_bulk(harness, msg, calls, with_outputs)
                reply = {"results": results}
            elif op == "timed":
                # Timed calls in bulk: each one exactly a "call" (its own seed and inputs, flush, hold,
                # events, synchronize and checks), one pipe round trip for all (~250 us per call on the
                # H200 host, 2026-11-30). Their outputs stay until the next batch, for fetch(index).
                harness.timed_batch = []
                results, calls = _calls_in_bulk(harness, msg, calls, lambda result, sub: harness.timed_batch.append(
                    (harness.last_outputs, harness.snapshot)))
                reply = {"results": results}
            elif op == "capture":
                reply = harness.capture(msg)
            elif op == "fetch":
                reply = harness.fetch(msg)
            else:
                reply = {"error": "worker_error", "detail": f"unknown op {op}"}
        except Exception as exc:  # a harness bug: report it rather than hang the judge
            if harness.device == "cuda":  # unless a kernel's fault surfaced here (a fetch's synchronize)
                _sync_or_die(_one_line(exc))
            reply = {"error": "worker_error", "detail": _one_line(exc) + " | " + traceback.format_exc(limit=3)}
        tampered = integrity.check()
        if tampered:
            reply = {"error": "harness_tampered", "detail": "; ".join(tampered)}
        reply["nonce"] = nonce
        if heartbeat is not None:
            heartbeat.arm(False)
        send(reply)


def _calls_in_bulk(harness: Harness, msg: dict, calls: int, after) -> tuple[list[dict], int]:
    """Each of ``msg["calls"]`` as one "call" (``after(result, sub)`` once it returned), up to the first
    error; returns the results and the worker's call count since start."""
    results = []
    for sub in msg["calls"]:
        first = calls == 0
        calls += 1
        try:
            result = harness.call(dict(msg, **sub, op="call"))
            after(result, sub)
        except Exception as exc:
            code, detail = classify_exception(exc, first or sub.get("first_of_task", msg.get("first_of_task", False)))
            result = {"error": code, "detail": detail}
            if harness.device == "cuda":
                _sync_or_die(detail)
        results.append(result)
        if "error" in result:
            break
    return results, calls


def _host_us(marks: list[int]) -> dict:
    """{"host_us": {part: us}} from a call's marks (timing.HOST_PARTS; under the profiler, "launch" is the
    profiled call); an unguarded call's "checks" is 0."""
    if len(marks) != len(timing.HOST_PARTS) + 1:
        return {}
    return {"host_us": {part: (b - a) / 1000.0 for part, a, b in zip(timing.HOST_PARTS, marks, marks[1:])}}


def _sync_or_die(detail: str = ""):
    """After a kernel raised on CUDA the context may be poisoned (illegal address): then exit, saying
    CUDA's own error line last (the judge takes it as the crash's detail)."""
    try:
        torch.cuda.synchronize()
    except Exception as exc:
        cuda_line = next((line for line in (detail, _one_line(exc)) if "CUDA" in line or "cuda" in line), detail)
        sys.stderr.write(f"\n{CRASH_PREFIX} {cuda_line or _one_line(exc)}\n")
        sys.stderr.flush()
        os._exit(3)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:2000]


# Where a call's Python stack says it is compiling: JIT frontends, builders, autotuners (docs/reliability.md).
COMPILER_FILES = ("/triton/compiler/", "/triton/backends/", "/triton/runtime/autotuner.py", "/triton/runtime/build.py",
                  "/torch/utils/cpp_extension.py", "/torch/_inductor/", "/torch/_dynamo/", "/cupy/cuda/compiler.py",
                  "/ratchet/cuda_build.py")
# Child processes that are compilers (ninja and what it runs, Triton's ptxas).
COMPILER_CHILDREN = {"ninja", "gcc", "g++", "cc", "c++", "cc1", "cc1plus", "clang", "clang++", "ld", "as", "collect2",
                     "nvcc", "cicc", "ptxas", "fatbinary", "nvlink", "cudafe++", "hipcc", "make", "cmake"}


class Heartbeat(threading.Thread):
    """Twice a second, while the judge waits on a call, one byte on a pipe: b"c" while the call is in a
    compiler (a frame of COMPILER_FILES on the main thread's stack, or a child named in COMPILER_CHILDREN),
    else b"r". The judge limits running time per call and compiling time per evaluation. Idle (blocked on
    an event) during timed batches: nothing wakes in the timed region."""

    PERIOD_S = 0.5

    def __init__(self, fd: int):
        super().__init__(name="ratchet-heartbeat", daemon=True)
        self.fd, self.main = fd, threading.main_thread().ident
        self.armed = threading.Event()

    def arm(self, on: bool):
        (self.armed.set if on else self.armed.clear)()

    def run(self):
        nap = threading.Event()  # never set: a sleep that a patched time.sleep cannot shorten
        while True:
            self.armed.wait()
            nap.wait(self.PERIOD_S)
            if not self.armed.is_set():
                continue
            try:
                os.write(self.fd, b"c" if self.compiling() else b"r")
            except OSError:  # a full pipe (the judge drains it while it waits) or a closed one
                pass

    def compiling(self) -> bool:
        frame = sys._current_frames().get(self.main)
        depth = 0
        while frame is not None and depth < 400:
            name = frame.f_code.co_filename
            # A compiler module being imported (its module-level code) is not a compile: a first call that
            # imports torch._dynamo lazily, then hangs holding the GIL, would otherwise be taken for one.
            if frame.f_code.co_name != "<module>" and any(marker in name for marker in COMPILER_FILES):
                return True
            frame, depth = frame.f_back, depth + 1
        return any(_comm(pid) in COMPILER_CHILDREN for pid in _children())


def _children() -> list[int]:
    pids = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return pids


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def main():
    parser = argparse.ArgumentParser(description="Ratchet judge worker (internal)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--beat", type=int, default=None)
    args = parser.parse_args()
    conn = Connection(args.fd)
    # The candidate's prints must not reach the judge's stdout (the JSON channel).
    sys.stdout = sys.stderr
    threading.excepthook = lambda args: None
    heartbeat = None
    if args.beat is not None:
        heartbeat = Heartbeat(args.beat)
        heartbeat.start()
    gc.collect()
    serve(conn, heartbeat)
    # Nothing of the worker outlives its evaluation, so skip the interpreter's teardown: with torch
    # loaded it took ~0.9 s per worker on the CPU, two per evaluation, all of it on the judge's wall time.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
