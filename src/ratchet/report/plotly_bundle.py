"""Which plotly.js a page embeds: plotly.js's basic partial bundle when it matches plotly.py, else the full one.

The report's figures use only scatter and bar traces, which the basic bundle holds; a browser on a small
machine spends most of a report's opening time evaluating plotly.js, and the basic bundle is a quarter
of the full one. The figures' JSON is written by plotly.py for its own plotly.js version, so the basic
bundle is used only when its version is that one (see vendor/README.md).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from plotly.offline import get_plotlyjs, get_plotlyjs_version

BASIC_BUNDLE = Path(__file__).with_name("vendor") / "plotly-basic.min.js"
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})
_VERSION = re.compile(r"plotly\.js \(basic - minified\) v(\d+\.\d+\.\d+)")


def basic_bundle_version(path: Path | None = None) -> str | None:
    """The version in the basic bundle's banner, or None when the file is missing or not that bundle."""
    try:
        with (path or BASIC_BUNDLE).open(encoding="utf-8") as f:
            head = f.read(400)
    except OSError:
        return None
    match = _VERSION.search(head)
    return match.group(1) if match else None


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js source to embed: the basic bundle when its version is plotly.py's, else the full one."""
    if basic_bundle_version() == get_plotlyjs_version():
        return BASIC_BUNDLE.read_text(encoding="utf-8")
    return get_plotlyjs()
