"""The LLM proposer, offline: a loopback server started here speaks the OpenAI chat-completions API (and
Anthropic's Messages API) and replays scripted answers: good code, broken code, no code, an HTTP 500
before an answer, a slow answer. The official SDKs talk to it through their base URL.

- A whole ``ratchet run rmsnorm --device cpu --proposer llm`` is judged for real (about 5 evaluations):
  the ledger holds every answer's attempt with its tokens and cost, the broken one named by the judge,
  the no-code one as ``no_code``, the tuner's configs of the good candidate, a kept model-written best,
  and the run ends at the cost budget; the slow answer was written while the seed was being judged.
- Faster tests swap the judge for a stand-in (the loop's ``_judge``): Anthropic end to end with an idea
  and a token budget, model errors that never crash a run, parents from the best few distinct sources.
- Extraction of the candidate file from tricky answers.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ratchet.candidate import load_candidate
from ratchet.judge import JudgeOptions
from ratchet.run.ledger import Ledger
from ratchet.run.loop import Loop, RunLimits
from ratchet.search.llm import LLMProposer, extract_candidate
from ratchet.search.llm_client import LLMSettings, ModelCallError, make_chat
from ratchet.task import load_task

# -- candidate files the "model" writes -----------------------------------------------------------------

# Deliberately wasteful, so that the model's candidates beat it on every shape: the whole thing 4 times.
SLOW_SEED = '''"""A wasteful but correct RMSNorm: the whole computation four times, in float64."""

import torch


def kernel(x, weight, eps):
    for _ in range(4):
        xd = x.double()
        out = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()).to(x.dtype)
    return out
'''

GOOD_TUNABLE = '''import torch

SPACE = {"CHUNK": [0, 32]}


def kernel(x, weight, eps, CHUNK=0):
    T = x.shape[0]
    out = torch.empty_like(x)
    w = weight.float()
    step = CHUNK or max(T, 1)
    for start in range(0, T, step):
        xf = x[start:start + step].float()
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
        out[start:start + step] = (xf * rstd * w).to(x.dtype)
    return out
'''

GOOD_PLAIN = '''import torch


def kernel(x, weight, eps):
    xf = x.to(torch.float32)
    scale = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (xf * scale * weight.to(torch.float32)).to(x.dtype)
'''

BROKEN = '''import torch


def kernel(x, weight, eps):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) *
'''


def fenced(code: str, before: str = "Here is the kernel.", after: str = "") -> str:
    return f"{before}\n\n```python\n{code}```\n{after}"


# -- the loopback server ---------------------------------------------------------------------------------

class FakeLLM:
    """Replays ``script`` in order, one item per HTTP request; then ``default``. An item is an answer
    ``{"text": ..., "delay": s}`` or an error ``{"status": 500}``. Requests are logged with their times."""

    def __init__(self, script, default=None, usage=(1000, 500)):
        self.script = list(script)
        self.default = default or {"text": "I have no further ideas."}
        self.usage = usage
        self.requests: list[dict] = []
        self.arrivals = 0  # requests that have arrived, counted before their answer
        self.lock = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                started = time.time()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    item = fake.script.pop(0) if fake.script else fake.default
                    fake.arrivals += 1
                    fake.lock.notify_all()
                time.sleep(item.get("delay", 0))
                if "status" in item:
                    payload = {"error": {"message": "scripted failure", "type": "server_error"}}
                    self._reply(item["status"], payload, {"retry-after-ms": "10"})
                elif self.path.endswith("/chat/completions"):
                    self._reply(200, {
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": item["text"]}}],
                        "usage": {"prompt_tokens": fake.usage[0], "completion_tokens": fake.usage[1],
                                  "total_tokens": sum(fake.usage)}})
                else:  # Anthropic Messages
                    self._reply(200, {
                        "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                        "content": [{"type": "text", "text": item["text"]}], "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": {"input_tokens": fake.usage[0], "output_tokens": fake.usage[1]}})
                with fake.lock:
                    fake.requests.append({"path": self.path, "body": body, "status": item.get("status", 200),
                                          "started": started, "finished": time.time()})

            def _reply(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def prompts(self) -> list[str]:
        out = []
        for r in self.requests:
            if r["status"] == 200:
                messages = r["body"]["messages"]
                out.append(messages[-1]["content"])
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


# -- a whole run, judged for real ------------------------------------------------------------------------

def test_whole_llm_run_on_the_cpu(tmp_path, keys):
    from ratchet.cli import main

    seed = tmp_path / "slow_seed.py"
    seed.write_text(SLOW_SEED)
    llm = FakeLLM([
        # A slow answer, still shorter than the seed's judging: 2.0-3.3 s here, ~2.05 s once in CI, which
        # a 2 s delay made a race (2026-11-30).
        {"text": fenced(GOOD_TUNABLE, after="The tuner can pick CHUNK."), "delay": 1.0},
        {"text": fenced(BROKEN)},
        {"text": "I would fuse the reduction and the scaling into one pass over each row."},  # no code
        {"status": 500},  # retried by the SDK, then the answer below
        {"text": fenced(GOOD_PLAIN, before="A shorter version:")},
    ])
    ledger_path = tmp_path / "ledger.sqlite"
    started = time.monotonic()
    try:
        code = main(["run", "rmsnorm", "--device", "cpu", "--seed", str(seed), "--ledger", str(ledger_path),
                     "--proposer", "llm", "--llm-model", "fake-coder", "--llm-base-url", llm.url + "/v1",
                     "--llm-price-in", "1", "--llm-price-out", "2", "--llm-max-cost", "0.0075"])
    finally:
        llm.close()
    wall = time.monotonic() - started
    assert code == 0
    with Ledger(ledger_path) as ledger:
        run = ledger.list_runs()[0]
        attempts = ledger.attempts(run["id"])
        best = ledger.best(run["id"])

    # Four answers at 1000 in + 500 out tokens, $1 and $2 per million: $0.002 each; $0.008 >= $0.0075.
    assert run["status"] == "done" and run["proposer"] == "llm"
    assert run["stop_reason"].startswith("LLM cost budget spent"), run["stop_reason"]
    assert run["options"]["llm"]["model"] == "fake-coder" and "key" not in json.dumps(run["options"]).lower()
    by_source = {}
    for a in attempts:
        by_source.setdefault(a["source_sha256"], []).append(a)
    answers = [a for a in attempts if a["proposer"] == "llm"]
    assert len(answers) == 4
    assert all(a["tokens_in"] == 1000 and a["tokens_out"] == 500 for a in answers)
    assert all(a["cost_usd"] == pytest.approx(0.002) for a in answers)
    assert sum(a["cost_usd"] or 0 for a in attempts) == pytest.approx(0.008)
    assert all(a["tokens_in"] is None and a["cost_usd"] is None for a in attempts if a["proposer"] == "tune")

    def answer_attempt(code_text):
        return next(a for a in answers if a["source"] == code_text)

    broken = answer_attempt(BROKEN)
    assert broken["verdict"] == "error" and broken["reasons"][0]["code"] in ("import_error", "compile_error")
    no_code = next(a for a in answers if a["reasons"] and a["reasons"][0]["code"] == "no_code")
    assert no_code["verdict"] == "error" and "fuse the reduction" in no_code["source"]
    # The good tunable answer: its default by the model, the rest of its SPACE by the tuner, all passing.
    tunable = answer_attempt(GOOD_TUNABLE)
    tuned = by_source[tunable["source_sha256"]]
    assert tunable["config"] == {"CHUNK": 0} and tunable["verdict"] == "pass"
    assert sorted(a["config"]["CHUNK"] for a in tuned) == [0, 32]
    assert all(a["verdict"] == "pass" for a in tuned)
    assert {a["proposer"] for a in tuned} == {"llm", "tune"}
    plain = answer_attempt(GOOD_PLAIN)  # came after an HTTP 500 the SDK retried
    assert plain["verdict"] == "pass"
    assert [r["status"] for r in llm.requests].count(500) == 1
    # The best is the model's code, kept over the seed, faster than it.
    seed_attempt = next(a for a in attempts if a["source"] == SLOW_SEED)
    assert best is not None and best["source"] in (GOOD_TUNABLE, GOOD_PLAIN)
    assert best["speedup"] > seed_attempt["speedup"]
    assert tunable["kept"] or plain["kept"]
    # Files beside the ledger: the candidate, its prompt, the raw answer.
    workdir = tmp_path / "candidates" / run["id"]
    assert (workdir / "001.py").read_text() == GOOD_TUNABLE
    assert "The tuner can pick CHUNK." in (workdir / "001.answer.md").read_text()
    first_prompt = llm.prompts()[0]
    assert "## What to return" in first_prompt and "SPACE" in first_prompt
    assert "range(4)" in first_prompt  # the seed is the first parent
    # Overlap: the slow first answer was written while the seed was judged, and the next call was
    # made while the first candidate was judged.
    first, second = llm.requests[0], llm.requests[1]
    seed_end = epoch(seed_attempt["created_at"])
    seed_start = seed_end - seed_attempt["judge_wall_s"]
    assert first["started"] < seed_end and first["finished"] > seed_start
    assert first["finished"] < seed_end  # the answer was ready before the judge was done
    tunable_end = epoch(tunable["created_at"])
    assert second["started"] < tunable_end - 0.5 * tunable["judge_wall_s"]
    print(f"whole run: {len(attempts)} attempts in {wall:.1f} s")


# -- faster runs with a stand-in judge -------------------------------------------------------------------

def stand_in_judge(loop, seconds=0.3, while_judging=None):
    """Judge by a speed written in the candidate (``# speed: 1.5``), after a short sleep. ``while_judging``
    is called with the candidate's number (its speed's tenths: 1.3 is 3) before the verdict."""
    original = loop._judge

    def judge(proposal, options):
        if getattr(proposal, "preset_verdict", None) is not None:
            return original(proposal, options)
        time.sleep(seconds)
        match = re.search(r"# speed: ([0-9.]+)", proposal.candidate.source)
        if while_judging and match:
            while_judging(round((float(match.group(1)) - 1) * 10))
        if not match:
            return {"verdict": "error", "reasons": [{"code": "import_error", "detail": "stand-in"}],
                    "speedup": None, "shapes": [], "judge_wall_s": seconds}
        speed = float(match.group(1)) * (1 + 0.01 * sum(map(int, re.findall(r"\d+", str(proposal.config)))))
        rng = random.Random(proposal.candidate.sha256 + str(proposal.config))
        times = [100.0 / speed * (1 + 0.005 * rng.gauss(0, 1)) for _ in range(40)]
        ref = [100.0 * (1 + 0.005 * rng.gauss(0, 1)) for _ in range(40)]
        return {"verdict": "pass", "reasons": [], "speedup": speed, "judge_wall_s": seconds,
                "shapes": [{"shape": {"T": 7, "H": 256}, "dtype": "float32", "weight": 1.0, "held_out": False,
                            "times_us": times, "ref_times_us": ref, "median_us": sorted(times)[20]}]}

    loop._judge = judge


def speed_file(speed: float, space: str = "") -> str:
    return f"import torch\n\n# speed: {speed}\n{space}\n\ndef kernel(x, weight, eps, **config):\n    return x\n"


def run_with_stand_in(tmp_path, settings, script, seeds_speed=(1.0,), budget=None, ideas=(), usage=(1000, 500),
                      gpu_like=False, while_judging=None):
    llm = FakeLLM(script, usage=usage)
    openai = settings.get("provider", "openai") == "openai"
    settings = LLMSettings(**{**settings, "base_url": llm.url + ("/v1" if openai else "")})
    task = load_task("rmsnorm")
    seeds = []
    for i, speed in enumerate(seeds_speed):
        path = tmp_path / f"seed{i}.py"
        path.write_text(speed_file(speed))
        seeds.append(load_candidate(path))
    ledger = Ledger(tmp_path / "ledger.sqlite")
    idea_ids = [ledger.add_idea("rmsnorm", text) for text in ideas]
    run_id = ledger.create_run(task="rmsnorm", task_path="rmsnorm", device="cpu", device_name="test", proposer="llm",
                               budget_attempts=budget)
    proposer = LLMProposer(task, ledger, run_id, seeds, make_chat(settings), settings, device="cpu")
    # gpu_like: the loop's GPU pipeline (one evaluation judging, one more in flight); the stand-in judges.
    options = JudgeOptions(device="cuda", gpu_index=0) if gpu_like else JudgeOptions(device="cpu")
    loop = Loop(ledger, run_id, task, proposer, RunLimits(budget_attempts=budget), [options], candidates=seeds)
    stand_in_judge(loop, while_judging=while_judging and (lambda number: while_judging(number, llm)))
    try:
        result = loop.run()
    finally:
        proposer.close()
        llm.close()
    return result, ledger, run_id, llm, idea_ids


def test_anthropic_run_with_an_idea_and_a_token_budget(tmp_path, keys):
    script = [{"text": fenced(speed_file(1.5, 'SPACE = {"B": [1, 2, 3, 4, 5]}')), "delay": 0.5},
              {"text": fenced(speed_file(1.2))},
              {"text": fenced(speed_file(1.7))},
              {"text": fenced(speed_file(1.9))}]
    settings = {"model": "claude-test", "provider": "anthropic", "max_tokens_total": 400}
    result, ledger, run_id, llm, (idea,) = run_with_stand_in(
        tmp_path, settings, script, ideas=["keep the whole row in registers"], usage=(100, 50))
    attempts = ledger.attempts(run_id)
    # 150 tokens an answer: the third reaches 450 >= 400, so no fourth call.
    assert result.stop_reason == "LLM token budget spent: 450 of 400 tokens"
    assert all(r["path"] == "/v1/messages" for r in llm.requests) and len(llm.requests) == 3
    assert llm.requests[0]["body"]["system"].startswith("You are an expert GPU kernel engineer")
    answers = [a for a in attempts if a["proposer"] == "llm"]
    assert [a["tokens_in"] for a in answers] == [100, 100, 100] and all(a["cost_usd"] is None for a in answers)
    # The idea went into the first prompt only, and the attempts of that answer link to it.
    prompts = llm.prompts()
    assert f"## Try this idea (idea {idea}" in prompts[0] and "keep the whole row in registers" in prompts[0]
    assert "## Try this idea" not in prompts[1]
    first = [a for a in attempts if a["idea_id"] == idea]
    assert first and {a["source"] for a in first} == {answers[0]["source"]}
    assert ledger.get_idea(idea)["status"] == "tried"
    # The tuner tried 4 configs of the tunable answer (its share), defaults first.
    tuned = [a for a in attempts if a["source"] == answers[0]["source"]]
    assert len(tuned) == 4 and tuned[0]["config"] == {"B": 1}
    assert ledger.best(run_id)["speedup"] == pytest.approx(1.7)


def test_model_errors_never_crash_a_run(tmp_path, keys):
    # 400 is not retried; five unusable answers in a row end the model's part of the run.
    script = [{"status": 400}] * 5
    settings = {"model": "m", "max_retries": 0}
    result, ledger, run_id, llm, _ = run_with_stand_in(tmp_path, settings, script)
    attempts = ledger.attempts(run_id)
    errors = [a for a in attempts if a["proposer"] == "llm"]
    assert len(errors) == 5
    assert all(a["verdict"] == "error" and a["reasons"][0]["code"] == "no_code" for a in errors)
    assert "HTTP 400" in errors[0]["reasons"][0]["detail"]
    assert all(a["tokens_in"] is None for a in errors)
    assert result.stop_reason.startswith("the model gave no usable answer 5 times in a row")
    assert [a["verdict"] for a in attempts if a["proposer"] == "tune"] == ["pass"]  # the seed


@pytest.mark.parametrize("gpu_like", [False, True])
def test_overlap_model_calls_run_while_the_judge_works(tmp_path, keys, gpu_like):
    script = [{"text": fenced(speed_file(1.0 + i / 10)), "delay": 0.4} for i in range(1, 5)]
    # While candidate k is judged, the judge waits for the model request for candidate k+1 to arrive.
    # Overlap means it arrives; a loop that asks the model only after judging would leave the judge
    # waiting out its 10 s. An event, not wall-clock stamps, so a loaded CI machine cannot flip it.
    arrived_while_judging = {}

    def wait_for_next_request(candidate_number, llm):
        with llm.lock:
            arrived_while_judging[candidate_number] = llm.lock.wait_for(
                lambda: llm.arrivals > candidate_number, timeout=10)

    result, ledger, run_id, llm, _ = run_with_stand_in(tmp_path, {"model": "m"}, script, budget=5,
                                                       gpu_like=gpu_like, while_judging=wait_for_next_request)
    attempts = ledger.attempts(run_id)
    assert len(attempts) == 5 and result.stop_reason == "attempt budget spent"
    assert [a["verdict"] for a in attempts] == ["pass"] * 5
    # Candidates 1-3 (speeds 1.1-1.3) each overlapped the next request; the seed, 0, overlapped the first.
    assert all(arrived_while_judging[k] for k in range(0, 4)), arrived_while_judging


def test_a_resumed_proposer_restores_spend_candidates_and_numbering(tmp_path, keys):
    script = [{"text": fenced(speed_file(1.3, 'SPACE = {"B": [1, 2, 3]}'))}, {"text": "no code here"}]
    result, ledger, run_id, llm, _ = run_with_stand_in(tmp_path, {"model": "m"}, script, budget=3)
    assert result.stop_reason == "attempt budget spent"
    settings = LLMSettings(model="m")
    again = LLMProposer(load_task("rmsnorm"), ledger, run_id, [], None, settings)
    assert again.tokens_spent == 1500 * len([a for a in ledger.attempts(run_id) if a["proposer"] == "llm"])
    written = [c for c in again.candidates() if c.path.endswith("001.py")]
    assert len(written) == 1 and written[0].space == {"B": (1, 2, 3)}
    assert again._next_number > 2  # new files never overwrite the run's earlier ones


def test_parents_are_the_best_few_distinct_candidates_in_turn(tmp_path, keys):
    task = load_task("rmsnorm")
    ledger = Ledger(tmp_path / "ledger.sqlite")
    run_id = ledger.create_run(task="rmsnorm", task_path="rmsnorm", device="cpu", device_name="t", proposer="llm")
    for i, (source, speed) in enumerate([("a", 1.1), ("b", 1.9), ("b", 2.0), ("c", 1.5), ("d", 1.7), ("e", None)]):
        verdict = {"verdict": "pass" if speed else "fail", "reasons": [], "speedup": speed, "shapes": [],
                   "judge_wall_s": 0.0}
        ledger.record_attempt(run_id, str(tmp_path / f"{source}.py"), f"# {source}\n", {"i": i}, verdict, "llm")
    settings = LLMSettings(model="m")
    proposer = LLMProposer(task, ledger, run_id, [], None, settings, workdir=tmp_path / "w")
    picks = [proposer._choose_parent(n) for n in range(1, 5)]
    assert [p.source for p in picks] == ["# b\n", "# d\n", "# c\n", "# b\n"]
    assert picks[0].speedup == 2.0 and picks[0].config == {"i": 2}


# -- the SDK backends against the loopback server ---------------------------------------------------------

def test_openai_backend_retries_a_503_and_reports_usage(keys, monkeypatch):
    llm = FakeLLM([{"status": 503}, {"text": "hello"}], usage=(11, 7))
    monkeypatch.setenv("OPENAI_BASE_URL", llm.url + "/v1")  # the SDK's own variable, no flag
    try:
        answer = make_chat(LLMSettings(model="m")).complete("sys", "user")
    finally:
        llm.close()
    assert (answer.text, answer.tokens_in, answer.tokens_out) == ("hello", 11, 7)
    assert [r["status"] for r in llm.requests] == [503, 200]
    assert llm.requests[1]["body"]["messages"] == [{"role": "system", "content": "sys"},
                                                   {"role": "user", "content": "user"}]


def test_a_timeout_is_retried_then_raised_as_one_line(keys):
    llm = FakeLLM([], default={"text": "late", "delay": 1.5})
    try:
        chat = make_chat(LLMSettings(model="m", base_url=llm.url + "/v1", timeout_s=0.3, max_retries=1))
        with pytest.raises(ModelCallError) as info:
            chat.complete("s", "u")
    finally:
        llm.close()
    assert "Timeout" in str(info.value) and "\n" not in str(info.value)


def test_anthropic_backend_speaks_the_messages_api(keys):
    llm = FakeLLM([{"text": fenced(GOOD_PLAIN)}], usage=(20, 30))
    try:
        answer = make_chat(LLMSettings(model="claude-x", provider="anthropic", base_url=llm.url)).complete("s", "u")
    finally:
        llm.close()
    assert extract_candidate(answer.text).code == GOOD_PLAIN
    assert (answer.tokens_in, answer.tokens_out) == (20, 30)
    body = llm.requests[0]["body"]
    assert llm.requests[0]["path"] == "/v1/messages" and body["system"] == "s" and body["max_tokens"] > 0


# -- the command line --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,env,message", [
    (["--proposer", "llm"], {"OPENAI_API_KEY": "k"}, "needs --llm-model"),
    (["--proposer", "llm", "--llm-model", "m"], {}, "needs OPENAI_API_KEY"),
    (["--proposer", "llm", "--llm-model", "m", "--llm-provider", "anthropic"], {}, "needs ANTHROPIC_API_KEY"),
    (["--proposer", "llm", "--llm-model", "m", "--llm-max-cost", "1"], {"OPENAI_API_KEY": "k"}, "--llm-price-in"),
    (["--llm-model", "m"], {"OPENAI_API_KEY": "k"}, "goes with --proposer llm"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, env, message):
    from ratchet.cli import main

    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ledger = tmp_path / "ledger.sqlite"
    assert main(["run", "rmsnorm", "--device", "cpu", "--ledger", str(ledger), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not ledger.exists()  # nothing was started


# -- extraction ----------------------------------------------------------------------------------------------

def test_extraction_takes_the_biggest_block_defining_kernel():
    usage = "```python\nout = kernel(x, w, 1e-6)\n```"
    answer = f"Plan first.\n\n```python\n{GOOD_TUNABLE}```\n\nCall it like this:\n{usage}\n"
    assert extract_candidate(answer).code == GOOD_TUNABLE
    two = f"```python\n{GOOD_PLAIN}```\nA tunable version:\n```py\n{GOOD_TUNABLE}```"
    assert extract_candidate(two).code == GOOD_TUNABLE


def test_extraction_of_odd_fences():
    assert extract_candidate(f"~~~python\n{GOOD_PLAIN}~~~").code == GOOD_PLAIN
    assert extract_candidate(f"```\n{GOOD_PLAIN}```").code == GOOD_PLAIN  # no language
    assert extract_candidate(f"```python\r\n{GOOD_PLAIN.replace(chr(10), chr(13) + chr(10))}```").code == GOOD_PLAIN
    assert extract_candidate(f"````python\n{GOOD_PLAIN}````").code == GOOD_PLAIN
    assert extract_candidate(GOOD_PLAIN).code == GOOD_PLAIN  # bare code, no fence
    cut = extract_candidate(f"```python\n{GOOD_PLAIN}")  # an answer cut off by its token limit
    assert cut.code == GOOD_PLAIN and cut.parses


def test_extraction_of_answers_without_usable_code():
    assert extract_candidate("").code is None
    assert extract_candidate("Use a two-pass reduction.").code is None
    assert extract_candidate("```cpp\nint kernel() {}\n```").code is None  # not Python
    helper = extract_candidate("```python\ndef helper(x):\n    return x\n```")
    assert helper.code is None and "defines kernel" in helper.note
    broken = extract_candidate(fenced(BROKEN))  # tries to define kernel: goes to the judge
    assert broken.code == BROKEN and not broken.parses
    nested = extract_candidate("```python\nclass K:\n    def kernel(self, x):\n        return x\n```")
    assert nested.code is not None and not nested.parses  # the judge says missing_kernel
