"""The loop's pipelining, offline: several evaluations in flight (per GPU, one being timed and
loop.LOOKAHEAD starting, compiling and checking) commit in proposal order, so the ledger and the keep
decisions equal a serial run's."""

import random
import time

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions
from ratchet.run.ledger import Ledger
from ratchet.run.loop import Loop, RunLimits
from ratchet.search.tune import TuneProposer
from ratchet.task import load_task
from pathlib import Path

DATA = Path(__file__).parent / "data"


def fake_verdict(config, delay_rng):
    """A recorded-looking verdict whose speed depends on the config; sleeps a random while to reorder."""
    time.sleep(delay_rng.uniform(0, 0.05))
    speed = {0: 1.0, 64: 1.3, 256: 1.6, 1024: 1.2}[config["CHUNK"]] * (1.05 if config["ORDER"] == "yx" else 1.0)
    rng = random.Random(str(config))
    times = [100.0 / speed * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(40)]
    ref = [100.0 * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(40)]
    return {"verdict": "pass", "reasons": [], "speedup": speed, "judge_wall_s": 0.01,
            "shapes": [{"shape": {"N": 1000}, "dtype": "float32", "weight": 1.0, "held_out": False,
                        "times_us": times, "ref_times_us": ref, "median_us": sorted(times)[20]}]}


def run_loop(tmp_path, slots, name):
    task = load_task(str(DATA / "tasks" / "axpby.py"))
    cand = load_candidate(DATA / "candidates" / "axpby_tunable.py")
    ledger = Ledger(tmp_path / f"{name}.sqlite")
    run_id = ledger.create_run(task="axpby", task_path="axpby.py", device="cuda", device_name="fake",
                               proposer="tune", budget_attempts=8)
    options = [JudgeOptions(device="cuda", gpu_index=i) for i in range(slots)]
    loop = Loop(ledger, run_id, task, TuneProposer([cand], sampler="grid"), RunLimits(budget_attempts=8), options,
                candidates=[cand])
    delays = random.Random(slots)
    loop._judge = lambda proposal, opts: fake_verdict(proposal.config, delays)
    result = loop.run()
    rows = [(a["seq"], a["config_key"], a["kept"]) for a in ledger.attempts(run_id)]
    return result, rows


def test_parallel_run_commits_like_a_serial_run(tmp_path):
    serial, serial_rows = run_loop(tmp_path, 1, "serial")
    parallel, parallel_rows = run_loop(tmp_path, 2, "parallel")
    assert serial.attempts == parallel.attempts == 8
    assert parallel_rows == serial_rows  # same order, same configs, same keep decisions
    assert serial.best_speedup == parallel.best_speedup == max(1.6 * 1.05, 1.6)


def test_a_slow_oldest_evaluation_does_not_idle_the_other_slots(tmp_path):
    # One GPU: three evaluations run at once (loop.LOOKAHEAD = 2). The first proposal takes 1 s (a long
    # compile), the others 20 ms. Commits still go in proposal order, but while the first is judged the
    # other two slots keep judging the next proposals, up to two pipelines' worth uncommitted, and never
    # more than three at once.
    from ratchet.run.loop import LOOKAHEAD, UNCOMMITTED_PIPELINES
    import threading

    task = load_task(str(DATA / "tasks" / "axpby.py"))
    cand = load_candidate(DATA / "candidates" / "axpby_tunable.py")
    ledger = Ledger(tmp_path / "slow_head.sqlite")
    run_id = ledger.create_run(task="axpby", task_path="axpby.py", device="cuda", device_name="fake",
                               proposer="tune", budget_attempts=8)
    loop = Loop(ledger, run_id, task, TuneProposer([cand], sampler="grid"), RunLimits(budget_attempts=8),
                [JudgeOptions(device="cuda", gpu_index=0)], candidates=[cand])
    guard, events, state = threading.Lock(), [], {"running": 0, "most": 0}

    def judge(proposal, opts):
        with guard:
            first = not events
            events.append(("start", str(proposal.config)))
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        time.sleep(1.0 if first else 0.02)
        with guard:
            state["running"] -= 1
            events.append(("end", str(proposal.config)))
        return fake_verdict(proposal.config, random.Random(0))

    loop._judge = judge
    assert loop.run().attempts == 8
    head_end = events.index(("end", events[0][1]))
    started_before = sum(1 for kind, _ in events[:head_end] if kind == "start")
    pipeline = 1 + LOOKAHEAD
    assert started_before == UNCOMMITTED_PIPELINES * pipeline  # 6, not the 3 a blocked pipeline allows
    assert state["most"] == pipeline
    configs = [a["config_key"] for a in ledger.attempts(run_id)]
    _, serial_rows = run_loop(tmp_path, 1, "serial")
    assert configs == [row[1] for row in serial_rows]  # proposal order, as a serial run


def test_gpu_slots_given_without_a_device_lock_get_one_per_gpu():
    # Timing alone on a GPU rests on its lock: a caller that passes none must not time over the checks of
    # the evaluations in flight beside it.
    from ratchet.judge import JudgeOptions
    from ratchet.judge.device_lock import DeviceLock
    from ratchet.run.executor import LocalExecutor

    mine = DeviceLock()
    slots = LocalExecutor([JudgeOptions(device="cuda", gpu_index=0), JudgeOptions(device="cuda", gpu_index=1),
                           JudgeOptions(device="cuda", gpu_index=2, device_lock=mine)]).slots
    assert all(isinstance(s.device_lock, DeviceLock) for s in slots)
    assert slots[0].device_lock is not slots[1].device_lock and slots[2].device_lock is mine
    again = LocalExecutor([JudgeOptions(device="cuda", gpu_index=3)] * 2).slots  # one GPU, one lock
    assert again[0].device_lock is again[1].device_lock
    assert LocalExecutor([JudgeOptions(device="cpu")]).slots[0].device_lock is None  # one at a time there


def test_the_oldest_evaluation_in_flight_is_timed_first():
    """judge_in_order ranks each evaluation by proposal: when several wait to be timed on one GPU, the
    one to be committed next goes first, whichever asked first."""
    import threading

    from ratchet.judge.device_lock import DeviceLock
    from ratchet.run.loop import judge_in_order

    lock = DeviceLock()
    options = [JudgeOptions(device="cuda", gpu_index=0, device_lock=lock)]
    items = iter(range(3))
    held, timed = threading.Event(), []

    def judge(item, opts):
        if item == 2:  # the youngest holds the GPU first, until the others wait behind it, 1 before 0
            with lock.exclusive():
                held.set()
                deadline = time.monotonic() + 5
                while lock.state()[2] < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)
            return item
        held.wait(5)
        time.sleep(0.2 * (1 - item))  # 1 asks at once, 0 after it
        with lock.exclusive():
            timed.append(item)
        return item

    committed = []
    judge_in_order(lambda: next(items, None), judge, lambda item, outcome, opts: committed.append(outcome),
                   options, pipeline=3)
    assert timed == [0, 1] and committed == [0, 1, 2]
