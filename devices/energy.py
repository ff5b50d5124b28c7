"""Energy of repeated kernel launches: from raw counter readings to per-launch figures,
and the ``clproj.energy-results`` v1 format they are kept in.

Why the arithmetic is apart from the counters: NVIDIA's total-energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded) steps every 20-100 ms
and a power reading is a 1 s average, so a short window or a window cut between steps
gives a figure that looks exact and is not. The rules that turn readings into figures
(window length, counter steps, idle subtraction) are therefore one pure function,
:func:`window_figures`, tested on readings built from the counter's documented behaviour;
the code that talks to the driver (:mod:`devices.energy_nvml`) and to Linux powercap
(:mod:`devices.rapl`) only collects readings.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from clproj.errors import ClprojError

FORMAT = "clproj.energy-results"
VERSION = 1
# Integrate at least this long: 20-100 ms counter steps leave a 5% end error at 2 s.
MIN_WINDOW_S = 2.0
# ... over at least this many counter steps (a counter stuck for 2 s is not measuring).
MIN_COUNTER_STEPS = 10


@dataclass(frozen=True)
class CounterReading:
    """One poll of an energy counter: host monotonic time (s) and the counter value (J)."""

    t_s: float
    energy_j: float


@dataclass
class Window:
    """Everything read while one kernel was launched over and over.

    ``start_s``/``end_s``: host monotonic times of the first enqueue and of the queue
    drained after the last launch; ``readings``: the counter polled from before the
    start to after the end; ``idle_power_w``: power samples taken before the start, with
    the device quiet; ``sm_clock_mhz``/``temperature_c``: samples during the window."""

    kernel: str
    launches: int
    start_s: float
    end_s: float
    readings: list[CounterReading]
    idle_power_w: list[float] = field(default_factory=list)
    sm_clock_mhz: list[float] = field(default_factory=list)
    temperature_c: list[float] = field(default_factory=list)
    counter: str = "nvml-total-energy"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["readings"] = [[r.t_s, r.energy_j] for r in self.readings]
        return d


def _refuse(what: str, fix: str) -> ClprojError:
    return ClprojError(what, fix)


def counter_steps(readings: list[CounterReading]) -> list[CounterReading]:
    """The readings at which the counter changed value: the first poll of each new value.

    A step's poll time is the best estimate of when the counter was updated (the poll
    interval is far below the 20-100 ms update period); integrating between two step
    edges, not between two arbitrary polls, removes the up-to-one-period error at each
    end of the window."""
    steps: list[CounterReading] = []
    for prev, cur in itertools.pairwise(readings):
        if cur.energy_j < prev.energy_j:
            raise _refuse(
                f"energy counter went backwards at t={cur.t_s:.3f} s "
                f"({prev.energy_j:.3f} J -> {cur.energy_j:.3f} J)",
                "the driver restarted or the counter wrapped: measure the kernel again",
            )
        if cur.energy_j > prev.energy_j:
            steps.append(cur)
    return steps


def window_figures(
    w: Window, min_window_s: float = MIN_WINDOW_S, min_steps: int = MIN_COUNTER_STEPS
) -> dict[str, Any]:
    """Per-launch figures of one window, or ClprojError when the window cannot give them.

    Energy is integrated between the first and the last counter step inside the launch
    window (average power = energy / time between those steps); time per launch is the
    window's wall time / launches (a drained queue, so device time plus what the host adds
    between launches, which the window is long enough to make small). Power above idle
    subtracts the mean idle sample; energy per launch = average power x time per launch."""
    if w.launches < 1:
        raise _refuse(f"{w.kernel}: window has {w.launches} launches", "launch at least once")
    wall = w.end_s - w.start_s
    if not math.isfinite(wall) or wall < min_window_s:
        raise _refuse(
            f"{w.kernel}: launch window {wall:.3f} s is shorter than {min_window_s:g} s",
            f"repeat the kernel for at least {min_window_s:g} s (the counter steps every "
            "20-100 ms)",
        )
    inside = [r for r in w.readings if w.start_s <= r.t_s <= w.end_s]
    steps = [s for s in counter_steps(w.readings) if w.start_s <= s.t_s <= w.end_s]
    if len(steps) < max(2, min_steps):
        raise _refuse(
            f"{w.kernel}: the energy counter stepped {len(steps)} times in the "
            f"window, fewer than {min_steps}",
            "poll the counter more often or launch for longer",
        )
    first, last = steps[0], steps[-1]
    span = last.t_s - first.t_s
    if span < min_window_s * 0.5:
        raise _refuse(
            f"{w.kernel}: counter steps span {span:.3f} s of the {wall:.3f} s window",
            "poll the counter throughout the window",
        )
    energy = last.energy_j - first.energy_j
    power = energy / span
    per_launch = wall / w.launches
    idle = statistics.fmean(w.idle_power_w) if w.idle_power_w else None
    above = None if idle is None else power - idle
    return {
        "kernel": w.kernel,
        "launches": w.launches,
        "window_s": wall,
        "integrated_s": span,
        "counter_steps": len(steps),
        "polls": len(inside),
        "time_per_launch_s": per_launch,
        "energy_j": energy,
        "average_power_w": power,
        "idle_power_w": idle,
        "power_above_idle_w": above,
        "energy_per_launch_j": power * per_launch,
        "energy_above_idle_per_launch_j": None if above is None else above * per_launch,
        "sm_clock_mhz": _spread(w.sm_clock_mhz),
        "temperature_c": _spread(w.temperature_c),
    }


def _spread(samples: list[float]) -> dict[str, float] | None:
    if not samples:
        return None
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples)}


def kernel_entry(w: Window, **labels: Any) -> dict[str, Any]:
    """One ``kernels[]`` entry: ``labels`` (app, launch shape), the raw window, and its
    figures or, where the rules refuse it, the reason. Nothing measured is dropped and
    nothing refused is reported as a figure."""
    entry: dict[str, Any] = {**labels, "raw": w.to_dict(), "figures": None, "error": None}
    try:
        entry["figures"] = window_figures(w)
    except ClprojError as exc:
        entry["error"] = exc.cause
    return entry


def results(
    device: dict[str, Any], kernels: list[dict[str, Any]], host: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``clproj.energy-results`` v1 document of :func:`kernel_entry` entries (or
    ``{"app": ..., "error": ...}`` for an app that failed before any window)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "device": device,
        "host": host or {},
        "rules": {"min_window_s": MIN_WINDOW_S, "min_counter_steps": MIN_COUNTER_STEPS},
        "kernels": kernels,
    }


def validate_results(doc: Any) -> dict[str, Any]:  # noqa: C901
    """The document if it is a readable ``clproj.energy-results`` v1, else ClprojError
    naming the field (results are copied off the GPU machine and committed)."""
    fix = "pass a file written by scripts/gpu/energy.sh (docs/formats.md section 5)"
    if not isinstance(doc, dict):
        raise ClprojError("energy results: expected a JSON object", fix)
    if doc.get("format") != FORMAT:
        raise ClprojError(f"energy results field format: expected {FORMAT!r}", fix)
    v = doc.get("version")
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= VERSION:
        raise ClprojError(f"energy results field version: expected 1..{VERSION}, got {v!r}", fix)
    for name in ("device", "kernels"):
        if name not in doc:
            raise ClprojError(f"energy results field {name}: missing", fix)
    if not isinstance(doc["kernels"], list):
        raise ClprojError("energy results field kernels: expected a list", fix)
    for i, k in enumerate(doc["kernels"]):
        if not isinstance(k, dict):
            raise ClprojError(f"energy results field kernels[{i}]: expected an object", fix)
        raw = k.get("raw")
        if raw is None and isinstance(k.get("error"), str):
            continue  # an app that failed before any window: its reason, no readings
        if not isinstance(raw, dict) or not isinstance(raw.get("readings"), list):
            raise ClprojError(f"energy results field kernels[{i}].raw.readings: missing", fix)
    return doc


def read_results(path: str) -> dict[str, Any]:
    """A ``clproj.energy-results`` file, read and checked as untrusted input: what every
    reader of measured windows or microbenchmark readings opens it with."""
    from clproj.untrusted import read_json_file

    fix = "pass a file written by clproj profile-device --power or benchmarks/energy_run.py"
    return validate_results(read_json_file(path, "energy results", 256 << 20, fix))
