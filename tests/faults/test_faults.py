"""Fault injection on the CPU: one candidate per fault, each through the real judge (``evaluate``), with its
verdict, its reason code and, for the box, the files it aimed at unchanged by hash.

After every fault no process of the evaluation is left (the test process has no children), and
``test_next_candidate_is_unaffected`` judges [fault, honest] pairs in one process: the honest one passes.
Limits are small here so hangs cost seconds; the defaults and what a hang costs with them are in
docs/reliability.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, Limits, evaluate
from ratchet.judge import box
from ratchet.judge.forkserver import ForkServer
from ratchet.task import load_task

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates"
TASK = load_task(str(HERE.parent / "data" / "tasks" / "axpby.py"))
LIMITS = Limits(import_s=60, first_call_s=3, call_floor_s=2, call_s=3, compile_s=60, rss_bytes=1 * 2**30)
FAST = JudgeOptions(device="cpu", time_it=False, limits=LIMITS)

needs_box = pytest.mark.skipif(box.unavailable() is not None or box.opted_out(),
                               reason=f"no box on this machine: {box.unavailable()}")
needs_signal_scope = pytest.mark.skipif(box.landlock_abi() < 6, reason="Landlock below ABI 6 cannot scope signals")


def judge(name: str, options: JudgeOptions = FAST, path: Path | None = None):
    return evaluate(TASK, load_candidate(path or CANDIDATES / f"{name}.py"), None, options)


def codes(verdict) -> list[str]:
    return [r.code for r in verdict.reasons]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def marked(marker: str) -> list[psutil.Process]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if marker in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            pass
    return found


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Every fault test ends with no descendant of this process alive (keepers, workers, their children)
    but the judge's fork servers, which wait for the next worker (their forked keepers are counted)."""
    yield
    deadline = time.monotonic() + 5
    while True:
        servers = ForkServer.pids()
        left = [p for p in psutil.Process().children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE and p.pid not in servers]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, [p.cmdline() for p in left]


# -- crashes, exits, signals ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, detail", [
    ("segfault", "signal 11 (SIGSEGV)"),
    ("abort", "signal 6 (SIGABRT)"),
    ("sigalrm", "signal 14 (SIGALRM)"),
    ("exit_main", "exit status 3"),
    ("os_exit", "exit status 7"),
])
def test_a_dying_worker_is_a_crash(name, detail):
    v = judge(name)
    assert v.verdict == "error" and codes(v) == ["crash"], v.reasons
    assert detail in v.reasons[0].detail


@pytest.mark.parametrize("name", ["exit_in_thread", "chdir", "print_megabytes", "write_scratch"])
def test_survivable_faults_pass(name):
    v = judge(name)
    assert v.verdict == "pass", v.reasons


def test_environment_changes_stay_in_the_worker():
    before = dict(os.environ)
    v = judge("environ")
    assert v.verdict == "pass", v.reasons
    assert dict(os.environ) == before


def test_megabytes_printed_before_a_crash_leave_a_short_detail():
    v = judge("print_then_crash")
    assert codes(v) == ["crash"]
    assert "SIGSEGV" in v.reasons[0].detail and len(v.reasons[0].detail) < 700


# -- hangs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, limit", [
    ("hang_python", "3.0 s (first-call limit"),
    ("hang_libc_pause", "3.0 s (first-call limit"),
    ("sigterm_ignored_hang", "3.0 s (first-call limit"),
    ("hang_later_call", "4.0 s (call limit: 2 calls of 2.0 s"),  # the second shape's two calls in one batch
])
def test_a_hang_costs_its_stated_limit(name, limit):
    started = time.monotonic()
    v = judge(name)
    took = time.monotonic() - started
    assert v.verdict == "error" and codes(v) == ["timeout"], v.reasons
    assert f"hang: no return within {limit}" in v.reasons[0].detail
    # 3 s of running and the kill's grace after the worker started (the start itself can take 10 s and more
    # on a loaded machine): nowhere near the compile allowance.
    assert took - v.phases_s["start"] < 15, (took, v.phases_s)


