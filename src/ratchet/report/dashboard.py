"""The dashboard: a local, read-only web page that follows the ledger live while runs write to it.

It shows the runs and campaigns, a leaderboard per task, a run's figures (the report's, from
:mod:`ratchet.report.plots`), and any attempt's source and verdict. Three rules hold:
- read-only: the ledger is opened through ``LedgerView`` (SQLite ``mode=ro``), so no request can change
  it; candidate sources are shown as escaped text and never imported or run;
- GET and HEAD only; anything malformed (an unknown path or id, a bad number, a huge query, another
  method) gets a 4xx with a one-line text body, and an unexpected failure a 500 with one line, never a
  traceback page;
- live: each page polls a small JSON endpoint every second and redraws when the ledger moved (a run writing
  ten attempts a second is followed: a poll reads a count, a redraw re-reads one run).
Bound to 127.0.0.1 unless told otherwise: the ledger holds source code people may not want to share.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import plotly
import plotly.io as pio

from ratchet.report import html as report_html
from ratchet.report import plots
from ratchet.report.plotly_bundle import plotly_js
from ratchet.report.ledger_view import LedgerView
from ratchet.run.ledger import LedgerError

POLL_MS = 1000
PLOTLY_URL = f"/static/plotly-{plotly.__version__}.min.js"  # versioned: the browser may cache it for good
MAX_QUERY = 1024  # no page takes a query; a long one is junk
TABLE_ATTEMPTS = 200  # the newest attempts listed on a run's page (the figures hold them all)
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; object-src 'none'")


class HttpError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


class Dashboard:
    """What the handler serves, from one read-only view of the ledger."""

    def __init__(self, ledger_path: str | Path):
        self.ledger_path = Path(ledger_path)
        self.view = LedgerView(self.ledger_path)
        self._plotly = plotly_js().encode()
        self._cache: dict[str, tuple[tuple, bytes]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.view.close()

    # -- routing -----------------------------------------------------------------------------------
    def route(self, path: str) -> tuple[str, bytes]:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return "text/html", self.index().encode()
        head, rest = parts[0], parts[1:]
        if "/" + "/".join(parts) == PLOTLY_URL:
            return "application/javascript", self._plotly
        if head == "run" and len(rest) == 1:
            return "text/html", self.run_page(self._run_id(rest[0])).encode()
        if head == "run" and len(rest) == 3 and rest[1] == "attempt":
            return "text/html", self.attempt_page(self._run_id(rest[0]), _seq(rest[2])).encode()
        if head == "campaign" and len(rest) == 1:
            return "text/html", self.campaign_page(_checked_id(rest[0])).encode()
        if head == "api":
            return "application/json", self.api(rest)
        raise HttpError(404, f"no page at {path[:80]}")

    def _run_id(self, text: str) -> str:
        run_id = _checked_id(text)
        if not self.view.has_run(run_id):
            raise HttpError(404, f"unknown run '{run_id}'")
        return run_id

    def api(self, rest: list[str]) -> bytes:
        if rest == ["progress"]:
            return json.dumps(self.view.progress()).encode()
        if rest == ["runs"]:
            return json.dumps({"html": self.runs_html()}).encode()
        if len(rest) == 2 and rest[0] == "run":
            return json.dumps(self.run_progress(self._run_id(rest[1]))).encode()
        if len(rest) == 3 and rest[0] == "run" and rest[2] == "figures":
            return self.run_figures(self._run_id(rest[1]))
        raise HttpError(404, "no such endpoint")

    # -- JSON ------------------------------------------------------------------------------------------
    def run_progress(self, run_id: str) -> dict:
        run = self.view.run(run_id)
        return {"id": run_id, "attempts": run["attempts"], "best_speedup": run["best_speedup"],
                "best_seq": run["best_seq"], "status": run["status"], "updated_at": run["updated_at"]}

    def run_figures(self, run_id: str) -> bytes:
        """Every figure of the run as Plotly JSON, plus the attempts table; cached until the run moves."""
        progress = self.run_progress(run_id)
        key = (progress["attempts"], progress["best_seq"], progress["status"], progress["updated_at"])
        with self._lock:
            hit = self._cache.get(run_id)
        if hit and hit[0] == key:
            return hit[1]
        pic = report_html.run_picture(self.view, run_id)
        body = json.dumps({
            "progress": progress,
            "figures": {name: json.loads(pio.to_json(fig, validate=False)) for name, fig in pic.figures.items()},
            "blocks": {**report_html.run_blocks(pic), "attempts": attempts_table(run_id, pic.attempts)},
        }).encode()
        with self._lock:
            self._cache[run_id] = (key, body)
        return body

    # -- pages -----------------------------------------------------------------------------------------
    def _page(self, title: str, body: str, script: str = "", figures: bool = True) -> str:
        nav = '<p><a href="/">all runs</a></p>'
        return report_html.page(title, nav + body, plotly_src=PLOTLY_URL, script=script, with_plotly=figures)

    def index(self) -> str:
        body = ("<h1>Ratchet dashboard</h1>"
                f'<p class="note">ledger {escape(str(self.ledger_path))}, read-only; this page follows it live.</p>'
                f'<div id="runs">{self.runs_html()}</div>')
        script = _script("""
