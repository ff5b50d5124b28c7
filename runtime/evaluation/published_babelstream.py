"""BabelStream's published results: the results files, their array sizes and device profiles.

``clproj validate-published`` judges spec-sheet device profiles of devices nobody here has
against the times BabelStream's authors published (``results/v1.0/opencl/*.txt``: one file
per device, GPU-STREAM's text output, and any later version's). This module reads those
files and says what the run must record and how the app launches Dot on each device;
which profile judges a file is :mod:`runtime.evaluation.published_files`, running and
judging :mod:`runtime.evaluation.published`.

Per kernel (Copy, Mul, Add, Triad, and Dot where a file has it) the truth is the **Min
(sec)** column (``min_runtime`` in the ``--csv`` output of later versions): the fastest of
the file's iterations, one launch's time. The array size (elements per array) is, in order
of preference:

1. the ``Number of elements: N`` line or the CSV rows' ``n_elements`` (versions that
   print them), or the ``Resizing array from A to B`` line's ``B`` (exact: the app rounded
   the size down);
2. the ``Array size: X MB`` line, one element being 8 bytes in FP64 (``Precision:
   double``, the default) or 4 in FP32. Its "MB" is 2^20 bytes in GPU-STREAM before
   version 2.0 (400.0 MB = 52,428,800 doubles) and 10^6 bytes from 2.0 on (268.4 MB =
   33,554,432 doubles, to the printed 0.1 MB); ``MiB``, ``GB`` and ``GiB`` (the unit
   options of later versions) mean what they say;
3. for files with neither line (the oldest versions printed none), derived from each
   kernel's rate and time: ``MBytes/sec * 1e6 * Min / (arrays moved * bytes)``, where Copy
   and Mul move 2 arrays (one read, one written), Add and Triad 3, Dot 2; the median over
   the kernels, rounded to 4 significant digits (the printed rate and time carry about 6,
   so the estimate's own error is far below that rounding).

The printed Min carries five decimals (0.00018 s on an H100 at the default size: 2
significant digits), the rate column seven or more digits of the same minimum
(``MBytes/sec = weight x bytes x elements / Min``), so where the element count is known
and the rate's unit is printed (``MBytes/sec``, ``MB/s``, ``MiB/s``...) the time is read
back from the rate; it is kept only if it rounds to the printed Min (else the Min is the
truth, and the file's rate means something this reader does not know).

A results folder may be the flat ``results/v1.0/opencl/`` or a tree such as
``results/v2.0/<device>/<implementation>.txt``: every ``*.txt`` below it is read, labelled
by its path (``k20x/ocl.txt`` is ``k20x-ocl``). The OpenCL, CUDA and HIP implementations
are judged: their streaming kernels are the same one-element-per-work-item loops
(``src/ocl``, ``src/cuda``, ``src/hip``), so the OpenCL kernel ``clproj`` records is the
computation their times measured; Dot is projected in the launch a file prints, else the
OpenCL app's (:func:`dot_launch`; HIP prints none). Files of other
models (Kokkos, OpenMP, SYCL, RAJA...: other code generators, CPU threading) and runs on
managed or page-fault memory (``Memory: MANAGED``: the time includes page migration) are
left out, counted in one line each.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from clproj.errors import ClprojError
from clproj.runtime.evaluation.published_files import (
    Identity,
    identify,
    read_number,
    read_result_text,
    truth_files,
)

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
KERNELS = {
    "Copy": "copy", "Mul": "mul", "Add": "add", "Triad": "triad", "Dot": "stream_dot",
    "Nstream": "nstream",
}  # fmt: skip
# Arrays each kernel (by the name it is recorded under) reads or writes once: BabelStream's
# own "weight" of its bandwidth
ARRAYS_MOVED = {"copy": 2, "mul": 2, "add": 3, "triad": 3, "stream_dot": 2, "nstream": 4}
# The programming models whose results are judged (module docstring), lower case
JUDGED_IMPLEMENTATIONS = ("opencl", "cuda", "hip")
# Bytes of the unit a rate column is printed in, by its header ("MBytes/sec" is 10^6 bytes
# in every version, also before 2.0 when the array size line printed 2^20-byte MB)
RATE_UNIT_BYTES = {
    "MBytes/sec": 1e6, "MiBytes/sec": 2.0**20, "GBytes/sec": 1e9, "GiBytes/sec": 2.0**30,
    "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
    "KiB/s": 2.0**10, "MiB/s": 2.0**20, "GiB/s": 2.0**30, "TiB/s": 2.0**40,
}  # fmt: skip


@dataclass
class BabelResult:
    """One published results file: a device's per-kernel best times at one array size."""

    label: str  # the file stem
    path: str
    device_name: str  # the "Using <model> device" line ("" where the file names none)
    precision: str  # "double" or "float"
    elements: int
    elements_from: str  # "resize line", "element count line", "csv rows", "array size line"
    # or "derived from rates"
    min_s: dict[str, float] = field(default_factory=dict)  # kernel name -> seconds
    rate_mbs: dict[str, float] = field(default_factory=dict)
    implementation: str = ""  # the "Implementation:" line ("" where the file has none)
    # Dot's launch on the device, as the file prints it ("Reduction kernel config: 120
    # groups of size 1024"); None where it prints none
    dot_config: tuple[int, int] | None = None
    memory: str = ""  # the "Memory:" line (DEFAULT, MANAGED, PAGEFAULT; "" where none)
    # per kernel the truth: the time read back from the rate column where it rounds to the
    # printed Min, else the Min (module docstring)
    time_s: dict[str, float] = field(default_factory=dict)
    from_rate: tuple[str, ...] = ()  # the kernels whose time_s was read from the rate

    @property
    def element_bytes(self) -> int:
        return 4 if self.precision == "float" else 8