@pytest.fixture
def spin_library(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the spinning library")
    src = tmp_path / "spin.c"
    src.write_text("void spin(void) { volatile unsigned long n = 0; for (;;) n++; }\n")
    lib = tmp_path / "libspin.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return lib


def test_a_native_hang_holding_the_gil_is_stopped(spin_library, monkeypatch):
    monkeypatch.setenv("FAULT_LIB", str(spin_library))
    started = time.monotonic()
    v = judge("hang_native_gil")
    assert codes(v) == ["timeout"] and "hang: no return within 3.0 s" in v.reasons[0].detail
    assert time.monotonic() - started - v.phases_s["start"] < 15


@pytest.fixture
def fake_compiler(tmp_path):
    """A program named like a compiler (ninja) that runs as long as it is told: /bin/sleep under that name."""
    ninja = tmp_path / "ninja"
    ninja.symlink_to(shutil.which("sleep"))
    return ninja


def test_time_in_a_compiler_is_not_a_hang(fake_compiler, monkeypatch):
    monkeypatch.setenv("FAULT_COMPILER", str(fake_compiler))
    monkeypatch.setenv("FAULT_COMPILE_S", "5")  # beyond the 3 s first-call limit
    v = judge("compile_long")
    assert v.verdict == "pass", v.reasons


def test_compiling_beyond_the_allowance_is_a_timeout(fake_compiler, monkeypatch):
    monkeypatch.setenv("FAULT_COMPILER", str(fake_compiler))
    monkeypatch.setenv("FAULT_COMPILE_S", "60")
    started = time.monotonic()
    v = judge("compile_long", JudgeOptions(device="cpu", time_it=False,
                                           limits=Limits(first_call_s=3, compile_s=2)))
    assert codes(v) == ["timeout"] and "more than 2 s (the compile allowance)" in v.reasons[0].detail
    assert time.monotonic() - started - v.phases_s["start"] < 15


# -- memory ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, detail", [
    ("memory_runaway", "GiB of host memory (limit 1.0 GiB)"),  # the judge's RSS watch
    ("memory_huge", "can't allocate memory"),  # the worker's address-space limit, at once
])
def test_host_memory_exhaustion_is_out_of_memory(name, detail):
    v = judge(name)
    assert v.verdict == "error" and codes(v) == ["out_of_memory"], v.reasons
    assert detail in v.reasons[0].detail


# -- orphans --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["orphan_ignores_sigterm", "orphan_daemon"])
def test_orphan_children_fail_and_are_ended(name, monkeypatch):
    marker = f"ratchet-fault-{name}-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("FAULT_MARKER", marker)
    v = judge(name)
    assert v.verdict == "fail" and "child_process" in codes(v), v.reasons
    deadline = time.monotonic() + 5
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(marker) == []


# -- the box --------------------------------------------------------------------------------------------
@pytest.fixture
def ledger_file(tmp_path, monkeypatch):
    """A real ledger with one run in it, under ``.ratchet/`` of a working directory of its own."""
    from ratchet.run.ledger import Ledger

    monkeypatch.chdir(tmp_path)
    path = tmp_path / ".ratchet" / "ledger.sqlite"
    with Ledger(path) as ledger:
        run_id = ledger.create_run("axpby", str(TASK.source_path), "cpu", "cpu", "tune")
    monkeypatch.setenv("FAULT_TARGET", str(path))
    return path, run_id


def assert_ledger_intact(path: Path, run_id: str, digest: str):
    from ratchet.run.ledger import Ledger

    assert sha(path) == digest
    with Ledger(path, create=False) as ledger:
        assert ledger.get_run(run_id)["id"] == run_id


@needs_box
def test_overwriting_the_ledger_is_refused(ledger_file):
    path, run_id = ledger_file
    digest = sha(path)
    v = judge("write_ledger")
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    assert str(path) in v.reasons[0].detail
    assert_ledger_intact(path, run_id, digest)


@needs_box
def test_a_refusal_swallowed_still_changes_nothing(ledger_file):
    path, run_id = ledger_file
    digest = sha(path)
    v = judge("write_refused_quietly")
    assert v.verdict == "pass", v.reasons
    assert_ledger_intact(path, run_id, digest)


@needs_box
def test_appending_to_a_file_in_tmp_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "log.txt"
    target.write_text("before\n")
    monkeypatch.setenv("FAULT_TARGET", str(target))
    v = judge("write_tmp")
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    assert target.read_text() == "before\n"


