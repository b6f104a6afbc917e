"""``--executor ray`` (run/ray_executor.py): a whole ``ratchet run`` over a local Ray cluster started here
(two CPUs, one actor each), one actor killed in the middle of an evaluation; the attempts and verdicts
equal a local run's, none lost or recorded twice. Without Ray, one line and the install command. The
keep rule compares an attempt only with the best timed on its own kind of device, and a second loss is
recorded as an ``error`` with reason ``lost``.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ratchet.candidate import load_candidate
from ratchet.run.ledger import Ledger
from ratchet.run.record import record_and_keep

try:
    import ray
except ImportError:  # the Ray tests skip; the others run
    ray = None

DATA = Path(__file__).parent / "data"
TASK = str(DATA / "tasks" / "axpby.py")
TUNABLE = str(DATA / "candidates" / "axpby_tunable.py")
WRONG = str(DATA / "candidates" / "axpby_wrong.py")
needs_ray = pytest.mark.skipif(ray is None, reason="Ray is not installed (pip install 'ratchet[ray]')")


def ratchet(*args, ledger, timeout=300, popen=False):
    env = dict(os.environ, RATCHET_LEDGER=str(ledger))
    cmd = [sys.executable, "-m", "ratchet", *args]
    if popen:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def attempts(ledger):
    with sqlite3.connect(ledger) as conn:
        rows = conn.execute("SELECT seq, source_sha256, config_key, verdict, reasons_json, extra_json FROM attempts "
                            "ORDER BY seq").fetchall()
    return [{"seq": r[0], "key": (r[1], r[2]), "verdict": r[3], "codes": [x["code"] for x in json.loads(r[4])],
             "extra": json.loads(r[5])} for r in rows]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two CPUs for the module (started the way a driver connects: ratchet shipped)."""
    from ratchet.run.ray_executor import RaySettings, connect

    connect(RaySettings(num_cpus=2))
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def kill_one_evaluation(killed: list, stop: threading.Event, after_s: float = 2.0):
    """SIGKILL the first Ray actor seen judging (its process title is ``ray::Evaluator.judge``) once it has
    judged for ``after_s``: mid-evaluation, its judge's workers started and the candidate imported."""
    seen: dict[int, float] = {}
    while not stop.is_set() and not killed:
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if cmdline.startswith("ray::Evaluator.judge"):
                first = seen.setdefault(proc.info["pid"], time.monotonic())
                if time.monotonic() - first >= after_s:
                    os.kill(proc.info["pid"], signal.SIGKILL)
                    killed.append(proc.info["pid"])
                    return
        time.sleep(0.1)


@needs_ray
def test_a_run_over_ray_survives_a_killed_worker_and_matches_a_local_run(cluster, tmp_path):
    budget = ("--budget", "2")  # both seeds' defaults, judged at once on the two actors
    seeds = ("--seed", TUNABLE, "--seed", WRONG)
    on_ray, local = tmp_path / "ray.sqlite", tmp_path / "local.sqlite"
    proc = ratchet("run", TASK, *seeds, "--device", "cpu", *budget, "--executor", "ray", "--address", cluster,
                   ledger=on_ray, popen=True)
    # The local run beside it: the verdicts do not depend on a busy machine, and the test takes half as long.
    alone = ratchet("run", TASK, *seeds, "--device", "cpu", *budget, ledger=local, popen=True)
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=kill_one_evaluation, args=(killed, stop), daemon=True)
    killer.start()
    try:
        out, err = proc.communicate(timeout=240)
        _, alone_err = alone.communicate(timeout=240)
    finally:
        stop.set()
        proc.kill()
        alone.kill()
    assert proc.returncode == 0, err[-2000:]
    assert alone.returncode == 0, alone_err[-2000:]
    assert "over a Ray cluster (2 actors)" in out
    assert killed, "no evaluation was seen running on a Ray actor"

    remote, here = attempts(on_ray), attempts(local)
    assert [a["seq"] for a in remote] == [1, 2]
    assert len({a["key"] for a in remote}) == 2  # nothing judged twice, nothing dropped
    # The same proposals, the same verdicts and first reasons as on this machine alone.
    assert {a["key"]: (a["verdict"], a["codes"][:1]) for a in remote} == \
        {a["key"]: (a["verdict"], a["codes"][:1]) for a in here}
    assert sorted(a["verdict"] for a in remote) == ["fail", "pass"]
    # Each attempt says where it ran; the killed one was judged again on the other actor.
    for a in remote:
        placement = a["extra"]["placement"]
        assert placement["executor"] == "ray" and placement["node"] and placement["device_name"].startswith("cpu")
    retried = [a for a in remote if a["extra"]["placement"].get("retried_after")]
    assert len(retried) == 1 and "lost" not in retried[0]["codes"]
    loss = retried[0]["extra"]["placement"]["retried_after"]
    assert len(loss) == 1 and f"pid {killed[0]}" in loss[0]
    assert retried[0]["extra"]["placement"]["pid"] != killed[0]


