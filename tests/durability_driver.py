"""A process for the durability tests to SIGKILL: it drives the ledger the way ``ratchet run`` does.

    python durability_driver.py ledger LEDGER CONFIGS [RUN]   # start (or resume RUN) a run of CONFIGS attempts
    python durability_driver.py cli ARGV...                   # the real `ratchet ARGV...`, writes made slow

Both make every ledger write transaction print ``in-write METHOD`` and sleep ``DRIVER_WRITE_SLEEP_S`` seconds
between its last statement and its COMMIT, so the test can kill inside a write. The ledger mode does
what the loop does with the ledger, in its order, without the judge (whose import alone takes seconds):
back up the ledger, create the run with this process as its owner (or claim it on resume), replay the
recorded attempts, then for each config not yet recorded "judge" it (a short sleep), record the attempt
and its keep decision in one transaction, print ``committed SEQ CONFIG``, and mark the run done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager

from ratchet.run.ledger import Ledger

WRITE_SLEEP_S = float(os.environ.get("DRIVER_WRITE_SLEEP_S", "0.02"))
JUDGE_SLEEP_S = float(os.environ.get("DRIVER_JUDGE_SLEEP_S", "0.05"))


def slow_writes() -> None:
    plain = Ledger._write

    @contextmanager
    def slow(self):
        with plain(self) as conn:
            yield conn
            # The ledger method writing (frame 0: here; 1: contextlib's __exit__; 2: the method).
            print(f"in-write {sys._getframe(2).f_code.co_name}", file=sys.stderr, flush=True)
            time.sleep(WRITE_SLEEP_S)

    Ledger._write = slow


def verdict_for(index: int) -> dict:
    """A made-up verdict, a function of the config alone: every third fails, speedups rise and fall."""
    if index % 3 == 2:
        return {"verdict": "fail", "reasons": [{"code": "wrong_output", "detail": f"config {index}"}],
                "speedup": None, "shapes": [], "judge_wall_s": JUDGE_SLEEP_S}
    speedup = 1.0 + (index * 7 % 11) / 10
    return {"verdict": "pass", "reasons": [], "speedup": speedup, "judge_wall_s": JUDGE_SLEEP_S,
            "shapes": [{"shape": {"N": 1000}, "dtype": "float32", "times_us": [10.0 / speedup] * 5,
                        "ref_times_us": [10.0] * 5}]}


def drive_ledger(path: str, configs: int, resume: str | None) -> int:
    from ratchet.run.liveness import this_process

    source = "def kernel(x, I=0):\n    return x\n"
    with Ledger(path) as ledger:
        if ledger.list_runs():  # as run_command.backup_ledger (which imports the judge: seconds here)
            ledger.backup()
        owner = this_process()
        if resume:
            run_id = resume
            ledger.claim_run(run_id, owner)
        else:
            run_id = ledger.create_run(task="durability", task_path="durability.py", device="cpu",
                                       device_name="test cpu", proposer="tune", budget_attempts=configs, owner=owner)
        print(f"run {run_id}", flush=True)
        ledger.set_status(run_id, "running")
        best = ledger.best(run_id)
        for index in range(configs):
            config = {"I": index}
            if ledger.has_attempt(run_id, ledger_sha(source), config):
                continue  # recorded before the kill: never judged twice
            time.sleep(JUDGE_SLEEP_S)
            verdict = verdict_for(index)
            keep = verdict["verdict"] == "pass" and (best is None or verdict["speedup"] > best["speedup"])
            attempt_id = ledger.record_attempt(run_id, "cand.py", source, config, verdict, "tune", keep=keep)
            if keep:
                best = ledger.get_attempt(attempt_id)
            print(f"committed {ledger.get_attempt(attempt_id)['seq']} {json.dumps(config)}", flush=True)
        ledger.set_status(run_id, "done", "attempt budget spent")
    print("done", flush=True)
    return 0


def ledger_sha(source: str) -> str:
    from ratchet.run.ledger import source_sha256

    return source_sha256(source)


def main(argv: list[str]) -> int:
    slow_writes()
    if argv[0] == "ledger":
        return drive_ledger(argv[1], int(argv[2]), argv[3] if len(argv) > 3 else None)
    if argv[0] == "cli":
        from ratchet.cli import main as ratchet

        return ratchet(argv[1:])
    raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
