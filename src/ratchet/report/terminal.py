"""The one way Ratchet makes a Rich console, and the one rule for its tables: readable anywhere.

A terminal gets its own width. Anything else (a pipe, a file, a CI log) gets a console so wide that no
table is squeezed: Rich would otherwise squeeze to 80 columns (or $COLUMNS) and cut cells to "medi…",
"3564…", which makes a logged ``ratchet eval`` unreadable. A table wider than the terminal it is shown on
is written as one record a row ("median us 29.08, IQR us 25.25, ..."), wrapped between figures, never
inside one; in a live view, where a table must stay a table, its columns fold instead of cutting.
"""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Wide enough for any table Ratchet prints; lines are as long as their content, never padded to this.
UNBOUNDED_WIDTH = 100_000


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A Console for stdout (or stderr, or ``file``): the terminal's width on a terminal, unbounded otherwise."""
    console = Console(stderr=stderr, file=file)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, file=file, width=UNBOUNDED_WIDTH)


def readable(table: Table) -> Table:
    """Fold, never cut, every column of ``table`` (Rich's default overflow is an ellipsis); returns it."""
    for column in table.columns:
        column.overflow = "fold"
    return table


def show(console: Console, table: Table) -> None:
    """Print ``table`` whole: as it is where it fits, else one record a row that wraps between figures."""
    natural = console.measure(table, options=console.options.update_width(UNBOUNDED_WIDTH)).maximum
    if natural <= console.width:
        console.print(table)
        return
    if table.title:
        console.print(table.title)
    headers = [Text.from_markup(c.header) if isinstance(c.header, str) else c.header for c in table.columns]
    rows = zip(*(list(c.cells) for c in table.columns))
    for row in rows:
        record = Text(" - ")
        for i, (header, cell) in enumerate(zip(headers, row)):
            value = Text.from_markup(cell) if isinstance(cell, str) else cell
            if not value.plain:
                continue
            record.append(", " if i and len(record) > 3 else "")
            record.append_text(Text(f"{header.plain} ")).append_text(value)
        console.print(record)