_ROW = re.compile(r"^(Copy|Mul|Add|Triad|Dot|Nstream)\s+([0-9.eE+-]+)\s+([0-9.eE+-]+)\s")
# --csv: function,num_times,n_elements,sizeof,max_<unit>_per_sec,min_runtime,max_runtime,...
_CSV_ROW = re.compile(
    r"^(Copy|Mul|Add|Triad|Dot|Nstream),\s*\d+,\s*(\d+),\s*(\d+),\s*([0-9.eE+-]+),\s*([0-9.eE+-]+),"
)
_RESIZE = re.compile(r"Resizing array from \d+ to (\d+)")
_ELEMENTS = re.compile(r"^Number of elements:\s*(\d+)")
_ARRAY = re.compile(r"^Array size:\s*([0-9.]+)\s*(MiB|MB|GiB|GB|KiB|KB|TiB|TB)\b")
_DOT_CONFIG = re.compile(r"^Reduction kernel config:\s*(\d+) groups of (?:\(fixed\) )?size (\d+)")
# "Using OpenCL device NAME", "Using HIP device NAME"; version 5's CUDA prints
# 'CUDA Device 0: "NAME" 132 SMs(9,0) ...'
_USING = re.compile(r"^Using (\S+) device (.+)$")
_CUDA_DEVICE = re.compile(r'^CUDA Device \d+:\s*"([^"]+)"')
_HEADER = re.compile(r"^Function\s+(\S+)\s+Min")
_MEMORY = re.compile(r"^Memory(?: Allocation)?:\s*(\w+)")
_VERSION = re.compile(r"^Version:\s*(\d+)(?:\.(\d+))?")
# Bytes of each unit an "Array size" line may print, from version 2.0 on; before it
# GPU-STREAM printed 2^20-byte megabytes as "MB".
UNIT_BYTES = {
    "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
    "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
}  # fmt: skip
DECIMAL_FROM_VERSION = (2, 0)


