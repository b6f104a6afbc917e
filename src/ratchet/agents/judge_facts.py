"""What an agent must know about how the judge measures and what its cheaper checks prove, written once
for ``program.md`` and the brief (and so the LLM proposer's prompt). The facts are the judge's own
(``ratchet.judge.timing``, ``ratchet.judge.evaluation``, ``ratchet.run.keep``; docs/judge.md); the
numbers are imported from there where the code names them, so the text cannot drift from the code.
"""

from __future__ import annotations


def timing_protocol(device: str) -> list[str]:
    """Markdown bullets: how a candidate is timed on ``device`` and what "speedup" and "kept" mean."""
    from ratchet.judge.timing import CPU_POLICY, GPU_POLICY, LAUNCH_HOLD_US
    from ratchet.run.keep import KeepPolicy

    keep, policy = KeepPolicy(), (CPU_POLICY if device == "cpu" else GPU_POLICY)
    common = [
        f"- The reference runs in a worker of its own; batches of {policy.batch} calls of each side alternate "
        "in random order in the same evaluation (never a stored number), until the relative standard error "
        f"of both medians is under {policy.target_rse:.1%} (at least {policy.min_reps} calls) or "
        f"{policy.cap_s:g} s per shape and side is spent.",
        "- Per shape and dtype: median, IQR and count of your calls; the shape's speedup is the reference's "
        "median over yours. **Speedup** is the weighted geometric mean of those over the public shapes and "
        "dtypes, with the task's shape weights: one shape made very fast cannot carry the rest.",
        "- A random eighth of the timed calls (at least one) have their outputs checked too; held-out shapes "
        "are checked for correctness, not timed.",
        f"- **Kept** means: it passed, its weighted geometric-mean gain over the run's best is above the "
        f"best's measured noise floor (at least {keep.min_noise:.0%}) with a bootstrap significance of "
        f"{keep.alpha:g}, and no shape is slower than the best beyond that shape's noise; within noise "
        "either way, the simpler file (fewer code lines) wins. A pass that is not kept is still recorded.",
    ]
    if device == "cpu":
        return ["- CPU: `time.perf_counter_ns` around each call in a worker with one OpenMP thread. CPU times "
                "say nothing about GPU speed."] + common
    return [
        "- Warm-up first (compile, autotune, allocator), kept out of the numbers; the first call has a "
        "longer time limit than later ones.",
        "- Before **each** timed call: the inputs are refilled with fresh data, the L2 is flushed (a buffer "
        "twice the L2 written, another as large read) and persisting L2 lines are reset, so every call "
        "reads from DRAM: data reuse across calls is not free here.",
        f"- The launch hold: the GPU is kept busy for {LAUNCH_HOLD_US:g} µs (`torch.cuda._sleep`) before the "
        "start event, "
        "so your host-side launch cost (Python, the Triton launcher, argument checks) is queued behind it "
        "and not timed while it fits; CUDA events bracket the call, then a device-wide synchronize (work "
        "on other streams is timed too).",
        f"- CUDA graphs: where the reference's eager median is under {policy.graph_below_us:g} µs (decode "
        "sizes), "
        "both sides are captured into a CUDA graph and timed on replay, and that mode gives the shape's "
        "speedup (the row's `mode` says `graph`). Your kernel must be capturable: no host "
        "synchronization (`.item()`, `.cpu()`, `.tolist()`), no decisions on tensor values on the host; "
        "scalar arguments are replayed as captured. Launch overhead hardly counts in this mode; the "
        "kernel's own device time does. Above that, the shape is timed eager (each launch behind the hold "
        "above), even where the model's own decode step replays a CUDA graph.",
        *common,
    ]


