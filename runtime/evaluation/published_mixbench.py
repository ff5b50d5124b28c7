"""mixbench's published logs: per compute-iteration level, the time of each precision.

``clproj validate-published`` judges spec-sheet device profiles against published mixbench
runs (mixbench-cuda on a V100, mixbench-hip on an MI100). One kernel runs at a series of
*compute iterations* per element, from pure streaming (0) to compute-bound (256); the log's
CSV block gives per level and precision: flops/byte, ex.time (ms), GFLOPS and GB/sec. This
module reads the logs and the configuration the run must copy; running and judging are
:mod:`runtime.evaluation.published`.

**Times.** ``ex.time`` is printed in ms with two decimals (0.16 or 0.17 for a 0.1681 ms
launch: up to 3 % of rounding at the memory plateau). The log's GB/sec column carries five
significant digits of the same measurement: ``bytes / GB/sec`` with ``bytes = elements x
sizeof(precision)`` (``elements`` = buffer size / 8: mixbench allocates the buffer in
doubles and every precision reads ``elements`` values of its own type) gives the time to
about 0.01 %. That time is used when it rounds to the printed ``ex.time`` (within 0.006
ms); otherwise (a log whose GB/sec does not match) the printed ``ex.time`` is.

**Crossover.** The first level whose time exceeds ``CROSSOVER x`` the level-0 time: where
the kernel leaves the memory plateau (the time is flat while the added flops hide behind
memory traffic, and grows with the level once compute dominates). 1.1 is above the plateau's
own noise in the published logs (their level 0-24 times vary by under 5 %).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from clproj.errors import ClprojError
from clproj.runtime.evaluation.published_files import (
    Identity,
    identify,
    read_number,
    read_result_text,
    truth_files,
)

# Log file stem -> (spec device-profile key, vendor).
PROFILES: dict[str, tuple[str, str]] = {
    "v100-mixbench-cuda": ("v100-pcie-spec", "NVIDIA"),
    "mi100-mixbench-hip": ("mi100-spec", "AMD"),
}

# CSV group header -> precision name, and bytes per element read by that precision.
GROUPS = {
    "single precision ops": "sp",
    "packed single precision ops": "sp2",
    "double precision ops": "dp",
    "half precision ops": "hp",
    "integer operations": "int",
}
ELEMENT_BYTES = {"sp": 4, "sp2": 8, "dp": 8, "hp": 4, "int": 4}
# The OpenCL kernel's class_T for each precision mixbench-opencl builds.
CLASS_T = {"float": "sp", "double": "dp", "half2": "hp", "int": "int"}
CROSSOVER = 1.1
JUDGED = ("sp", "dp")  # precisions judged (the others are parsed and reported)


@dataclass
class MixPoint:
    """One precision at one level: as printed, and the time used (see the module docstring)."""

    flops_per_byte: float
    ex_time_ms: float
    gflops: float
    gbps: float
    time_s: float


@dataclass
class MixLog:
    """One published mixbench log: its configuration and its per-level points."""

    label: str
    path: str
    device_name: str
    buffer_mb: int
    elements_per_thread: int
    fusion: int
    block_strided: bool
    levels: dict[int, dict[str, MixPoint]] = field(default_factory=dict)
    # The header's device shape (0 where it prints none): compute units ("Total SPs: 7040
    # (110 MPs x 64 SPs/MP)", mixbench-ocl's "Total CUs: 110"), clock ("GPU clock rate:
    # 1700 MHz") and warp ("WarpSize", which mixbench-ocl does not print).
    compute_units: int = 0
    clock_mhz: float = 0.0
    warp: int = 0
    workgroup: int = 256  # mixbench-ocl's "Workgroup size"; the CUDA and HIP flavours use 256

    @property
    def shape(self) -> tuple[int, float, int] | None:
        """(compute units, clock, warp or 0 where unknown), or None without both of the first."""
        if self.compute_units and self.clock_mhz:
            return self.compute_units, self.clock_mhz, self.warp
        return None

    @property
    def elements(self) -> int:
        """Elements per precision's array: the buffer holds this many doubles."""
        return self.buffer_mb * 2**20 // 8

    def curve(self, precision: str) -> list[tuple[int, MixPoint]]:
        return [
            (lvl, pts[precision]) for lvl, pts in sorted(self.levels.items()) if precision in pts
        ]


def _header_value(lines: list[str], *names: str) -> str | None:
    """The value of the first header line named any of ``names`` (the flavours of mixbench
    name some lines differently: "Elements per thread" / "Elements per workitem")."""
    for line in lines:
        if line.strip().startswith(names) and ":" in line:
            return line.split(":", 1)[1].strip()
    return None


def _number(text: str | None, pattern: str) -> float:
    """The number ``pattern`` captures in a header value, or 0.0 (absent, or "1.2.3")."""
    m = re.search(pattern, text or "")
    value = read_number(m.group(1)) if m else None
    return 0.0 if value is None else value


