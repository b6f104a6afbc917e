"""judge.device_lock: checks share the GPU, timing holds it alone, turns are phase-fair (a waiting timer
goes before later checks, a check that met a timing before the next timer); and two real evaluations
sharing one lock never check while the other is timed."""

import contextlib
import threading
import time
from pathlib import Path

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions, evaluate
from ratchet.judge.device_lock import DeviceLock, holding, ranked
from ratchet.task import load_task

DATA = Path(__file__).parent / "data"


def _hold(lock, mode, entered, release):
    with holding(lock, mode):
        entered.set()
        release.wait(10)


def _start(lock, mode):
    entered, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_hold, args=(lock, mode, entered, release), daemon=True)
    thread.start()
    return thread, entered, release


def test_shared_holders_overlap():
    lock = DeviceLock()
    a, a_in, a_go = _start(lock, "shared")
    b, b_in, b_go = _start(lock, "shared")
    assert a_in.wait(5) and b_in.wait(5)
    assert lock.state() == (2, False, 0)
    a_go.set(), b_go.set()
    a.join(5), b.join(5)
    assert lock.state() == (0, False, 0)


def test_exclusive_waits_for_shared_and_blocks_new_shared():
    lock = DeviceLock()
    reader, r_in, r_go = _start(lock, "shared")
    assert r_in.wait(5)
    timer, t_in, t_go = _start(lock, "exclusive")
    time.sleep(0.2)
    assert not t_in.is_set() and lock.state() == (1, False, 1)  # waits for the check to finish
    late, l_in, l_go = _start(lock, "shared")
    time.sleep(0.2)
    assert not l_in.is_set()  # a waiting timer goes first
    r_go.set()
    assert t_in.wait(5) and lock.state() == (0, True, 0)
    time.sleep(0.2)
    assert not l_in.is_set()  # nothing beside a timing
    t_go.set()
    assert l_in.wait(5)
    l_go.set()
    for t in (reader, timer, late):
        t.join(5)
    assert lock.state() == (0, False, 0)


def test_a_check_that_met_a_timing_goes_before_the_timers_still_waiting():
    """Phase-fair turns: a queue of timers (each shape one hold) does not starve a check that waited
    through a timing; a check arriving behind a waiting timer still goes after it."""
    lock = DeviceLock()
    first, f_in, f_go = _start(lock, "exclusive")
    assert f_in.wait(5)
    second, s_in, s_go = _start(lock, "exclusive")
    time.sleep(0.2)
    check, c_in, c_go = _start(lock, "shared")
    time.sleep(0.2)
    assert not c_in.is_set() and lock.state() == (0, True, 1)
    f_go.set()  # the first timing ends: the check that met it goes, before the second timer
    assert c_in.wait(5)
    time.sleep(0.2)
    assert not s_in.is_set() and lock.state() == (1, False, 1)
    late, l_in, l_go = _start(lock, "shared")  # arrives behind the waiting timer: after it
    time.sleep(0.2)
    assert not l_in.is_set()
    c_go.set()
    assert s_in.wait(5)
    time.sleep(0.2)
    assert not l_in.is_set()  # nothing beside a timing
    s_go.set()
    assert l_in.wait(5)
    l_go.set()
    for t in (first, second, check, late):
        t.join(5)
    assert lock.state() == (0, False, 0)


def test_a_timer_that_holds_again_at_once_does_not_jump_a_waiting_check():
    """A timer times shape after shape, each a hold of its own: the check waiting through its hold goes
    between two of them."""
    lock = DeviceLock()
    order, log = [], threading.Lock()
    first_shape, go_on = threading.Event(), threading.Event()

    def timer():
        with lock.exclusive():
            first_shape.set()
            go_on.wait(5)
        with lock.exclusive():  # the next shape, asked for at once
            with log:
                order.append("second shape")

    def check():
        with lock.shared():
            with log:
                order.append("check")

    t = threading.Thread(target=timer, daemon=True)
    t.start()
    assert first_shape.wait(5)
    c = threading.Thread(target=check, daemon=True)
    c.start()
    time.sleep(0.2)
    go_on.set()
    t.join(5), c.join(5)
    assert order == ["check", "second shape"]


def _ranked_timer(lock, rank, order, log):
    def run():
        with contextlib.ExitStack() as stack:
            if rank is not None:
                stack.enter_context(ranked(rank))
            with lock.exclusive(), log:
                order.append(rank)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_waiting_timers_go_oldest_first_and_unranked_last():
    """The head of a pipeline (rank 0, the next verdict to be recorded) is timed before younger
    evaluations whatever order they asked in; a hold asked for outside ``ranked`` comes after them."""
    lock = DeviceLock()
    order, log = [], threading.Lock()
    first, f_in, f_go = _start(lock, "exclusive")  # holds the GPU while the others line up
    assert f_in.wait(5)
    threads = []
    for rank in (None, 5, 2, 0, 3):
        threads.append(_ranked_timer(lock, rank, order, log))
        time.sleep(0.1)
    assert lock.state() == (0, True, 5)
    f_go.set()
    for t in [first, *threads]:
        t.join(5)
    assert order == [0, 2, 3, 5, None] and lock.state() == (0, False, 0)


def test_the_rank_is_restored_and_a_younger_timer_goes_when_the_older_is_not_waiting():
    lock = DeviceLock()
    order, log = [], threading.Lock()
    with ranked(7):
        with ranked(1):
            pass
        _ranked_timer(lock, 9, order, log).join(5)  # nothing older waits: no reason to hold it back
        with lock.exclusive():
            order.append("seven")
    assert order == [9, "seven"] and lock.state() == (0, False, 0)


