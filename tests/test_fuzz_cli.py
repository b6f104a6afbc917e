"""Every command's argument parsing, fuzzed with hypothesis: argv lists built from each subparser's own
options (flags, choices, typed values) with junk values, junk positionals, unknown and repeated flags,
run in-process through ``ratchet.cli.main``. The property: a command either succeeds, or prints exactly
one line on stderr starting ``ratchet: error:`` and exits 2 (``eval`` may exit 1 for a fail verdict,
``doctor`` 1 for problems left); never a traceback, never a hang.

The inputs are chosen to fail fast: the ledger named by ``RATCHET_LEDGER`` does not exist, positionals
are junk or files that are no task, candidate or run. Only what would do long real work once its
arguments were accepted is stubbed: ``hw`` (may measure the machine), ``mcp`` (serves on stdin until it
closes), ``stack`` (builds and times a model: its WORKLOAD is a choice, so the fuzzer reaches it),
``dashboard`` (serves the ledger until Ctrl-C, once a ledger the fuzz made exists).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hang_limit import hang_limit

import ratchet.cli as cli

EXAMPLES = int(os.environ.get("RATCHET_FUZZ_CLI_EXAMPLES", "1400"))
EXAMPLE_LIMIT_S = 20
LONG_RUNNING = ("hw", "mcp", "stack", "dashboard")
ALLOWED_CODES = {"eval": {0, 1, 2}, "doctor": {0, 1, 2}}
SEEN: dict[str, int] = {}


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub)command path, e.g. ('idea', 'add'), with its parser."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + (name,)] = sub
                found.update(subcommands(sub, prefix + (name,)))
    return found


PARSER = cli.build_parser()
COMMANDS = {path: sub for path, sub in subcommands(PARSER).items()
            if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)}

junk_text = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20),
    st.sampled_from(["", "-", "--", "-1", "0", "1e999", "nan", "3x", "0x", "-2x", "{}", "[]", '{"BLOCK": 1}',
                     "{not json", "1,2", "0,0", "99", "a,b", "1h", "0s", "-5m", "1x4096", "x", "/", ".", "..",
                     "/dev/null", "/nonexistent/dir/file.py", "r00000000", "NOPE", "\n", "é", "a" * 300]),
)


def value_strategy(action: argparse.Action, files: list[str]):
    options = [junk_text, st.sampled_from(files)]
    if action.choices:
        options.append(st.sampled_from(list(action.choices)))
    if action.type is int or action.type is float:
        options.append(st.integers(-2**70, 2**70).map(str))
    return st.one_of(*options)


@st.composite
def argvs(draw, files: list[str]) -> list[str]:
    path = draw(st.sampled_from(sorted(COMMANDS)))
    parser = COMMANDS[path]
    argv = list(path)
    optionals = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    positionals = [a for a in parser._actions if not a.option_strings]
    chosen = draw(st.lists(st.sampled_from(optionals), max_size=5)) if optionals else []
    for action in chosen:
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
        elif draw(st.integers(0, 9)) == 0:
            argv.append(flag)  # the value is missing
        else:
            value = draw(value_strategy(action, files))
            argv += [f"{flag}={value}"] if draw(st.booleans()) and flag.startswith("--") else [flag, value]
    for action in positionals:
        if draw(st.integers(0, 7)) == 0:
            continue  # missing positional
        count = draw(st.integers(1, 3)) if action.nargs in ("*", "+") else 1
        argv += [draw(value_strategy(action, files)) for _ in range(count)]
    extra = draw(st.integers(0, 12))
    if extra == 0:
        argv.append(draw(st.sampled_from(["--no-such-flag", "--jsn", "-z", "--ledger-path=x"])))
    elif extra == 1:
        argv.append("--help")
    elif extra == 2:
        argv.insert(0, draw(st.sampled_from(["--version", "evl", "rnu", "no-such-command", "-q"])))
    elif extra == 3:
        argv.append(draw(junk_text))
    return argv


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A folder with the files the fuzzer may name: none of them a task, candidate, model or ledger."""
    root = tmp_path_factory.mktemp("fuzz_cli")
    (root / "binary.py").write_bytes(b"\x00\xff\xfe junk")
    (root / "empty.py").write_text("")
    (root / "text.txt").write_text("not python\n")
    (root / "nokernel.py").write_text("x = 1\n")
    (root / "folder").mkdir()
    (root / "dangling.py").symlink_to(root / "nowhere")
    (root / "notes.sqlite").write_text("not a database\n" * 20)
    return root


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), hang_limit(EXAMPLE_LIMIT_S, f"ratchet {argv}"):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's --help and --version
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzz_every_command_line(sandbox, monkeypatch, data):
    # A fixed list (commands create files in the sandbox; hypothesis needs the same choices every time).
    files = [str(sandbox / name) for name in ("binary.py", "empty.py", "text.txt", "nokernel.py", "folder",
                                              "dangling.py", "notes.sqlite", "missing.py", "no/ledger.sqlite")]
    argv = data.draw(argvs(files))
    monkeypatch.chdir(sandbox)
    monkeypatch.setenv("RATCHET_LEDGER", str(sandbox / "no-ledger-here" / "ledger.sqlite"))
    monkeypatch.setenv("RATCHET_NCU", "off")
    monkeypatch.setattr(cli, "build_parser", lambda: PARSER)  # built once: ~50 ms a build on two busy cores
    code, out, err = run_main(argv)
    command = next((a for a in argv if not a.startswith("-")), "")
    SEEN[command] = SEEN.get(command, 0) + 1
    assert "Traceback" not in err, (argv, err)
    assert code in ALLOWED_CODES.get(command, {0, 2}), (argv, code, err)
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ratchet: error: ") or (not err and "usage" in out), (argv, err)


