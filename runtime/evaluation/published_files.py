"""Published results files: finding them in a folder, and which device each one is.

``clproj validate-published`` is judged by results nobody here has seen (newer devices'
BabelStream and mixbench results), dropped into a ``--truth`` folder under names of their
authors' choosing. So a file is matched to a spec-sheet profile by what it says about
itself, not only by a table of known file names. In order:

1. **file table**: the suite's table of the results it ships with (exact file names, also
   where a tree's label puts folders before one; it also settles what a name cannot, e.g.
   the two ECC settings of one card);
2. **file name**: the device the file's name or folder path names (``k20x/ocl.txt``,
   ``nvidia-titan-xp.txt``), read with :func:`devices.specs.spec_for_file_name`; a name
   comes before the device's own because AMD's OpenCL names a device by its chip's
   codename (every Hawaii board is "Hawaii"), which a person naming a file does not;
3. **device name**: the name the runtime reported (``Using OpenCL device ...``,
   ``Device: ...``), read as a local device's name is (:func:`devices.specs.spec_for`);
4. **device shape**: compute units, warp width and clock from the log's header, when they
   fit exactly one sheet (:func:`devices.specs.spec_by_shape`): some runtimes report an
   empty name.

Where a file prints its compute units, a name match (2, 3) whose sheet has another count
is not taken: what the device reported about itself outranks what a name suggests (AMD's
OpenCL calls an MI210 and an MI250X GCD both "gfx90a"; an "MI250" GCD has 104 compute
units, not the MI250X's 110).

A file none of these identifies is listed as "unidentified", never judged against a
guess; a device with no sheet is added to ``devices/spec_sheets.py`` from its vendor's
sheet.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from clproj.devices import specs
from clproj.errors import ClprojError
from clproj.untrusted import read_regular_file

# A published results file or log is a few KiB; anything past this is not one.
MAX_RESULT_BYTES = 16 << 20


@dataclass(frozen=True)
class Identity:
    """The spec profile a results file is judged with, and how it was found."""

    key: str | None  # spec profile key (None: unidentified)
    vendor: str
    matched_by: str  # "file table", "file name", "device name", "device shape" or ""


def truth_files(folder: str, fix: str, suffix: str = ".txt") -> list[tuple[str, str]]:
    """``(label, path)`` of every ``suffix`` file at or below ``folder``, sorted by label;
    a ``folder`` that is missing, not a folder or holds no such file is a
    :class:`ClprojError` (``fix`` says what to pass).

    The label is the path below ``folder`` without the suffix, its folders joined by
    ``-``: a flat folder keeps its file stems, a tree (``v2.0/k20x/ocl.txt``) gives
    ``k20x-ocl`` when passed ``v2.0``. Hidden files and folders are skipped.
    """
    if not os.path.exists(folder):
        raise ClprojError(f"{folder}: no such folder", fix)
    if not os.path.isdir(folder):
        raise ClprojError(f"{folder} is a file, not a folder of results", fix)
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.endswith(suffix) and not name.startswith("."):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, folder)[: -len(suffix)]
                found.append(("-".join(rel.split(os.sep)), path))
    if not found:
        raise ClprojError(f"{folder} holds no *{suffix} file (nor do its folders)", fix)
    return sorted(found)


def read_number(text: str) -> float | None:
    """A finite number printed in a results file or log, or None: their patterns admit
    text ``float`` does not ("1.2.3"), and a file may print "inf" or "nan"."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_result_text(path: str, fix: str) -> str:
    """A results file's text: a regular file of at most ``MAX_RESULT_BYTES`` (a FIFO, a
    device or a huge file in a ``--truth`` tree is one error line, never a hang), decoded
    as UTF-8 with undecodable bytes replaced (logs carry terminal bytes: progress bars)."""
    data = read_regular_file(path, "results file", MAX_RESULT_BYTES, fix)
    return data.decode("utf-8", errors="replace")


def identify(
    label: str,
    table: Mapping[str, tuple[str, str]],
    device_name: str = "",
    shape: tuple[int, float, int] | None = None,
    vendor_hint: Callable[[str], str] = lambda _label: "",
) -> Identity:
    """The profile of one results file (see the module docstring for the order).

    ``shape`` is (compute units, clock MHz, warp width) where the file prints them;
    ``vendor_hint`` names the vendor of a file nothing identifies, from its label or else
    its device name.
    """
    # The file's own name, also where a tree's label puts folders before it.
    named = [n for n in table if label == n or label.endswith("-" + n)]
    if named:
        key, vendor = table[max(named, key=len)]
        return Identity(key, vendor, "file table")
    finders: list[tuple[str, Callable[[], specs.Spec | None]]] = [
        ("file name", lambda: specs.spec_for_file_name(label)),
        ("device name", lambda: specs.spec_for(device_name) if device_name.strip() else None),
        ("device shape", lambda: specs.spec_by_shape(*shape) if shape else None),
    ]
    for how, find in finders:
        sheet = find()
        if sheet is not None and (shape is None or sheet.cus == shape[0]):
            return Identity(sheet.key, sheet.vendor, how)
    return Identity(None, vendor_hint(label) or vendor_hint(device_name), "")
