"""BabelStream's published results: the results files, their array sizes and device profiles.

``clproj validate-published`` judges spec-sheet device profiles of devices nobody here has
against the times BabelStream's authors published (``results/v1.0/opencl/*.txt``: one file
per device, GPU-STREAM's text output). This module only reads those files and says what
the run must record; running and judging are :mod:`runtime.evaluation.published`.

Per kernel (Copy, Mul, Add, Triad, and Dot where a file has it) the truth is the **Min
(sec)** column: the fastest of the file's iterations, one launch's time. The array size
(elements per array) is, in order of preference:

1. the ``Resizing array from A to B`` line's ``B`` (exact: the app rounded the size down);
2. the ``Array size: X MB`` line, where GPU-STREAM's "MB" is 2^20 bytes and one element
   is 8 bytes in FP64 (``Precision: double``, the default) or 4 in FP32: ``X * 2^20 /
   bytes`` (400.0 MB = 52,428,800 doubles);
3. for files with neither line (the oldest versions printed none), derived from each
   kernel's rate and time: ``MBytes/sec * 1e6 * Min / (arrays moved * bytes)``, where Copy
   and Mul move 2 arrays (one read, one written), Add and Triad 3, Dot 2; the median over
   the kernels, rounded to 4 significant digits (the printed rate and time carry about 6,
   so the estimate's own error is far below that rounding).
"""

from __future__ import annotations

import math
import os
import re
import statistics
from dataclasses import dataclass, field

from clproj.errors import ClprojError

# Results file stem -> (spec device-profile key, vendor). ECC on and off results of one
# card share its profile: the profile has one memory bandwidth, the files judge it twice.
PROFILES: dict[str, tuple[str, str]] = {
    "amd-a10-7850k-radeon-r7": ("a10-7850k-gpu-spec", "AMD"),
    "amd-firepro-s10000": ("firepro-s10000-spec", "AMD"),
    "amd-firepro-s9150-ecc-off": ("firepro-s9150-spec", "AMD"),
    "amd-r9-fury-x": ("r9-fury-x-spec", "AMD"),
    "amd-radeon-7970": ("hd7970-spec", "AMD"),
    "amd-radeon-r9-290x": ("r9-290x-spec", "AMD"),
    "amd-radeon-r9-295x2": ("r9-295x2-spec", "AMD"),
    "intel-phi-se10p": ("xeon-phi-se10p-spec", "Intel"),
    "nvidia-gtx-580": ("gtx-580-spec", "NVIDIA"),
    "nvidia-gtx-780-ti": ("gtx-780-ti-spec", "NVIDIA"),
    "nvidia-gtx-980": ("gtx-980-spec", "NVIDIA"),
    "nvidia-gtx-980-ti": ("gtx-980-ti-spec", "NVIDIA"),
    "nvidia-k20c-ecc-off": ("k20c-spec", "NVIDIA"),
    "nvidia-k20c-ecc-on": ("k20c-spec", "NVIDIA"),
    "nvidia-k40c-ecc-off": ("k40c-spec", "NVIDIA"),
    "nvidia-k40c-ecc-on": ("k40c-spec", "NVIDIA"),
    "nvidia-k80-ecc-off": ("k80-spec", "NVIDIA"),
    "nvidia-k80-ecc-on": ("k80-spec", "NVIDIA"),
}

# Results file's function name -> the OpenCL kernel BabelStream launches for it.
KERNELS = {"Copy": "copy", "Mul": "mul", "Add": "add", "Triad": "triad", "Dot": "stream_dot"}
ARRAYS_MOVED = {"Copy": 2, "Mul": 2, "Add": 3, "Triad": 3, "Dot": 2}


@dataclass
class BabelResult:
    """One published results file: a device's per-kernel best times at one array size."""

    label: str  # the file stem
    path: str
    device_name: str  # the "Using OpenCL device" line ("" where the file names none)
    precision: str  # "double" or "float"
    elements: int
    elements_from: str  # "resize line", "array size line" or "derived from rates"
    min_s: dict[str, float] = field(default_factory=dict)  # kernel name -> seconds
    rate_mbs: dict[str, float] = field(default_factory=dict)

    @property
    def element_bytes(self) -> int:
        return 4 if self.precision == "float" else 8