def parse_log(path: str, label: str | None = None) -> MixLog:  # noqa: C901
    """One mixbench log (labelled by its stem unless ``label`` is given); a file that is
    not one is a :class:`ClprojError` naming it."""
    label = label or os.path.splitext(os.path.basename(path))[0]
    fix = "pass mixbench's folder (it has truth/*.txt logs) or --truth DIR"
    lines = read_result_text(path, fix).splitlines()
    buffer = _header_value(lines, "Buffer size")
    ept = _header_value(lines, "Elements per thread", "Elements per workitem")
    if not buffer or not ept:
        raise ClprojError(
            f"{path}: not a mixbench log (no 'Buffer size' or 'Elements per thread' line)", fix
        )
    stride = _header_value(lines, "Workitem stride") or ""  # mixbench-ocl: Workgroup|NDRange
    trade_off = _header_value(lines, "Trade-off type") or ""  # mixbench-cuda and -hip
    m = re.match(r"(\d+)\s*MB", buffer)
    if not m:
        raise ClprojError(f"{path}: unreadable buffer size {buffer!r}", fix)

    def count(what: str, text: str | None, default: int) -> int:
        """A positive count of the header (``default`` where the line is absent)."""
        if text is None:
            return default
        n = int(_number(text, r"^(\d+)"))
        if n <= 0:
            raise ClprojError(f"{path}: unreadable {what} {text!r}", fix)
        return n

    log = MixLog(
        label=label,
        path=path,
        device_name=_header_value(lines, "Device") or "",
        buffer_mb=int(m.group(1)),
        elements_per_thread=count("elements per thread", ept, 0),
        fusion=count(
            "fusion degree",
            _header_value(lines, "Thread fusion degree", "Workitem fusion degree"),
            1,
        ),
        block_strided="block strided" in trade_off or stride.lower().startswith("workgroup"),
        compute_units=int(
            _number(_header_value(lines, "Total SPs"), r"\((\d+)\s*MPs")
            or _number(_header_value(lines, "Total CUs"), r"^(\d+)")
        ),
        clock_mhz=_number(_header_value(lines, "GPU clock rate"), r"^([0-9.]+)\s*MHz"),
        warp=int(_number(_header_value(lines, "WarpSize"), r"^(\d+)")),
        workgroup=count("work-group size", _header_value(lines, "Workgroup size"), 256),
    )
    groups: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("Experiment ID"):
            names = [c.strip().lower() for c in line.split(",")[1:]]
            groups = [GROUPS.get(n, n) for n in names if n]
            rows = lines[i + 2 :]
            break
    else:
        raise ClprojError(f"{path}: not a mixbench log (no 'Experiment ID' CSV header)", fix)
    for row in rows:
        cells = [c.strip() for c in row.split(",")]
        if not cells[0].isdigit():
            if log.levels:
                break
            continue
        level = int(cells[0])
        values = cells[1:]
        points: dict[str, MixPoint] = {}
        for g, prec in enumerate(groups):
            try:
                fpb, ms, gf, gb = (float(v) for v in values[4 * g : 4 * g + 4])
            except ValueError:
                continue
            points[prec] = MixPoint(fpb, ms, gf, gb, _time_s(log, prec, ms, gb))
        log.levels[level] = points
    if not log.levels:
        raise ClprojError(f"{path}: the CSV block has no level rows", fix)
    return log


def _time_s(log: MixLog, precision: str, ex_time_ms: float, gbps: float) -> float:
    nbytes = log.elements * ELEMENT_BYTES.get(precision, 4)
    if gbps > 0:
        from_rate = nbytes / (gbps * 1e9)
        if abs(from_rate * 1e3 - ex_time_ms) <= 0.006:
            return from_rate
    return ex_time_ms * 1e-3


def load_logs(folder: str) -> tuple[list[MixLog], list[str]]:
    """Every ``*.txt`` log at or below ``folder``, and one error line per file that failed."""
    fix = "pass mixbench's folder (it has truth/) or --truth DIR"
    logs, errors = [], []
    for label, path in truth_files(folder, fix):
        try:
            logs.append(parse_log(path, label))
        except ClprojError as exc:
            errors.append(exc.cause)
    return logs, errors


def crossover(curve: list[tuple[int, float]]) -> int | None:
    """The first level whose time exceeds ``CROSSOVER`` x the level-0 time (None: never)."""
    times = dict(curve)
    base = times.get(0)
    if not base:
        return None
    return next((lvl for lvl, t in sorted(curve) if t > CROSSOVER * base), None)


def vendor_hint(label: str) -> str:
    """The vendor of a log nothing identifies, from the flavour in its name (cuda, hip)."""
    low = label.lower()
    return "NVIDIA" if "cuda" in low else "AMD" if "hip" in low else ""


def identity(log: MixLog) -> Identity:
    """The spec profile a log is judged with (:mod:`published_files`)."""
    return identify(log.label, PROFILES, log.device_name, log.shape, vendor_hint)


def run_args(log: MixLog) -> list[str]:
    """mixbench-opencl's arguments for the log's configuration (main-ocl.cpp's positional
    order: device index, work-group size, array size in 1024^2 elements, elements per work-item,
    fusion degree; ``-w`` for block-strided)."""
    args = ["-w"] if log.block_strided else []
    return [
        *args,
        "1",
        str(log.workgroup),
        str(log.elements // 2**20),
        str(log.elements_per_thread),
        str(log.fusion),
    ]


def level_of(options: str) -> tuple[str, int] | None:
    """(precision, level) from a recorded launch's build options; None for the warm-up."""
    t = re.search(r"-Dclass_T=(\w+)", options)
    n = re.search(r"-DCOMPUTE_ITERATIONS=(\d+)", options)
    if not t or not n or t.group(1) not in CLASS_T:
        return None
    return CLASS_T[t.group(1)], int(n.group(1))
