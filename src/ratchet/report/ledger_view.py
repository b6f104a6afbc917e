"""The ledger opened read-only, for the HTML report and the dashboard.

Both only look: the file is opened through SQLite's ``mode=ro`` URI, so no statement this module runs can
change it (SQLite refuses writes on such a connection), and no migration or pragma that the run's
``Ledger`` applies on opening happens here. Rows come back decoded as ``Ledger`` returns them
(``config``, ``reasons``, ``shapes``, ``extra`` ...), with the per-call times dropped from shapes: a
report needs the medians, not the thousands of samples the keep rule used.

Campaigns are read only where the ledger has them (a ``campaigns`` table and a ``campaign`` column on
runs, which a newer Ratchet writes); an older ledger simply has none.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from ratchet.run.ledger import APPLICATION_ID, Ledger, LedgerError
from ratchet.run.ledger import decode_row as ledger_decode_row

_DROPPED_SHAPE_FIELDS = ("times_us", "ref_times_us")


def decode_row(row: sqlite3.Row) -> dict[str, Any]:
    out = ledger_decode_row(row, other_json=True)
    for shape in out.get("shapes") or []:
        if isinstance(shape, dict):
            for name in _DROPPED_SHAPE_FIELDS:
                shape.pop(name, None)
    return out


class LedgerView:
    """A read-only window on a ledger file. Thread-safe (one connection behind a lock)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise LedgerError(f"no ledger at {self.path} (no runs recorded there yet)")
        try:
            self._conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True,
                                         check_same_thread=False, timeout=10)
            self._conn.row_factory = sqlite3.Row
            app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{self.path} is not a Ratchet ledger: {exc}") from None
        if app_id != APPLICATION_ID or version < 1:
            self._conn.close()
            raise LedgerError(f"{self.path} is not a Ratchet ledger")
        self.schema_version = version  # a newer schema is read too: only columns known to exist are named
        self._lock = threading.Lock()
        self.has_campaigns = self._has_table("campaigns") and "campaign" in self._columns("runs")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> LedgerView:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _has_table(self, name: str) -> bool:
        return bool(self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self._query(f"PRAGMA table_info({table})")}

    # -- runs ----------------------------------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        """Every run, oldest first, with ``attempts``, ``best_speedup`` and ``best_seq`` (as ``ratchet runs``)."""
        rows = self._query(Ledger._RUN_SELECT + " ORDER BY r.created_at, r.rowid")
        return [decode_row(r) for r in rows]

    def run(self, run_id: str) -> dict[str, Any]:
        rows = self._query(Ledger._RUN_SELECT + " WHERE r.id = ?", (run_id,))
        if not rows:
            raise LedgerError(f"unknown run '{run_id}' (see 'ratchet runs')")
        return decode_row(rows[0])

    def has_run(self, run_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM runs WHERE id = ?", (run_id,)))

    def attempts(self, run_id: str, after_seq: int = 0, with_source: bool = False) -> list[dict[str, Any]]:
        """A run's attempts in seq order (those after ``after_seq``); the source only when asked for."""
        columns = "*" if with_source else ", ".join(c for c in self._columns("attempts") if c != "source")
        rows = self._query(f"SELECT {columns} FROM attempts WHERE run_id = ? AND seq > ? ORDER BY seq",
                           (run_id, after_seq))
        return [decode_row(r) for r in rows]

    def attempt(self, run_id: str, seq: int) -> dict[str, Any]:
        rows = self._query("SELECT * FROM attempts WHERE run_id = ? AND seq = ?", (run_id, seq))
        if not rows:
            raise LedgerError(f"run '{run_id}' has no attempt #{seq}")
        return decode_row(rows[0])

    def best_history(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT b.id, b.attempt_id, b.since_seq, b.created_at, a.seq, a.speedup, a.proposer"
            " FROM best b JOIN attempts a ON a.id = b.attempt_id WHERE b.run_id = ? ORDER BY b.id", (run_id,))
        return [dict(r) for r in rows]

    def ideas(self, task: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self._query("SELECT * FROM ideas WHERE task = ? ORDER BY id", (task,))]

    def progress(self) -> dict[str, Any]:
        """What a live page polls: per run its attempt count, latest seq, status and best; cheap to read."""
        rows = self._query(
            "SELECT r.id, r.status, r.updated_at, count(a.id) AS attempts, coalesce(max(a.seq), 0) AS last_seq"
            " FROM runs r LEFT JOIN attempts a ON a.run_id = r.id GROUP BY r.id ORDER BY r.created_at, r.rowid")
        return {"runs": [dict(r) for r in rows],
                "attempts": sum(r["attempts"] for r in rows)}

    # -- campaigns (newer ledgers) ---------------------------------------------------------------------

    def campaigns(self) -> list[dict[str, Any]]:
        if not self.has_campaigns:
            return []
        return [decode_row(r) for r in self._query("SELECT * FROM campaigns ORDER BY rowid")]

    def campaign(self, campaign_id: str) -> dict[str, Any]:
        if not self.has_campaigns:
            raise LedgerError(f"'{campaign_id}' is not a run, and this ledger records no campaigns")
        rows = self._query("SELECT * FROM campaigns WHERE id = ?", (campaign_id,))
        if not rows:
            raise LedgerError(f"unknown run or campaign '{campaign_id}' (see 'ratchet runs')")
        return decode_row(rows[0])

    def campaign_runs(self, campaign_id: str) -> list[dict[str, Any]]:
        if not self.has_campaigns:
            return []
        rows = self._query(Ledger._RUN_SELECT + " WHERE r.campaign = ? ORDER BY r.created_at, r.rowid",
                           (campaign_id,))
        return [decode_row(r) for r in rows]
