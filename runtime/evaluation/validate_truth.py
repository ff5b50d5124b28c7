"""Truth files and launch shapes: what ``clproj validate`` compares projections against.

A truth file (``truth/<device>.tsv``, docs/validation.md) holds the real-device times of a
suite's kernels, one row per (app, kernel, global size, local size) *shape* with its launch
count. This module reads them and defines the shape key that both sides are matched on; it
is apart from the matching so that the file format and its errors have one home.
"""

from __future__ import annotations

import csv
import io
import math
import os
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from clproj.errors import ClprojError
from clproj.intercept import identity
from clproj.intercept.identity import ShapeKey
from clproj.untrusted import BadField, is_finite_number, read_regular_file, short

# A device's truth file holds one row per measured shape: a few hundred KiB for a suite.
MAX_TRUTH_BYTES = 64 << 20
# A field is a name, a size or a number: one longer than this is no truth file's (a long
# mangled kernel name is well below it). The csv module refuses fields over 128 KiB itself;
# that refusal is turned into the same one-line error (_csv_lines).
MAX_FIELD_CHARS = 4096
# The largest size_t: an NDRange entry or a launch count beyond it cannot be a launch's.
SIZE_MAX = 2**64 - 1
# A launch's time in ns is within these: the floor (a picosecond, far below one clock
# cycle) keeps launches x mean_ns x 1e-9 and the ratios to it normal floats, never 0 or
# inf; the ceiling (about 32 years) keeps the totals and the metrics' squares of them far
# from float overflow.
MIN_TIME_NS = 1e-3
MAX_TIME_NS = 1e18
TRUTH_COLUMNS = ("app", "device", "kernel", "global", "local", "launches", "mean_ns")

Dims = tuple[int, int, int]


def pad_dims(values: Sequence[int] | str | None) -> Dims | None:
    """:func:`intercept.identity.pad_ndrange` of a list or of a truth file's text
    (``2048,2048,1``; ``NULL``, ``NONE``, ``-`` or empty for a NULL local size)."""
    if isinstance(values, str):
        text = values.strip()
        if not text or text.upper() in ("NULL", "NONE", "-"):
            return None
        values = [int(v) for v in text.split(",") if v.strip()]
    return identity.pad_ndrange(values)


def fmt_dims(dims: Dims | None) -> str:
    return "NULL" if dims is None else ",".join(str(v) for v in dims)


@dataclass
class TruthRow:
    """All launches of one shape of one kernel of one app, measured on one device."""

    app: str
    device: str  # the device name (a profile's identity.name)
    kernel: str
    global_size: Dims
    local_size: Dims | None
    launches: int
    mean_ns: float  # per launch, so launches x mean_ns is the shape's total

    @property
    def key(self) -> ShapeKey:
        return (self.kernel, self.global_size, self.local_size)

    @property
    def total_s(self) -> float:
        return self.launches * self.mean_ns * 1e-9


@dataclass
class TruthDevice:
    """One truth file: a device's name and its rows by app, then by shape."""

    label: str  # the file's stem, e.g. h100
    name: str
    path: str
    rows: dict[str, dict[ShapeKey, TruthRow]] = field(default_factory=dict)
    # The key of the profile the device is judged on, where ``clproj validate`` assigned
    # one (runtime/evaluation/validate_devices.py); empty: the run's profile of its name.
    profile: str = ""

    def app_rows(self, app: str) -> dict[ShapeKey, TruthRow]:
        return self.rows.get(app, {})


_FIX_LINE = "correct or remove that line (the truth file format: docs/validation.md)"


def _whole(text: str, lo: int) -> int | None:
    """``text`` as a decimal integer in ``lo..SIZE_MAX``; None otherwise. ASCII digits only:
    ``int`` would also take ``+5``, ``1_000`` and other scripts' digits, no truth file's way."""
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > len(str(SIZE_MAX)):
        return None
    value = int(text)
    return value if lo <= value <= SIZE_MAX else None


