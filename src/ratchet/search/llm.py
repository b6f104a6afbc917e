"""The LLM proposer: the model writes ideas, the tuner tunes.

Each model call gets the brief (``ratchet.agents.brief.build_brief``), one parent candidate and at most one
pending idea, and is asked for ONE complete candidate file with a ``SPACE``. The answer's code is
written under the run's directory next to the ledger (``candidates/RUN/NNN.py``, with the prompt and
the raw answer beside it), judged with its default config, and, once one of its configs passes, a
TuneProposer tries up to ``configs_per_candidate`` configs of its SPACE in all (defaults first). The
seeds get the same share.

- Overlap: one model call runs at a time in a background thread, and the next one starts as soon as
  an answer is taken, so the model works while the loop judges. ``propose()`` hands out a ready
  answer first, else a tuner config; with nothing to hand out it returns None while proposals are
  still being judged (the loop commits them and asks again), and waits for the model only when none
  are. The price: the prompt of call n+1 is written before candidate n is judged.
- Parents: one per idea, the best few (3) ideas taken in turn. Passing attempts are grouped by idea: the
  idea an attempt was given (its ``idea_id``: every file and config written for it), else its own source
  (a model's candidate and its tuned configs); each idea offers its fastest attempt. So three variants of
  one idea never take every slot from a second, slower idea. Before anything passed, the seeds in turn.
- Ledger: the attempt of an answer's first config carries its ``tokens_in``, ``tokens_out`` and
  ``cost_usd`` (None without prices: unknown, not free) and the idea it was given (``idea_id``); the
  tuner's configs of that candidate carry the same idea and parent, and no tokens.
- An answer without usable code, or a call that still failed after the SDK's retries, is recorded as
  an attempt with verdict ``error`` and reason ``no_code``; code that does not parse or defines no
  kernel goes to the judge, which names it (``import_error``, ``missing_kernel``). Nothing a model does
  ends a run.
- Budgets: no call starts once ``max_tokens_total`` or ``max_cost_usd`` is reached (the last call may
  pass it by one answer), nor after 5 unusable answers in a row; the tuner then finishes the share of
  the candidates it has, and ``stop_reason`` says why the proposer ended.
"""

from __future__ import annotations

import ast
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from ratchet.candidate import Candidate, CandidateError, load_candidate, top_level_names
from ratchet.run.ledger import Ledger, config_key
from ratchet.search.base import Outcome, Proposal
from ratchet.search.llm_client import Answer, LLMSettings, ModelCallError
from ratchet.search.tune import TuneProposer
from ratchet.task import Task

PARENTS = 3  # the best few distinct ideas (their fastest passing attempt each) a prompt starts from, in turn
MAX_UNUSABLE_IN_A_ROW = 5
BRIEF_CHARS = 24000

SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer optimizing the kernels of LLM inference. A trusted judge runs "
    "your code in a separate process on fresh random inputs and held-out shapes, checks every output "
    "against a higher-precision reference, rejects anything that games the measurement, and times it "
    "against the reference. Only correct kernels that are really faster are kept.")


# -- extraction --------------------------------------------------------------------------------------

_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$")
_PY_LANGS = {"python", "py", "python3", "py3", ""}
_DEF_KERNEL = re.compile(r"^\s*(def|class)\s+(kernel|ModelNew)\b", re.M)


@dataclass(frozen=True)
class Extracted:
    code: str | None  # the candidate file, or None: the answer holds no usable code
    parses: bool
    note: str


