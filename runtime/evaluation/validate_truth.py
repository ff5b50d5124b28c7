"""Truth files and launch shapes: what ``clproj validate`` compares projections against.

A truth file (``truth/<device>.tsv``, docs/validation.md) holds the real-device times of a
suite's kernels, one row per (app, kernel, global size, local size) *shape* with its launch
count. This module reads them and defines the shape key that both sides are matched on; it
is apart from the matching so that the file format and its errors have one home.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from clproj.errors import ClprojError
from clproj.intercept import identity
from clproj.intercept.identity import ShapeKey
from clproj.untrusted import read_regular_file

# A device's truth file holds one row per measured shape: a few hundred KiB for a suite.
MAX_TRUTH_BYTES = 64 << 20
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


def read_truth_file(path: str, label: str | None = None) -> TruthDevice:
    """Parse one ``truth/<device>.tsv``; rows of a repeated shape are merged launch-weighted."""
    label = label or os.path.splitext(os.path.basename(path))[0]
    data = read_regular_file(path, "truth file", MAX_TRUTH_BYTES, "check --truth DIR")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClprojError(
            f"truth file {path} is not UTF-8 text (byte {exc.start})",
            "a truth file is a tab-separated text file (docs/validation.md)",
        ) from None
    reader = csv.DictReader(io.StringIO(text), delimiter="\t")
    missing = [c for c in TRUTH_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ClprojError(
            f"truth file {path} lacks column(s) {', '.join(missing)}",
            f"a truth file is a TSV with the columns {', '.join(TRUTH_COLUMNS)}",
        )
    dev: TruthDevice | None = None
    for lineno, rec in enumerate(reader, start=2):
        try:
            row = TruthRow(
                app=rec["app"],
                device=rec["device"],
                kernel=rec["kernel"],
                global_size=pad_dims(rec["global"]) or (0, 0, 0),
                local_size=pad_dims(rec["local"]),
                launches=int(rec["launches"]),
                mean_ns=float(rec["mean_ns"]),
            )
        except (TypeError, ValueError) as exc:
            raise ClprojError(
                f"{path}:{lineno}: unreadable truth row ({exc})", "fix or remove the row"
            ) from None
        if dev is None:
            dev = TruthDevice(label=label, name=row.device, path=path)
        elif row.device != dev.name:
            raise ClprojError(
                f"{path}:{lineno}: device {row.device!r}, but the file began with {dev.name!r}",
                "keep one device per truth file",
            )
        shapes = dev.rows.setdefault(row.app, {})
        old = shapes.get(row.key)
        if old is not None:
            n = old.launches + row.launches
            old.mean_ns = (old.mean_ns * old.launches + row.mean_ns * row.launches) / max(n, 1)
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
