"""Decode tokens/s of transformers models, four ways, in one run: a Qwen3-MoE-style and a Llama-3.1-8B-style
model (random weights from configs written here, full width, as many layers as fit), per batch x context:

1. ``transformers``: the model as transformers runs it (sdpa attention, its default experts), static
   cache, eager steps;
2. ``compiled``: transformers' fastest path for it: static cache, the decode step under torch.compile,
   captured in a CUDA graph;
3. ``ratchet``: the same, with a ``ratchet export`` package applied (``--export DIR``, the folder holding
   its pyproject.toml), so its kernels run inside the judged shape ranges (missing without --export);
4. ``floor``: the step's byte floor: the weights a step must read (every dense weight, and of an MoE
   layer's experts those its router picked in the row's first step, counted by a hook on the routers;
   ``min(E, B x top_k)`` where none could be counted) plus the KV cache up to the context, over the
   device's measured copy bandwidth.

Speed alone proves nothing: each row's notes also give how far the compiled and ratchet ways' logits of the
first step (from the same cache and tokens) are from transformers' eager ones (``*_logits_diff`` in the
JSON; compiled's own distance is the scale to read ratchet's against).

    python -m benchmarks.e2e_models --out out/e2e_models [--export out/pkg] [--batches 1 32] \\
        [--contexts 8192 32768] [--models qwen3_moe llama] [--layers N] [--row-timeout 900]
    python -m benchmarks.e2e_models --tiny --device cpu --contexts 64 --batches 1   # a smoke test

Each (model, batch, context) row runs in a child process under a time limit, so an OOM, a CUDA fault or
a compile that never returns ends only that row: it is printed as one line and the other rows go on. Each
model's first row gets twice the limit (``--first-row-timeout``): Inductor's cache is cold for it.
``<out>/e2e_models.md`` and ``.json`` are rewritten after every row, so a cut-short run keeps what it
measured. Step times: CUDA events around ``--steps`` replays (median of ``--repeats``); on a CPU
``perf_counter``, which says nothing about GPUs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

FULL_LAYERS = {"llama": 32, "qwen3_moe": 48}
WAYS = ("transformers", "compiled", "ratchet")


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["qwen3_moe", "llama"], choices=sorted(FULL_LAYERS))
    p.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    p.add_argument("--contexts", nargs="+", type=int, default=[8192, 32768])
    p.add_argument("--layers", type=int, help="layers per model (default: all the real model has, or as many as fit)")
    p.add_argument("--export", metavar="DIR", help="a 'ratchet export' package folder to apply for the ratchet rows")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="tiny configs (a CPU smoke test of this script)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--row-timeout", type=float, default=900.0)
    p.add_argument("--first-row-timeout", type=float, help="the limit of each model's first row (default: twice "
                   "--row-timeout): it compiles with Inductor's cache cold and fills it for the rows after it "
                   "(Llama's first row, batch 1 at 8192, ran out of 115 s on 2026-12-03 where later rows fit)")
    p.add_argument("--out", default="out/e2e_models")
    p.add_argument("--row", help=argparse.SUPPRESS)  # the child: model,batch,context
    return p.parse_args(argv)


# -- the child: one row ----------------------------------------------------------------------------------
def _layers_that_fit(family: str, batch: int, context: int, device: str, wanted: int | None, tiny: bool) -> int:
    import torch

    from ratchet.e2e.models import families

    full = FULL_LAYERS[family]
    if tiny:
        return wanted or 2
    if wanted:
        return wanted
    one = families.config(family, "full", n_layers=1)
    per_layer = _layer_weight_bytes(one) + _cache_bytes_per_layer(one, batch, context + 64)
    free = torch.cuda.mem_get_info()[0] if device == "cuda" else 0
    embeddings = 2 * one.vocab_size * one.hidden_size * 2
    fit = int((0.80 * free - embeddings - 4 * 2**30) // per_layer)
    return max(1, min(full, fit))


def _layer_weight_bytes(cfg) -> int:
    h, heads, kv, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    attn = h * (heads + 2 * kv) * d + heads * d * h
    experts = getattr(cfg, "num_experts", 0) or 0
    mlp = experts * 3 * h * cfg.moe_intermediate_size + experts * h if experts else 3 * h * cfg.intermediate_size
    return 2 * (attn + mlp)


def _read_weight_bytes(cfg, batch: int, touched: float | None = None) -> int:
    """What one decode step must read of one layer's weights: all but the experts no token reaches
    (``touched``: the distinct experts a layer's router picked, on average; by default as many as the
    batch's tokens could reach, which is more than random routing reaches at batch 32)."""
    h, heads, kv, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    attn = h * (heads + 2 * kv) * d + heads * d * h
    experts = getattr(cfg, "num_experts", 0) or 0
    if experts:
        if touched is None:
            touched = min(experts, batch * cfg.num_experts_per_tok)
        return int(2 * (attn + touched * 3 * h * cfg.moe_intermediate_size + experts * h))
    return 2 * (attn + 3 * h * cfg.intermediate_size)


def experts_touched(model, step, top_k: int) -> float | None:
    """The mean number of distinct experts the model's routers picked in one call of ``step``: a forward
    hook on every module whose output holds an integer tensor of ``top_k`` columns (a top-k router's
    expert ids, as transformers' MoE routers return them). None when no router was seen."""
    import torch

    counts: list[int] = []

    def count(_module, _inputs, output):
        for t in output if isinstance(output, tuple) else (output,):
            if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dim() == 2 and t.shape[-1] == top_k:
                counts.append(int(torch.unique(t).numel()))
                return

    hooks = [m.register_forward_hook(count) for m in model.modules() if getattr(m, "top_k", None) == top_k]
    try:
        step()
    finally:
        for hook in hooks:
            hook.remove()
    return sum(counts) / len(counts) if counts else None


def _cache_bytes_per_layer(cfg, batch: int, length: int) -> int:
    return 2 * 2 * batch * cfg.num_key_value_heads * length * cfg.head_dim


def _copy_tbps(device: str) -> float | None:
    import torch

    if device != "cuda":
        return None
    a = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000
    return 10 * 2 * a.numel() / seconds / 1e12  # read + write


def _time_steps(step, device: str, steps: int, repeats: int) -> float:
    import torch

    for _ in range(3):
        step()
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                step()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000 / steps)
        else:
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            samples.append((time.perf_counter() - t0) * 1e6 / steps)
    return statistics.median(samples)