def _dims(column: str, text: str, what: str) -> Dims:
    """A truth file's NDRange (``2048,2048,1``): 1 to 3 entries, each 1..SIZE_MAX, padded
    to three. :func:`pad_dims` is laxer (it skips empty entries and takes ``-1``): it
    serves projections, which clproj made itself."""
    values = [_whole(v, 1) for v in text.split(",")]
    if len(values) > 3 or any(v is None for v in values):
        raise BadField(column, f"{what} 1 to 3 comma-separated integers 1..2^64-1)")
    # pad_ndrange's None is for all zeros, which no entry here is.
    return identity.pad_ndrange(values) or (1, 1, 1)  # type: ignore[arg-type]


def _local(text: str) -> Dims | None:
    """A truth file's local size: NULL, ``-``, empty or all zeros is none (docs/validation.md),
    anything else an NDRange as :func:`_dims` reads it."""
    parts = text.strip().upper()
    if parts in ("", "NULL", "NONE", "-") or all(_whole(v, 0) == 0 for v in parts.split(",")):
        return None
    return _dims("local", text, "a local size (NULL, zeros or")


def _time_ns(column: str, text: str, zero_ok: bool) -> float:
    """``text`` as a time in ns: finite, MIN_TIME_NS (or, ``zero_ok``, 0) to MAX_TIME_NS."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    lo = 0.0 if zero_ok else MIN_TIME_NS
    if is_finite_number(value) and lo <= value <= MAX_TIME_NS:
        return value
    raise BadField(column, f"a time in ns (a finite number {lo:g} to {MAX_TIME_NS:g})")


def _name(column: str, text: str) -> str:
    """A name field (app, device, kernel): not blank and free of control characters: a tab
    or line break gets into a field only through an unbalanced quote, and names are printed
    in tables, where escape codes would reach the user's terminal."""
    if not text.strip() or any(unicodedata.category(c) == "Cc" for c in text):
        raise BadField(column, "a name (not blank, no control characters)")
    return text


def _check_optional(rec: dict[str, str]) -> None:
    """The columns a truth file may carry that validation does not use: each, where given,
    must still be what it says, since a bad value there means a broken or hostile file.
    ``median_ns`` and ``min_ns`` may be 0: a coarse timer reads 0 for a very short launch,
    and nothing divides by them here."""
    if (dim := rec.get("work_dim", "").strip()) and _whole(dim, 1) not in (1, 2, 3):
        raise BadField("work_dim", "a work_dim (1, 2 or 3)")
    for column in ("median_ns", "min_ns"):
        if text := rec.get(column, "").strip():
            _time_ns(column, text, zero_ok=True)


def _parse_row(rec: dict[str, str]) -> TruthRow:
    """One checked truth row: every used column, and the optional ones where given;
    :class:`BadField` naming the first bad column."""
    launches = _whole(rec["launches"], 1)
    if launches is None:
        raise BadField("launches", "a launch count (an integer 1..2^64-1)")
    row = TruthRow(
        app=_name("app", rec["app"]),
        device=_name("device", rec["device"]),
        kernel=_name("kernel", rec["kernel"]),
        global_size=_dims("global", rec["global"], "a global size ("),
        local_size=_local(rec["local"]),
        launches=launches,
        mean_ns=_time_ns("mean_ns", rec["mean_ns"], zero_ok=False),
    )
    _check_optional(rec)
    return row


def _csv_lines(path: str, text: str) -> Iterator[tuple[int, list[str]]]:
    """The file's lines as (line number, fields), blank ones included as ``[]``; the csv
    module's own refusals (a field over its limit of 128 KiB) are one error naming the
    line, not a traceback, and so is a field that runs over several lines: no truth field
    holds a line break, so that is a stray quote that would swallow the lines after it."""
    reader = csv.reader(io.StringIO(text), delimiter="\t")
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ClprojError(
                f"{path}:{reader.line_num}: not a line of a truth file ({exc})", _FIX_LINE
            ) from None
        if reader.line_num != start:
            raise ClprojError(
                f"{path}:{start}: a quote opens a field that runs to line {reader.line_num}",
                _FIX_LINE,
            )
        yield start, fields


