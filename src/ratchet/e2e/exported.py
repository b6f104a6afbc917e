"""An exported package (``ratchet export``) loaded from its folder, installed or not: for measuring a
model with its kernels in (``ratchet profile --apply``, ``benchmarks/e2e_models.py --export``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


PACKAGE_PREFIX = "ratchet_export_"  # every exported package's name and its custom ops' namespace


class PackageError(Exception):
    """Not a package ``ratchet export`` wrote, or one that fails to import; one line for the user."""


def package_dir(folder: str | Path) -> Path:
    """The package ``ratchet_export_<id>`` inside ``folder`` (the one holding its pyproject.toml)."""
    root = Path(folder).expanduser().resolve()
    found = sorted(p for p in root.glob(PACKAGE_PREFIX + "*") if (p / "__init__.py").is_file()) if root.is_dir() else []
    if not found:
        raise PackageError(f"{folder}: not a package 'ratchet export' wrote (no ratchet_export_*/__init__.py in it)")
    return found[0]


def load_package(folder: str | Path) -> ModuleType:
    """``package_dir(folder)`` imported under its own name, so its modules import each other as installed."""
    path = package_dir(folder)
    name = path.name
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
    except Exception as exc:  # the package's own import (a kernel file, a missing library): one line
        del sys.modules[name]
        first = (str(exc).strip().splitlines() or [""])[0]
        raise PackageError(f"{folder}: the package failed to import: {type(exc).__name__}: {first}") from None
    if not callable(getattr(package, "apply", None)):
        raise PackageError(f"{folder}: the package has no apply(model)")
    return package