def code_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of a Markdown answer as (language, code); an unclosed last fence (an answer cut
    off by its token limit) runs to the end."""
    lines = text.replace("\r\n", "\n").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        i += 1
        if not match:
            continue
        fence, lang = match.group(1), match.group(2).lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body = []
        while i < len(lines) and not close.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        blocks.append((lang, "\n".join(body).strip("\n") + "\n"))
    return blocks


def _defines_kernel(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return bool(top_level_names(tree) & {"kernel", "ModelNew"})  # the rule load_candidate applies


def _biggest(codes: list[str]) -> str:
    """The longest block; among equals, the last (a corrected version comes after the first try)."""
    return max(enumerate(codes), key=lambda item: (len(item[1].strip()), item[0]))[1]


def extract_candidate(answer: str) -> Extracted:
    """The candidate file in a model's answer.

    The biggest Python block that parses and defines ``kernel`` (or ``ModelNew``) at top level; else the
    biggest Python block that tries to (``def kernel``), which goes to the judge to be named as broken;
    else the whole answer when it is bare code that defines ``kernel``; else no usable code.
    """
    blocks = [code for lang, code in code_blocks(answer or "") if lang in _PY_LANGS]
    good = [code for code in blocks if _defines_kernel(code)]
    if good:
        return Extracted(_biggest(good), True, "")
    broken = [code for code in blocks if _DEF_KERNEL.search(code)]
    if broken:
        return Extracted(_biggest(broken), False, "the code block defining kernel does not parse or define it "
                                                   "at top level")
    if not blocks and _defines_kernel(answer or ""):
        return Extracted(answer.strip("\n") + "\n", True, "bare code without a fence")
    if not (answer or "").strip():
        return Extracted(None, False, "the answer is empty")
    if blocks:
        return Extracted(None, False, f"none of the answer's {len(blocks)} Python block(s) defines kernel(...)")
    return Extracted(None, False, "the answer holds no ```python block")


# -- proposals ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LLMProposal(Proposal):
    """A proposal with what the ledger records of a model answer (read by the loop with getattr)."""

    idea_id: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    preset_verdict: dict | None = None  # set when there is nothing to judge (no usable code)


@dataclass
class _Entry:
    """A candidate the proposer tunes: a seed or a model's answer."""

    candidate: Candidate
    tuner: TuneProposer
    parent_attempt: int | None = None
    idea: str | None = None
    idea_id: int | None = None
    used: set = field(default_factory=set)  # config keys proposed or replayed
    passed: bool = False


@dataclass(frozen=True)
class _Parent:
    candidate_path: str
    source: str
    config: dict
    speedup: float | None
    attempt_id: int | None
    seq: int | None
    idea: str | None = None  # the idea this parent was written for, when it had one


@dataclass
class _Call:
    number: int
    parent: _Parent | None
    idea: dict | None
    prompt: str = ""
    answer: Answer | None = None
    error: str | None = None
    started: float = 0.0  # time.time(), for logs and tests
    finished: float = 0.0


def instructions(configs_per_candidate: int) -> str:
    return (
        "## What to return\n"
        "Return ONE complete Python file in a single ```python block, and no other code block. The file "
        "must define `kernel(...)` with exactly the task's parameters, returning what the reference "
        "returns, and `SPACE = {\"NAME\": [value, ...], ...}`: the tunable parameters (block sizes, warps, "
        "stages, chunk sizes, ...) as a literal dict of lists whose first values are your best guess. "
        "Each SPACE name arrives in kernel(...) as a keyword argument; a tuner tries up to "
        f"{configs_per_candidate} configs of it, defaults first. `CONSTRAINTS = [\"EXPR\", ...]` over "
        "SPACE names is optional. Bring a new idea (an algorithm, a fusion, a better memory access "
        "pattern) rather than new parameter values, which the tuner picks. A few sentences of "
        "explanation before the block are welcome.\n")


def parent_section(parent: _Parent | None) -> str:
    if parent is None:
        return ""
    if parent.speedup is not None:
        status = (f"passed at {parent.speedup:.3f}x over the reference with config {parent.config} "
                  f"(attempt {parent.seq})")
    else:
        status = "a starting point that has not passed yet"
    idea = f"It was written for the idea: {parent.idea}\n" if parent.idea else ""
    return (f"## Start from this candidate ({Path(parent.candidate_path).name}: {status})\n{idea}"
            f"```python\n{parent.source.rstrip()}\n```\n")


def idea_section(idea: dict | None) -> str:
    if idea is None:
        return ""
    return f"## Try this idea (idea {idea['id']}, from {idea.get('author') or 'human'})\n{idea['text']}\n"


def idea_key(attempt: dict) -> tuple:
    """What makes two attempts the same idea: the idea they were given, else the same source."""
    if attempt.get("idea_id") is not None:
        return ("idea", attempt["idea_id"])
    return ("source", attempt["source_sha256"])