def parse_results(path: str, label: str | None = None) -> BabelResult:  # noqa: C901
    """One results file (labelled by its stem unless ``label`` is given); a file that is
    not one is a :class:`ClprojError` naming it."""
    label = label or os.path.splitext(os.path.basename(path))[0]
    lines = read_result_text(path, "check the results folder").splitlines()
    device, precision, implementation = "", "double", ""
    version = (0, 0)
    dot_config: tuple[int, int] | None = None
    exact: tuple[int, str] | None = None
    array: tuple[float, str] | None = None
    min_s: dict[str, float] = {}
    rates: dict[str, float] = {}
    printed: dict[str, str] = {}  # kernel -> its Min as printed (the table rows)
    unit_bytes, memory = 0.0, ""
    for line in lines:
        text = line.strip()
        if m := _USING.match(text):
            device = m.group(2).strip()
        elif m := _CUDA_DEVICE.match(text):
            device = m.group(1).strip()
        elif m := _HEADER.match(text):
            unit_bytes = RATE_UNIT_BYTES.get(m.group(1), 0.0)
        elif m := _MEMORY.match(text):
            memory = m.group(1).upper()
        elif text.startswith("Implementation:"):
            implementation = text.split(":", 1)[1].strip()
        elif m := _VERSION.match(text):
            version = (int(m.group(1)), int(m.group(2) or 0))
        elif m := _DOT_CONFIG.match(text):
            groups, size = int(m.group(1)), int(m.group(2))
            # a launch no device makes (no work-item, or past 2^31 of them) is no config
            dot_config = (groups, size) if 0 < groups * size < 2**31 else None
        elif text.startswith("Precision:"):
            precision = "float" if "float" in text else "double"
        elif m := _RESIZE.search(text):
            exact = (int(m.group(1)), "resize line")
        elif m := _ELEMENTS.match(text):
            exact = (int(m.group(1)), "element count line")
        elif m := _ARRAY.match(text):
            if (mb := read_number(m.group(1))) is not None:
                array = (mb, m.group(2))
        elif m := _CSV_ROW.match(text):
            n, size = int(m.group(2)), int(m.group(3))
            rate, t = read_number(m.group(4)), read_number(m.group(5))
            if rate is not None and t is not None and t > 0 and n > 0:
                min_s[KERNELS[m.group(1)]] = t
                rates[KERNELS[m.group(1)]] = rate
                exact, precision = (n, "csv rows"), "float" if size == 4 else "double"
        elif m := _ROW.match(line.replace("\t", " ") + " "):
            rate, t = read_number(m.group(2)), read_number(m.group(3))
            if rate is not None and t is not None and t > 0:
                min_s[KERNELS[m.group(1)]] = t
                rates[KERNELS[m.group(1)]] = rate
                printed[KERNELS[m.group(1)]] = m.group(3)
    if not min_s:
        raise ClprojError(
            f"{path}: not a BabelStream results file (no Copy/Mul/Add/Triad/Dot/Nstream row with a "
            "Min (sec) time)",
            "pass the folder of BabelStream's published *.txt results",
        )
    result = BabelResult(
        label, path, device, precision, 0, "", min_s, rates, implementation, dot_config, memory
    )
    if exact:
        result.elements, result.elements_from = exact
    elif array and array[0] > 0:
        size, unit = array
        per = UNIT_BYTES[unit] if version >= DECIMAL_FROM_VERSION or unit != "MB" else 2.0**20
        result.elements = round(size * per / result.element_bytes)
        result.elements_from = "array size line"
    else:
        result.elements = derived_elements(rates, min_s, result.element_bytes)
        result.elements_from = "derived from rates"
    result.time_s = dict(min_s)
    if unit_bytes and result.elements:
        read = {k: rate_time(result, k, unit_bytes, printed[k]) for k in printed}
        result.time_s.update({k: t for k, t in read.items() if t is not None})
        result.from_rate = tuple(k for k, t in read.items() if t is not None)
    return result


# Relative slack on a rate-read time beyond the printed Min's rounding: the element count
# of an "Array size" line is itself rounded (268.4 MB: 0.02 %; 4 significant digits where
# derived from the rates: 0.05 %)
RATE_SLACK = 1e-3


