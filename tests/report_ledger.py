"""A ledger of made-up but well-formed attempts for the report and dashboard tests, written through the
ledger's own API (``record_attempt``, ``set_best``), as a run writes it.

Outcomes cycle through every kind the report colours: kept, passed, raced (a keep_reason in the verdict's
extra), failed by several reasons, error. Nothing here is a measurement; the tests compare the figures
with these rows.
"""

from __future__ import annotations

import random

from ratchet.run.ledger import Ledger

SPACE = {"BLOCK": [128, 256, 512, 1024], "num_warps": [2, 4, 8]}
SHAPES = [{"T": 16, "H": 4096}, {"T": 1024, "H": 4096}, {"T": 4096, "H": 8192}]
FAIL_CODES = ("wrong_output", "timed_output_wrong", "beyond_roofline", "input_mutated")
ERROR_CODES = ("compile_error", "timeout")
CEILINGS = {"copy_tbps": 4.2, "matmul_tflops": 700.0}


def shape_rows(speedup: float) -> list[dict]:
    rows = []
    for i, shape in enumerate(SHAPES):
        nbytes = 4 * shape["T"] * shape["H"]
        ref = max(10.0, 15 * nbytes / (CEILINGS["copy_tbps"] * 1e6))  # the eager reference: far from the floor
        med = ref / (speedup * (0.9 + 0.1 * i))
        rows.append({"shape": shape, "dtype": "bf16", "held_out": False, "correct": True, "mode": "eager",
                     "median_us": med, "iqr_us": med * 0.02, "reps": 50, "ref_median_us": ref,
                     "speedup": ref / med, "floor_us": nbytes / (CEILINGS["copy_tbps"] * 1e6),
                     "achieved_tbps": nbytes / (med * 1e6),
                     "achieved_tflops": 5 * shape["T"] * shape["H"] / (med * 1e6),
                     "roofline_fraction": nbytes / (CEILINGS["copy_tbps"] * 1e6) / med, "weight": 1.0,
                     "times_us": [med * (1 + 0.01 * k) for k in range(-2, 3)],
                     "ref_times_us": [ref * (1 + 0.01 * k) for k in range(-2, 3)]})
    return rows


def make_run(ledger: Ledger, attempts: int, seed: int = 0, task: str = "rmsnorm") -> str:
    """A run of ``attempts`` attempts; returns its id."""
    rng = random.Random(seed)
    run_id = ledger.create_run(task, f"/tasks/{task}/task.py", "cuda", "NVIDIA H200", "tune", goal_speedup=3.0,
                               budget_attempts=attempts)
    idea = ledger.add_idea(task, "one program per row, <b>vectorised</b> loads")
    best_id = None
    for i in range(attempts):
        attempt_id, kept = add_attempt(ledger, run_id, i, rng, idea, best_id)
        best_id = attempt_id if kept else best_id  # the tuner's next proposals descend from the best
    return run_id


def add_attempt(ledger: Ledger, run_id: str, i: int, rng: random.Random, idea: int | None = None,
                parent: int | None = None) -> tuple[int, bool]:
    """One attempt; every fifth passes (one in three of those kept, one raced), the rest fail or error."""
    config = {"BLOCK": SPACE["BLOCK"][i % 4], "num_warps": SPACE["num_warps"][(i // 4) % 3]}
    kind = i % 10
    verdict: dict = {"reasons": [], "judge_wall_s": 1.0 + rng.random(), "ceilings": CEILINGS}
    if kind in (0, 5):
        speedup = 1.0 + 0.01 * i + rng.random() * 0.1
        verdict.update(verdict="pass", speedup=speedup, shapes=shape_rows(speedup))
        if kind == 5 and i % 20 == 5:
            verdict["keep_reason"] = "raced: another attempt of the same batch won"
    elif kind == 9:
        code = ERROR_CODES[(i // 10) % 2]
        verdict.update(verdict="error", reasons=[{"code": code, "detail": f"{code} at attempt {i}"}], shapes=[])
    else:
        code = FAIL_CODES[(i + kind) % len(FAIL_CODES)]
        verdict.update(verdict="fail", reasons=[{"code": code, "detail": f"<script>alert({i})</script>"},
                                                {"code": "nan_inf", "detail": "second reason"}], shapes=[])
    source = f"# candidate {i}\ndef kernel(x, weight, eps, BLOCK=256, num_warps=4):\n    return x\n"
    attempt_id = ledger.record_attempt(run_id, f"/seeds/triton_{i % 3}.py", source, config, verdict, "tune",
                                       parent_attempt=parent, idea_id=idea if i % 7 == 0 else None)
    kept = verdict["verdict"] == "pass" and kind == 0 and i % 30 == 0
    if kept:
        ledger.set_best(run_id, attempt_id)
    return attempt_id, kept
