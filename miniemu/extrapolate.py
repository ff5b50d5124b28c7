"""Extrapolation past the emulation budget (bounded.py, steps 2 and 3).

Loop extrapolation: the launch is re-emulated with the knob (the scalar argument that
sets the heaviest loop's trip count) shrunk so the loop runs a few dozen times, every
counter is fitted as a polynomial of the trip count over the probes and evaluated at the
launch's own. Budget extrapolation, where no knob exists: the partial statistics scaled by
the loop's trip count over the iterations observed. Every decision uses counted
quantities only, so a profile is a function of the kernel and its inputs.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clproj.errors import ClprojError
from clproj.miniemu.counters import flatten_stats, lower_confidence, rebuild_stats, relative_error
from clproj.miniemu.profile import KernelProfile, build_profile, instructions_total, scale_stats
from clproj.miniemu.scev import (
    Launch,
    NotEvaluable,
    child_entries,
    mean_nest_trips,
    scev_args,
    scev_ids,
    signed,
    trip_count,
    uniform_trips,
)

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord
    from clproj.miniemu.bounded import Budget, Runner

# Validation error of the extrapolation fit (relative, on the check probe) per confidence.
FIT_HIGH, FIT_MEDIUM = 0.02, 0.10

# Probe knob values keep the launch's own value modulo this many elements: a knob that is
# also a row stride (``A[i*n + j]``) then starts every row at the same offset within its
# 128-byte line as the launch does, for 4-byte and wider elements (32 is a multiple of
# every 32-byte sector and 128-byte line in such elements), so the lines a row touches
# grow by exactly one per 32 trips in the probes as in the launch. Probes at other
# residues fit exactly among themselves and still miss the launch's misaligned rows: a
# 256-row sum at n = 1000 probed at n = 42/84/127 counted 3.9% fewer transactions than
# its whole group (n = 1000 rows start 8 words past a line, n = 42 rows at varying offsets).
KNOB_MODULUS = 32


def profile_of(raw: Any, record: LaunchRecord) -> KernelProfile:
    return build_profile(raw, record.kernel, record.signature, record.local_size is None)


def with_scalar(record: LaunchRecord, index: int, value: int) -> LaunchRecord:
    rec = copy.copy(record)
    rec.args = [copy.copy(a) for a in record.args]
    a = rec.args[index]
    a.data = (value & ((1 << (8 * len(a.data))) - 1)).to_bytes(len(a.data), "little")
    rec.path = None
    return rec


def scalar_changes(base: LaunchRecord, record: LaunchRecord) -> dict[int, bytes] | None:
    """The scalar arguments ``record`` sets anew (index: bytes) where it is ``base`` but
    for them (as :func:`with_scalar` makes the probes), else None: a run of it can be
    forked from ``base``'s prepared launch (miniemu.fork_server's templates)."""
    import dataclasses

    if len(record.args) != len(base.args):
        return None
    changes: dict[int, bytes] = {}
    for a, b in zip(base.args, record.args, strict=True):
        if a == b:
            continue
        if a.kind == b.kind == "scalar" and dataclasses.replace(b, data=a.data) == a:
            changes[b.index] = bytes(b.data or b"")
        else:
            return None
    return changes if dataclasses.replace(record, args=base.args) == base else None


def dependent_depth(loops: list[dict], loop: dict, knob: int) -> int:
    """Loops on ``loop``'s ancestor chain (itself included) whose trip count reads ``knob``."""
    by_id = {lp["id"]: lp for lp in loops}
    depth, cur = 0, loop
    while cur is not None:
        if knob in scev_args(cur.get("exact")):
            depth += 1
        cur = by_id.get(cur.get("parent", -1))
    return depth


def choose_knob(raw: Any, args: dict[int, int]) -> tuple[dict, int, int] | None:
    """(heaviest loop, knob argument, polynomial degree), or None when no loop qualifies."""
    best = None
    launch = Launch.of(raw)
    for lp in raw.loops:
        used = scev_args(lp.get("exact")) & set(args)
        if not used:
            continue
        try:
            t = uniform_trips(lp, args, launch)
        except NotEvaluable:
            continue
        if best is None or t > best[0]:
            best = (t, lp, used)
    if best is None or best[0] <= 64:
        return None
    t, lp, used = best
    knob = max(used, key=lambda i: signed(args[i], 64))  # the loop bound, not an offset
    return lp, knob, dependent_depth(raw.loops, lp, knob)


