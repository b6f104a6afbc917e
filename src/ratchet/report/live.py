"""The live view of a run: progress, best speedup, last verdicts, failures by reason, and where each
attempt being judged is (import, correctness on shape X, timing shape X; elapsed and the usual time).

A Rich live panel on a terminal (an attempt's phase line goes when the attempt is committed); one plain
line per attempt, and one per phase of each attempt being judged, when the output is a file or a pipe.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, deque
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ratchet.judge import JudgeProgress
from ratchet.report.terminal import make_console, readable
from ratchet.run.loop import LoopEvent


class RunDisplay:
    def __init__(self, run_id: str, task: str, budget: int | None, console: Console | None = None):
        self.console = console or make_console()
        self.run_id, self.task, self.budget = run_id, task, budget
        self.recent: deque[LoopEvent] = deque(maxlen=8)
        self.failures: Counter = Counter()
        self.best: float | None = None
        self.count = 0
        self.walls: list[float] = []  # judge seconds of the attempts so far: what the next one should take
        self.judging: dict[str, JudgeProgress] = {}  # attempt key -> where it is
        self.lock = threading.Lock()  # progress comes from the loop's judging threads
        self.live = Live(self._render(), console=self.console, refresh_per_second=4) if self.console.is_terminal else None

    def __enter__(self):
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.__exit__(*exc)

    def progress(self, p: JudgeProgress) -> None:
        """A judge's ``JudgeOptions.progress``: the live panel shows it; a pipe gets a line per phase."""
        key = _key(p.candidate, p.config)
        with self.lock:
            before = self.judging.get(key)
            self.judging[key] = p
            if self.live:
                self.live.update(self._render())
            elif before is None or before.phase != p.phase:
                self.console.print(escape(f"[{self.run_id}]   {self._where(p)}"), highlight=False, soft_wrap=True)

    def _where(self, p: JudgeProgress) -> str:
        steps = f" ({p.step}/{p.steps})" if p.steps else ""
        usual = f", usually {sum(self.walls) / len(self.walls):.0f} s" if self.walls else ""
        return f"{Path(p.candidate).name} {p.config}: {p.phase} {p.detail}{steps}, {p.elapsed_s:.1f} s{usual}"

    def __call__(self, event: LoopEvent):
        with self.lock:
            if self.judging.pop(_key(event.candidate, event.config), None) is None:
                # The judge reports its resolved config; a proposal may have left defaults out.
                same = [k for k in self.judging if k.startswith(Path(event.candidate).name + " ")]
                for k in same[:1]:
                    del self.judging[k]
            self.walls.append(event.judge_wall_s)
        self.recent.append(event)
        self.count = event.attempts
        self.best = event.best_speedup
        if event.verdict != "pass":
            self.failures.update(event.reasons[:1])
        if self.live:
            self.live.update(self._render())
        else:
            speed = f"{event.speedup:.3f}x" if event.speedup else "-"
            best = f"{self.best:.3f}x" if self.best else "-"
            mark = f" KEPT ({event.keep_reason})" if event.kept else (
                f" not kept: {event.keep_reason}" if event.verdict == "pass" else "")
            why = f" {','.join(event.reasons[:2])}" if event.reasons else ""
            self.console.print(escape(f"[{self.run_id}] #{event.seq} {Path(event.candidate).name} {event.config} "
                                      f"{event.verdict} {speed}{why}{mark} | best {best} | {event.judge_wall_s:.1f}s"),
                               highlight=False, soft_wrap=True)

    def _render(self):
        budget = f"/{self.budget}" if self.budget else ""
        best = f"{self.best:.3f}x" if self.best else "-"
        head = f"[bold]ratchet run {self.run_id}[/] {self.task}: {self.count}{budget} attempts, best {best}"
        table = Table(show_edge=False)
        for col in ("#", "candidate", "config", "verdict", "speedup", "kept"):
            table.add_column(col)
        for e in self.recent:
            table.add_row(str(e.seq), Path(e.candidate).name, str(e.config),
                          e.verdict + (f" ({e.reasons[0]})" if e.reasons else ""),
                          f"{e.speedup:.3f}x" if e.speedup else "-", "yes" if e.kept else "")
        fails = ", ".join(f"{code} {n}" for code, n in self.failures.most_common()) or "none"
        judging = [escape(f"judging {self._where(p)}") for p in self.judging.values()]
        return Group(head, readable(table), f"failures by reason: {fails}", *judging)


def _key(candidate: str, config: dict) -> str:
    return f"{Path(candidate).name} {json.dumps(config, sort_keys=True)}"