def _row(args) -> dict:
    import torch

    from ratchet.e2e.models import families, wrap
    from ratchet.e2e.stack import compiled_decode_step
    from ratchet.e2e.step_timing import DecodeBench
    from ratchet.e2e.workloads import OpRegistry

    family, batch, context = args.row.split(",")
    batch, context = int(batch), int(context)
    device, size = args.device, "tiny" if args.tiny else "full"
    n_layers = _layers_that_fit(family, batch, context, device, args.layers, args.tiny)
    cfg = families.config(family, size, n_layers=n_layers)
    if getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None):
        # transformers' fastest experts path on a GPU (a dense model refuses the setting)
        cfg._experts_implementation = "grouped_mm" if device == "cuda" else "eager"
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    out = {"model": family, "batch": batch, "context": context, "layers": n_layers, "full_layers": FULL_LAYERS[family],
           "device": device, "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    decoder = wrap(hf, OpRegistry(), name=family, adapt=False)
    bench = DecodeBench(decoder, batch, context, slack=args.steps * (args.repeats + 4) + 8)
    graphs = device == "cuda"
    first_logits = {}  # each way's logits of the first step from the same state: what a speed-up must keep

    def measure(way, forward=None, graph=False):
        try:
            runner = bench.runner(cuda_graph=graph, forward=forward)
            out[f"{way}_us"] = _time_steps(runner.step, device, args.steps, args.repeats)
            bench.reset()
            first_logits[way] = runner.step().float().clone()
        except Exception as exc:  # one line per failure; the other ways still run
            out[f"{way}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        bench.reset()

    measure("transformers")
    top_k = getattr(cfg, "num_experts_per_tok", None)
    if top_k:  # which experts this row's tokens reach: the floor reads those, not every one they could
        out["experts_touched"] = experts_touched(hf, bench.runner(cuda_graph=False).step, top_k)
        bench.reset()
    compiled = compiled_decode_step(decoder, "default")
    measure("compiled", compiled, graphs)
    if args.export:
        from ratchet.e2e.exported import load_package

        adaptation = load_package(args.export).apply(hf)
        out["ratchet_swapped"] = adaptation.swapped
        torch._dynamo.reset()
        measure("ratchet", compiled_decode_step(decoder, "default"), graphs)
    else:
        out["ratchet_error"] = "no --export package given"
    for way in ("compiled", "ratchet"):
        if way in first_logits and "transformers" in first_logits:
            out[f"{way}_logits_diff"] = logits_diff(first_logits[way], first_logits["transformers"])
    tbps = _copy_tbps(device)
    if tbps:
        weights = (n_layers * _read_weight_bytes(cfg, batch, out.get("experts_touched"))
                   + 2 * cfg.vocab_size * cfg.hidden_size)
        cache = n_layers * _cache_bytes_per_layer(cfg, batch, context)
        out.update(copy_tbps=tbps, floor_us=(weights + cache) / (tbps * 1e12) * 1e6)
    return out


def logits_diff(got, reference) -> float:
    """The largest absolute difference of two steps' logits; inf where one is not finite and the other is
    (a kernel that overflows is not a speed-up, whatever its tokens/s)."""
    import torch

    if bool((torch.isfinite(got) != torch.isfinite(reference)).any()):
        return math.inf
    both = torch.isfinite(got) & torch.isfinite(reference)
    return float((got[both] - reference[both]).abs().max()) if bool(both.any()) else 0.0


# -- the parent ------------------------------------------------------------------------------------------
def _logits_note(row) -> str:
    """How far each fast way's first-step logits are from transformers' eager ones; compiled's own distance
    is the scale a kernel's is read against (both reorder floating-point sums)."""
    parts = [f"{way} {row[f'{way}_logits_diff']:.3g}" for way in ("compiled", "ratchet")
             if row.get(f"{way}_logits_diff") is not None]
    return f"logits vs transformers: {', '.join(parts)}" if parts else ""


def _tokens(batch, us):
    return batch * 1e6 / us if us else None


def _table(rows) -> str:
    lines = ["| model | layers | batch | context | transformers tok/s | compiled tok/s | ratchet tok/s | "
             "ratchet / compiled | floor tok/s | notes |", "|" + " --- |" * 10]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | - | {r['batch']} | {r['context']} | - | - | - | - | - | {r['error']} |")
            continue
        t = {w: _tokens(r["batch"], r.get(f"{w}_us")) for w in WAYS}
        floor = _tokens(r["batch"], r.get("floor_us"))
        ratio = t["ratchet"] / t["compiled"] if t["ratchet"] and t["compiled"] else None
        notes = "; ".join(n for n in [*(r.get(f"{w}_error") for w in WAYS), _logits_note(r)] if n)

        def f(v):
            return f"{v:.1f}" if v else "-"

        lines.append(f"| {r['model']} | {r['layers']}/{r['full_layers']} | {r['batch']} | {r['context']} | "
                     f"{f(t['transformers'])} | {f(t['compiled'])} | {f(t['ratchet'])} | "
                     f"{f'{ratio:.2f}x' if ratio else '-'} | {f(floor)} | {notes} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.row:
        print(json.dumps(_row(args)))
        return 0
    if args.device == "cuda" and not args.tiny:
        import torch

        if not torch.cuda.is_available():
            print("e2e_models: no CUDA device here (use --tiny --device cpu for a smoke test)", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for context in args.contexts:
        for family in args.models:
            for batch in args.batches:
                row = [sys.executable, __file__, "--row", f"{family},{batch},{context}", "--device", args.device,
                       "--steps", str(args.steps), "--repeats", str(args.repeats)]
                row += ["--tiny"] if args.tiny else []
                row += ["--layers", str(args.layers)] if args.layers else []
                row += ["--export", args.export] if args.export else []
                first = not any(r["model"] == family for r in rows)
                limit = (args.first_row_timeout or 2 * args.row_timeout) if first else args.row_timeout
                try:
                    proc = subprocess.run(row, capture_output=True, text=True, timeout=limit)
                    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
                    if proc.returncode != 0 or not last.startswith("{"):
                        err = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
                        result = {"model": family, "batch": batch, "context": context,
                                  "error": f"exit {proc.returncode}: {err}"}
                    else:
                        result = json.loads(last)
                except subprocess.TimeoutExpired:
                    result = {"model": family, "batch": batch, "context": context,
                              "error": f"timed out after {limit:.0f} s"}
                rows.append(result)
                if "error" in result:
                    print(f"e2e_models: {family} B={batch} L={context}: {result['error']}", file=sys.stderr)
                table = _table(rows)
                header = (f"Decode tokens/s, {rows[0].get('device_name', args.device)}, started {started} "
                          f"(`python -m benchmarks.e2e_models {' '.join(argv or sys.argv[1:])}`)\n\n")
                (out / "e2e_models.md").write_text(header + table + "\n")
                (out / "e2e_models.json").write_text(json.dumps({"started": started, "rows": rows}, indent=1))
                print(table.splitlines()[-1], flush=True)
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