@pytest.fixture(autouse=True)
def stub_long_running(monkeypatch):
    """Past their argument checks, these would measure, serve or time a model for minutes."""
    for name in LONG_RUNNING:
        module = __import__(f"ratchet.cli.{name}", fromlist=["x"])
        func = getattr(module, f"cmd_{name}")
        for action in PARSER._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                sub = action.choices[name]
                if sub.get_default("func") is func:
                    monkeypatch.setattr(sub, "_defaults", {**sub._defaults, "func": lambda args: 0})


def test_a_double_dash_given_as_an_options_value_is_one_line(sandbox, monkeypatch):
    """Python 3.11 and 3.12 turn --output=-- into an empty list (found by the fuzzer above: a traceback
    from `ratchet program`); every command's parser refuses it in one line."""
    monkeypatch.chdir(sandbox)
    for argv in (["program", "--run", "", "--output=--", ""], ["eval", "rmsnorm", "x.py", "--run=--"]):
        code, out, err = run_main(argv)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [
            f"ratchet: error: argument {'-o/--output' if argv[0] == 'program' else '--run'}: '--' is not a value "
            f"(see 'ratchet {argv[0]} --help')"]


def test_zz_every_command_was_fuzzed():
    print("cli fuzz examples per command:", dict(sorted(SEEN.items())))
    if SEEN:  # absent when this test is selected alone
        top = {path[0] for path in COMMANDS}
        assert top <= set(SEEN) and sum(SEEN.values()) >= EXAMPLES


def test_no_traceback_reaches_stderr_of_the_real_command(tmp_path):
    """The same property through a real process, for a few hostile argv lists."""
    (tmp_path / "binary.py").write_bytes(b"\x00\xff")
    cases = [["eval", str(tmp_path / "binary.py"), str(tmp_path / "binary.py")],
             ["eval", str(tmp_path), str(tmp_path), "--config", "[" * 100000],
             ["runs", "--ledger", str(tmp_path / "binary.py")],
             ["run", "--resume", "rnope", "--ledger", str(tmp_path / "l.sqlite")],
             ["doctor", "--ledger", str(tmp_path)],
             ["idea", "add", "x" * 5000, "text"]]
    script = ("import sys\nfrom ratchet.cli import main\nfor argv in eval(sys.argv[1]):\n"
              "    code = main(argv)\n    print(code, file=sys.stderr, flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script, repr(cases)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, RATCHET_LEDGER=str(tmp_path / "none.sqlite")), cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 * len(cases), lines  # per case: one error line, then its exit code
    for message, code in zip(lines[0::2], lines[1::2]):
        assert message.startswith("ratchet: error: ") and code in ("1", "2"), (message, code)