def _records(path: str, text: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The data lines as (line number, column -> field) after the header, blank lines
    skipped; a field longer than MAX_FIELD_CHARS, or a line too short to hold every
    column validation uses, is an error naming the line."""
    header: list[str] = []
    for lineno, fields in _csv_lines(path, text):
        for i, value in enumerate(fields):
            if len(value) > MAX_FIELD_CHARS:
                column = header[i] if i < len(header) else f"field {i + 1}"
                raise ClprojError(
                    f"{path}:{lineno}: {column} has {len(value)} characters, more than the "
                    f"{MAX_FIELD_CHARS} of any truth file field",
                    _FIX_LINE,
                )
        if not header:
            header = fields or [""]
            missing = [c for c in TRUTH_COLUMNS if c not in header]
            if missing:
                raise ClprojError(
                    f"truth file {path} lacks column(s) {', '.join(missing)}",
                    f"a truth file is a TSV with the columns {', '.join(TRUTH_COLUMNS)}",
                )
        elif fields:
            rec = dict(zip(header, fields, strict=False))
            absent = [c for c in TRUTH_COLUMNS if c not in rec]
            if absent:
                raise ClprojError(
                    f"{path}:{lineno}: {absent[0]} is missing (the line has {len(fields)} "
                    f"fields, the header {len(header)})",
                    _FIX_LINE,
                )
            yield lineno, rec
    if not header:
        raise ClprojError(
            f"truth file {path} is empty",
            f"a truth file is a TSV with the columns {', '.join(TRUTH_COLUMNS)}",
        )


def read_truth_file(path: str, label: str | None = None) -> TruthDevice:
    """Parse one ``truth/<device>.tsv``; rows of a repeated shape are merged launch-weighted.

    The file is untrusted (a third party's measurements): it is read as a bounded regular
    file and every value is checked here, so that a bad one stops ``clproj validate``
    before any app is built or run, as one error naming the file, line and column."""
    label = label or os.path.splitext(os.path.basename(path))[0]
    data = read_regular_file(path, "truth file", MAX_TRUTH_BYTES, "check --truth DIR")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClprojError(
            f"truth file {path} is not UTF-8 text (byte {exc.start})",
            "a truth file is a tab-separated text file (docs/validation.md)",
        ) from None
    dev: TruthDevice | None = None
    for lineno, rec in _records(path, text):
        try:
            row = _parse_row(rec)
        except BadField as bad:
            raise ClprojError(
                f"{path}:{lineno}: {bad.field} is {short(rec[bad.field].strip())}, not {bad.what}",
                _FIX_LINE,
            ) from None
        if dev is None:
            dev = TruthDevice(label=label, name=row.device, path=path)
        elif row.device != dev.name:
            raise ClprojError(
                f"{path}:{lineno}: device {short(row.device)}, "
                f"but the file began with {short(dev.name)}",
                "keep one device per truth file",
            )
        shapes = dev.rows.setdefault(row.app, {})
        old = shapes.get(row.key)
        if old is not None:
            n = old.launches + row.launches
            old.mean_ns = (old.mean_ns * old.launches + row.mean_ns * row.launches) / n
            old.launches = n
        else:
            shapes[row.key] = row
    if dev is None:
        raise ClprojError(f"truth file {path} has no rows", "measure the device first")
    return dev


def load_truth(truth_dir: str) -> list[TruthDevice]:
    """Every ``*.tsv`` in ``truth_dir``, sorted by file name."""
    if not os.path.isdir(truth_dir):
        what = "is a file, not a folder" if os.path.exists(truth_dir) else "does not exist"
        raise ClprojError(
            f"truth folder {truth_dir} {what}", "pass --truth DIR with the suite's *.tsv"
        )
    files = sorted(f for f in os.listdir(truth_dir) if f.endswith(".tsv"))
    if not files:
        raise ClprojError(f"no *.tsv truth file in {truth_dir}", "pass the suite's truth folder")
    return [read_truth_file(os.path.join(truth_dir, f)) for f in files]