def parents_by_idea(attempts: list[dict], limit: int) -> list[dict]:
    """The fastest passing attempt of each idea, for the ``limit`` ideas with the fastest ones."""
    best: dict[tuple, dict] = {}
    for attempt in attempts:
        if attempt["verdict"] != "pass" or attempt["speedup"] is None:
            continue
        key = idea_key(attempt)
        if key not in best or attempt["speedup"] > best[key]["speedup"]:
            best[key] = attempt
    return sorted(best.values(), key=lambda a: -a["speedup"])[:limit]


class LLMProposer:
    name = "llm"

    def __init__(self, task: Task, ledger: Ledger, run_id: str, seeds: list[Candidate], chat,
                 settings: LLMSettings, device: str = "cpu", sampler: str = "tpe",
                 workdir: str | Path | None = None):
        self.task, self.ledger, self.run_id, self.chat = task, ledger, run_id, chat
        self.settings, self.device, self.sampler = settings, device, sampler
        self.workdir = Path(workdir) if workdir else Path(ledger.path).parent / "candidates" / run_id
        self.entries: dict[str, _Entry] = {}
        for i, seed in enumerate(seeds):
            self.entries.setdefault(seed.sha256, _Entry(seed, TuneProposer([seed], sampler, seed=i)))
        self.seed_shas = set(self.entries)
        self.stop_reason: str | None = None
        self.calls: list[_Call] = []  # every call taken, in order (for displays and tests)
        self.tokens_spent = 0
        self.cost_spent = 0.0
        self._future: Future | None = None
        self._started = self._closed = False
        self._unusable_in_a_row = 0
        self._ideas_given: set[int] = set()
        self._outstanding: set[tuple[str, str]] = set()  # handed out, outcome not told yet
        self._next_number = 1
        self._restore()

    # -- the protocol ------------------------------------------------------------------------------
    def propose(self) -> Proposal | None:
        if not self._started:
            self._started = True
            self._maybe_start_call()
        while True:
            if self._future is not None and self._future.done():
                call = self._future.result()
                self._future = None
                proposal = self._from_call(call)
                self._maybe_start_call()  # the model works on the next answer while this one is judged
                return self._hand_out(proposal)
            proposal = self._next_tuner_config()
            if proposal is not None:
                return self._hand_out(proposal)
            # Nothing to hand out now. With proposals still being judged, None lets the loop commit
            # them (their outcomes may open tuner configs) and ask again; the loop ends only on None
            # with nothing in flight. Else wait for the model.
            if self._future is None or self._outstanding:
                return None
            self._future.exception()

    def _hand_out(self, proposal: Proposal) -> Proposal:
        self._outstanding.add((proposal.candidate.sha256, config_key(proposal.config)))
        return proposal

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self._outstanding.discard((proposal.candidate.sha256, config_key(proposal.config)))
        entry = self.entries.get(proposal.candidate.sha256)
        if entry is None:  # an answer without code: nothing to tune
            return
        entry.tuner.tell(proposal, outcome)
        entry.used.add(config_key(proposal.config))
        if outcome.verdict == "pass":
            entry.passed = True

    def candidates(self) -> list[Candidate]:
        """Every candidate this proposer tunes (seeds and answers restored from the ledger)."""
        return [e.candidate for e in self.entries.values()]

    def close(self) -> None:
        """No new calls; a call still running is abandoned (its thread is a daemon)."""
        self._closed = True

    # -- tuning ------------------------------------------------------------------------------------
    def _next_tuner_config(self) -> Proposal | None:
        """A config of the oldest candidate with share left: its default first, the others once one passed."""
        for entry in self.entries.values():
            if len(entry.used) >= self.settings.configs_per_candidate or (entry.used and not entry.passed):
                continue
            proposal = entry.tuner.propose()
            if proposal is None:
                continue
            entry.used.add(config_key(proposal.config))
            return LLMProposal(proposal.candidate, proposal.config, parent_attempt=entry.parent_attempt,
                               idea=entry.idea, proposer="tune", idea_id=entry.idea_id)
        return None

    # -- model calls -------------------------------------------------------------------------------
    def _maybe_start_call(self) -> None:
        if self._future is not None or self._closed or self.stop_reason:
            return
        self.stop_reason = self._budget_spent()
        if self.stop_reason:
            return
        number = self._next_number
        self._next_number += 1
        call = _Call(number, self._choose_parent(number), self._choose_idea())
        future: Future = Future()

        def work():
            try:
                self._call_model(call)
            except BaseException as exc:  # a bug in the brief or the SDK must not kill the run
                call.error = f"{type(exc).__name__}: {exc}"
            call.finished = time.time()
            future.set_result(call)

        self._future = future
        threading.Thread(target=work, name=f"ratchet-llm-call-{number}", daemon=True).start()

    def _call_model(self, call: _Call) -> None:
        call.started = time.time()
        from ratchet.agents.brief import build_brief  # written alongside; the prompt's main part

        extra = (parent_section(call.parent) + idea_section(call.idea)
                 + instructions(self.settings.configs_per_candidate))
        brief = build_brief(self.task, ledger=self.ledger, run_id=self.run_id, device=self.device,
                            max_chars=max(4000, BRIEF_CHARS - len(extra)))
        call.prompt = f"{brief.rstrip()}\n\n{extra}"
        self._write(call.number, "prompt.md", f"# system\n{SYSTEM_PROMPT}\n\n# user\n{call.prompt}")
        try:
            call.answer = self.chat.complete(SYSTEM_PROMPT, call.prompt)
        except ModelCallError as exc:
            call.error = str(exc)

    def _budget_spent(self) -> str | None:
        s = self.settings
        if s.max_tokens_total is not None and self.tokens_spent >= s.max_tokens_total:
            return f"LLM token budget spent: {self.tokens_spent} of {s.max_tokens_total} tokens"
        if s.max_cost_usd is not None and self.cost_spent >= s.max_cost_usd:
            return f"LLM cost budget spent: ${self.cost_spent:.4f} of ${s.max_cost_usd:.4f}"
        if self._unusable_in_a_row >= MAX_UNUSABLE_IN_A_ROW:
            last = self.calls[-1]
            return (f"the model gave no usable answer {self._unusable_in_a_row} times in a row "
                    f"(last: {last.error or 'no code'})")
        return None

    def _choose_parent(self, number: int) -> _Parent | None:
        """The fastest attempt of each of the best few ideas, taken in turn; else the seeds in turn."""
        top = parents_by_idea(self.ledger.attempts(self.run_id), PARENTS)
        if top:
            a = top[(number - 1) % len(top)]
            return _Parent(a["candidate_path"], a["source"], a["config"], a["speedup"], a["id"], a["seq"],
                           a.get("idea"))
        seeds = [self.entries[sha].candidate for sha in self.seed_shas]
        if not seeds:
            return None
        seeds.sort(key=lambda c: c.path)
        seed = seeds[(number - 1) % len(seeds)]
        return _Parent(seed.path, seed.source, seed.default_config(), None, None, None)

    def _choose_idea(self) -> dict | None:
        """The oldest pending idea for the task not yet given to the model in this run."""
        for idea in self.ledger.ideas(self.task.name):
            if idea["status"] == "pending" and idea["id"] not in self._ideas_given:
                self._ideas_given.add(idea["id"])
                return idea
        return None

    # -- answers -----------------------------------------------------------------------------------
    def _from_call(self, call: _Call) -> Proposal:
        self.calls.append(call)
        answer = call.answer
        tokens_in = answer.tokens_in if answer else None
        tokens_out = answer.tokens_out if answer else None
        cost = None
        if answer is not None:
            # Budgets count what the server reported; a server that reports no usage: ~4 characters a token.
            self.tokens_spent += tokens_in if tokens_in is not None else len(call.prompt) // 4
            self.tokens_spent += tokens_out if tokens_out is not None else len(answer.text) // 4
            cost = self.settings.cost_usd(tokens_in, tokens_out)
            self.cost_spent += cost or 0.0
        idea = call.idea
        if call.error is not None:
            self._unusable_in_a_row += 1
            if idea is not None:  # the model never saw it: offer it again
                self._ideas_given.discard(idea["id"])
            text = f"model call {call.number} failed: {call.error}\n"
            return self._preset(call, "no_code", f"the model call failed: {call.error}", text, None, None, None)
        ledger_fields = dict(tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost)
        self._write(call.number, "answer.md", answer.text)
        extracted = extract_candidate(answer.text)
        if extracted.code is None:
            self._unusable_in_a_row += 1
            detail = f"no usable code in the answer: {extracted.note} (finish reason {answer.finish_reason})"
            return self._preset(call, "no_code", detail, answer.text, **ledger_fields)
        self._unusable_in_a_row = 0
        path = self._write(call.number, "py", extracted.code)
        try:
            candidate = load_candidate(path) if extracted.parses else Candidate(str(path.resolve()), extracted.code)
        except CandidateError as exc:  # e.g. a SPACE that is not a literal dict of lists
            return self._preset(call, "bad_input", str(exc), answer.text, **ledger_fields)
        if candidate.sha256 in self.entries:
            return self._preset(call, "no_code", "the answer repeats a candidate already in this run",
                                answer.text, **ledger_fields)
        entry = _Entry(candidate, TuneProposer([candidate], self.sampler, seed=call.number),
                       parent_attempt=call.parent and call.parent.attempt_id, idea=idea and idea["text"],
                       idea_id=idea and idea["id"])
        first = entry.tuner.propose()  # the default config
        if first is None:
            return self._preset(call, "bad_input", "no config of the SPACE meets the CONSTRAINTS", answer.text,
                                **ledger_fields)
        self.entries[candidate.sha256] = entry
        entry.used.add(config_key(first.config))
        return LLMProposal(candidate, first.config, parent_attempt=entry.parent_attempt, idea=entry.idea,
                           proposer=self.name, idea_id=entry.idea_id, **ledger_fields)

    def _preset(self, call: _Call, code: str, detail: str, text: str, tokens_in, tokens_out, cost_usd) -> Proposal:
        """An attempt with nothing to judge: the answer itself is recorded, with verdict error."""
        path = self._write(call.number, "answer.md", text)
        # The header makes the recorded source unique in the run (the ledger keys attempts by source).
        source = f"# ratchet: answer {call.number} of run {self.run_id}, no candidate ({code})\n{text}"
        idea = call.idea if call.error is None else None
        verdict = {"verdict": "error", "reasons": [{"code": code, "detail": detail}], "speedup": None,
                   "shapes": [], "judge_wall_s": 0.0, "task": self.task.name, "candidate": str(path),
                   "config": {}, "device": self.device, "notes": ["recorded by the llm proposer: nothing to judge"]}
        return LLMProposal(Candidate(str(path.resolve()), source), {},
                           parent_attempt=call.parent and call.parent.attempt_id, idea=idea and idea["text"],
                           proposer=self.name, idea_id=idea and idea["id"], tokens_in=tokens_in,
                           tokens_out=tokens_out, cost_usd=cost_usd, preset_verdict=verdict)

    def _write(self, number: int, suffix: str, text: str) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"{number:03d}.{suffix}"
        path.write_text(text)
        return path

    # -- resume ------------------------------------------------------------------------------------
    def _restore(self) -> None:
        """On resume: the spend so far, the ideas given, and the model's candidates (to tune further)."""
        attempts = self.ledger.attempts(self.run_id)
        for attempt in attempts:
            self.tokens_spent += (attempt["tokens_in"] or 0) + (attempt["tokens_out"] or 0)
            self.cost_spent += attempt["cost_usd"] or 0.0
            if attempt["idea_id"] is not None:
                self._ideas_given.add(attempt["idea_id"])
            if attempt["proposer"] != self.name or attempt["source_sha256"] in self.entries:
                continue
            path = Path(attempt["candidate_path"])
            if path.suffix != ".py":
                continue
            try:
                if not path.is_file() or path.read_text() != attempt["source"]:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(attempt["source"])
                candidate = load_candidate(path)
            except (OSError, CandidateError):
                continue  # broken code is never tuned
            self.entries[candidate.sha256] = _Entry(
                candidate, TuneProposer([candidate], self.sampler, seed=attempt["seq"]),
                parent_attempt=attempt["parent_attempt"], idea=attempt["idea"], idea_id=attempt["idea_id"])
        numbers = [int(p.name[:3]) for p in self.workdir.glob("[0-9][0-9][0-9].*")] if self.workdir.is_dir() else []
        self._next_number = max(numbers, default=0) + 1


def summary(settings: LLMSettings) -> str:
    """One line for the run's banner."""
    price = (f"${settings.price_in_per_mtok:g}/${settings.price_out_per_mtok:g} per M tokens in/out"
             if settings.priced else "cost unknown (no --llm-price-in/--llm-price-out)")
    return f"{settings.provider} model {settings.model}, {price}"

