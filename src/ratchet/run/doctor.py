"""``ratchet doctor``: check a ledger and repair what can be repaired without guessing.

Checks, in order: the file is a whole SQLite database (``PRAGMA integrity_check``); it is a Ratchet
ledger of a schema this Ratchet knows; no row points at a row that is not there; every best pointer
names a passing attempt of its own run; no (source, config) is recorded twice in a run and every run's
seq numbers run 1..n; no run reads ``running`` while the process that drove it is gone.

Repairs: a damaged file is moved aside (never deleted) and the newest whole backup (``Ledger.backup``,
taken at each run start) is restored in its place; an older schema is migrated; best pointers to
missing or non-passing attempts are removed, so each run's best is again its latest valid one, and the
``kept`` marks follow; links to missing parents or ideas are cleared; runs whose process is gone are
stored as ``stopped``. What cannot be repaired without inventing or dropping recorded attempts (attempts
of no run, duplicates, gaps in seq) is reported and left as it is.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ratchet.run.ledger import APPLICATION_ID, MIGRATIONS, Ledger, LedgerError, list_backups
from ratchet.run.liveness import owner_alive


@dataclass(frozen=True)
class Finding:
    """One line of the doctor's report: ``ok`` (checked, fine), ``found`` (wrong; the next line says
    how it was repaired), ``repaired`` (fixed) or ``problem`` (wrong, and still so)."""

    kind: str
    text: str


@dataclass(frozen=True)
class DoctorReport:
    path: Path
    findings: tuple[Finding, ...]

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "problem"]

    @property
    def exit_code(self) -> int:
        """0: healthy or repaired; 1: problems remain."""
        return 1 if self.problems else 0


def examine(path: str | os.PathLike) -> DoctorReport:
    """Check the ledger at ``path`` and repair what can be repaired. A path that holds no ledger and no
    backup of one is a LedgerError (the caller's mistake, not a damaged ledger)."""
    path = Path(path)
    findings: list[Finding] = []
    if path.is_dir():
        raise LedgerError(f"{path} is a directory, not a ledger file")
    if not path.exists():
        if not list_backups(path):
            raise LedgerError(f"no ledger at {path} and no backup of one in {path.parent / 'backups'}")
        findings.append(Finding("found", f"no ledger at {path}"))
        _restore(path, findings, damaged=False)
    else:
        kind, detail = _damage(path)
        if kind == "whole" and path.stat().st_size == 0 and list_backups(path):
            kind, detail = "damaged", "the file is empty"  # truncated (a ledger is never 0 bytes once opened)
        if kind == "whole":
            findings.append(Finding("ok", "the file is a whole SQLite database (integrity_check ok)"))
        elif kind == "unreadable":  # not the file's fault (permissions, locks): nothing to restore
            findings.append(Finding("problem", f"cannot read the ledger: {detail}"))
        else:
            findings.append(Finding("found", f"the file is damaged: {detail}"))
            _restore(path, findings, damaged=True)
    if any(f.kind == "problem" for f in findings):
        return DoctorReport(path, tuple(findings))
    try:
        refusal = _foreign_file(path)
    except sqlite3.Error as exc:
        refusal = f"cannot read the ledger: {' '.join(str(exc).split())}"
    if refusal:
        findings.append(Finding("problem", refusal + "; left untouched"))
        return DoctorReport(path, tuple(findings))
    try:
        _check_contents(path, findings)
    except LedgerError as exc:  # e.g. read-only: the checks ran as far as they could
        findings.append(Finding("problem", f"could not finish: {exc}"))
    except sqlite3.Error as exc:
        findings.append(Finding("problem", f"could not finish: {' '.join(str(exc).split())}"))
    return DoctorReport(path, tuple(findings))


# -- the file -----------------------------------------------------------------------------------------


def _connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)


# SQLite's words for a file whose bytes are wrong (as opposed to one it may not open or is locked).
_DAMAGE_WORDS = ("not a database", "malformed", "corrupt")


def _damage(path: Path) -> tuple[str, str]:
    """``("whole", "")``, ``("damaged", what SQLite found)`` or ``("unreadable", why)``: one line each."""
    try:
        conn = _connect_ro(path)
        try:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        text = " ".join(str(exc).split())
        return ("damaged" if any(w in text.lower() for w in _DAMAGE_WORDS) else "unreadable"), text
    if rows == ["ok"]:
        return "whole", ""
    return "damaged", "; ".join(rows[:3]) + (f" (and {len(rows) - 3} more)" if len(rows) > 3 else "")


