"""``ratchet report``: the figures hold exactly the ledger's rows, the file is self-contained and small, and
bad input is one line with exit 2. (The browser tests in tests/browser/ check that the figures render.)"""

import json
import re
import sqlite3
from collections import Counter

import pytest
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from ratchet.cli import main
from ratchet.report import html as report_html
from ratchet.report import plotly_bundle, plots
from ratchet.report.ledger_view import LedgerView
from ratchet.run.ledger import Ledger, LedgerError
from report_ledger import make_run

ATTEMPTS = 500


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "ledger.sqlite"
    with Ledger(path) as ledger:
        make_run(ledger, ATTEMPTS, seed=1)
        make_run(ledger, 7, seed=2, task="softmax")
    return path


@pytest.fixture(scope="module")
def run_id(ledger_path):
    with LedgerView(ledger_path) as view:
        return view.runs()[0]["id"]


def _sql(path, query, params=()):
    with sqlite3.connect(path) as conn:
        return conn.execute(query, params).fetchall()


def _figures_in(page: str) -> dict:
    """Every Plotly.newPlot call of a page: div id -> its data (the JSON plotly.py writes)."""
    out = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\]),\s*\{', page, re.S):
        out[match.group(1)] = json.loads(match.group(2))
    return out


def test_progress_points_are_the_ledger_attempts_by_outcome(ledger_path, run_id):
    with LedgerView(ledger_path) as view:
        pic = report_html.run_picture(view, run_id)
    traces = [t for t in pic.figures["progress"].data if t.meta == "attempts"]
    assert sum(len(t.x) for t in traces) == ATTEMPTS
    seqs = sorted(x for t in traces for x in t.x)
    assert seqs == list(range(1, ATTEMPTS + 1))
    by_name = {t.name.split(" (")[0]: len(t.x) for t in traces}
    kept = _sql(ledger_path, "SELECT count(*) FROM attempts WHERE run_id = ? AND kept = 1", (run_id,))[0][0]
    passed = _sql(ledger_path, "SELECT count(*) FROM attempts WHERE run_id = ? AND verdict = 'pass'", (run_id,))[0][0]
    errors = _sql(ledger_path, "SELECT count(*) FROM attempts WHERE run_id = ? AND verdict = 'error'", (run_id,))[0][0]
    raced = _sql(ledger_path, "SELECT count(*) FROM attempts WHERE run_id = ? AND kept = 0 AND "
                 "json_extract(extra_json, '$.keep_reason') LIKE 'raced%'", (run_id,))[0][0]
    assert kept >= 2 and raced >= 1 and errors >= 1
    assert by_name["kept"] == kept and by_name["raced"] == raced and by_name["error"] == errors
    assert by_name["passed"] == passed - kept - raced
    fails = _sql(ledger_path, "SELECT json_extract(reasons_json, '$[0].code'), count(*) FROM attempts "
                 "WHERE run_id = ? AND verdict = 'fail' GROUP BY 1", (run_id,))
    assert {f"fail: {code}": n for code, n in fails} == {k: v for k, v in by_name.items() if k.startswith("fail")}
    # Over wall time: the best line and the count of attempts, one value per attempt.
    by_meta = {t.meta: t for t in pic.figures["progress_time"].data}
    assert list(by_meta["count"].y) == list(range(1, ATTEMPTS + 1))
    assert len(by_meta["best"].x) == ATTEMPTS and all(x >= 0 for x in by_meta["best"].x)
    best_line = next(t for t in pic.figures["progress"].data if t.meta == "best")
    best = _sql(ledger_path, "SELECT a.speedup FROM best b JOIN attempts a ON a.id = b.attempt_id "
                "WHERE b.run_id = ? ORDER BY b.id DESC LIMIT 1", (run_id,))[0][0]
    assert best_line.y[-1] == pytest.approx(best, abs=1e-4)


def test_failure_breakdown_counts_the_ledger_reason_codes(ledger_path, run_id):
    with LedgerView(ledger_path) as view:
        attempts = view.attempts(run_id)
    bar = plots.failure_figure(attempts).data[0]
    want = dict(_sql(ledger_path, "SELECT json_extract(reasons_json, '$[0].code'), count(*) FROM attempts "
                     "WHERE run_id = ? AND verdict != 'pass' GROUP BY 1", (run_id,)))
    assert dict(zip(bar.x, bar.y)) == want
    assert list(bar.y) == sorted(bar.y, reverse=True)


def test_best_shapes_roofline_lineage_and_landscape(ledger_path, run_id):
    with LedgerView(ledger_path) as view:
        pic = report_html.run_picture(view, run_id)
    best = pic.best
    rows = [r for r in best["shapes"] if r["median_us"]]
    shapes = pic.figures["shapes"].data[0]
    assert list(shapes.y) == [pytest.approx(r["speedup"], abs=1e-4) for r in rows]
    assert "not measured" in pic.notes["shapes"]  # no peer times in this ledger
    tbps = next(t for t in pic.figures["roofline"].data if t.meta == "tbps")
    assert list(tbps.y) == [r["achieved_tbps"] for r in rows]
    assert pic.notes["roofline"].startswith("measured ceilings")
    from ratchet.diagnose.bottleneck import classify_row

    classes = re.findall(r"<td>((?:memory|compute|overhead)-bound|\?)</td>", report_html.best_table(best))
    assert classes == [classify_row(r, best["extra"]["ceilings"]) for r in rows] and len(classes) == 3
    ceilings = {t.meta: set(t.y) for t in pic.figures["roofline"].data if str(t.meta).startswith("ceiling")}
    assert ceilings == {"ceiling copy_tbps": {4.2}, "ceiling matmul_tflops": {700.0}}
    # Lineage: the parent chain from the best back to the first kept attempt, each seq once.
    by_id = {a["id"]: a for a in pic.attempts}
    expected, node = [], best
    while node:
        expected.append(node["seq"])
        node = by_id.get(node["parent_attempt"])
    assert [a["seq"] for a in pic.chain] == sorted(expected) and len(expected) >= 2
    hover = next(t for t in pic.figures["lineage"].data if t.meta == "lineage").hovertext
    assert "idea: one program per row, &lt;b&gt;vectorised&lt;/b&gt; loads" in hover[0]  # Plotly reads tags
    # Landscape: per knob, a dot per passing attempt at its value, and per value the count of the others.
    for knob in ("BLOCK", "num_warps"):
        dots = next(t for t in pic.figures["landscape"].data if t.meta == f"knob {knob}")
        crosses = next(t for t in pic.figures["landscape"].data if t.meta == f"knob {knob} not timed")
        timed = [a for a in pic.attempts if a["speedup"]]
        assert Counter(dots.x) == Counter(str(a["config"][knob]) for a in timed)
        assert dict(zip(crosses.x, crosses.customdata)) == dict(
            Counter(str(a["config"][knob]) for a in pic.attempts if not a["speedup"]))


def test_report_file_is_self_contained_small_and_names_the_run(ledger_path, run_id, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", run_id, "-o", str(out), "--ledger", str(ledger_path)]) == 0
    assert "wrote" in capsys.readouterr().out
    page = out.read_text()
    assert out.stat().st_size < 5_000_000
    assert "<script src=" not in page  # plotly.js is inline
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?:', page)  # nothing loaded from the network
    assert run_id in page
    figures = _figures_in(page)
    progress = figures["fig-progress"]
    assert sum(len(t["x"]) for t in progress if t.get("meta") == "attempts") == ATTEMPTS
    assert {"fig-progress", "fig-progress_time", "fig-failures", "fig-shapes", "fig-roofline", "fig-lineage",
            "fig-landscape"} <= set(figures)
    # People's text is escaped: the idea's markup and the reasons' details never reach the page raw.
    assert "<b>vectorised</b>" not in page and "&lt;b&gt;vectorised&lt;/b&gt;" in page
    assert "<script>alert(" not in page


def test_reports_embed_the_basic_plotly_bundle_and_use_only_its_traces(ledger_path, run_id, campaign_ledger,
                                                                        tmp_path):
    assert plotly_bundle.basic_bundle_version() == get_plotlyjs_version()  # the vendored file follows plotly.py
    path, _ = campaign_ledger
    pages = [report_html.write_report(ledger_path, run_id, tmp_path / "r.html").read_text(),
             report_html.write_report(path, "c1", tmp_path / "c.html").read_text()]
    for page in pages:
        assert "plotly.js (basic - minified) v" in page and len(page) < 2_000_000
        types = {t.get("type", "scatter") for traces in _figures_in(page).values() for t in traces}
        assert types and types <= plotly_bundle.BASIC_TRACES, types


def test_a_basic_bundle_of_another_version_falls_back_to_the_full_one(tmp_path, monkeypatch):
    old = tmp_path / "plotly-basic.min.js"
    old.write_text("/**\n* plotly.js (basic - minified) v1.0.0\n*/\n")
    assert plotly_bundle.basic_bundle_version(old) == "1.0.0"
    assert plotly_bundle.basic_bundle_version(tmp_path / "missing.js") is None
    monkeypatch.setattr(plotly_bundle, "BASIC_BUNDLE", old)
    plotly_bundle.plotly_js.cache_clear()
    try:
        assert plotly_bundle.plotly_js() == get_plotlyjs()
    finally:
        plotly_bundle.plotly_js.cache_clear()


def test_a_run_with_no_attempts_still_reports(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        run_id = ledger.create_run("rmsnorm", "t.py", "cpu", "cpu", "tune")
    out = report_html.write_report(path, run_id, tmp_path / "r.html")
    page = out.read_text()
    assert run_id in page and "nothing kept yet" in page and "no attempt carried a config" in page


@pytest.mark.parametrize("argv, message", [
    (["report", "rnope", "-o", "x.html"], "unknown run 'rnope'; this ledger records no campaigns"),
    (["report", "RUN", "-o", "x.html", "--ledger", "missing.sqlite"], "no ledger at missing.sqlite"),
    (["report", "RUN"], "required: -o"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, ledger_path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if "--ledger" not in argv:
        argv = [*argv, "--ledger", str(ledger_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_not_a_ledger_is_refused_in_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all" * 100)
    assert main(["report", "r1", "-o", str(tmp_path / "x.html"), "--ledger", str(junk)]) == 2
    assert "is not a Ratchet ledger" in capsys.readouterr().err
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(LedgerError, match="not a Ratchet ledger"):
        LedgerView(other)


def test_report_never_changes_the_ledger(ledger_path, run_id, tmp_path):
    before = (ledger_path.read_bytes(), ledger_path.stat().st_mtime_ns)
    report_html.write_report(ledger_path, run_id, tmp_path / "r.html")
    assert (ledger_path.read_bytes(), ledger_path.stat().st_mtime_ns) == before


def test_gates_live_where_the_gate_writes_them(tmp_path):
    from ratchet.e2e.gate import gates_dir_for

    assert report_html.gates_dir(tmp_path / "ledger.sqlite") == gates_dir_for(tmp_path / "ledger.sqlite")


# -- campaigns: a ledger with a campaigns table (as a newer Ratchet writes one) ---------------------------

GATE = {"run": None, "workload": "llama", "op": "rmsnorm", "size": "tiny", "device": "cpu", "verdict": "fail",
        "settings": [
            {"kind": "decode", "batch": 1, "length": 1024, "graphs": "simulated", "verdict": "pass", "reason": None,
             "baseline_us": 100.0, "kernel_us": 95.0, "ratio": 0.95, "detail": ""},
            {"kind": "decode", "batch": 8, "length": 8192, "graphs": "simulated", "verdict": "fail", "reason": "slower",
             "baseline_us": 200.0, "kernel_us": 230.0, "ratio": 1.15, "detail": "slower beyond noise"},
            {"kind": "prefill", "batch": 1, "length": 512, "graphs": "off", "verdict": "pass", "reason": None,
             "baseline_us": 900.0, "kernel_us": 850.0, "ratio": 0.944, "detail": ""}]}
STACK = {"workload": "llama", "batch": 8, "context": 8192, "layers": [
    {"name": "eager", "kind": "baseline", "step_us": 1000.0, "saved_us": None},
    {"name": "rmsnorm kernel", "kind": "kernel", "step_us": 900.0, "saved_us": 100.0},
    {"name": "CUDA graphs", "kind": "cuda_graphs", "step_us": 600.0, "saved_us": 300.0}]}


@pytest.fixture()
def campaign_ledger(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        runs = [make_run(ledger, 40, seed=3), make_run(ledger, 25, seed=4, task="silu_mul"), make_run(ledger, 5, seed=5)]
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE campaigns (id TEXT PRIMARY KEY, model TEXT, status TEXT, created_at TEXT,"
                     " profile_json TEXT, stack_json TEXT)")
        conn.execute("ALTER TABLE runs ADD COLUMN campaign TEXT")
        profile = {"worth_a_run": [{"task": "rmsnorm", "shares": {"decode": 0.2}},
                                   {"task": "silu_mul", "shares": {"decode": 0.1}}]}
        conn.execute("INSERT INTO campaigns VALUES ('c1', 'llama', 'done', '2026-12-01T20:00:00', ?, ?)",
                     (json.dumps(profile), json.dumps(STACK)))
        conn.executemany("UPDATE runs SET campaign = 'c1' WHERE id = ?", [(runs[0],), (runs[1],)])
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / f"{runs[0]}-llama-tiny-cpu.json").write_text(json.dumps({**GATE, "run": runs[0]}))
    return path, runs


def test_campaign_report(campaign_ledger, tmp_path):
    path, runs = campaign_ledger
    page = report_html.write_report(path, "c1", tmp_path / "c.html").read_text()
    for run in runs[:2]:
        assert run in page
    assert runs[2] not in page  # not part of the campaign
    figures = _figures_in(page)
    assert {f"fig-run-{i}" for i in range(2)} <= set(figures)
    assert sum(len(t["x"]) for t in figures["fig-run-0"] if t.get("meta") == "attempts") == 40
    gate = figures["fig-gate-0"][0]
    assert gate["y"] == [0.95, 1.15, 0.944] and gate["marker"]["color"] == ["#2ca02c", "#d62728", "#2ca02c"]
    waterfall = figures["fig-stack-0"][0]
    assert waterfall["type"] == "bar" and waterfall["y"] == [1000.0, -100.0, -300.0, 600.0]
    assert waterfall["base"] == [0.0, 1000.0, 900.0, 0.0]  # each saving hangs from what was left before it
    with LedgerView(path) as view:
        rows = plots.amdahl_rows(view.campaign("c1"), view.campaign_runs("c1"))
        best = view.run(runs[0])["best_speedup"]
    assert rows[0]["share"] == 0.2
    assert rows[0]["step_speedup"] == pytest.approx(1 / (0.8 + 0.2 / best))


def test_unknown_campaign_is_one_line(campaign_ledger, tmp_path, capsys):
    path, _ = campaign_ledger
    assert main(["report", "c9", "-o", str(tmp_path / "x.html"), "--ledger", str(path)]) == 2
    assert "unknown run or campaign 'c9'" in capsys.readouterr().err


def test_outcomes_and_peers_from_rows_as_other_ledgers_write_them():
    # A keep_reason as a column of its own (or in the verdict's extra): "raced..." is raced unless kept.
    assert plots.outcome({"verdict": "pass", "kept": 0, "keep_reason": "raced: lost to #12"}) == plots.RACED
    assert plots.outcome({"verdict": "pass", "kept": 1, "keep_reason": "raced: won"}) == plots.KEPT
    assert plots.outcome({"verdict": "fail", "kept": 0, "reasons": [{"code": "wrong_output", "detail": ""}]}) \
        == "fail: wrong_output"
    assert plots.outcome({"verdict": "error", "kept": 0, "reasons": [{"code": "timeout", "detail": ""}]}) == plots.ERROR
    # Peer times stored with the rows become bars of their own: the peer's median over the best's.
    best = {"seq": 4, "shapes": [
        {"shape": {"T": 1}, "dtype": "bf16", "median_us": 2.0, "speedup": 3.0, "peers": {"torch_compile": 3.0}},
        {"shape": {"T": 8}, "dtype": "bf16", "median_us": 4.0, "speedup": 2.5, "peers": {}}]}
    fig, note = plots.shapes_figure(best)
    assert note == ""
    bars = {t.meta: list(t.y) for t in fig.data}
    assert bars == {"vs reference": [3.0, 2.5], "vs torch_compile": [1.5, None]}


def test_rows_written_by_other_tools_still_report(tmp_path):
    """Attempts as an outside agent or an older Ratchet may have recorded them: reasons without details,
    configs with lists, shape rows missing most fields, a pass with no speedup, ideas by id only."""
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        run_id = ledger.create_run("custom", "t.py", "cuda", "Some Future GPU", "agent")
        odd = [
            {"verdict": "fail", "reasons": [{"code": "wrong_output"}], "shapes": []},
            {"verdict": "fail", "reasons": [], "shapes": []},
            {"verdict": "pass", "speedup": None, "shapes": [{"shape": {}, "dtype": None, "median_us": 5.0}]},
            {"verdict": "pass", "speedup": 1.2, "shapes": [{"median_us": 2.0, "speedup": 1.2}]},
            {"verdict": "error", "reasons": [{"code": "crash", "detail": None}], "shapes": [{"weird": True}]},
        ]
        ids = [ledger.record_attempt(run_id, f"c{i}.py", f"# {i}\n", {"TILE": [i, 2]} if i % 2 else {}, v, "agent",
                                     idea_id=None) for i, v in enumerate(odd)]
        ledger.set_best(run_id, ids[3])
    page = report_html.write_report(path, run_id, tmp_path / "r.html").read_text()
    figures = _figures_in(page)
    assert sum(len(t["x"]) for t in figures["fig-progress"] if t.get("meta") == "attempts") == len(odd)
    bars = dict(zip(figures["fig-failures"][0]["x"], figures["fig-failures"][0]["y"]))
    assert bars == {"wrong_output": 1, "unknown": 1, "crash": 1}
    assert "no ceilings stored with the attempt and no datasheet for this device" in page
