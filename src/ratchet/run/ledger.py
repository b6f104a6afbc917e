"""The ledger: the durable record of every run and attempt, in one SQLite file.

Every report, resume and ``ratchet best`` reads from here, so two rules hold:

* Every write is one transaction. A SIGKILL at any moment leaves a whole attempt or none of it, and
  the sequence numbers of a run stay contiguous (``tests/test_ledger.py`` kills a writer to check).
* The file is in WAL mode, so ``ratchet runs`` in another terminal reads while a run writes.

The schema is versioned with ``PRAGMA user_version``: ``MIGRATIONS[i]`` takes a ledger from version
``i`` to ``i + 1``, each in one transaction. A ledger written by a newer Ratchet is refused without
touching the file. Only the standard library's ``sqlite3`` is used.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import secrets
import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from ratchet.run.liveness import Owner, owner_alive

RUN_STATUSES = ("running", "stopped", "done", "failed")
# What ``get_run``/``list_runs`` report besides the stored statuses: the ledger says ``running`` but the
# process that drove the run is gone (SIGKILL, crash, reboot). ``ratchet run --resume`` continues it;
# ``ratchet doctor`` stores it as ``stopped``.
GONE = "gone"
FINISHED_STATUSES = ("stopped", "done", "failed")
VERDICTS = ("pass", "fail", "error")
APPLICATION_ID = 0x52415443  # "RATC" in the SQLite header: tells a ledger from another database
BUSY_TIMEOUT_MS = 10_000
BACKUPS_KEPT = 5  # backups of a ledger kept beside it (``backups/``), newest first

# MIGRATIONS[i] takes the schema from version i to i + 1. Append only; never edit a released entry.
# Each script runs statement by statement inside one transaction, so `PRAGMA foreign_keys` (a no-op
# in a transaction) cannot be used; a table rebuild should use `PRAGMA defer_foreign_keys = ON`.
MIGRATIONS: list[str] = [
    # v1
    f"""
    PRAGMA application_id = {APPLICATION_ID};

    CREATE TABLE runs (
        id              TEXT PRIMARY KEY,
        task            TEXT NOT NULL,
        task_path       TEXT NOT NULL,
        device          TEXT NOT NULL,
        device_name     TEXT NOT NULL,
        goal_speedup    REAL,
        budget_attempts INTEGER,
        budget_seconds  REAL,
        proposer        TEXT NOT NULL,
        options_json    TEXT NOT NULL DEFAULT '{{}}',
        status          TEXT NOT NULL CHECK (status IN ('running', 'stopped', 'done', 'failed')),
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        finished_at     TEXT,
        stop_reason     TEXT
    );

    CREATE TABLE attempts (
        id             INTEGER PRIMARY KEY,
        run_id         TEXT NOT NULL REFERENCES runs(id),
        seq            INTEGER NOT NULL CHECK (seq >= 1),
        candidate_path TEXT NOT NULL,
        source         TEXT NOT NULL,
        source_sha256  TEXT NOT NULL,
        config_json    TEXT NOT NULL,
        config_key     TEXT NOT NULL,
        parent_attempt INTEGER REFERENCES attempts(id),
        proposer       TEXT NOT NULL,
        idea           TEXT,
        verdict        TEXT NOT NULL CHECK (verdict IN ('pass', 'fail', 'error')),
        reasons_json   TEXT NOT NULL,
        speedup        REAL,
        shapes_json    TEXT NOT NULL,
        judge_wall_s   REAL NOT NULL,
        cost_json      TEXT,
        extra_json     TEXT NOT NULL DEFAULT '{{}}',
        kept           INTEGER NOT NULL DEFAULT 0 CHECK (kept IN (0, 1)),
        created_at     TEXT NOT NULL,
        UNIQUE (run_id, seq),
        UNIQUE (run_id, source_sha256, config_key)
    );

    CREATE TABLE best (
        id         INTEGER PRIMARY KEY,
        run_id     TEXT NOT NULL REFERENCES runs(id),
        attempt_id INTEGER NOT NULL REFERENCES attempts(id),
        since_seq  INTEGER NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX best_by_run ON best(run_id, id);
    """,
    # v2: ideas people (or models) bring, linked from the attempts they led to; what an LLM attempt cost.
    """
    CREATE TABLE ideas (
        id         INTEGER PRIMARY KEY,
        task       TEXT NOT NULL,
        text       TEXT NOT NULL CHECK (length(trim(text)) > 0),
        author     TEXT NOT NULL DEFAULT 'human',
        status     TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'tried', 'dropped')),
        created_at TEXT NOT NULL
    );
    CREATE INDEX ideas_by_task ON ideas(task, id);

    ALTER TABLE attempts ADD COLUMN idea_id INTEGER REFERENCES ideas(id);
    ALTER TABLE attempts ADD COLUMN tokens_in INTEGER;
    ALTER TABLE attempts ADD COLUMN tokens_out INTEGER;
    ALTER TABLE attempts ADD COLUMN cost_usd REAL;
    """,
    # v3: the process that drives a run (pid, host, start time), so a run whose process is gone is seen as such.
    """
    ALTER TABLE runs ADD COLUMN owner_pid INTEGER;
    ALTER TABLE runs ADD COLUMN owner_host TEXT;
    ALTER TABLE runs ADD COLUMN owner_started REAL;
    """,
    # v4: why the keep rule kept or discarded each attempt (a faster attempt that is not kept says why).
    """
    ALTER TABLE attempts ADD COLUMN keep_reason TEXT;
    """,
]

# The kind of device an attempt was timed on: the verdict's ``device_name`` (kept in extra_json); an
# attempt without one (recorded before names were compared, or never timed) counts as the run's device.
_ATTEMPT_DEVICE = ("coalesce(nullif(json_extract(a.extra_json, '$.device_name'), ''),"
                   " (SELECT r.device_name FROM runs r WHERE r.id = a.run_id))")

# Verdict fields stored in columns of their own; the rest of the verdict JSON goes to extra_json.
_VERDICT_COLUMNS = ("verdict", "reasons", "speedup", "shapes", "judge_wall_s", "config")
_JSON_COLUMNS = {  # column -> (decoded key, value when NULL)
    "options_json": ("options", {}),
    "config_json": ("config", {}),
    "reasons_json": ("reasons", []),
    "shapes_json": ("shapes", []),
    "cost_json": ("cost", None),
    "extra_json": ("extra", {}),
}


class LedgerError(Exception):
    """The ledger cannot do what was asked; the message is one line for the user."""


def sqlite_failure(path: Path, exc: BaseException) -> LedgerError:
    """One line for the user from an SQLite (or OS) error met while using the ledger at ``path``."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    low = text.lower()
    if "disk is full" in low or "no space" in low or "file too large" in low:
        return LedgerError(f"the ledger {path} cannot be written: the disk is full ({text}); "
                           "nothing of the failed write was recorded")
    if "readonly" in low or "read-only" in low or "permission denied" in low:
        return LedgerError(f"the ledger {path} is read-only ({text}); check the permissions of the file and its folder")
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return LedgerError(f"the ledger {path} is damaged ({text}); 'ratchet doctor --ledger {path}' can restore "
                           "it from its latest backup")
    if "disk i/o error" in low:
        return LedgerError(f"the ledger {path} cannot be read or written: disk I/O error (a full disk or a failing "
                           "device?); nothing of the failed write was recorded")
    if "unable to open" in low:
        return LedgerError(f"cannot open the ledger {path} ({text}); check the permissions of the file and its folder")
    if "locked" in low or "busy" in low:
        return LedgerError(f"the ledger {path} is busy ({text}): another process holds it too long")
    return LedgerError(f"the ledger {path} failed: {text}")


