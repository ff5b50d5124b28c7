"""Console output shared by every subcommand: tables, JSON and progress bars.

Tables and progress go through rich; progress bars draw on stderr so that ``--json``
output on stdout stays machine-readable.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

T = TypeVar("T")


def _isatty(stream: Any) -> bool:
    """Whether ``stream`` is a terminal; a closed or missing one (``>&-`` makes Python's
    ``sys.stdout`` None) is not, and must not stop clproj from starting."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


# Piped output (tests, logs, `| less`) gets wide tables instead of wrapped cells.
stdout = Console(soft_wrap=False, width=None if _isatty(sys.stdout) else 200)
# Piped errors and notes stay one line each (grep-able, as the CLI promises), however long
# the paths in them: rich would otherwise wrap them at 80 columns.
stderr = Console(stderr=True, soft_wrap=not _isatty(sys.stderr))
# Tables on stderr, as wide as those on stdout: a wrapper's own report (`clproj run`'s
# summary) goes there, so the app's stdout stays the app's.
stderr_tables = Console(stderr=True, soft_wrap=False, width=None if _isatty(sys.stderr) else 200)


def fmt_time(seconds: float | None) -> str:
    """Seconds in s, ms or us with three significant digits; ``-`` for none or not finite."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout (numpy scalars become plain numbers)."""

    def default(o: Any) -> Any:
        if hasattr(o, "tolist"):
            return o.tolist()
        if isinstance(o, bytes):
            return o.hex()
        raise TypeError(f"not JSON serialisable: {type(o).__name__}")

    sys.stdout.write(json.dumps(obj, indent=2, default=default) + "\n")


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    title: str | None = None,
    to: Console | None = None,
) -> None:
    """Print a readable table on ``to`` (stdout unless told); numbers are right-aligned."""
    rows = [list(r) for r in rows]
    table = Table(title=title, show_lines=False, header_style="bold")
    for i, col in enumerate(columns):
        numeric = bool(rows) and all(
            isinstance(r[i], (int, float)) for r in rows if r[i] is not None
        )
        table.add_column(col, justify="right" if numeric else "left")
    for r in rows:
        table.add_row(
            *["" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in r]
        )
    (to or stdout).print(table)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal)."""
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        disable=not stderr.is_terminal,
    ) as progress:
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


def publish(text: str, out: str | None = None) -> None:
    """A benchmark's report: on stdout, and into ``out`` (markdown) when given, the same
    text both times so the committed file is what the command printed."""
    sys.stdout.write(text)
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
