"""Placement policy: which device runs the next launch of a kernel. Pure and fast.

Why pure: the broker must answer a placement request within a millisecond, so the rule
is a few arithmetic operations over small dicts, with no I/O; tests and the benchmark
call :func:`decide` directly.

The rule (docs/cluster.md, "Placement rule"). For every live device ``d`` with a known
projected time ``t_d`` (seconds per launch of this kernel):

    cost_d = remaining * t_d  +  queue_d  +  move_bytes_d / bandwidth_d

``remaining`` is the expected number of launches still to come (the client estimates it
as the number seen so far: a kernel launched n times is expected to run about n more),
``queue_d`` the seconds of work already queued on ``d``, ``move_bytes_d`` the bytes of
the kernel's buffers that are not yet valid on ``d``, ``bandwidth_d`` the transfer rate
into ``d`` (from its profile). The cheapest device wins; the current device is kept
unless the winner is cheaper by more than ``hysteresis`` (fraction), so launches do not
flip between near-equal devices. That is exactly the migration rule: move when the
projected gain over the remaining launches outweighs moving the data.

With no projection at all the launch goes at once to a *default* device (the current one,
else the least loaded, ties to the fastest by peak throughput): the first launch never
waits for the projection.

With ``objective`` energy or EDP (``clproj run --objective``, the client's ``place``
request), the launches' part of the cost is priced in joules (``remaining * e_d``, the
projected energy per launch posted with the times) or joule-seconds (that x the time
cost) instead; queue and transfer stay in the time cost, which also decides the
constraints: with ``deadline_s`` only devices whose projected launch time meets it, with
``max_slowdown`` only devices whose time cost is within that fraction of the fastest,
are candidates (none meets the deadline: the fastest). A device without a projected
energy is no candidate under energy or EDP while another has one, so nothing is placed
by a made-up figure; with none, the rule falls back to time.

Projection sources, best first: a projection posted to the broker (``runtime.projection.model``
or the shim's mini-emulation, possibly arriving late); the pluggable ``projector``
callable; and the FALLBACK :func:`peak_ratio_projection`, a placeholder that scales a
launch time measured on one device by the ratio of peak throughputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A projector maps (kernel key, device views) to device id -> seconds (None: unknown).
Projector = Callable[[str, Mapping[str, "DeviceView"]], Mapping[str, float | None] | None]

DEFAULT_BANDWIDTH = 1e9  # bytes/s when a profile gives no transfer rate
DEFAULT_HYSTERESIS = 0.05


@dataclass
class DeviceView:
    """What placement knows about one device."""

    id: str
    peak_flops: float  # fp32 peak, ops/s (profile throughput or spec)
    h2d_bytes_per_s: float = DEFAULT_BANDWIDTH
    queue_s: float = 0.0  # seconds of work queued
    inflight: int = 0


@dataclass(frozen=True)
class Decision:
    device: str
    reason: str
    costs: dict[str, float]


def peak_fp32(profile: Mapping[str, Any]) -> float:
    """Peak fp32 throughput of a device profile (throughput.fp32_fma, else spec numbers)."""
    thr = profile.get("throughput") or {}
    for k in ("fp32_fma", "fp32_add", "fp32_mul"):
        v = thr.get(k)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    cu = profile.get("compute_units") or 1
    mhz = profile.get("clock_mhz") or 1000
    lanes = profile.get("warp_width") or 1
    return float(cu) * float(mhz) * 1e6 * float(lanes)


def peak_ratio_projection(
    measured: Mapping[str, float], devices: Mapping[str, DeviceView]
) -> dict[str, float | None]:
    """FALLBACK projection (placeholder until ``runtime.projection.model`` is plugged in).

    A launch time measured on device m is scaled by peak_m / peak_d for every device d.
    It knows nothing of memory-boundness or occupancy; it only lets placement act before
    a real projection arrives. With no measurement every time is unknown.
    """
    out: dict[str, float | None] = {d: None for d in devices}
    base = [(m, t) for m, t in measured.items() if m in devices and t > 0]
    if not base:
        return out
    m, t = min(base, key=lambda mt: mt[1])
    pm = devices[m].peak_flops
    for d, view in devices.items():
        out[d] = measured.get(d) or t * pm / max(view.peak_flops, 1.0)
    return out


@dataclass(frozen=True)
class Objective:
    """What placement minimises and under which constraints (``clproj run --objective
    --deadline --max-slowdown``; settings CLPROJ_OBJECTIVE, CLPROJ_DEADLINE_S,
    CLPROJ_MAX_SLOWDOWN): ``deadline_s`` per launch, 0 none; ``max_slowdown`` a fraction
    over the fastest device's time cost, 0 none."""

    name: str = "time"
    deadline_s: float = 0.0
    max_slowdown: float = 0.0