def probe_value(
    lp: dict, args: dict[int, int], knob: int, target: int, launch: Launch
) -> int | None:
    """Smallest knob value in [0, actual] whose trip count reaches ``target`` (bisection)."""
    actual = signed(args[knob], 64)
    if actual <= 0:
        return None

    def trips(v: int) -> float:
        at = {**args, knob: v}
        if scev_ids(lp.get("exact")):  # a grid-stride loop: the mean over the launch's ids
            return mean_nest_trips([lp], at, "exact", list(launch.global_size), None, launch)
        return signed(trip_count(lp, at, launch=launch) - 1, 64) + 1

    lo, hi = 0, actual
    if trips(hi) < target:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if trips(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def congruent(values: list[int], actual: int) -> list[int]:
    """``values`` moved each to the nearest value >= ``KNOB_MODULUS`` of the launch's
    residue modulo ``KNOB_MODULUS`` (why: the constant's comment), or unchanged where that
    leaves fewer distinct values or one past ``actual``. A value moves by at most half
    the modulus, and distinct values 32 apart span >= 64, so the largest grows by at most
    a quarter: a probe planned within half the instruction budget stays within it."""
    r = actual % KNOB_MODULUS
    moved = [r + KNOB_MODULUS * max(1, round((v - r) / KNOB_MODULUS)) for v in values]
    if len(set(moved)) < len(values) or max(moved) > actual:
        return values
    return moved


def loop_entries(raw: Any, lp: dict, loops: list[dict], knob: int, args: dict[int, int]) -> float:
    """Entries into ``lp`` in a run, counted: its header executions over the trips per entry
    that the knob sets (the product over ``lp`` and its ancestors whose trip count reads it)."""
    by_id = {x["id"]: x for x in loops}
    launch = Launch.of(raw)
    per_entry: float = 1
    cur = lp
    while cur is not None:
        if knob in scev_args(cur.get("exact")):
            trips = uniform_trips(cur, args, launch)
            per_entry *= trips if cur is lp else child_entries(cur, trips)
        cur = by_id.get(cur.get("parent", -1))
    h = sum(int(g.loop_iterations.get(str(lp["id"]), 0)) for g in raw.groups)
    return h / max(1, per_entry)


@dataclass
class ProbePlan:
    """The probes of a loop extrapolation: loop, knob argument, degree, knob values."""

    loop: dict
    knob: int
    degree: int
    values: list[int]
    xs: list[float]  # the loop's trips per entry at each probe
    x_actual: float  # ... and at the launch's own arguments
    uncapped: bool  # the probe size is ``probe_trips``, not capped by the instructions per trip
    ipi: float  # instructions per trip of the loop in the run that planned the probes
    lanes: int  # work-items each run emulates

    def same_runs(self, other: ProbePlan) -> bool:
        """Whether ``other`` runs the same probes (loop, knob and its values): the runs
        of one plan serve the other."""
        return (self.loop["id"], self.knob, self.values) == (
            other.loop["id"],
            other.knob,
            other.values,
        )


def plan_probes(first: Any, args: dict[int, int], budget: Budget) -> ProbePlan | str:
    """The probes ``first`` (a run stopped at a budget) calls for, or why there are none
    ("" when no loop qualifies)."""
    choice = choose_knob(first, args)
    if choice is None:
        return ""
    lp, knob, degree = choice
    if degree > 2:
        return f"loop {lp['id']} nests {degree} loops on argument {knob} (probes fit degree <= 2)"
    # Trips per probe: keep each probe well inside the instruction budget.
    h = sum(int(g.loop_iterations.get(str(lp["id"]), 0)) for g in first.groups) or 1
    ipi = max(1.0, sum(instructions_total(g.stats) for g in first.groups) / h)
    lanes = math.prod(first.local_size)
    if not first.has_barrier:
        lanes = min(lanes, budget.work_items)
    cap = (0.5 * budget.instructions / (lanes * ipi)) ** (1.0 / degree)
    t_max = int(max(4, min(budget.probe_trips, cap)))
    targets = sorted({max(2, round(t_max * (j + 1) / (degree + 2))) for j in range(degree + 2)})
    if len(targets) < degree + 2:
        return f"too few distinct probe trip counts for loop {lp['id']}"
    launch = Launch.of(first)
    found = [probe_value(lp, args, knob, t, launch) for t in targets]
    if any(v is None for v in found) or len(set(found)) < len(found):
        return f"argument {knob} cannot set loop {lp['id']} to {targets} trips"
    values = congruent([int(v) for v in found if v is not None], signed(args[knob], 64))
    try:
        xs = [uniform_trips(lp, {**args, knob: v}, launch) for v in values]
        x_actual = uniform_trips(lp, args, launch)
    except NotEvaluable as exc:
        return f"loop {lp['id']} at the probes: {exc}"
    return ProbePlan(lp, knob, degree, values, xs, x_actual, cap >= budget.probe_trips, ipi, lanes)


def start_probes(runner: Runner, plan: ProbePlan) -> list[Any]:
    return [runner.start(with_scalar(runner.record, plan.knob, v)) for v in plan.values]


def run_probes(runner: Runner, plan: ProbePlan) -> list[Any]:
    """The probes' statistics, run to their end (parallel where the runner can)."""
    return runner.run_all([with_scalar(runner.record, plan.knob, v) for v in plan.values])


def wait_probes(runner: Runner, handles: list[Any]) -> list[Any] | str:
    """The probes' statistics, or why a probe failed."""
    raws, failed = [], ""
    for h in handles:
        try:
            raws.append(runner.wait(h))
        except ClprojError as exc:
            failed = failed or f"a probe failed: {exc.cause[:200]}"
    return failed or raws


def loop_extrapolate(
    runner: Runner, first: Any, args: dict[int, int]
) -> tuple[KernelProfile, dict] | str:
    """The loop-extrapolated profile, or why there is none ("" when no loop qualifies)."""
    plan = plan_probes(first, args, runner.budget)
    if isinstance(plan, str):
        return plan
    return fit_probes(runner.record, plan, run_probes(runner, plan), first.loops, args)


def fit_probes(
    rec: LaunchRecord, plan: ProbePlan, raws: list[Any], loops: list[dict], args: dict[int, int]
) -> tuple[KernelProfile, dict] | str:
    """The profile fitted on the probes' statistics, or why they are not usable."""
    lp, knob, degree, values = plan.loop, plan.knob, plan.degree, plan.values
    xs, x_actual = plan.xs, plan.x_actual
    if any(r.stop_reason == "time-budget" for r in raws):
        return "the wall-clock backstop stopped a probe"
    if any(r.stop_reason == "instruction-budget" for r in raws):
        return "a probe exceeded the instruction budget"
    # The probes must change the loop's trip count and nothing else: counted entries into
    # the loop (the work-items that reach it) must agree, or the fit extrapolates the
    # change in entries too (PolyBench's `if (i < n) for (j < n)`, probed at small n).
    try:
        entries = [
            loop_entries(r, lp, loops, knob, {**args, knob: v})
            for r, v in zip(raws, values, strict=True)
        ]
    except NotEvaluable:
        return f"trip counts of loop {lp['id']}'s nest not evaluable at the probes"
    if max(entries) - min(entries) > FIT_HIGH * max(entries):
        return (
            f"argument {knob} also changes how many work-items reach loop {lp['id']} "
            f"(entries {', '.join(f'{e:g}' for e in entries)} at {knob} = {values})"
        )
    probes = [profile_of(r, rec) for r in raws]
    import numpy as np

    # Fitted on the d + 1 largest probes, checked on the smallest: the probes nearest the
    # launch's trip count are the ones in its regime where a counter is not one polynomial
    # (a footprint of rows that overlap once they pass their stride: probes at 40 trips,
    # below a 64-element row stride, then 72 and 136; from the first two the fit
    # extrapolated the unique bytes of a loop at 1000 trips 9.7x, from the last two exactly).
    fit_n = degree + 1
    # One least-squares solve for all counters (a column each): a polyfit per counter
    # took 5-8 ms of a 10^4-trip loop's 0.1 s emulation.
    flat = [flatten_stats(p.total) for p in probes]
    keys = sorted(set().union(*flat))
    ys = np.array([[f.get(key, 0.0) for key in keys] for f in flat]).reshape(len(flat), -1)
    coef = np.polyfit(xs[-fit_n:], ys[-fit_n:], degree)
    predicted_actual = dict(zip(keys, np.polyval(coef, x_actual).tolist(), strict=True))
    predicted_check = dict(zip(keys, np.polyval(coef, xs[0]).tolist(), strict=True))
    check = rebuild_stats(probes[0].total, predicted_check)
    err, what = relative_error(check, probes[0].total)
    total = rebuild_stats(probes[0].total, predicted_actual)
    base = probes[0]
    per_group = scale_stats(total, 1.0 / base.launch["num_groups"])
    for s in (total, per_group):
        s.setdefault("local", {})["bytes_per_group"] = base.total["local"]["bytes_per_group"]
        s["private_bytes_per_work_item"] = base.total["private_bytes_per_work_item"]
    fit_conf = "high" if err <= FIT_HIGH else "medium" if err <= FIT_MEDIUM else "low"
    detail = {
        "loop": lp["id"],
        "knob_argument": knob,
        "knob_actual": signed(args[knob], 64),
        "probe_values": values,
        "probe_trips": xs,
        "actual_trips": x_actual,
        "degree": degree,
        "check_error": round(err, 4),
        "check_error_in": what,
        "loop_entries": entries[0],
    }
    prof = KernelProfile(
        rec.kernel, rec.signature, base.launch, dict(base.emulation), per_group, total
    )
    flags = [f for f in base.emulation["flags"]]
    flags.append(
        f"loop-extrapolated: loop {lp['id']} runs {x_actual:.0f} times per entry; fitted on "
        f"argument {knob} = {values[-fit_n:]} (degree {degree}), check probe off by {err:.1%}"
    )
    prof.emulation.update(
        confidence=lower_confidence(fit_conf, base.emulation["confidence"]),
        flags=flags,
        loop_extrapolation=detail,
    )
    return prof, detail


def budget_extrapolate(
    first: Any, args: dict[int, int], record: LaunchRecord
) -> tuple[float, str, list[str]]:
    """Scale the attempt's partial statistics by expected / observed loop iterations."""
    h = {
        k: sum(int(g.loop_iterations.get(k, 0)) for g in first.groups)
        for k in {k for g in first.groups for k in g.loop_iterations}
    }
    flags: list[str] = []
    factor, confidence = 1.0, "low"
    if h:
        heaviest = max(h, key=lambda k: h[k])
        lp = next((x for x in first.loops if str(x["id"]) == heaviest), None)
        wi = sum(g.work_items for g in first.groups)
        per_wi = h[heaviest] / max(1, wi)
        expected, how = None, ""
        if lp is not None:
            chain, cur = [], lp
            by_id = {x["id"]: x for x in first.loops}
            while cur is not None:
                chain.append(cur)
                cur = by_id.get(cur.get("parent", -1))
            for key, label in (("exact", "exact"), ("max", "symbolic maximum")):
                try:
                    expected = mean_nest_trips(
                        chain,
                        args,
                        key,
                        record.global_size,
                        record.global_offset,
                        Launch.of(first),
                    )
                    if any(scev_ids(c.get(key)) for c in chain):
                        label += ", mean over the launch's work-item ids"
                    how = label
                    break
                except NotEvaluable:
                    continue
        if expected is not None and per_wi > 0:
            factor = max(1.0, expected / per_wi)
            confidence = "medium" if how.startswith("exact") else "low"
            flags.append(
                f"budget-extrapolated: loop {heaviest} trip count ({how}) {expected:.0f} per "
                f"work-item, {per_wi:.0f} emulated; statistics of a partial work-item sample "
                "(warp-level counts are not coalesced across a warp)"
            )
        else:
            flags.append(
                "budget-extrapolated: trip count not derivable; statistics are those of the "
                "budget (a lower bound)"
            )
    else:
        flags.append("budget-extrapolated: no loop found; statistics are a lower bound")
    return factor, confidence, flags
