"""Campaigns in the ledger: one ``ratchet optimize MODEL`` is a campaign, its runs point at it.

The schema lives here, apart from the ledger's versioned migrations, and only adds: a ``campaigns``
table and a ``campaign`` column on ``runs`` (NULL for a run started by ``ratchet run``). ``ensure_schema``
adds whichever of the two a ledger lacks, in one transaction, so a ledger written before campaigns existed
is migrated the first time a campaign touches it and stays readable by everything else. A campaign's
progress (``state``: the profile's plan, what each op's run, gate and the stack gave) is one JSON column
(the profile itself another, ``profile``, for reports),
rewritten in one transaction per stage, so a campaign killed at any moment resumes from its last stage;
its runs are found through ``runs.campaign``, never only through the state, so a run created just before
a kill is found again rather than started twice.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timezone
from typing import Any

from ratchet.run.ledger import Ledger, LedgerError

CAMPAIGN_STATUSES = ("running", "done", "stopped")

_CREATE = """
CREATE TABLE IF NOT EXISTS campaigns (
    id          TEXT PRIMARY KEY,
    model       TEXT NOT NULL,
    device      TEXT NOT NULL,
    options_json TEXT NOT NULL DEFAULT '{}',
    state_json  TEXT NOT NULL DEFAULT '{}',
    profile_json TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'stopped')),
    stop_reason TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    finished_at TEXT
)
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def ensure_schema(ledger: Ledger) -> None:
    """Add the campaigns table and runs.campaign where missing (idempotent; a no-op on a current ledger)."""
    conn = ledger._conn
    with ledger._lock:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
        campaign_columns = {r[1] for r in conn.execute("PRAGMA table_info(campaigns)")}
    if "campaign" in columns and "profile_json" in campaign_columns:
        return
    with ledger._write() as c:
        c.execute(_CREATE)
        if "campaign" not in {r[1] for r in c.execute("PRAGMA table_info(runs)")}:
            c.execute("ALTER TABLE runs ADD COLUMN campaign TEXT REFERENCES campaigns(id)")
        if "profile_json" not in {r[1] for r in c.execute("PRAGMA table_info(campaigns)")}:
            c.execute("ALTER TABLE campaigns ADD COLUMN profile_json TEXT NOT NULL DEFAULT '{}'")


def has_campaigns(ledger: Ledger) -> bool:
    with ledger._lock:
        return ledger._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'campaigns'").fetchone() is not None


def create_campaign(ledger: Ledger, model: str, device: str, options: dict) -> str:
    ensure_schema(ledger)
    now = _now()
    for _ in range(20):
        cid = "c" + secrets.token_hex(4)
        with ledger._write() as c:
            if c.execute("SELECT 1 FROM campaigns WHERE id = ?", (cid,)).fetchone():
                continue
            c.execute("INSERT INTO campaigns (id, model, device, options_json, status, created_at, updated_at) "
                      "VALUES (?, ?, ?, ?, 'running', ?, ?)", (cid, model, device, json.dumps(options), now, now))
        return cid
    raise LedgerError("could not allocate a new campaign id")


def get_campaign(ledger: Ledger, cid: str) -> dict[str, Any]:
    if not has_campaigns(ledger):
        raise LedgerError(f"unknown campaign '{cid}' (this ledger holds no campaign)")
    ensure_schema(ledger)
    with ledger._lock:
        row = ledger._conn.execute("SELECT * FROM campaigns WHERE id = ?", (cid,)).fetchone()
    if row is None:
        raise LedgerError(f"unknown campaign '{cid}' (see 'ratchet runs')")
    out = dict(row)
    out["options"] = json.loads(out.pop("options_json"))
    out["state"] = json.loads(out.pop("state_json"))
    out["profile"] = json.loads(out.pop("profile_json"))
    return out


def list_campaigns(ledger: Ledger) -> list[dict[str, Any]]:
    if not has_campaigns(ledger):
        return []
    with ledger._lock:
        ids = [r[0] for r in ledger._conn.execute("SELECT id FROM campaigns ORDER BY created_at, rowid")]
    return [get_campaign(ledger, i) for i in ids]


def save_state(ledger: Ledger, cid: str, state: dict) -> None:
    with ledger._write() as c:
        c.execute("UPDATE campaigns SET state_json = ?, updated_at = ? WHERE id = ?", (json.dumps(state), _now(), cid))


def save_profile(ledger: Ledger, cid: str, profile: dict) -> None:
    """The campaign's profile (``Profile.to_json()``: phases, ops, the tasks worth a run with their shares),
    for reports."""
    with ledger._write() as c:
        c.execute("UPDATE campaigns SET profile_json = ?, updated_at = ? WHERE id = ?",
                  (json.dumps(profile), _now(), cid))


def set_status(ledger: Ledger, cid: str, status: str, reason: str | None = None) -> None:
    if status not in CAMPAIGN_STATUSES:
        raise LedgerError(f"unknown campaign status '{status}'")
    now = _now()
    with ledger._write() as c:
        c.execute("UPDATE campaigns SET status = ?, stop_reason = ?, updated_at = ?, finished_at = ? WHERE id = ?",
                  (status, reason, now, now if status != "running" else None, cid))


def attach_run(ledger: Ledger, run_id: str, cid: str) -> None:
    with ledger._write() as c:
        c.execute("UPDATE runs SET campaign = ? WHERE id = ?", (cid, run_id))


def campaign_runs(ledger: Ledger, cid: str) -> list[dict[str, Any]]:
    """The campaign's runs (as ``Ledger.get_run`` gives them), oldest first. A run is the campaign's when
    its ``campaign`` column says so or its options do (written in the run's own creating transaction): a
    kill between creating a run and attaching it leaves a run this finds, and attaches, on resume."""
    with ledger._lock:
        rows = ledger._conn.execute(
            "SELECT id, campaign FROM runs WHERE campaign = ? OR json_extract(options_json, '$.campaign') = ? "
            "ORDER BY created_at, rowid", (cid, cid)).fetchall()
    for run_id, attached in rows:
        if attached is None:
            attach_run(ledger, run_id, cid)
    return [ledger.get_run(r[0]) for r in rows]