TIME = Objective()


def constrained(times: Mapping[str, float], objective: Objective) -> set[str]:
    """The devices ``objective``'s constraints allow among those with a time: within the
    deadline (none does: the fastest) and within the slowdown bound of the fastest."""
    if not times:
        return set()
    fastest = min(times.values())
    ok = set(times)
    if objective.deadline_s > 0:
        ok = {d for d in ok if times[d] <= objective.deadline_s}
        if not ok:
            return {min(times, key=lambda d: (times[d], d))}
    if objective.max_slowdown > 0:
        ok = {d for d in ok if times[d] <= fastest * (1 + objective.max_slowdown)}
    return ok


def decide(  # noqa: C901
    times: Mapping[str, float | None],
    devices: Mapping[str, DeviceView],
    move_bytes: Mapping[str, int],
    remaining: float,
    current: str | None = None,
    hysteresis: float = DEFAULT_HYSTERESIS,
    energies: Mapping[str, float | None] | None = None,
    objective: Objective = TIME,
) -> Decision:
    """Pick the device for the next launch; ``devices`` holds only live devices.
    ``energies``: projected joules per launch (None: unknown), used by ``objective``."""
    if not devices:
        raise ValueError("no live device")
    remaining = max(float(remaining), 1.0)
    costs: dict[str, float] = {}
    launch_t: dict[str, float] = {}
    for d, view in devices.items():
        t = times.get(d)
        if t is None:
            continue
        bw = view.h2d_bytes_per_s if view.h2d_bytes_per_s > 0 else DEFAULT_BANDWIDTH
        costs[d] = remaining * t + view.queue_s + move_bytes.get(d, 0) / bw
        launch_t[d] = float(t)
    if costs and (objective.deadline_s > 0 or objective.max_slowdown > 0):
        # the deadline is per launch; the slowdown bound is over the whole time cost
        on_time = constrained(launch_t, Objective(deadline_s=objective.deadline_s))
        within = constrained(
            {d: costs[d] for d in on_time}, Objective(max_slowdown=objective.max_slowdown)
        )
        costs = {d: c for d, c in costs.items() if d in within}
    if costs and objective.name != "time":
        e = {d: (energies or {}).get(d) for d in costs}
        known = {d: float(v) for d, v in e.items() if v is not None}
        if known:
            costs = {
                d: remaining * j * (costs[d] if objective.name == "edp" else 1.0)
                for d, j in known.items()
            }
            best = min(costs, key=lambda d: (costs[d], d))
            unit = "J" if objective.name == "energy" else "J s"
            if current in costs and current != best:
                if costs[current] - costs[best] <= hysteresis * costs[current]:
                    return Decision(current, f"stay: {objective.name} gain below hysteresis", costs)
                return Decision(
                    best, f"migrate: projected {objective.name} {costs[best]:.3g} {unit}", costs
                )
            return Decision(best, f"lowest projected {objective.name} ({unit})", costs)
    if not costs:
        if current in devices:
            return Decision(current, "no projection yet: stay on current device", costs)
        best = min(devices.values(), key=lambda v: (v.queue_s, v.inflight, -v.peak_flops, v.id))
        return Decision(best.id, "no projection yet: default device (least loaded)", costs)
    best = min(costs, key=lambda d: (costs[d], d))
    if current in costs and current != best:
        if costs[current] - costs[best] <= hysteresis * costs[current]:
            return Decision(current, "stay: gain below hysteresis", costs)
        return Decision(
            best,
            f"migrate: projected gain {costs[current] - costs[best]:.3g}s over "
            f"{remaining:g} launches exceeds data movement",
            costs,
        )
    return Decision(best, "lowest projected cost", costs)
