"""The live view of a run: progress, best speedup, last verdicts, failures by reason.

A Rich live panel on a terminal; one plain line per attempt when the output is a file or a pipe.
"""

from __future__ import annotations

from collections import Counter, deque
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from ratchet.run.loop import LoopEvent


class RunDisplay:
    def __init__(self, run_id: str, task: str, budget: int | None, console: Console | None = None):
        self.console = console or Console(stderr=False)
        self.run_id, self.task, self.budget = run_id, task, budget
        self.recent: deque[LoopEvent] = deque(maxlen=8)
        self.failures: Counter = Counter()
        self.best: float | None = None
        self.count = 0
        self.live = Live(self._render(), console=self.console, refresh_per_second=4) if self.console.is_terminal else None

    def __enter__(self):
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, event: LoopEvent):
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
            mark = " KEPT" if event.kept else ""
            why = f" {','.join(event.reasons[:2])}" if event.reasons else ""
            self.console.print(f"[{self.run_id}] #{event.seq} {Path(event.candidate).name} {event.config} "
                               f"{event.verdict} {speed}{why}{mark} | best {best} | {event.judge_wall_s:.1f}s",
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
        return Group(head, table, f"failures by reason: {fails}")
