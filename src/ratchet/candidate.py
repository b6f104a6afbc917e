"""Candidate files: a ``kernel(...)`` with the reference's parameters, and an optional ``SPACE``.

This module only reads a candidate's source and validates configs; it never imports candidate code
into the caller's process (that happens in the judge's worker). A config is a dict choosing one value
for each SPACE key; its values arrive in ``kernel(...)`` as keyword arguments.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


class CandidateError(Exception):
    """The candidate file or config is unusable; the message is one line for the user."""


# A kernel's source is kilobytes; a file this large is a mistake (or an attack on the parser), not a kernel.
MAX_SOURCE_BYTES = 8 * 1024 * 1024
# The tuner lists a SPACE's configs; the built-in seeds have at most ~100. A space this large is a typo.
MAX_SPACE_CONFIGS = 1_000_000
# What Python's own parser and literal reader raise on hostile input besides SyntaxError: null bytes
# (ValueError), nesting too deep for the parser (RecursionError, MemoryError), unhashable keys (TypeError).
_PARSE_ERRORS = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError)


@dataclass(frozen=True)
class Candidate:
    path: str
    source: str
    space: Mapping[str, tuple] = field(default_factory=dict)
    kind: str = "ratchet"  # or "kernelbench" for a ModelNew file
    constraints: tuple[str, ...] = ()  # expressions over SPACE names that every config must meet

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def default_config(self) -> dict[str, Any]:
        """The first value of every SPACE key: the seed author's best guess."""
        return {key: values[0] for key, values in self.space.items()}

    def all_configs(self) -> list[dict[str, Any]]:
        keys = list(self.space)
        return [dict(zip(keys, combo)) for combo in itertools.product(*(self.space[k] for k in keys))]

    def valid_configs(self) -> list[dict[str, Any]]:
        """Every config of SPACE that meets the CONSTRAINTS, in SPACE order."""
        return [c for c in self.all_configs() if not self.broken_constraints(c)]

    def broken_constraints(self, config: Mapping[str, Any]) -> list[str]:
        return [expr for expr in self.constraints if not _eval_constraint(expr, config)]

    def resolve_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """Fill missing keys with defaults; a key or value outside SPACE is a CandidateError."""
        resolved = self.default_config()
        for key, value in (config or {}).items():
            if key not in self.space:
                known = ", ".join(self.space) or "none"
                raise CandidateError(f"config key {_one_line(repr(key))[:80]} is not in the candidate's SPACE (keys: {known})")
            if value not in self.space[key]:
                raise CandidateError(f"config {key}={_one_line(repr(value))[:80]} is not in SPACE[{key!r}] = "
                                     f"{list(self.space[key])}")
            resolved[key] = value
        broken = self.broken_constraints(resolved)
        if broken:
            raise CandidateError(f"config {resolved} breaks the candidate's constraint '{_one_line(broken[0])}'")
        return resolved


