"""The byte floor of one decode step: the least time a workload's step can take on a device's memory.

A decode step must read every weight it uses once (the LM head whole, the embedding only for the batch's
tokens, a MoE layer only the experts its tokens were routed to) and every cached key and value once.
Divided by the measured copy bandwidth, that is a floor no kernel beats; a reference step time over the
floor is the most any stack of kernels could gain over that reference. Activations, the router's logits
and the attention scores are left out (all small at decode), so the floor is a little low: honest for
saying what cannot be reached, not for claiming what can.

Weights are counted from the workload itself (``ratchet.e2e.workloads.build``, parameters made on PyTorch's
meta device: nothing is allocated) and the cache from its ``cache_shapes``. Routed experts touched by B
tokens of top-k routing over E experts: E * (1 - (1 - k/E)^B) in expectation for uniform routing (each
token picks k distinct experts). That is an assumption, and for the deepseek workload too high: on the
H200 (2026-11-30, session 7, `ratchet profile deepseek --batch 32 --context 32768`) its two MoE layers'
grouped GEMMs took 5.90 ms, under the 6.7 ms this count's bytes need at the copy rate, so its random
router touches fewer experts; at the MoE the floor here is an upper bound, and reference / floor a
lower bound on what a stack could gain.

    python benchmarks/step_floor.py --workloads llama deepseek --contexts 8192 32768 --batch 32 \
        --copy-tbps 4.22 --e2e docs/measurements/2026-11-30-h200-session4/call{3,5}*/e2e/e2e_stack.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ratchet.e2e.workloads import build, config_for
from ratchet.e2e.workloads.config import WORKLOADS
from ratchet.e2e.workloads import core


@dataclass(frozen=True)
class StepFloor:
    workload: str
    batch: int
    context: int
    weight_bytes: float  # weights read by one step
    expert_bytes: float  # of those, routed experts (expected under uniform routing)
    cache_bytes: float  # keys and values read by one step

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.cache_bytes

    def floor_us(self, copy_tbps: float) -> float:
        return self.bytes / (copy_tbps * 1e12) * 1e6


@contextlib.contextmanager
def _meta_weights():
    """Workloads draw their weights through core.Init; here it makes meta tensors instead."""

    def normal(self, *shape, std, dtype=None):
        return nn.Parameter(torch.empty(shape, device="meta", dtype=dtype or self.dtype), requires_grad=False)

    saved = core.Init.__init__, core.Init.normal
    core.Init.__init__ = lambda self, seed, device, dtype: setattr(self, "dtype", dtype)
    core.Init.normal = normal
    try:
        yield
    finally:
        core.Init.__init__, core.Init.normal = saved


def expected_experts(n_experts: int, topk: int, tokens: int) -> float:
    """Distinct experts that ``tokens`` tokens touch when each picks ``topk`` of ``n_experts`` uniformly."""
    return n_experts * (1.0 - (1.0 - topk / n_experts) ** tokens)


def step_floor(workload: str, batch: int, context: int, size: str = "full") -> StepFloor:
    config = config_for(workload, size)
    with _meta_weights():
        model = build(workload, size, device="cpu")
    n_experts = getattr(config, "n_experts", 0)
    touched = expected_experts(n_experts, config.topk, batch) / n_experts if n_experts else 0.0
    weights = experts = 0.0
    for name, p in model.named_parameters():
        nbytes = p.numel() * p.element_size()
        if name == "embed":
            nbytes = batch * p.shape[1] * p.element_size()  # only the batch's token rows
        elif n_experts and name.rsplit(".", 1)[-1] in ("w_gate_up", "w_down") and p.dim() == 3:  # [E, ., .]
            nbytes *= touched
            experts += nbytes
        weights += nbytes
    cache = 0.0
    for shape, shared in model.cache_shapes(batch, context):
        per_tensor = torch.Size(shape).numel() * torch.empty((), dtype=config.dtype).element_size()
        cache += per_tensor * (1 if shared else 2)
    return StepFloor(workload, batch, context, weights, experts, cache)


def _measured(paths: list[Path]) -> dict:
    """(workload, context, batch) -> (reference us, stack us) from e2e_stack.json files (later ones win)."""
    out = {}
    rows = [row for path in paths for row in json.loads(path.read_text()).get("rows", [])]
    for row in rows:
        stack = row.get("stack") or {}
        ref, top = row.get("reference_us"), stack.get("final_us")
        if ref and top:
            out[(row["workload"], row["context"], row["batch"])] = (ref, top)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--contexts", nargs="+", type=int, default=[8192, 32768])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--size", default="full", choices=["full", "tiny"])
    parser.add_argument("--copy-tbps", type=float, required=True,
                        help="the device's measured copy bandwidth (ratchet hw prints it; H200: 4.22)")
    parser.add_argument("--e2e", type=Path, nargs="+", default=[],
                        help="e2e_stack.json files (benchmarks/e2e_stack.py) whose step times to compare")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    args = parser.parse_args()
    if min(args.contexts + args.batch) < 1:
        parser.error("--contexts and --batch must be positive")
    missing = [str(p) for p in args.e2e if not p.is_file()]
    if missing:
        parser.error(f"--e2e: no such file: {', '.join(missing)}")
    measured = _measured(args.e2e)
    lines = [f"Byte floor of one decode step at {args.copy_tbps:g} TB/s (`python benchmarks/step_floor.py "
             f"--copy-tbps {args.copy_tbps:g} ...`)", "",
             "| workload | context | batch | weights GB | of which experts GB | cache GB | floor us "
             "| reference us | stack us | reference / floor (most any stack can gain) | stack / floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.workloads:
        for context in args.contexts:
            for batch in args.batch:
                f = step_floor(name, batch, context, args.size)
                floor = f.floor_us(args.copy_tbps)
                ref, top = measured.get((name, context, batch), (None, None))
                cells = [f"{ref:.0f}" if ref else "–", f"{top:.0f}" if top else "–",
                         f"{ref / floor:.2f}x" if ref else "–", f"{top / floor:.2f}x" if top else "–"]
                lines.append(f"| {name} | {context} | {batch} | {f.weight_bytes / 1e9:.2f} | {f.expert_bytes / 1e9:.2f} "
                             f"| {f.cache_bytes / 1e9:.2f} | {floor:.0f} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