def test_an_exception_releases_the_lock():
    lock = DeviceLock()
    for mode in ("shared", "exclusive"):
        try:
            with holding(lock, mode):
                raise RuntimeError("kernel crashed")
        except RuntimeError:
            pass
        assert lock.state() == (0, False, 0)


def test_plain_lock_serves_both_modes_and_none_holds_nothing():
    plain = threading.Lock()
    with holding(plain, "shared"):
        assert plain.locked()
    with holding(plain, "exclusive"):
        assert plain.locked()
    assert not plain.locked()
    with holding(None, "exclusive"):
        pass


class RecordingLock(DeviceLock):
    """Logs (mode, thread, start, end) of every hold."""

    def __init__(self):
        super().__init__()
        self.holds, self._log = [], threading.Lock()

    def _record(self, mode, inner):
        lock = self

        class _Ctx:
            def __enter__(self):
                inner.__enter__()
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                with lock._log:
                    lock.holds.append((mode, threading.get_ident(), self.start, time.perf_counter()))
                return inner.__exit__(*exc)

        return _Ctx()

    def shared(self):
        return self._record("shared", super().shared())

    def exclusive(self):
        return self._record("exclusive", super().exclusive())


def test_two_evaluations_never_check_beside_a_timing():
    task = load_task(str(DATA / "tasks" / "axpby.py"))
    candidate = load_candidate(DATA / "candidates" / "axpby_honest.py")
    lock = RecordingLock()
    options = JudgeOptions(device="cpu", device_lock=lock)
    verdicts = []
    threads = [threading.Thread(target=lambda: verdicts.append(evaluate(task, candidate, None, options)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [v.verdict for v in verdicts] == ["pass", "pass"], [v.reasons for v in verdicts]
    exclusive = [h for h in lock.holds if h[0] == "exclusive"]
    shared = [h for h in lock.holds if h[0] == "shared"]
    timed_shapes = sum(1 for v in verdicts for row in v.shapes if row.median_us is not None)
    assert len(exclusive) >= timed_shapes + 2  # each shape's timing, and the ceilings, alone
    assert len({h[1] for h in shared}) == 2  # both evaluations checked under the shared lock
    for mode, thread, start, end in exclusive:
        for other in lock.holds:
            if other[2:] != (start, end):
                assert other[3] <= start or other[2] >= end, (mode, other)  # no overlap at all
    assert lock.state() == (0, False, 0)


def test_an_evaluation_reports_its_wait_for_the_gpu_and_its_own_cpu_time():
    # The verdict's judge_host_s: seconds spent waiting for the device lock (a timer holds it until 1 s
    # after the evaluation first asks for it) and the judging thread's own CPU seconds, so a slow loop
    # shows which it was; and the correctness phase by part.
    task = load_task(str(DATA / "tasks" / "axpby.py"))
    candidate = load_candidate(DATA / "candidates" / "axpby_honest.py")

    class AskedLock(DeviceLock):
        def __init__(self):
            super().__init__()
            self.asked = threading.Event()

        def shared(self):
            self.asked.set()
            return super().shared()

    lock = AskedLock()
    thread, entered, release = _start(lock, "exclusive")
    entered.wait(5)
    def release_a_second_after_asked():
        lock.asked.wait(60)
        time.sleep(1.0)
        release.set()

    threading.Thread(target=release_a_second_after_asked, daemon=True).start()
    verdict = evaluate(task, candidate, None, JudgeOptions(device="cpu", device_lock=lock))
    thread.join(5)
    assert verdict.verdict == "pass", verdict.reasons
    host = verdict.judge_host_s
    assert 0.9 <= host["gpu_wait"] <= verdict.judge_wall_s
    assert 0.0 < host["cpu"] <= verdict.judge_wall_s
    parts = host["first_call"] + host["calls"] + host["checks"]
    assert min(host["first_call"], host["calls"], host["checks"]) > 0.0
    assert parts <= verdict.phases_s["correctness"] + 0.01
    assert host["calls"] + host["checks"] >= 0.9  # the lock wait lies inside those parts
    # The worker's own clock around the first launch (profiled or not) lies inside the first call's round trip.
    first = host["first_launch"] + host["first_profiled"]
    assert 0.0 < first < host["first_call"] and 0.0 in (host["first_launch"], host["first_profiled"])
    alone = evaluate(task, candidate, None, JudgeOptions(device="cpu"))
    assert alone.judge_host_s["gpu_wait"] == 0.0


def test_each_correctness_step_holds_the_gpu_once():
    # A step (a batch of the candidate's calls, then their checks) takes the shared lock once, not once for
    # the calls and again for the checks: a waiting timer goes first at every acquisition, so each extra
    # one can wait behind a whole timing shape. Each shape's 2 calls go in one step, but the first call of
    # the evaluation goes alone (unlocked: it compiles; its checks take the lock), so the first shape
    # takes two steps.
    task = load_task(str(DATA / "tasks" / "axpby.py"))
    candidate = load_candidate(DATA / "candidates" / "axpby_honest.py")
    lock = RecordingLock()
    verdict = evaluate(task, candidate, None, JudgeOptions(device="cpu", device_lock=lock))
    assert verdict.verdict == "pass", verdict.reasons
    shared = [h for h in lock.holds if h[0] == "shared"]
    assert len(shared) == len(verdict.shapes) + 1