_ROW = re.compile(r"^(Copy|Mul|Add|Triad|Dot)\s+([0-9.eE+-]+)\s+([0-9.eE+-]+)\s")
_RESIZE = re.compile(r"Resizing array from \d+ to (\d+)")
_ARRAY = re.compile(r"^Array size:\s*([0-9.]+)\s*MB")


def parse_results(path: str) -> BabelResult:  # noqa: C901
    """One results file; a file that is not one is a :class:`ClprojError` naming it."""
    label = os.path.splitext(os.path.basename(path))[0]
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ClprojError(f"{path}: {exc.strerror}", "check the results folder") from None
    device, precision = "", "double"
    resized: int | None = None
    array_mb: float | None = None
    min_s: dict[str, float] = {}
    rates: dict[str, float] = {}
    for line in lines:
        text = line.strip()
        if text.startswith("Using OpenCL device"):
            device = text[len("Using OpenCL device") :].strip()
        elif text.startswith("Precision:"):
            precision = "float" if "float" in text else "double"
        elif m := _RESIZE.search(text):
            resized = int(m.group(1))
        elif m := _ARRAY.match(text):
            array_mb = float(m.group(1))
        elif m := _ROW.match(line.replace("\t", " ") + " "):
            try:
                rate, t = float(m.group(2)), float(m.group(3))
            except ValueError:
                continue
            if t > 0 and math.isfinite(t):
                min_s[KERNELS[m.group(1)]] = t
                rates[KERNELS[m.group(1)]] = rate
    if not min_s:
        raise ClprojError(
            f"{path}: not a BabelStream results file (no Copy/Mul/Add/Triad/Dot row with a "
            "Min (sec) time)",
            "pass the folder of BabelStream's published *.txt results",
        )
    result = BabelResult(label, path, device, precision, 0, "", min_s, rates)
    if resized:
        result.elements, result.elements_from = resized, "resize line"
    elif array_mb:
        result.elements = round(array_mb * 2**20 / result.element_bytes)
        result.elements_from = "array size line"
    else:
        result.elements = derived_elements(rates, min_s, result.element_bytes)
        result.elements_from = "derived from rates"
    return result


def derived_elements(rates: dict[str, float], min_s: dict[str, float], element_bytes: int) -> int:
    """Elements per array from MBytes/sec x Min time (see the module docstring, rule 3)."""
    names = {v: k for k, v in KERNELS.items()}
    estimates = [
        rates[k] * 1e6 * min_s[k] / (ARRAYS_MOVED[names[k]] * element_bytes)
        for k in min_s
        if k in rates and rates[k] > 0
    ]
    if not estimates:
        return 0
    value = statistics.median(estimates)
    digits = 4 - math.floor(math.log10(value)) - 1
    return int(round(value, digits))


def load_results(folder: str) -> tuple[list[BabelResult], list[str]]:
    """Every ``*.txt`` results file of ``folder``, and one error line per file that failed."""
    if not os.path.isdir(folder):
        raise ClprojError(
            f"{folder}: no such folder",
            "pass BabelStream's folder (it has results/v1.0/opencl/) or --truth DIR",
        )
    results, errors = [], []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".txt"):
            continue
        try:
            results.append(parse_results(os.path.join(folder, name)))
        except ClprojError as exc:
            errors.append(exc.cause)
    return results, errors


def profile_of(label: str) -> tuple[str | None, str]:
    """The spec profile key and vendor a results file is judged with (None: not in the table)."""
    key, vendor = PROFILES.get(label, (None, ""))
    if not vendor:
        low = label.lower()
        vendor = next((v for v in ("AMD", "NVIDIA", "Intel") if low.startswith(v.lower())), "")
    return key, vendor