def default_ledger_path(explicit: str | os.PathLike | None = None) -> Path:
    """``--ledger PATH`` if given, else ``$RATCHET_LEDGER``, else ``./.ratchet/ledger.sqlite``."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("RATCHET_LEDGER")
    if env:
        return Path(env)
    return Path.cwd() / ".ratchet" / "ledger.sqlite"


def backups_dir(path: str | os.PathLike) -> Path:
    """Where the backups of the ledger at ``path`` go: ``backups/`` in the ledger's folder."""
    return Path(path).parent / "backups"


def list_backups(path: str | os.PathLike) -> list[Path]:
    """The backups of the ledger at ``path``, newest first (names sort by their UTC time)."""
    path = Path(path)
    folder = backups_dir(path)
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f"{path.stem}-*.sqlite"), reverse=True)


def config_key(config: Mapping[str, Any]) -> str:
    """Canonical JSON of a config (sorted keys, no spaces): equal configs give equal keys."""
    try:
        return json.dumps(dict(config), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise LedgerError(f"config is not plain JSON: {exc}") from None


def source_sha256(source: str) -> str:
    """The hash a candidate's source is known by (the same as ``Candidate.sha256``)."""
    return hashlib.sha256(source.encode()).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _statements(script: str) -> Iterator[str]:
    """Split an SQL script into complete statements (triggers included) for execution one by one."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer
            buffer = ""
    if buffer.strip():
        yield buffer


class Ledger:
    """One open ledger file. Use as a context manager, or call :meth:`close`.

    Safe to share between threads of one process (calls are serialised by a lock); other processes
    open their own ``Ledger`` on the same file.
    """

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = Path(path)
        try:
            exists, is_dir = self.path.exists(), self.path.is_dir()
        except (OSError, ValueError) as exc:  # a name too long, a null byte
            raise LedgerError(f"cannot open the ledger {str(self.path)[:200]}: {exc}"[:400]) from None
        if not create and not exists:
            raise LedgerError(f"no ledger at {self.path} (no runs recorded there yet)")
        if is_dir:
            raise LedgerError(f"cannot open the ledger {self.path}: it is a directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger's folder {self.path.parent}: {exc.strerror or exc}") from None
        self._lock = threading.RLock()
        try:
            # isolation_level=None: no implicit transactions; every write is an explicit BEGIN IMMEDIATE.
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger {self.path}: {exc}") from None
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._check_file()  # reads only: a file we must refuse is left exactly as it was
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")  # durable against process death in WAL
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.Error as exc:
            self._conn.close()
            raise sqlite_failure(self.path, exc) from None
        except BaseException:
            self._conn.close()
            raise

    # -- opening -------------------------------------------------------------------------------------

    def _check_file(self) -> None:
        try:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            tables = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc) and "malformed" not in str(exc):
                raise sqlite_failure(self.path, exc) from None  # e.g. disk I/O, permissions: not the file's bytes
            hint = (f"; 'ratchet doctor --ledger {self.path}' can restore it from its latest backup"
                    if list_backups(self.path) else "")
            raise LedgerError(f"{self.path} is not a Ratchet ledger: not a SQLite database ({exc}){hint}") from None
        if app_id not in (0, APPLICATION_ID) or (version == 0 and tables > 0):
            raise LedgerError(f"{self.path} is a SQLite database but not a Ratchet ledger")
        if version > len(MIGRATIONS):
            raise LedgerError(
                f"the ledger {self.path} was written by a newer Ratchet "
                f"(schema {version}, this one knows {len(MIGRATIONS)}); upgrade Ratchet to read it"
            )

    def _migrate(self) -> None:
        # Up to date (the usual case): take no write lock, so a reader opens while a run is writing.
        if self.schema_version >= len(MIGRATIONS):
            return
        while True:
            with self._write() as conn:
                # Re-read under the write lock: another process may have migrated since we looked.
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version >= len(MIGRATIONS):
                    return
                for statement in _statements(MIGRATIONS[version]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1}")

    @property
    def schema_version(self) -> int:
        with self._reading():
            return self._conn.execute("PRAGMA user_version").fetchone()[0]

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with BEGIN IMMEDIATE so that read-then-write (the next seq) is
        atomic across processes; rolled back on any exception. SQLite's own errors (disk full, read-only,
        damaged file) leave as one-line LedgerErrors."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise sqlite_failure(self.path, exc) from None
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise sqlite_failure(self.path, exc) from None
                raise

    def _rollback(self) -> None:
        if self._conn.in_transaction:  # SQLite may have rolled back already (disk full, ...)
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:  # nothing was committed; the next BEGIN reports a lasting problem
                pass

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Serialise a read with the other threads' calls; SQLite's errors leave as one-line LedgerErrors."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as exc:
                raise sqlite_failure(self.path, exc) from None

    def close(self) -> None:
        with self._reading():
            self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- backups -------------------------------------------------------------------------------------

    def backup(self, keep: int = BACKUPS_KEPT) -> Path:
        """Copy the ledger with SQLite's online backup API (a consistent snapshot, even while another
        process writes) to ``backups/<name>-<UTC time>.sqlite`` beside it, and keep the newest ``keep``.

        The copy is written under a temporary name and renamed, so a kill mid-backup leaves no partial
        file among the backups. ``ratchet run`` calls this at each start, so a damaged ledger loses at
        most the tail of the run since then (``ratchet doctor`` restores it).
        """
        folder = backups_dir(self.path)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        final = folder / f"{self.path.stem}-{stamp}.sqlite"
        partial = folder / f".{final.name}.partial"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with self._reading():
                target = sqlite3.connect(partial)
                try:
                    self._conn.backup(target)
                    # A single file: the copy needs no -wal beside it to be whole.
                    target.execute("PRAGMA journal_mode = DELETE")
                finally:
                    target.close()
            os.replace(partial, final)
        except (OSError, LedgerError) as exc:
            partial.unlink(missing_ok=True)
            raise exc if isinstance(exc, LedgerError) else sqlite_failure(final, exc) from None
        for old in list_backups(self.path)[keep:]:
            old.unlink(missing_ok=True)
        return final


    # -- runs ----------------------------------------------------------------------------------------

    def create_run(
        self,
        task: str,
        task_path: str,
        device: str,
        device_name: str,
        proposer: str,
        goal_speedup: float | None = None,
        budget_attempts: int | None = None,
        budget_seconds: float | None = None,
        options: Mapping[str, Any] | None = None,
        owner: Owner | None = None,
    ) -> str:
        """Start a run (status ``running``) and return its id, e.g. ``r1a2b3c4d``.

        ``owner`` is the process that drives the run (``liveness.this_process()`` for ``ratchet run``):
        once it is gone, the run reads ``gone``. Runs that outside agents feed have none."""
        options_json = _dumps(dict(options or {}))
        now = _now()
        for _ in range(20):  # 2**32 ids: a collision is rare; retry instead of failing the run
            run_id = "r" + secrets.token_hex(4)
            try:
                with self._write() as conn:
                    conn.execute(
                        "INSERT INTO runs (id, task, task_path, device, device_name, goal_speedup,"
                        " budget_attempts, budget_seconds, proposer, options_json, status, created_at,"
                        " updated_at, owner_pid, owner_host, owner_started)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                        (run_id, task, str(task_path), device, device_name, goal_speedup, budget_attempts,
                         budget_seconds, proposer, options_json, now, now,
                         *((owner.pid, owner.host, owner.started) if owner else (None, None, None))),
                    )
                return run_id
            except sqlite3.IntegrityError as exc:
                if "runs.id" not in str(exc):
                    raise LedgerError(f"run rejected by the ledger: {exc}") from None
        raise LedgerError("could not allocate a new run id")

    _RUN_SELECT = """
        SELECT r.*,
               (SELECT count(*) FROM attempts a WHERE a.run_id = r.id) AS attempts,
               (SELECT a.speedup FROM best b JOIN attempts a ON a.id = b.attempt_id
                 WHERE b.run_id = r.id ORDER BY b.id DESC LIMIT 1) AS best_speedup,
               (SELECT a.seq FROM best b JOIN attempts a ON a.id = b.attempt_id
                 WHERE b.run_id = r.id ORDER BY b.id DESC LIMIT 1) AS best_seq
        FROM runs r
    """

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The run's row (``options`` decoded) plus ``attempts``, ``best_speedup`` and ``best_seq``."""
        with self._reading():
            row = self._conn.execute(self._RUN_SELECT + " WHERE r.id = ?", (run_id,)).fetchone()
        if row is None:
            raise LedgerError(f"unknown run '{run_id}' (see 'ratchet runs')")
        return _with_liveness(decode_row(row))

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run, oldest first, each as :meth:`get_run` returns it."""
        with self._reading():
            rows = self._conn.execute(self._RUN_SELECT + " ORDER BY r.created_at, r.rowid").fetchall()
        return [_with_liveness(decode_row(row)) for row in rows]

    def claim_run(self, run_id: str, owner: Owner) -> None:
        """Make ``owner`` the process driving a run (on resume). Refused while the run's recorded owner is
        still alive: two processes driving one run would judge the same proposals twice."""
        with self._write() as conn:
            row = conn.execute("SELECT status, owner_pid, owner_host, owner_started FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
            if row is None:
                raise LedgerError(f"unknown run '{run_id}' (see 'ratchet runs')")
            same = (row["owner_pid"], row["owner_host"]) == (owner.pid, owner.host)
            if row["status"] == "running" and not same and owner_alive(
                    row["owner_pid"], row["owner_host"], row["owner_started"]):
                raise LedgerError(f"run '{run_id}' is still running in process {row['owner_pid']} on "
                                  f"{row['owner_host']}; stop that one first")
            conn.execute("UPDATE runs SET owner_pid = ?, owner_host = ?, owner_started = ?, updated_at = ?"
                         " WHERE id = ?", (owner.pid, owner.host, owner.started, _now(), run_id))

    def set_status(self, run_id: str, status: str, stop_reason: str | None = None) -> None:
        """Set a run's status; a finished status stamps ``finished_at``, ``running`` (resume) clears it."""
        if status not in RUN_STATUSES:
            raise LedgerError(f"unknown run status '{status}' (one of {', '.join(RUN_STATUSES)})")
        now = _now()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, stop_reason = ?, updated_at = ?, finished_at = ? WHERE id = ?",
                (status, stop_reason, now, now if status in FINISHED_STATUSES else None, run_id),
            )
            if cursor.rowcount == 0:
                raise LedgerError(f"unknown run '{run_id}' (see 'ratchet runs')")

    def _require_run(self, conn: sqlite3.Connection, run_id: str) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise LedgerError(f"unknown run '{run_id}' (see 'ratchet runs')")

    # -- attempts ------------------------------------------------------------------------------------

    def record_attempt(
        self,
        run_id: str,
        candidate_path: str,
        source: str,
        config: Mapping[str, Any],
        verdict_json: Mapping[str, Any],
        proposer: str,
        parent_attempt: int | None = None,
        idea: str | None = None,
        cost: Mapping[str, Any] | None = None,
        idea_id: int | None = None,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cost_usd: float | None = None,
        keep: bool = False,
        keep_reason: str | None = None,
    ) -> int:
        """Record one judged attempt and return its id; its ``seq`` is the run's next number.

        ``verdict_json`` is ``Verdict.to_json(with_times=True)``: ``verdict``, ``reasons``,
        ``speedup``, ``shapes`` and ``judge_wall_s`` get columns; the other fields are kept in
        ``extra``. The same (source, config) twice in one run is a LedgerError. ``idea_id`` links the
        attempt to the idea behind it (which then counts as tried); ``tokens_in``, ``tokens_out`` and
        ``cost_usd`` are what a model charged to propose it. ``keep`` makes it the run's best in the same
        transaction (as :meth:`set_best`), so a kill never leaves a kept attempt recorded but not kept;
        ``keep_reason`` is the keep rule's reason, stored with it.
        """
        verdict = verdict_json.get("verdict")
        if verdict not in VERDICTS:
            raise LedgerError(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
        key = config_key(config)
        sha = source_sha256(source)
        extra = {k: v for k, v in verdict_json.items() if k not in _VERDICT_COLUMNS}
        speedup = verdict_json.get("speedup")
        row = (
            str(candidate_path), source, sha, _dumps(dict(config)), key, parent_attempt, proposer, idea,
            verdict, _dumps(list(verdict_json.get("reasons") or [])),
            None if speedup is None else float(speedup),
            _dumps(list(verdict_json.get("shapes") or [])), float(verdict_json.get("judge_wall_s") or 0.0),
            None if cost is None else _dumps(dict(cost)), _dumps(extra), _now(),
            idea_id, tokens_in, tokens_out, None if cost_usd is None else float(cost_usd), keep_reason,
        )
        with self._write() as conn:
            self._require_run(conn, run_id)
            seq = conn.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM attempts WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
            try:
                cursor = conn.execute(
                    "INSERT INTO attempts (run_id, seq, candidate_path, source, source_sha256, config_json,"
                    " config_key, parent_attempt, proposer, idea, verdict, reasons_json, speedup,"
                    " shapes_json, judge_wall_s, cost_json, extra_json, created_at,"
                    " idea_id, tokens_in, tokens_out, cost_usd, keep_reason)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, seq, *row),
                )
                if idea_id is not None:
                    conn.execute("UPDATE ideas SET status = 'tried' WHERE id = ? AND status = 'pending'",
                                 (idea_id,))
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc):
                    raise LedgerError(
                        f"run '{run_id}' already has an attempt with this source ({sha[:12]}) and config {key}"
                    ) from None
                raise LedgerError(f"attempt rejected by the ledger: {exc}") from None
            attempt_id = int(cursor.lastrowid)
            if keep:
                self._set_best(conn, run_id, attempt_id)
            conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (_now(), run_id))
            return attempt_id

    def has_attempt(self, run_id: str, source_sha256: str, config: Mapping[str, Any]) -> bool:
        """Whether this run already judged this source (by hash) with this config."""
        with self._reading():
            row = self._conn.execute(
                "SELECT 1 FROM attempts WHERE run_id = ? AND source_sha256 = ? AND config_key = ?",
                (run_id, source_sha256, config_key(config)),
            ).fetchone()
        return row is not None

    def attempts(self, run_id: str, verdict: str | None = None) -> list[dict[str, Any]]:
        """Every attempt of a run in seq order, JSON fields decoded (``config``, ``reasons``, ...); with
        ``verdict``, only those with that verdict (decoding the rest is most of the cost in a long run)."""
        query = "SELECT * FROM attempts WHERE run_id = ?" + (" AND verdict = ?" if verdict else "") + " ORDER BY seq"
        with self._reading():
            self._require_run(self._conn, run_id)
            rows = self._conn.execute(query, (run_id, verdict) if verdict else (run_id,))
            return [decode_row(row) for row in rows.fetchall()]

    def get_attempt(self, attempt_id: int) -> dict[str, Any]:
        """One attempt by id (decoded like :meth:`attempts`)."""
        with self._reading():
            row = self._conn.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise LedgerError(f"unknown attempt {attempt_id}")
        return decode_row(row)

    def add_attempt_extra(self, attempt_id: int, key: str, value: Any) -> bool:
        """Add one key to a recorded attempt's ``extra`` (e.g. ``counters`` from ncu, read after the
        verdict). Write-once: a key the attempt already has, or a field of the judge's verdict, is never
        replaced; returns whether the key was added. The judge's own fields stay as they were recorded."""
        if key in _VERDICT_COLUMNS:
            raise LedgerError(f"'{key}' is a field of the judge's verdict, not an addition")
        with self._write() as conn:
            row = conn.execute("SELECT extra_json FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
            if row is None:
                raise LedgerError(f"unknown attempt {attempt_id}")
            extra = json.loads(row[0] or "{}")
            if key in extra:
                return False
            extra[key] = value
            conn.execute("UPDATE attempts SET extra_json = ? WHERE id = ?", (_dumps(extra), attempt_id))
            return True

    def set_keep_reason(self, attempt_id: int, reason: str) -> None:
        """Store the keep rule's reason with a recorded attempt (``ratchet show`` and ``--json`` show it)."""
        with self._write() as conn:
            if conn.execute("UPDATE attempts SET keep_reason = ? WHERE id = ?", (reason, attempt_id)).rowcount == 0:
                raise LedgerError(f"unknown attempt {attempt_id}")

    # -- the best so far -----------------------------------------------------------------------------

    def set_best(self, run_id: str, attempt_id: int) -> None:
        """Make a passing attempt the run's best: mark it kept and append it to the best history.

        ``since_seq`` is the run's latest seq at that moment (the attempt's own seq when the loop keeps
        it right after judging). ``kept`` stays 1 on earlier bests: it means "was kept at some point".
        """
        with self._write() as conn:
            self._require_run(conn, run_id)
            self._set_best(conn, run_id, attempt_id)

    def _set_best(self, conn: sqlite3.Connection, run_id: str, attempt_id: int) -> None:
        row = conn.execute(
            "SELECT verdict FROM attempts WHERE id = ? AND run_id = ?", (attempt_id, run_id)
        ).fetchone()
        if row is None:
            raise LedgerError(f"run '{run_id}' has no attempt {attempt_id}")
        if row["verdict"] != "pass":
            raise LedgerError(f"attempt {attempt_id} did not pass (verdict {row['verdict']}); it cannot be the best")
        since = conn.execute("SELECT max(seq) FROM attempts WHERE run_id = ?", (run_id,)).fetchone()[0]
        now = _now()
        conn.execute("UPDATE attempts SET kept = 1 WHERE id = ?", (attempt_id,))
        conn.execute(
            "INSERT INTO best (run_id, attempt_id, since_seq, created_at) VALUES (?, ?, ?, ?)",
            (run_id, attempt_id, since, now),
        )
        conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (now, run_id))

    def best(self, run_id: str, device_name: str | None = None) -> dict[str, Any] | None:
        """The current best attempt of a run (decoded), or None while nothing has been kept.

        With ``device_name``, the latest best timed on that kind of device (a GPU's name, or the CPU's
        ``cpu <machine> xN``): the one the keep rule compares an attempt timed there with, so times from
        different GPU kinds are never compared. Without it, the latest best of any kind."""
        query = ("SELECT a.* FROM best b JOIN attempts a ON a.id = b.attempt_id WHERE b.run_id = ?"
                 + (f" AND {_ATTEMPT_DEVICE} = ?" if device_name else "") + " ORDER BY b.id DESC LIMIT 1")
        with self._reading():
            self._require_run(self._conn, run_id)
            row = self._conn.execute(query, (run_id, device_name) if device_name else (run_id,)).fetchone()
        return None if row is None else decode_row(row)

    def bests_by_device(self, run_id: str) -> dict[str, dict[str, Any]]:
        """The latest best of each kind of device the run's attempts were timed on, by device name (one
        entry for a run on one kind of device)."""
        query = (f"SELECT {_ATTEMPT_DEVICE} AS kind, a.* FROM best b JOIN attempts a ON a.id = b.attempt_id"
                 " WHERE b.run_id = ? ORDER BY b.id")
        with self._reading():
            self._require_run(self._conn, run_id)
            rows = self._conn.execute(query, (run_id,)).fetchall()
        out: dict[str, dict[str, Any]] = {}
        for row in rows:  # oldest first: the latest of each kind stays
            decoded = decode_row(row)
            out[decoded.pop("kind")] = decoded
        return out

    def count_attempts(self, run_id: str) -> int:
        """How many attempts a run has (without reading them: the loop asks at every step)."""
        with self._reading():
            return self._conn.execute("SELECT count(*) FROM attempts WHERE run_id = ?", (run_id,)).fetchone()[0]

    def best_history(self, run_id: str) -> list[dict[str, Any]]:
        """Every change of best, oldest first: ``attempt_id``, ``since_seq``, ``created_at``, and the
        attempt's ``seq``, ``speedup`` and ``config``."""
        with self._reading():
            self._require_run(self._conn, run_id)
            rows = self._conn.execute(
                "SELECT b.id, b.run_id, b.attempt_id, b.since_seq, b.created_at,"
                " a.seq, a.speedup, a.config_json, a.proposer"
                " FROM best b JOIN attempts a ON a.id = b.attempt_id WHERE b.run_id = ? ORDER BY b.id",
                (run_id,),
            ).fetchall()
        return [decode_row(row) for row in rows]


    # -- ideas ------------------------------------------------------------------------------------------

    def add_idea(self, task: str, text: str, author: str = "human") -> int:
        """Record an idea for a task (e.g. "split the row across programs at B=1") and return its id."""
        if not text or not text.strip():
            raise LedgerError("an idea needs some text")
        with self._write() as conn:
            cursor = conn.execute("INSERT INTO ideas (task, text, author, created_at) VALUES (?, ?, ?, ?)",
                                  (task, text.strip(), author, _now()))
            return int(cursor.lastrowid)

    def set_idea_status(self, idea_id: int, status: str) -> None:
        if status not in ("pending", "tried", "dropped"):
            raise LedgerError(f"idea status must be pending, tried or dropped, not {status!r}")
        with self._write() as conn:
            if conn.execute("UPDATE ideas SET status = ? WHERE id = ?", (status, idea_id)).rowcount == 0:
                raise LedgerError(f"unknown idea {idea_id} (see 'ratchet idea list')")

    def ideas(self, task: str | None = None) -> list[dict[str, Any]]:
        """Ideas (of one task, or all), oldest first, each with its outcome so far: ``attempts`` linked
        to it, how many ``passed``, were ``kept``, and the ``best_speedup`` among those that passed."""
        query = (
            "SELECT i.*, count(a.id) AS attempts, coalesce(sum(a.verdict = 'pass'), 0) AS passed,"
            " coalesce(sum(a.kept), 0) AS kept, max(CASE WHEN a.verdict = 'pass' THEN a.speedup END) AS best_speedup"
            " FROM ideas i LEFT JOIN attempts a ON a.idea_id = i.id"
            + (" WHERE i.task = ?" if task else "") + " GROUP BY i.id ORDER BY i.id"
        )
        with self._reading():
            rows = self._conn.execute(query, (task,) if task else ()).fetchall()
        return [dict(row) for row in rows]

    def get_idea(self, idea_id: int) -> dict[str, Any]:
        for idea in self.ideas():
            if idea["id"] == idea_id:
                return idea
        raise LedgerError(f"unknown idea {idea_id} (see 'ratchet idea list')")