@needs_box
def test_writing_into_home_is_refused(monkeypatch):
    name = f".ratchet-fault-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("FAULT_NAME", name)
    v = judge("write_home")
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    assert not (Path.home() / name).exists()


@needs_box
@pytest.mark.parametrize("name", ["write_beside_candidate", "write_self"])
def test_writing_beside_or_over_the_candidate_is_refused(name, tmp_path):
    folder = tmp_path / "cands"
    folder.mkdir()
    path = folder / f"{name}.py"
    shutil.copy(CANDIDATES / f"{name}.py", path)
    before = {p.name: sha(p) for p in folder.iterdir()}
    v = judge(name, path=path)
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    assert {p.name: sha(p) for p in folder.iterdir()} == before


@needs_box
def test_rewriting_the_task_file_at_import_is_refused(tmp_path, monkeypatch):
    task_file = tmp_path / "axpby_task.py"
    shutil.copy(HERE.parent / "data" / "tasks" / "axpby.py", task_file)
    digest = sha(task_file)
    monkeypatch.setenv("FAULT_TARGET", str(task_file))
    v = evaluate(load_task(str(task_file)), load_candidate(CANDIDATES / "write_task_file.py"), None, FAST)
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    assert sha(task_file) == digest


@needs_box
def test_a_tcp_connection_is_refused(monkeypatch):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    monkeypatch.setenv("FAULT_PORT", str(server.getsockname()[1]))
    v = judge("net_tcp")
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    with pytest.raises(socket.timeout):
        server.accept()  # nobody connected
    server.close()


@needs_box
def test_a_udp_datagram_is_refused(monkeypatch):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(0.2)
    monkeypatch.setenv("FAULT_PORT", str(receiver.getsockname()[1]))
    v = judge("net_udp")
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    with pytest.raises(socket.timeout):
        receiver.recvfrom(16)  # nothing arrived
    receiver.close()


@needs_box
@needs_signal_scope
def test_signalling_the_judge_is_refused():
    got = []
    previous = __import__("signal").signal(15, lambda *a: got.append(a))
    try:
        v = judge("signal_judge")
    finally:
        __import__("signal").signal(15, previous)
    assert v.verdict == "fail" and codes(v) == ["box_violation"], v.reasons
    assert got == []


def test_without_the_box_the_judge_refuses_in_one_line(monkeypatch):
    monkeypatch.setattr(box, "landlock_abi", lambda: 0)
    monkeypatch.delenv(box.OPT_OUT_ENV, raising=False)
    v = judge("honest")
    assert v.verdict == "error" and codes(v) == ["box_unavailable"]
    detail = v.reasons[0].detail
    assert "\n" not in detail and "no Landlock" in detail and f"{box.OPT_OUT_ENV}=1" in detail


def test_the_opt_out_judges_unboxed_and_says_so(monkeypatch):
    monkeypatch.setattr(box, "landlock_abi", lambda: 0)
    monkeypatch.setenv(box.OPT_OUT_ENV, "1")
    v = judge("honest")
    assert v.verdict == "pass", v.reasons
    assert any("without the box" in note for note in v.notes)


# -- the next candidate -----------------------------------------------------------------------------------
PAIRS = ["segfault", "hang_python", "memory_huge", "orphan_daemon", "write_tmp", "sigalrm"]


def test_next_candidate_is_unaffected(monkeypatch, tmp_path):
    """[fault, honest] pairs in one process, as a run judges them: each honest one passes with no reasons."""
    monkeypatch.setenv("FAULT_MARKER", f"ratchet-fault-pairs-{os.getpid()}")
    target = tmp_path / "target.txt"
    target.write_text("before\n")
    monkeypatch.setenv("FAULT_TARGET", str(target))
    boxed = box.unavailable() is None and not box.opted_out()
    for name in [n for n in PAIRS if boxed or not n.startswith("write")]:
        fault = judge(name)
        assert fault.verdict != "pass", (name, fault.reasons)
        honest = judge("honest")
        assert honest.verdict == "pass" and honest.reasons == [], (name, honest.reasons)
    assert target.read_text() == "before\n"