def test_executor_ray_without_ray_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    from ratchet.cli import main

    ledger = tmp_path / "ledger.sqlite"
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    code = main(["run", TASK, "--seed", TUNABLE, "--device", "cpu", "--budget", "1", "--executor", "ray",
                 "--ledger", str(ledger)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "needs Ray" in lines[0] and "pip install 'ratchet[ray]'" in lines[0], err
    assert not ledger.exists() or not Ledger(ledger).list_runs()  # no run was created


def test_address_needs_the_ray_executor(tmp_path, capsys):
    from ratchet.cli import main

    code = main(["run", TASK, "--device", "cpu", "--address", "head:6379", "--ledger", str(tmp_path / "l.sqlite")])
    assert code == 2 and "--address goes with --executor ray" in capsys.readouterr().err


# -- unit level: a second loss, and like with like ----------------------------------------------------


def _verdict(device_name: str, scale: float, verdict: str = "pass") -> dict:
    """A passing verdict with times: the kernel at ``scale`` times the reference on both shapes."""
    shapes = [{"shape": {"N": n}, "dtype": "float32", "held_out": False, "weight": 1.0, "mode": "eager",
               "times_us": [10.0 * scale * (1 + 0.001 * i) for i in range(24)],
               "ref_times_us": [10.0 * (1 + 0.001 * i) for i in range(24)]} for n in (1000, 4096)]
    return {"verdict": verdict, "reasons": [], "speedup": 1 / scale, "shapes": shapes, "judge_wall_s": 1.0,
            "device": "cuda", "device_name": device_name}


def _run(ledger):
    return ledger.create_run(task="axpby", task_path=TASK, device="cuda", device_name="NVIDIA H200",
                             proposer="tune", options={"executor": "ray"})


def test_the_keep_rule_compares_an_attempt_only_with_the_best_of_its_device_kind(tmp_path):
    candidate = load_candidate(TUNABLE)
    with Ledger(tmp_path / "l.sqlite") as ledger:
        run = _run(ledger)
        fast_h200 = record_and_keep(ledger, run, candidate, {"CHUNK": 0, "ORDER": "xy"}, _verdict("NVIDIA H200", 0.5),
                                    "tune")
        # Slower than the H200's best, but the first pass timed on an H100: kept there, compared with nothing.
        h100 = record_and_keep(ledger, run, candidate, {"CHUNK": 64, "ORDER": "xy"}, _verdict("NVIDIA H100", 0.8),
                               "tune")
        # Faster than the H100's best and slower than the H200's: on an H200, it is compared with the H200's.
        slow_h200 = record_and_keep(ledger, run, candidate, {"CHUNK": 256, "ORDER": "xy"},
                                    _verdict("NVIDIA H200", 0.7), "tune")
        assert fast_h200[1].keep and h100[1].keep and h100[1].reason == "first passing candidate"
        assert not slow_h200[1].keep and "slower than the best" in slow_h200[1].reason
        kinds = ledger.bests_by_device(run)
        assert {k: b["id"] for k, b in kinds.items()} == {"NVIDIA H200": fast_h200[0], "NVIDIA H100": h100[0]}
        assert ledger.best(run, device_name="NVIDIA H200")["id"] == fast_h200[0]
        assert ledger.best(run)["id"] == h100[0]  # the latest kept of any kind


def test_a_second_loss_is_recorded_as_lost_with_both_failures(tmp_path):
    from ratchet.run.ray_executor import RayExecutor, RaySettings, RaySlot, _Lost

    executor = RayExecutor.__new__(RayExecutor)  # its judging without a cluster: the calls below stand in
    executor.device, executor.settings = "cuda", RaySettings()
    executor._lock = threading.Lock()
    executor.slots = [RaySlot(0, None, {"node_id": "a", "node": "node-a", "pid": 11}),
                      RaySlot(1, None, {"node_id": "a", "node": "node-a", "pid": 12}),
                      RaySlot(2, None, {"node_id": "b", "node": "node-b", "pid": 21})]
    tried = []

    def lose(slot, candidate, config, race_bars):
        tried.append(slot.index)
        raise _Lost("ActorDiedError: the actor died unexpectedly")

    executor._call = lose
    candidate = load_candidate(TUNABLE)
    verdict = executor.judge(None, candidate, {}, executor.slots[0], {})
    assert tried == [0, 2]  # the retry went to another node
    assert verdict["verdict"] == "error" and [r["code"] for r in verdict["reasons"]] == ["lost"]
    assert "pid 11 on node-a" in verdict["reasons"][0]["detail"] and "pid 21 on node-b" in verdict["reasons"][0]["detail"]
    with Ledger(tmp_path / "l.sqlite") as ledger:
        run = _run(ledger)
        attempt_id, decision = record_and_keep(ledger, run, candidate, {}, verdict, "tune")
        recorded = ledger.get_attempt(attempt_id)
        assert not decision.keep and recorded["verdict"] == "error" and recorded["reasons"][0]["code"] == "lost"
        assert len(recorded["extra"]["placement"]["lost"]) == 2 and ledger.count_attempts(run) == 1


def test_resume_keeps_the_runs_cluster_unless_told_another(tmp_path, monkeypatch):
    """--resume RUN goes on where the run was started; --resume RUN --executor ray --address B moves it."""
    from ratchet.run import run_command
    from ratchet.run.executor import ExecutorChoice, ExecutorError

    asked = []

    def make_executor(choice, task, device, judge_options):
        asked.append(choice)
        raise ExecutorError("stand-in: no cluster here")

    monkeypatch.setattr(run_command, "make_executor", make_executor)
    with Ledger(tmp_path / "l.sqlite") as ledger:
        run = ledger.create_run(task="axpby", task_path=TASK, device="cpu", device_name="cpu", proposer="tune",
                                budget_attempts=2, options={"seeds": [TUNABLE], "executor": "ray", "address": "a:6379"})
        for request in (run_command.RunRequest(task=None, resume=run),
                        run_command.RunRequest(task=None, resume=run, executor=ExecutorChoice("ray", "b:6379"))):
            with pytest.raises(ExecutorError):
                run_command.start_or_resume(ledger, request)
        assert asked == [ExecutorChoice("ray", "a:6379"), ExecutorChoice("ray", "b:6379")]
        assert ledger.count_attempts(run) == 0 and ledger.get_run(run)["status"] == "running"