def _with_liveness(run: dict[str, Any]) -> dict[str, Any]:
    """A stored ``running`` whose owner process is gone reads ``gone`` (see GONE)."""
    if run.get("status") == "running" and owner_alive(
            run.get("owner_pid"), run.get("owner_host"), run.get("owner_started")) is False:
        run["status"] = GONE
    return run


def decode_row(row: sqlite3.Row, *, other_json: bool = False) -> dict[str, Any]:
    """One stored row as a dict, its known JSON columns decoded under their short names (``config_json``
    -> ``config``). With ``other_json``, any other ``*_json`` text column (a newer table's, e.g. campaigns)
    is decoded too, kept raw under its own name where it is not valid JSON."""
    out: dict[str, Any] = {}
    for column in row.keys():
        value = row[column]
        if column in _JSON_COLUMNS:
            name, empty = _JSON_COLUMNS[column]
            out[name] = empty if value is None else json.loads(value)
        elif other_json and column.endswith("_json") and isinstance(value, str):
            try:
                out[column[:-5]] = json.loads(value)
            except json.JSONDecodeError:
                out[column] = value
        else:
            out[column] = value
    return out


# -- standalone files ----------------------------------------------------------------------------------


def write_standalone(attempt: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write an attempt's candidate as one file whose defaults are the attempt's config.

    The file is the original source, then a block that rebinds ``kernel`` to a wrapper passing the
    config as keyword defaults (keywords given by the caller still win) and sets a one-value ``SPACE``.
    With an empty config (e.g. a KernelBench ``ModelNew``) the source is written unchanged.
    """
    source: str = attempt["source"]
    config = dict(attempt.get("config") or {})
    where = f"run {attempt.get('run_id', '?')}, attempt {attempt.get('seq', '?')}"
    if attempt.get("speedup") is not None:
        where += f", speedup {attempt['speedup']:.3f}x"
    text = source if source.endswith("\n") else source + "\n"
    if config:
        literal = repr(config)
        try:
            if ast.literal_eval(literal) != config:
                raise ValueError
        except (ValueError, SyntaxError):
            raise LedgerError(f"config {config!r} cannot be written as a Python literal") from None
        space = repr({key: [value] for key, value in config.items()})
        text += (
            "\n\n"
            f"# ---- Ratchet: the chosen config, baked in ({where}) ----\n"
            "# kernel(...) called without these keywords uses the config; keywords given still win.\n"
            f"_RATCHET_CONFIG = {literal}\n"
            "_ratchet_kernel = kernel\n"
            "\n\n"
            "def kernel(*args, **kwargs):\n"
            "    return _ratchet_kernel(*args, **{**_RATCHET_CONFIG, **kwargs})\n"
            "\n\n"
            f"SPACE = {space}\n"
        )
    else:
        text += f"\n# ---- Ratchet: {where}; no config to bake in ----\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
