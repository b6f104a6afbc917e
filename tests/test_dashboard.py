"""``ratchet dashboard``: read-only, follows a run writing ten attempts a second, names every run id, and
answers junk with a short 4xx text (never a traceback page)."""

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
import random
import re
import socket

import pytest

from ratchet.cli import main
from ratchet.report.dashboard import make_server
from ratchet.run.ledger import Ledger
from report_ledger import add_attempt, make_run
from test_report import campaign_ledger  # noqa: F401 (a fixture)


@pytest.fixture()
def ledger_path(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        make_run(ledger, 60, seed=1)
        make_run(ledger, 3, seed=2, task="softmax")
        ledger.create_run("rope", "t.py", "cpu", "cpu", "tune")  # no attempts yet
    return path


@pytest.fixture()
def server(ledger_path):
    srv = make_server(ledger_path, port=0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    srv.dashboard.close()


def url(srv, path):
    host, port = srv.server_address[:2]
    return f"http://{host}:{port}{path}"


def get(srv, path, method="GET"):
    request = urllib.request.Request(url(srv, path), method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read()


def runs_of(path):
    with Ledger(path, create=False) as ledger:
        return ledger.list_runs()


def test_bound_to_localhost_by_default(server):
    assert server.server_address[0] == "127.0.0.1"


def test_index_names_every_run_id_and_leaderboard(server, ledger_path):
    status, kind, body = get(server, "/")
    assert status == 200 and kind.startswith("text/html")
    page = body.decode()
    runs = runs_of(ledger_path)
    for run in runs:
        assert f'href="/run/{run["id"]}"' in page
    assert "leaderboard per task" in page and page.count("<h3>") == len({r["task"] for r in runs})


def test_run_page_figures_and_attempt_source(server, ledger_path):
    run = runs_of(ledger_path)[0]
    status, _, body = get(server, f"/run/{run['id']}")
    assert status == 200 and run["id"] in body.decode()
    status, _, body = get(server, f"/api/run/{run['id']}/figures")
    data = json.loads(body)
    assert data["progress"]["attempts"] == 60
    points = [t for t in data["figures"]["progress"]["data"] if t.get("meta") == "attempts"]
    assert sum(len(t["x"]) for t in points) == 60
    status, _, body = get(server, f"/run/{run['id']}/attempt/2")  # a failed attempt: reasons escaped
    page = body.decode()
    assert status == 200 and "def kernel(x, weight, eps" in page and "<script>alert(" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and 'id=verdict>fail<' in page


JUNK = ["/nope", "/run", "/run/rdoesnotexist", "/run/%3Cscript%3E", "/run/a/b/c/d", "/run/{r}/attempt/x",
        "/run/{r}/attempt/99999", "/run/{r}/attempt/-1", "/api/run/nope", "/api/whatever", "/static/x.js", "/static/plotly.min.js",
        "/campaign/c1", "/campaign/..%2F..", "/?" + "q" * 5000, "/run/{r}?" + "x=1&" * 2000, "/" + "a" * 3000,
        "/../../etc/passwd", "/run/" + "r" * 65]


def test_junk_requests_get_a_short_4xx_text(server, ledger_path):
    run_id = runs_of(ledger_path)[0]["id"]
    for path in JUNK:
        status, kind, body = get(server, path.replace("{r}", run_id))
        assert 400 <= status < 500, path
        assert kind.startswith("text/plain") and len(body) < 300 and b"Traceback" not in body, path
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        status, kind, body = get(server, "/", method)
        assert status == 405 and b"read-only" in body and b"Traceback" not in body, method


def test_a_request_that_is_not_http_gets_a_400_line(server):
    host, port = server.server_address[:2]
    for raw in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"GET " + b"/x" * 40000 + b" HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(raw)
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
        # A request line that is not HTTP/1.x gets an HTTP/0.9 answer: the body alone, our one line.
        status = int(re.match(rb"(?:HTTP/\d\.\d )?(\d{3})", reply).group(1))
        assert 400 <= status < 500 and b"Traceback" not in reply and b"<html" not in reply.lower(), reply[:200]


def test_a_session_of_requests_never_changes_the_ledger(server, ledger_path):
    def fingerprint():
        return hashlib.sha256(ledger_path.read_bytes()).hexdigest(), ledger_path.stat().st_mtime_ns

    before = fingerprint()
    run_ids = [r["id"] for r in runs_of(ledger_path)]
    for run_id in run_ids:
        for path in (f"/run/{run_id}", f"/api/run/{run_id}", f"/api/run/{run_id}/figures", f"/run/{run_id}/attempt/1"):
            get(server, path)
    for path in ["/", "/api/progress", "/api/runs", *JUNK]:
        get(server, path.replace("{r}", run_ids[0]))
    get(server, "/", "POST")
    assert fingerprint() == before


@pytest.mark.slow
def test_follows_a_run_writing_ten_attempts_a_second(server, ledger_path):
    """A writer records attempts through the ledger API at 10/s for 5 s; the endpoint the page polls
    reports each count within a few seconds, and the latest within 2 s of the last write."""
    with Ledger(ledger_path) as ledger:
        run_id = ledger.create_run("rmsnorm", "t.py", "cuda", "NVIDIA H200", "tune")
    written: list[tuple[float, int]] = []

    def writer():
        rng = random.Random(7)
        with Ledger(ledger_path) as ledger:
            for i in range(50):
                add_attempt(ledger, run_id, i, rng)
                written.append((time.monotonic(), i + 1))
                time.sleep(max(0.0, 0.1 - (time.monotonic() - written[-1][0])))

    thread = threading.Thread(target=writer)
    thread.start()
    lags = []
    while thread.is_alive():
        seen = json.loads(get(server, f"/api/run/{run_id}")[2])["attempts"]
        now = time.monotonic()
        behind = [t for t, n in written if n > seen]  # writes the endpoint did not show yet
        lags.append(now - behind[0] if behind else 0.0)
        get(server, f"/api/run/{run_id}/figures")  # the page redraws too, as a browser would
        time.sleep(0.5)
    thread.join()
    last_write = written[-1][0]
    while json.loads(get(server, f"/api/run/{run_id}")[2])["attempts"] != 50:
        assert time.monotonic() - last_write < 2.0, "the dashboard fell behind the ledger"
        time.sleep(0.1)
    assert max(lags) < 3.0, lags
    figures = json.loads(get(server, f"/api/run/{run_id}/figures")[2])
    assert sum(len(t["x"]) for t in figures["figures"]["progress"]["data"] if t.get("meta") == "attempts") == 50


def test_cli_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert main(["dashboard", "--ledger", str(tmp_path / "none.sqlite")]) == 2
    assert "no ledger at" in capsys.readouterr().err
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    assert main(["dashboard", "--ledger", str(path), "--port", "70000"]) == 2
    assert "is not a port number" in capsys.readouterr().err
    assert main(["dashboard", "--ledger", str(path), "--port", "x"]) == 2
    assert "invalid int value" in capsys.readouterr().err


def test_campaigns_on_a_ledger_that_records_them(campaign_ledger):
    path, runs = campaign_ledger
    srv = make_server(path, port=0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        page = get(srv, "/")[2].decode()
        assert 'href="/campaign/c1"' in page and all(f'href="/run/{r}"' in page for r in runs)
        status, _, body = get(srv, "/campaign/c1")
        assert status == 200 and all(r in body.decode() for r in runs[:2]) and "fig-stack-0" in body.decode()
        assert get(srv, "/campaign/c9")[0] == 404
    finally:
        srv.shutdown()
        srv.server_close()
        srv.dashboard.close()