let last = null;
async function tick() {
  try {
    const p = await (await fetch('/api/progress')).json();
    const key = JSON.stringify(p.runs.map(r => [r.id, r.attempts, r.status]));
    if (last !== null && key !== last) {
      document.getElementById('runs').innerHTML = (await (await fetch('/api/runs')).json()).html;
    }
    last = key;
  } catch (e) {}
  setTimeout(tick, POLL_MS);
}
setTimeout(tick, POLL_MS);
""")
        return self._page("Ratchet dashboard", body, script, figures=False)

    def runs_html(self) -> str:
        runs = self.view.runs()
        rows = [(_link(f"/run/{r['id']}", r["id"], "run-id"), escape(r["task"]), escape(r["status"]),
                 str(r["attempts"]), report_html._fmt_x(r.get("best_speedup")), escape(r["device"]),
                 escape(str(r.get("campaign") or "")), escape(r["created_at"])) for r in runs]
        out = "<h2>runs</h2>" + _raw_table(("run", "task", "status", "attempts", "best", "device", "campaign",
                                             "started"), rows, "runs-table")
        by_task: dict[str, list[dict]] = {}
        for r in runs:
            by_task.setdefault(r["task"], []).append(r)
        out += "<h2>leaderboard per task</h2>"
        for task, mine in sorted(by_task.items()):
            mine = sorted(mine, key=lambda r: -(r.get("best_speedup") or 0.0))
            out += f"<h3>{escape(task)}</h3>" + _raw_table(
                ("#", "run", "best", "attempts", "device"),
                [(str(i + 1), _link(f"/run/{r['id']}", r["id"]), report_html._fmt_x(r.get("best_speedup")),
                  str(r["attempts"]), escape(r.get("device_name") or r["device"])) for i, r in enumerate(mine)])
        campaigns = self.view.campaigns()
        if campaigns:
            out += "<h2>campaigns</h2>" + _raw_table(("campaign", "status", "started"), [
                (_link(f"/campaign/{c['id']}", str(c["id"]), "campaign-id"), escape(str(c.get("status") or "")),
                 escape(str(c.get("created_at") or ""))) for c in campaigns])
        elif self.view.has_campaigns:
            out += '<h2>campaigns</h2><p class="note">none yet</p>'
        return out

    def run_page(self, run_id: str) -> str:
        pic = report_html.run_picture(self.view, run_id)
        body = report_html.run_body(self.view, run_id, self.ledger_path, pic)
        body += "<h2>attempts (newest first)</h2>" + f'<div id="attempts">{attempts_table(run_id, pic.attempts)}</div>'
        script = _script(f"""