def correctness_only_check(spec: str, rid_note: str = "") -> list[str]:
    """Markdown bullets: ``--no-timing`` on the CPU, and what it does and does not prove."""
    return [
        f"- `TRITON_INTERPRET=1 ratchet eval {spec} FILE --device cpu --no-timing --json` runs the judge's "
        "correctness phase only, on the task's CPU shape set: fresh random inputs, held-out shapes (odd "
        "sizes), every dtype, the output and input guards. Seconds for plain torch; a Triton file runs "
        "each program in Python under the interpreter, a minute or more for a module of a model on two "
        "busy cores (81 s for a coding agent's MoE block, 2026-12-07): still far less than timing on a "
        f"CPU, which says nothing about a GPU anyway. Not recorded in a run{rid_note}. `--shape JSON` "
        "(repeatable) checks one shape alone, every dtype: a held-out shape a verdict failed at (a "
        "failed verdict's `shapes` end with it, `correct: false`, after those found right before it).",
        "- It proves the math, the dtypes and the handling of odd sizes on small shapes. It does NOT prove "
        "that the file compiles for the GPU (the interpreter accepts code that Triton's compiler refuses, "
        "e.g. a tensor shaped differently in two branches of an `if`: run `ratchet check`), that it is "
        "correct at the GPU's shapes, races or memory-ordering bugs (the interpreter runs programs one "
        "after another), CUDA-graph capture, or anything about speed. Nor that compiled code computes what "
        "the interpreter did (an agent's MoE kernel, right at 18 tokens there, was 97% wrong on an H100, "
        "2026-12-07).",
        "- Because the interpreter runs the programs of a launch one after another, in order, a program "
        "that waits for another one (a spin on a flag or a counter another program sets, a grid-wide "
        "barrier) hangs under it: such a path cannot be checked on the CPU at all, only compiled by "
        "`ratchet check`; keep a path without the wait for the interpreter and say which one the GPU runs. "
        "Some operations are missing from the interpreter (an fp32 `atomic_xchg`, for one): its error then "
        "names the launch line in your Python, not the line in the kernel.",
        "- Some arithmetic is wrong under the interpreter and right on the GPU: a `tl.dot` of bfloat16 "
        "operands returns garbage there (off by 2e10 on a 16x16 product, Triton 3.9, 2026-12-07; float16 "
        "and float32 are exact), and an fp32 -> fp8 cast can be off by a factor of 2. A file whose bf16 "
        "`tl.dot` fails only the CPU check is not wrong; check its math with float32 inputs (every dtype "
        "the task judges is checked) and let `ratchet check` prove the bf16 path compiles.",
    ]


def compile_check(spec: str, arch: str = "sm_90") -> str:
    return (f"`ratchet check {spec} FILE --arch {arch}` compiles every `@triton.jit` kernel the file launches "
            "(on the CPU shapes, with the types and constexprs of its real launches) through Triton's compiler "
            f"to PTX and `ptxas` for {arch}, without a GPU; CUDA C++ with `nvcc` where it is installed. A file "
            "that fails here would fail on the GPU: fix it before spending GPU time. Add `--shapes gpu` to "
            "launch the GPU's shapes instead, and the corners of its held-out ranges (inputs in host memory, "
            "launches never run; so `x.is_cuda` is False there, and a branch your file takes only on a CUDA "
            "device is never compiled: choose GPU paths by size or a constant, not by the device): a path or a "
            "constexpr your code picks only at GPU sizes (a wider block, another kernel above some T) is "
            "compiled only then, and the CPU correctness check never runs it; `--shape JSON` (repeatable) "
            "launches chosen shapes of the set alone, to compile only the path one size takes while you tune "
            "it. Each compiled kernel's line "
            "gives ptxas's registers per thread, bytes spilled to local memory and the blocks an SM holds "
            "at once (by registers, shared memory and threads): spills or one block per SM are worth a "
            "smaller tile or fewer warps. They come from this machine's Triton, which may not be the judge's "
            "(the brief's hardware section names the judge's): another version may allocate otherwise.")


def cuda_cpp_rule() -> str:
    return ("CUDA C++: build it inside `kernel` with `ratchet.cuda_build.load_cached` (`load_cached(name, "
            "cuda_src, cpp_src, functions, defines=...)`), which calls `torch.utils.cpp_extension.load_inline` once per source and "
            "`-D` defines and reuses the build in later calls and evaluations (never build at import). Each "
            "SPACE value passed as a define is a build of its own, compiled in the config's first call "
            "(17-27 s on the H200's host with other evaluations running); pass what can be a runtime "
            "argument (block size, a flag) as one.")


def gpu_arch(device_name: str | None) -> str:
    """The ``sm_XY`` target of a GPU by its sheet's compute capability; Hopper's sm_90 when unknown."""
    from ratchet.hardware.sheets import find_sheet

    sheet = find_sheet(device_name)
    return f"sm_{sheet.compute_capability.replace('.', '')}" if sheet else "sm_90"