def _foreign_file(path: Path) -> str | None:
    """Why this whole database is not one the doctor may change, or None."""
    conn = _connect_ro(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    finally:
        conn.close()
    if app_id not in (0, APPLICATION_ID) or (version == 0 and tables > 0):
        return f"{path} is a SQLite database but not a Ratchet ledger"
    if version > len(MIGRATIONS):
        return f"the ledger was written by a newer Ratchet (schema {version}, this one knows {len(MIGRATIONS)})"
    return None


def _usable_backup(backup: Path) -> bool:
    if _damage(backup)[0] != "whole":
        return False
    try:
        return _foreign_file(backup) is None
    except sqlite3.Error:
        return False


def _restore(path: Path, findings: list[Finding], damaged: bool) -> None:
    """Put the newest whole backup in place of ``path``; a damaged file is kept beside it, renamed."""
    backups = list_backups(path)
    good = next((b for b in backups if _usable_backup(b)), None)
    if good is None:
        why = "no backup of it" if not backups else f"none of its {len(backups)} backup(s) is whole"
        findings.append(Finding("problem", f"cannot restore the ledger: {why} in {path.parent / 'backups'}"))
        return
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    try:
        kept_as = None
        if damaged:
            kept_as = path.with_name(f"{path.name}.damaged-{stamp}")
            for suffix in ("", "-wal", "-shm"):  # the WAL belongs to the damaged file, not to the backup
                part = Path(str(path) + suffix)
                if part.exists():
                    os.replace(part, Path(str(kept_as) + suffix))
        partial = path.with_name(f".{path.name}.restoring")
        source, target = _connect_ro(good), sqlite3.connect(partial)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        os.replace(partial, path)
    except (OSError, sqlite3.Error) as exc:
        findings.append(Finding("problem", f"cannot restore from {good.name}: {' '.join(str(exc).split())}"))
        return
    with Ledger(path) as led:
        runs = led.list_runs()
        attempts = sum(r["attempts"] for r in runs)
    where = f"; the damaged file is kept as {kept_as.name}" if kept_as else ""
    findings.append(Finding("repaired", f"restored from the backup {good.name}: {len(runs)} run(s), {attempts} "
                                        f"attempt(s); attempts recorded after that backup are not in it{where}"))


# -- the contents -------------------------------------------------------------------------------------


def _check_contents(path: Path, findings: list[Finding]) -> None:
    before = _schema_version(path)
    with Ledger(path) as led:  # migrates an older schema
        if before < led.schema_version:
            findings.append(Finding("repaired", f"schema migrated from version {before} to {led.schema_version}"))
        else:
            findings.append(Finding("ok", f"schema version {led.schema_version} (current)"))
        conn = led._conn
        _orphans(led, conn, findings)
        _best_pointers(led, conn, findings)
        _duplicates_and_gaps(conn, findings)
        _dead_runs(led, conn, findings)
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        attempts = conn.execute("SELECT count(*) FROM attempts").fetchone()[0]
    findings.append(Finding("ok", f"{runs} run(s), {attempts} attempt(s) checked"))


def _schema_version(path: Path) -> int:
    conn = _connect_ro(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def _orphans(led: Ledger, conn: sqlite3.Connection, findings: list[Finding]) -> None:
    """Rows that name a row which is not there (what ``PRAGMA foreign_key_check`` lists)."""
    rows = conn.execute("PRAGMA foreign_key_check").fetchall()
    by_kind: dict[tuple[str, str], list[int]] = {}
    for table, rowid, parent, fk_index in rows:
        column = _fk_column(conn, table, fk_index)
        by_kind.setdefault((table, column), []).append(rowid)
    if not by_kind:
        findings.append(Finding("ok", "no orphan rows"))
    for (table, column), rowids in sorted(by_kind.items()):
        marks = ",".join("?" * len(rowids))
        if table == "best":
            with led._write() as c:
                c.execute(f"DELETE FROM best WHERE rowid IN ({marks})", rowids)
            findings.append(Finding("repaired", f"removed {len(rowids)} best pointer(s) to missing {column} rows"))
        elif table == "attempts" and column in ("parent_attempt", "idea_id"):
            with led._write() as c:
                c.execute(f"UPDATE attempts SET {column} = NULL WHERE rowid IN ({marks})", rowids)
            findings.append(Finding("repaired", f"cleared {column} of {len(rowids)} attempt(s) naming a missing row"))
        else:
            findings.append(Finding("problem", f"{len(rowids)} {table} row(s) name a missing {column} "
                                               "(not repaired: that would drop recorded attempts)"))


def _fk_column(conn: sqlite3.Connection, table: str, fk_index: int) -> str:
    for row in conn.execute(f"PRAGMA foreign_key_list({table})").fetchall():
        if row[0] == fk_index:
            return row[3]
    return "?"


def _best_pointers(led: Ledger, conn: sqlite3.Connection, findings: list[Finding]) -> None:
    """Best pointers must name a passing attempt of their own run; the run's best is its latest such."""
    bad = conn.execute(
        "SELECT b.id, b.run_id FROM best b LEFT JOIN attempts a ON a.id = b.attempt_id"
        " WHERE a.id IS NULL OR a.run_id != b.run_id OR a.verdict != 'pass'").fetchall()
    if bad:
        with led._write() as c:
            c.executemany("DELETE FROM best WHERE id = ?", [(row[0],) for row in bad])
        for run_id in sorted({row[1] for row in bad}):
            best = conn.execute(
                "SELECT a.seq, a.speedup FROM best b JOIN attempts a ON a.id = b.attempt_id WHERE b.run_id = ?"
                " ORDER BY b.id DESC LIMIT 1", (run_id,)).fetchone()
            now = f"attempt {best[0]} ({best[1]:.3f}x)" if best and best[1] is not None else "none"
            count = sum(1 for row in bad if row[1] == run_id)
            findings.append(Finding("repaired", f"run {run_id}: removed {count} best pointer(s) to non-passing or "
                                                f"foreign attempts; its best is now {now}"))
    with led._write() as c:  # `kept` means "was the best at some point": it follows the best history
        changed = c.execute("UPDATE attempts SET kept = (id IN (SELECT attempt_id FROM best))"
                            " WHERE kept != (id IN (SELECT attempt_id FROM best))").rowcount
    if changed:
        findings.append(Finding("repaired", f"kept marks of {changed} attempt(s) set to follow the best history"))
    if not bad and not changed:
        findings.append(Finding("ok", "every best pointer names a passing attempt of its run"))


def _duplicates_and_gaps(conn: sqlite3.Connection, findings: list[Finding]) -> None:
    duplicates = conn.execute(
        "SELECT run_id, source_sha256, config_key, count(*) FROM attempts"
        " GROUP BY run_id, source_sha256, config_key HAVING count(*) > 1").fetchall()
    for run_id, sha, key, count in duplicates:
        findings.append(Finding("problem", f"run {run_id}: source {sha[:12]} with config {key} is recorded {count} "
                                           "times (not repaired: which one counts is not known)"))
    gaps = conn.execute(
        "SELECT run_id, count(*), min(seq), max(seq), count(DISTINCT seq) FROM attempts GROUP BY run_id"
        " HAVING min(seq) != 1 OR max(seq) != count(*) OR count(DISTINCT seq) != count(*)").fetchall()
    for run_id, count, low, high, _ in gaps:
        findings.append(Finding("problem", f"run {run_id}: {count} attempts numbered {low}..{high}, not 1..{count} "
                                           "(attempts were removed by hand?)"))
    if not duplicates and not gaps:
        findings.append(Finding("ok", "no duplicate attempts; every run's seq numbers run 1..n"))


def _dead_runs(led: Ledger, conn: sqlite3.Connection, findings: list[Finding]) -> None:
    rows = conn.execute("SELECT id, owner_pid, owner_host, owner_started FROM runs WHERE status = 'running'"
                        " ORDER BY created_at").fetchall()
    dead = [r for r in rows if owner_alive(r["owner_pid"], r["owner_host"], r["owner_started"]) is False]
    for run in dead:
        led.set_status(run["id"], "stopped", f"process gone (pid {run['owner_pid']} on {run['owner_host']}); "
                                             "resume with --resume")
        findings.append(Finding("repaired", f"run {run['id']} read 'running' but its process (pid {run['owner_pid']} "
                                            f"on {run['owner_host']}) is gone: marked stopped; 'ratchet run "
                                            f"--resume {run['id']}' continues it"))
    if not dead:
        findings.append(Finding("ok", f"no run marked running without its process ({len(rows)} running)"))