const RUN = {json.dumps(run_id)};
const CONFIG = {json.dumps(report_html.PLOTLY_CONFIG)};
let last = {json.dumps(self.run_progress(run_id))};
async function tick() {{
  try {{
    const p = await (await fetch('/api/run/' + RUN)).json();
    if (p.attempts !== last.attempts || p.status !== last.status || p.best_seq !== last.best_seq) {{
      const f = await (await fetch('/api/run/' + RUN + '/figures')).json();
      for (const [name, fig] of Object.entries(f.figures)) {{
        const el = document.getElementById('fig-' + name);
        if (el) await Plotly.react(el, fig.data, fig.layout, CONFIG);
      }}
      for (const [id, html] of Object.entries(f.blocks)) {{
        const el = document.getElementById(id);
        if (el) el.innerHTML = html;
      }}
      last = f.progress;
    }}
  }} catch (e) {{}}
  setTimeout(tick, POLL_MS);
}}
setTimeout(tick, POLL_MS);
""")
        return self._page(f"Ratchet run {run_id}", body, script)

    def attempt_page(self, run_id: str, seq: int) -> str:
        try:
            a = self.view.attempt(run_id, seq)
        except LedgerError as exc:
            raise HttpError(404, str(exc)) from None
        reasons = report_html.table(("code", "detail"), [(r.get("code"), r.get("detail")) for r in a["reasons"]])
        rows = [(plots.shape_label(r), r.get("held_out"), r.get("correct"), r.get("median_us"), r.get("ref_median_us"),
                 r.get("speedup"), r.get("achieved_tbps")) for r in a["shapes"]]
        verdict = escape(a["verdict"])
        body = (f"<h1>run {_link(f'/run/{run_id}', run_id, 'run-id')}, attempt #{a['seq']}</h1>"
                f"<p>verdict <b class={verdict} id=verdict>{verdict}</b>, speedup {report_html._fmt_x(a['speedup'])}, "
                f"{escape(plots.outcome(a))}; proposer {escape(a['proposer'])}; config "
                f"<code>{escape(json.dumps(a['config']))}</code>; judged in {a['judge_wall_s']:.1f} s</p>"
                + report_html.section("reasons", reasons if a["reasons"] else report_html.note("none: it passed"))
                + report_html.section("shapes", report_html.table(
                    ("shape", "held out", "correct", "median µs", "reference µs", "speedup", "TB/s"), rows))
                + report_html.section(f"source: {a['candidate_path']}",
                                      f"<pre id=source>{escape(a['source'])}</pre>"))
        return self._page(f"Ratchet {run_id} #{seq}", body, figures=False)

    def campaign_page(self, campaign_id: str) -> str:
        try:
            body = report_html.campaign_body(self.view, campaign_id, self.ledger_path)
        except LedgerError as exc:
            raise HttpError(404, str(exc)) from None
        return self._page(f"Ratchet campaign {campaign_id}", body)


def attempts_table(run_id: str, attempts: list[dict]) -> str:
    newest = list(reversed(attempts[-TABLE_ATTEMPTS:]))
    rows = [(_link(f"/run/{run_id}/attempt/{a['seq']}", f"#{a['seq']}"),
             escape(str(a.get("candidate_path") or "").rsplit("/", 1)[-1]), escape(json.dumps(a.get("config") or {})),
             escape(plots.outcome(a)), report_html._fmt_x(a.get("speedup")),
             escape(((a.get("reasons") or [{}])[0] or {}).get("detail", "")[:120])) for a in newest]
    older = len(attempts) - len(newest)
    more = f'<p class="note">{older} older attempts not listed</p>' if older else ""
    return _raw_table(("#", "candidate", "config", "outcome", "speedup", "first reason"), rows, "attempts-table") + more


def _raw_table(header, rows, table_id: str = "") -> str:
    """A table of cells already escaped (some hold links)."""
    ident = f' id="{table_id}"' if table_id else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{ident}><tr>{head}</tr>{body}</table>"


def _link(href: str, text: str, klass: str = "") -> str:
    cls = f' class="{klass}"' if klass else ""
    return f'<a{cls} href="{escape(href)}">{escape(text)}</a>'


def _script(code: str) -> str:
    return f"<script>const POLL_MS = {POLL_MS};\n{code}</script>"


def _checked_id(text: str) -> str:
    if not _ID.match(text):
        raise HttpError(400, "a run or campaign id is letters, digits, '_', '.' or '-' (at most 64)")
    return text


def _seq(text: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise HttpError(400, f"attempt number '{text[:20]}' is not a positive integer")
    return int(text)


class Handler(BaseHTTPRequestHandler):
    server_version = "ratchet-dashboard"
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s\n"  # one line, no HTML page, no traceback
    dashboard: Dashboard  # set on the class made by make_server

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The base class answers an unknown HTTP version with 505: to this server it is a malformed request.
        if code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:
            code = HTTPStatus.BAD_REQUEST
        super().send_error(code, message, explain)

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def __getattr__(self, name: str):
        # Any other method (POST, PUT, DELETE, junk words): 405, not the base class's 501.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self._text_headers(b"405 the dashboard is read-only: GET or HEAD\n", allow=True)

    def _serve(self, send_body: bool) -> None:
        path = ""
        try:
            parts = urlsplit(self.path)
            path = parts.path
            if len(parts.query) > MAX_QUERY:
                raise HttpError(414, "query too long")
            if not self.path.startswith("/"):
                raise HttpError(400, "the path must start with /")
            kind, body = self.dashboard.route(parts.path)
            status = 200
        except HttpError as exc:
            kind, body, status = "text/plain; charset=utf-8", f"{exc.status} {exc.text}\n".encode(), exc.status
        except Exception as exc:  # one line: a bug or a ledger it cannot read, never a traceback page
            kind, status = "text/plain; charset=utf-8", 500
            body = f"500 the dashboard could not answer: {type(exc).__name__}\n".encode()
            print(f"ratchet dashboard: {self.path[:100]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        self.send_response(status)
        self.send_header("Content-Type", kind if "charset" in kind or kind.startswith("text/plain") else
                         f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        # Everything but plotly.js changes as the ledger does; plotly.js is named by its version.
        cached = status == 200 and path == PLOTLY_URL
        self.send_header("Cache-Control", "max-age=86400, immutable" if cached else "no-store")
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _text_headers(self, body: bytes, allow: bool = False) -> None:
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if allow:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # quiet: the terminal shows the URL, not every poll
        pass


def make_server(ledger_path: str | Path, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (0: a free port) serving the ledger; ``server.dashboard`` to close."""
    dashboard = Dashboard(ledger_path)
    handler = type("BoundHandler", (Handler,), {"dashboard": dashboard})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError:
        dashboard.close()
        raise
    server.daemon_threads = True
    server.dashboard = dashboard
    return server