def rate_time(result: BabelResult, kernel: str, unit_bytes: float, min_text: str) -> float | None:
    """``kernel``'s time read back from its rate column, or None where it does not round
    to the printed Min (``min_text``) (module docstring)."""
    rate = result.rate_mbs.get(kernel, 0.0)
    if rate <= 0:
        return None
    moved = ARRAYS_MOVED[kernel] * result.element_bytes * result.elements
    t = moved / (rate * unit_bytes)
    t_min = result.min_s[kernel]
    return t if abs(t - t_min) <= printed_half_step(min_text) + RATE_SLACK * t_min else None


def printed_half_step(text: str) -> float:
    """Half the last printed digit's step of a number as printed ("0.00124": 5e-6;
    "1.24e-05": 5e-8): how far the true value may lie from it."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def dot_launch(result: BabelResult, profile: Any) -> tuple[int, int] | None:
    """Dot's (groups, work-group size) on ``profile``'s device, or None: as recorded.

    Why: unlike the four streaming kernels, Dot is launched with a size the app computes
    from device queries (``src/ocl/OCLStream.cpp``): on a GPU or accelerator 4 groups per
    compute unit of the maximum work-group size, on a CPU one group per compute unit of
    twice the native double vector width. A launch recorded on this machine's CPU (2
    groups of 16 here) is not the launch the published time measured on a GPU (120 of
    1024 on a TITAN Xp): projected as recorded, the GPU would run 32 work-items. The
    file's own ``Reduction kernel config`` line wins; otherwise the app's GPU rule with the
    profile's compute units and maximum work-group size. A CPU target keeps the recorded
    launch (its rule needs the vector width, which profiles do not carry).
    """
    if result.dot_config:
        return result.dot_config
    if profile.kind == "CPU":
        return None
    return 4 * profile.compute_units, profile.max_work_group_size


def derived_elements(rates: dict[str, float], min_s: dict[str, float], element_bytes: int) -> int:
    """Elements per array from MBytes/sec x Min time (see the module docstring, rule 3)."""
    estimates = [
        rates[k] * 1e6 * min_s[k] / (ARRAYS_MOVED[k] * element_bytes)
        for k in min_s
        if k in rates and rates[k] > 0
    ]
    if not estimates:
        return 0
    value = statistics.median(estimates)
    digits = 4 - math.floor(math.log10(value)) - 1
    return int(round(value, digits))


def load_results(folder: str) -> tuple[list[BabelResult], list[str]]:
    """Every judged results file at or below ``folder`` (OpenCL, CUDA, HIP on the device's
    own memory), and one error line per file that failed (plus one line each counting the
    files of other implementations and of managed memory left out)."""
    fix = "pass BabelStream's folder (it has results/v1.0/opencl/) or --truth DIR"
    results, errors = [], []
    others: Counter[str] = Counter()  # implementation -> files left out
    managed: Counter[str] = Counter()  # memory kind -> files left out
    for label, path in truth_files(folder, fix):
        try:
            result = parse_results(path, label)
        except ClprojError as exc:
            errors.append(exc.cause)
            continue
        if result.implementation and result.implementation.lower() not in JUDGED_IMPLEMENTATIONS:
            others[result.implementation] += 1
        elif result.memory not in ("", "DEFAULT"):
            managed[result.memory] += 1
        else:
            results.append(result)
    for counts, which, why in (
        (others, "of other implementations",
         "clproj judges BabelStream's OpenCL, CUDA and HIP ones (the same kernels)"),
        (managed, "on managed or page-fault memory", "their times include page migration"),
    ):  # fmt: skip
        if counts:
            names = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            errors.append(f"{folder}: left out {counts.total()} results {which} ({names}): {why}")
    return results, errors


def vendor_hint(label: str) -> str:
    """The vendor a file's name starts with (the shipped files' convention), else ""."""
    low = label.lower()
    return next((v for v in ("AMD", "NVIDIA", "Intel") if low.startswith(v.lower())), "")


def identity(result: BabelResult) -> Identity:
    """The spec profile a results file is judged with (:mod:`published_files`)."""
    return identify(result.label, PROFILES, result.device_name, vendor_hint=vendor_hint)