def parse_config(text: str | None) -> dict[str, Any]:
    """Parse ``--config`` JSON; anything but a JSON object is a CandidateError."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CandidateError(f"--config is not valid JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:
        raise CandidateError("--config is nested too deeply to be a config") from None
    if not isinstance(value, dict):
        raise CandidateError("--config must be a JSON object, e.g. '{\"BLOCK\": 1024}'")
    return value


def load_candidate(path: str | Path) -> Candidate:
    """Read a candidate file and its SPACE without running it.

    SPACE must be a literal dict of lists so that it can be read safely here; the worker checks again
    that the imported module defines ``kernel`` with the right parameters.
    """
    path = Path(path)
    source = _read_source(path)
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
        raise CandidateError(f"{where}: syntax error: {_one_line(exc.msg)}") from None
    except _PARSE_ERRORS as exc:
        raise CandidateError(f"{path}: cannot be parsed as Python: {type(exc).__name__}: {_one_line(exc)}") from None
    names = top_level_names(tree)
    if "kernel" in names:
        kind = "ratchet"
    elif "ModelNew" in names:
        kind = "kernelbench"
    else:
        raise CandidateError(f"{path}: defines no kernel(...) function (nor a KernelBench ModelNew class)")
    space = _literal_space(tree, path)
    constraints = _literal_constraints(tree, path, space)
    return Candidate(path=str(path.resolve()), source=source, space=space, kind=kind, constraints=constraints)


def _read_source(path: Path) -> str:
    """The file's text, or a one-line CandidateError for what is not a readable UTF-8 file."""
    try:
        if path.is_dir():
            raise CandidateError(f"{path} is a directory, not a candidate file")
        if not path.is_file():
            raise CandidateError(f"candidate file not found: {path}")
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise CandidateError(f"{path}: {path.stat().st_size} bytes is too large for a candidate file "
                                 f"(at most {MAX_SOURCE_BYTES})")
        data = path.read_bytes()
    except (OSError, ValueError) as exc:  # permissions, a name too long, a null byte in the name
        raise CandidateError(f"cannot read the candidate file {str(path)[:200]}: {_one_line(exc)}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CandidateError(f"{path}: not UTF-8 text (byte {exc.start}); a candidate is a Python source file") from None


def _one_line(text) -> str:
    return " ".join(str(text).split())[:300]


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _literal_space(tree: ast.Module, path: Path) -> dict[str, tuple]:
    for node in reversed(tree.body):  # the last assignment wins, as when Python runs the file
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SPACE" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except _PARSE_ERRORS:
                raise CandidateError(f"{path}: SPACE must be a literal dict of lists") from None
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, (list, tuple)) and len(v) > 0 for k, v in value.items()
            ):
                raise CandidateError(f"{path}: SPACE must map names to non-empty lists of values")
            for key, values in value.items():
                if not key.isidentifier():  # the values arrive as keyword arguments
                    raise CandidateError(f"{path}: SPACE key {key!r} is not a Python name")
                for v in values:
                    if not _plain(v):  # configs are stored and printed as JSON
                        raise CandidateError(f"{path}: SPACE[{key!r}] value {_one_line(repr(v))[:80]} is not a plain "
                                             "JSON value (a number, string, boolean or None)")
            size = 1
            for values in value.values():
                size *= len(values)
            if size > MAX_SPACE_CONFIGS:
                raise CandidateError(f"{path}: SPACE has {size} configs; at most {MAX_SPACE_CONFIGS}")
            return {k: tuple(v) for k, v in value.items()}
    return {}


def _plain(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int, str))


_SAFE_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name, ast.Constant, ast.Load,
               ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
# Operators that turn small numbers into huge ones (2 ** 2 ** 40, 1 << 10 ** 9): the parent process
# evaluates constraints, so a constraint must not be able to hang it or exhaust its memory.
_HUGE_OPS = (ast.Pow, ast.LShift)


def _literal_constraints(tree: ast.Module, path: Path, space: Mapping[str, tuple]) -> tuple[str, ...]:
    """``CONSTRAINTS = ["BLOCK_N % BLOCK_K == 0", ...]``: arithmetic and comparisons over SPACE names."""
    for node in reversed(tree.body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONSTRAINTS" for t in node.targets):
            try:
                exprs = ast.literal_eval(node.value)
            except _PARSE_ERRORS:
                raise CandidateError(f"{path}: CONSTRAINTS must be a literal list of strings") from None
            if not isinstance(exprs, (list, tuple)) or not all(isinstance(e, str) for e in exprs):
                raise CandidateError(f"{path}: CONSTRAINTS must be a literal list of strings")
            for expr in exprs:
                try:
                    parsed = ast.parse(expr, mode="eval")
                except _PARSE_ERRORS:
                    raise CandidateError(f"{path}: constraint '{_one_line(expr)[:80]}' is not an expression") from None
                for sub in ast.walk(parsed):
                    if not isinstance(sub, _SAFE_NODES) or isinstance(sub, _HUGE_OPS):
                        raise CandidateError(f"{path}: constraint '{_one_line(expr)[:80]}' may use only SPACE "
                                             "names, numbers, arithmetic (not ** or <<) and comparisons")
                    if isinstance(sub, ast.Name) and sub.id not in space:
                        raise CandidateError(f"{path}: constraint '{_one_line(expr)[:80]}' names '{sub.id}', which is not in SPACE")
            return tuple(exprs)
    return ()


def _eval_constraint(expr: str, config: Mapping[str, Any]) -> bool:
    # Safe: the expression was checked to hold only names of SPACE, constants and operators.
    try:
        return bool(eval(compile(ast.parse(expr, mode="eval"), "<constraint>", "eval"), {"__builtins__": {}},
                         dict(config)))
    except (ArithmeticError, TypeError, ValueError, MemoryError, RecursionError) as exc:  # e.g. BLOCK % 0
        raise CandidateError(f"constraint '{_one_line(expr)[:80]}' cannot be evaluated at {dict(config)}: "
                             f"{type(exc).__name__}: {_one_line(exc)}") from None
