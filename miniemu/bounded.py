"""Bounded-cost mini-emulation: a kernel profile for every launch within a budget.

The paper's premise, "one work-group is cheap to emulate", fails for kernels whose
work-items loop millions of times. ``emulate_bounded`` keeps every emulation inside a
:class:`Budget` (instructions per emulator run, sampled work-items; wall time only as a
backstop) and says how each profile was obtained (``emulation.method``), what stopped it
(``emulation.budget``) and how far to trust it (``emulation.confidence``).

The bound is *counted*, never timed: the plugin counts instructions and work-items and
stops at the same instruction on an idle and on a loaded machine, and every decision and
extrapolation below uses counted quantities only (instructions, work-items, loop
iterations, ScalarEvolution trip counts), so a profile is a function of the kernel and its
inputs. Until 2026-11-24 the wall-clock budget (3 s) stopped runs and decided whether
there was time left for the probes, so the same launch got different profiles run to run
(PolyBench gemver_kernel2: 0.34x or 0.93x of measured on the GPUs). The wall clock is now
only a backstop (``Budget.wall_s``, 30 s of emulation per run): where it cuts a run short
the profile says ``budget: "wall"``, gets confidence ``low`` and is not written to the
projection cache.

Steps (docs/miniemu.md, "Bounded emulation"):

1. **Attempt**: group 0 in quick mode; without barriers the plugin stops after
   ``budget.work_items`` work-items (whole warps of consecutive local ids) and writes its
   statistics (``sampled-work-items``); any run stops at the instruction budget.
   A run that finishes is the profile (``full-group`` or ``sampled-work-items``).
2. **Loop extrapolation**: when the attempt hit the budget, the plugin's ScalarEvolution
   analysis (``loops``: backedge-taken counts as expressions over kernel arguments) picks
   the scalar argument (the *knob*) that sets the trip count of the heaviest loop. The
   launch is re-emulated with the knob shrunk so that the loop runs a few dozen times
   (``d + 2`` probes for a loop nest of arg-dependent depth ``d``); every counter is fitted
   as a degree-``d`` polynomial of the loop's trip count on ``d + 1`` probes, checked on
   the last one, and evaluated at the trip count of the launch's real argument values.
   All work-items take part in the probes, so warp-level statistics (transactions,
   divergence, bank conflicts) are real, not guessed. The probes are rejected when the
   knob also changes how many work-items reach the loop (loop entries per probe, counted:
   header executions / trip count, must agree): PolyBench's ``if (i < n) for (j < n)``
   probed at n = 16..48 runs the loop in 16..48 of the 128 sampled work-items, and the
   fit extrapolated that shrinkage (0.37x the instructions). The probes' trip counts reach
   ``probe_trips`` (128), so that the smallest is >= 32: a knob that is also a row stride
   (``A[i*n + j]``) then keeps rows of 4-byte elements >= 128 B apart, the largest segment
   counted, and the probes coalesce as the real launch does (at 16..48, PolyBench
   atax_kernel1's 128-byte transactions came out 1.41x those of the whole work-group).
3. **Budget extrapolation** (trip count not derivable from arguments): the partial
   statistics of the attempt are scaled by the ratio of the loop's trip count (exact
   constant -> ``medium``; symbolic maximum -> ``low``; none -> a lower bound, ``low``)
   to the iterations observed.

With a fork server (the default, :func:`_attempt`), a short *scout* run beside the attempt
plans the probes at once; when they predict that the attempt would stop at its budget, the
attempt is not waited for. The profile is the one the steps above give, in less time.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clproj.background_thread import map_in_threads
from clproj.errors import ClprojError
from clproj.miniemu.profile import KernelProfile, build_profile, instructions_total, scale_stats
from clproj.paths import scratch_parent

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord

_NOT_SCALED = ("bytes_per_group", "private_bytes_per_work_item")
# Validation error of the extrapolation fit (relative, on the check probe) per confidence.
FIT_HIGH, FIT_MEDIUM = 0.02, 0.10
# Seconds a worker needs before the kernel starts (python, pyopencl, Oclgrind's build).
STARTUP_S = 0.7


@dataclass
class Budget:
    """Cost limits of one bounded emulation.

    Counted (the bound; the same on any machine): ``instructions`` per emulator run (the
    plugin counts them); ``work_items`` sampled per group when the kernel has no barrier
    (two warps of the widest warp width, 64); ``probe_trips``: largest trip count of the
    heaviest loop in a probe run (probes also stay under half the instruction budget;
    128 keeps the smallest of the d + 2 probes >= 32 trips, module docstring).
    ``wall_s``: a safety backstop in wall seconds per emulator run, timed by the plugin
    from the kernel's start (loading the record is not emulation: a 256 MB PolyBench
    record takes seconds to load under load), ten times what the counted budget costs
    there on the loaded 2-core VM; where it fires, the profile is marked
    ``budget: "wall"`` (until 2026-11-24 it was the budget itself, 3 s for all runs of a
    profile, and made profiles depend on the machine's load).
    """

    wall_s: float = 30.0
    instructions: int = 2_000_000
    work_items: int = 128
    probe_trips: int = 128

    @classmethod
    def parse(cls, text: str | float | Budget | None) -> Budget:
        """``"30"`` (backstop seconds) or ``"wall=30,instructions=2e6,work_items=128,probe_trips=128"``."""
        if text is None:
            return cls()
        if isinstance(text, Budget):
            return text
        if isinstance(text, (int, float)):
            return cls(wall_s=float(text))
        out = cls()
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            key, _, val = part.partition("=") if "=" in part else ("wall", "", part)
            key = {"wall": "wall_s", "wall_s": "wall_s", "time": "wall_s"}.get(key, key)
            if key not in ("wall_s", "instructions", "work_items", "probe_trips"):
                raise ClprojError(
                    f"unknown budget field {key!r}",
                    "use wall=S,instructions=N,work_items=N,probe_trips=N",
                )
            try:
                setattr(out, key, float(val) if key == "wall_s" else int(float(val)))
            except ValueError:
                raise ClprojError(f"budget field {key} is not a number: {val!r}") from None
        if out.work_items < 64 or out.wall_s <= 0 or out.instructions <= 0:
            raise ClprojError(
                "budget too small: work_items >= 64, wall_s > 0 and instructions > 0",
                "the statistics need whole warps of 64 work-items",
            )
        return out


# ---------------------------------------------------------------- SCEV expressions


class NotEvaluable(Exception):
    """The trip-count expression depends on something other than kernel arguments."""


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def eval_scev(
    expr: dict[str, Any] | None, args: dict[int, int], ids: dict[int, int] | None = None
) -> int:
    """Evaluate a plugin SCEV expression (loops.cpp) with integer argument values (unsigned)
    and, where it reads ``get_global_id(d)``, the work-item's global ids ``ids[d]``."""
    if expr is None or "unknown" in expr:
        raise NotEvaluable(expr and expr.get("unknown"))
    bits = int(expr.get("bits", 64))
    mask = (1 << bits) - 1
    if "c" in expr:
        return int(expr["c"]) & mask
    if "arg" in expr:
        i = int(expr["arg"])
        if i not in args:
            raise NotEvaluable(f"argument {i} is not an integer scalar")
        return args[i] & mask
    if "gid" in expr:
        d = int(expr["gid"])
        if ids is None or d not in ids:
            raise NotEvaluable(f"the work-item's global id {d}")
        return ids[d] & mask
    op, ops = expr["op"], expr["ops"]
    vals = [eval_scev(o, args, ids) for o in ops]
    if op == "add":
        return sum(vals) & mask
    if op == "mul":
        return math.prod(vals) & mask
    if op == "udiv":
        if vals[1] == 0:
            raise NotEvaluable("division by zero")
        return (vals[0] // vals[1]) & mask
    if op in ("umax", "umin"):
        return (max if op == "umax" else min)(vals)
    if op in ("smax", "smin"):
        s = [_signed(v, bits) for v in vals]
        return (max if op == "smax" else min)(s) & mask
    if op == "zext":
        return vals[0] & mask
    if op == "sext":
        return _signed(vals[0], int(ops[0].get("bits", bits))) & mask
    if op == "trunc":
        return vals[0] & mask
    raise NotEvaluable(f"operation {op}")


def _scev_leaves(expr: dict[str, Any] | None, kind: str) -> set[int]:
    """The values of an expression's ``kind`` leaves (``arg`` indices, ``gid`` dimensions)."""
    if not expr:
        return set()
    if kind in expr:
        return {int(expr[kind])}
    out: set[int] = set()
    for o in expr.get("ops", []):
        out |= _scev_leaves(o, kind)
    return out


def scev_args(expr: dict[str, Any] | None) -> set[int]:
    """Kernel argument indices an expression reads."""
    return _scev_leaves(expr, "arg")


def scalar_args(record: LaunchRecord) -> dict[int, int]:
    """Integer view (little-endian, unsigned) of every scalar argument of 1-8 bytes."""
    out = {}
    for a in record.args:
        if a.kind == "scalar" and a.data is not None and len(a.data) in (1, 2, 4, 8):
            out[a.index] = int.from_bytes(a.data, "little")
    return out


def trip_count(
    loop: dict[str, Any],
    args: dict[int, int],
    key: str = "exact",
    ids: dict[int, int] | None = None,
) -> int:
    """Header executions per entry of ``loop`` (backedge-taken count + 1)."""
    return eval_scev(loop.get(key), args, ids) + 1


def scev_ids(expr: dict[str, Any] | None) -> set[int]:
    """Dimensions d whose ``get_global_id(d)`` an expression reads."""
    return _scev_leaves(expr, "gid")


# Work-item ids sampled per dimension when a nest's trip count depends on them: the mean
# over an evenly spaced grid of the launch's id range (a triangular nest's product is
# quadratic in the id; 256 points put the mean within 0.01% of the exact sum).
ID_SAMPLES = {1: 256, 2: 64, 3: 16}


def _trips_at(loop: dict[str, Any], args: dict[int, int], key: str, ids: dict[int, int]) -> int:
    """Trips of one entry for one work-item; a negative count (the loop's guard fails for
    this work-item, e.g. ids past the matrix edge) is one header execution."""
    expr = loop.get(key)
    bits = int((expr or {}).get("bits", 64))
    return max(0, _signed(eval_scev(expr, args, ids), bits)) + 1


def mean_nest_trips(
    chain: list[dict[str, Any]],
    args: dict[int, int],
    key: str,
    global_size: list[int],
    global_offset: list[int] | None = None,
) -> float:
    """Mean over the launch's work-items of the product of the nest's trip counts.

    Why a mean over ids: a trip count that reads the work-item's id (covariance's
    ``for (j2 = j1; j2 < m; j2++)`` with ``j1 = get_global_id(0)``) differs from one
    work-item to the next, and the emulated ones (group 0: the longest trips here) are no
    sample of the launch. Raises :class:`NotEvaluable` when a count reads anything else.
    """
    dims = sorted(set().union(*(scev_ids(c.get(key)) for c in chain)))
    if not dims:
        return float(math.prod(trip_count(c, args, key) for c in chain))
    offset = list(global_offset or [0] * len(global_size))
    per_dim = []
    for d in dims:
        if d >= len(global_size):
            raise NotEvaluable(f"get_global_id({d}) beyond the launch's {len(global_size)} dims")
        n, k = int(global_size[d]), ID_SAMPLES.get(len(dims), 16)
        k = min(n, k)
        per_dim.append([offset[d] + (2 * j + 1) * n // (2 * k) for j in range(k)])
    total, count = 0.0, 0
    for point in itertools.product(*per_dim):
        ids = dict(zip(dims, point, strict=True))
        total += math.prod(_trips_at(c, args, key, ids) for c in chain)
        count += 1
    return total / count


# ---------------------------------------------------------------- statistics helpers


def flatten_stats(stats: dict[str, Any], prefix: tuple = ()) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for k, v in stats.items():
        if k in _NOT_SCALED:
            continue
        if isinstance(v, dict):
            out.update(flatten_stats(v, (*prefix, k)))
        elif isinstance(v, (int, float)):
            out[(*prefix, k)] = float(v)
    return out


def rebuild_stats(template: dict[str, Any], values: dict[tuple, float], prefix: tuple = ()) -> dict:
    out: dict[str, Any] = {}
    for k, v in template.items():
        if isinstance(v, dict) and k not in _NOT_SCALED:
            out[k] = rebuild_stats(v, values, (*prefix, k))
        elif (*prefix, k) in values:
            out[k] = max(0, round(values[(*prefix, k)]))
        else:
            out[k] = copy.deepcopy(v)
    return out


def key_metrics(stats: dict[str, Any]) -> dict[str, float]:
    g = stats.get("global", {})
    tx = sum(c for d in g.get("transactions", {}).values() for w in d.values() for c in w.values())
    return {
        "instructions": instructions_total(stats),
        "global load bytes": g.get("load_bytes", 0),
        "global store bytes": g.get("store_bytes", 0),
        "transactions": tx,
        "local accesses": stats.get("local", {}).get("accesses", 0),
        "branches": stats.get("branches", {}).get("total", 0),
    }


def relative_error(pred: dict[str, Any], ref: dict[str, Any]) -> tuple[float, str]:
    """Largest relative difference of the key metrics (instructions, bytes, transactions)."""
    mp, mr = key_metrics(pred), key_metrics(ref)
    worst, what = 0.0, "instructions"
    for k in mr:
        hi = max(abs(mp[k]), abs(mr[k]))
        if hi > 0:
            d = abs(mp[k] - mr[k]) / hi
            if d > worst:
                worst, what = d, k
    return worst, what


def _lower(conf: str, other: str) -> str:
    order = ["low", "medium", "high"]
    return order[min(order.index(conf), order.index(other))]


# ---------------------------------------------------------------- the bounded emulation


class _Runner:
    """Runs emulator attempts of one record (and modified copies).

    Each run is bounded by the counted budget (instructions, sampled work-items); the
    wall-clock backstop (``budget.wall_s`` of emulation, in the plugin; the worker is
    killed at twice that plus its start-up) only catches a run that would otherwise not
    end. ``wall_stops`` counts the runs it stopped: a profile with any is marked
    ``budget: "wall"``. With a fork server (``server``, miniemu.worker ``--serve``) runs
    are started with :meth:`start` and collected with :meth:`wait`, in parallel; without
    one :meth:`start` runs the worker to its end.
    """

    def __init__(
        self, record: LaunchRecord, budget: Budget, backend: Any, tmp: str, server: Any = None
    ) -> None:
        self.record, self.budget, self.backend, self.tmp = record, budget, backend, tmp
        self.server = server
        self.start_s = time.perf_counter()
        self.runs = 0
        self.instructions = 0  # counted by the plugin, all runs
        self.wall_stops = 0

    def timeout(self) -> float:
        return 2 * self.budget.wall_s + STARTUP_S + 10.0

    def start(self, record: LaunchRecord, instructions: int | None = None) -> Any:
        from clproj.intercept.record import save

        # a folder of its own per run: probes start from several threads at once, and
        # they share the record's id (its file name)
        folder = tempfile.mkdtemp(prefix="r", dir=self.tmp)
        path = save(copy.copy(record), folder, link_blobs=True)
        limits = {
            "CLPROJ_STATS_MAX_WORK_ITEMS": str(self.budget.work_items),
            "CLPROJ_STATS_MAX_INSTRUCTIONS": str(instructions or self.budget.instructions),
            "CLPROJ_STATS_BUDGET_S": f"{self.budget.wall_s:.3f}",
        }
        self.runs += 1
        if self.server is not None:
            return self.server.submit(path, limits)
        # The plugin stops itself at the budget; the kill is the backstop for a hang
        # outside the kernel (start-up, loading the record, writing the statistics).
        try:
            return _Finished(self.backend.run(path, "bounded", self.timeout(), limits=limits))
        except ClprojError as exc:
            return _Finished(None, exc)

    def wait(self, handle: Any) -> Any:
        """The run's statistics (raises its error)."""
        if isinstance(handle, _Finished):
            raw, err = handle.raw, handle.error
        else:
            raw, err = None, None
            try:
                raw = self.server.result(handle, self.timeout())
            except ClprojError as exc:
                err = exc
        if err is not None:
            if "exceeded its time budget" in err.cause:
                self.wall_stops += 1
            raise err
        self.instructions += raw.instructions_executed
        if raw.stop_reason == "time-budget":
            self.wall_stops += 1
        return raw

    def cancel(self, handle: Any) -> None:
        """Drop a run whose result is no longer needed (killed if still going)."""
        if self.server is not None and not isinstance(handle, _Finished):
            self.server.cancel(handle)

    def done(self, handles: list[Any], timeout_s: float) -> Any:
        """The first of ``handles`` that has finished, waiting up to ``timeout_s``."""
        finished = [h for h in handles if isinstance(h, _Finished)]
        if finished or self.server is None:
            return finished[0] if finished else None
        return self.server.wait_any(handles, timeout_s)

    def finished(self, handle: Any) -> bool:
        """Whether the run has ended (its result is there to collect)."""
        return isinstance(handle, _Finished) or handle.status is not None

    def run(self, record: LaunchRecord) -> Any:
        return self.wait(self.start(record))

    def run_all(self, records: list[LaunchRecord]) -> list[Any]:
        """Runs in parallel: forks of the server, else worker processes from threads."""
        if self.server is None:
            return map_in_threads(self.run, records, "clproj-probe")
        handles = [self.start(r) for r in records]
        out, first_error = [], None
        for h in handles:
            try:
                out.append(self.wait(h))
            except ClprojError as exc:
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return out


@dataclass
class _Finished:
    """A run of the one-shot worker, already over: its statistics or its error."""

    raw: Any
    error: ClprojError | None = None


def _profile(raw: Any, record: LaunchRecord) -> KernelProfile:
    return build_profile(raw, record.kernel, record.signature, record.local_size is None)


def _with_scalar(record: LaunchRecord, index: int, value: int) -> LaunchRecord:
    rec = copy.copy(record)
    rec.args = [copy.copy(a) for a in record.args]
    a = rec.args[index]
    a.data = (value & ((1 << (8 * len(a.data))) - 1)).to_bytes(len(a.data), "little")
    rec.path = None
    return rec


def _dependent_depth(loops: list[dict], loop: dict, knob: int) -> int:
    """Loops on ``loop``'s ancestor chain (itself included) whose trip count reads ``knob``."""
    by_id = {lp["id"]: lp for lp in loops}
    depth, cur = 0, loop
    while cur is not None:
        if knob in scev_args(cur.get("exact")):
            depth += 1
        cur = by_id.get(cur.get("parent", -1))
    return depth


def _choose_knob(raw: Any, args: dict[int, int]) -> tuple[dict, int, int] | None:
    """(heaviest loop, knob argument, polynomial degree), or None when no loop qualifies."""
    best = None
    for lp in raw.loops:
        used = scev_args(lp.get("exact")) & set(args)
        if not used:
            continue
        try:
            t = trip_count(lp, args)
        except NotEvaluable:
            continue
        if best is None or t > best[0]:
            best = (t, lp, used)
    if best is None or best[0] <= 64:
        return None
    t, lp, used = best
    knob = max(used, key=lambda i: _signed(args[i], 64))  # the loop bound, not an offset
    return lp, knob, _dependent_depth(raw.loops, lp, knob)


def _probe_value(lp: dict, args: dict[int, int], knob: int, target: int) -> int | None:
    """Smallest knob value in [0, actual] whose trip count reaches ``target`` (bisection)."""
    actual = _signed(args[knob], 64)
    if actual <= 0:
        return None

    def trips(v: int) -> int:
        return _signed(trip_count(lp, {**args, knob: v}) - 1, 64) + 1

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


def _loop_entries(raw: Any, lp: dict, loops: list[dict], knob: int, args: dict[int, int]) -> float:
    """Entries into ``lp`` in a run, counted: its header executions over the trips per entry
    that the knob sets (the product over ``lp`` and its ancestors whose trip count reads it)."""
    by_id = {x["id"]: x for x in loops}
    per_entry, cur = 1, lp
    while cur is not None:
        if knob in scev_args(cur.get("exact")):
            per_entry *= trip_count(cur, args)
        cur = by_id.get(cur.get("parent", -1))
    h = sum(int(g.loop_iterations.get(str(lp["id"]), 0)) for g in raw.groups)
    return h / max(1, per_entry)


@dataclass
class _ProbePlan:
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


def _plan_probes(first: Any, args: dict[int, int], budget: Budget) -> _ProbePlan | str:
    """The probes ``first`` (a run stopped at a budget) calls for, or why there are none
    ("" when no loop qualifies)."""
    choice = _choose_knob(first, args)
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
    values = [_probe_value(lp, args, knob, t) for t in targets]
    if any(v is None for v in values) or len(set(values)) < len(values):
        return f"argument {knob} cannot set loop {lp['id']} to {targets} trips"
    xs = [float(trip_count(lp, {**args, knob: v})) for v in values]
    x_actual = float(trip_count(lp, args))
    return _ProbePlan(
        lp, knob, degree, [int(v) for v in values if v is not None], xs, x_actual,
        cap >= budget.probe_trips, ipi, lanes,
    )  # fmt: skip


def _start_probes(runner: _Runner, plan: _ProbePlan) -> list[Any]:
    return [runner.start(_with_scalar(runner.record, plan.knob, v)) for v in plan.values]


def _wait_probes(runner: _Runner, handles: list[Any]) -> list[Any] | str:
    """The probes' statistics, or why a probe failed."""
    raws, failed = [], ""
    for h in handles:
        try:
            raws.append(runner.wait(h))
        except ClprojError as exc:
            failed = failed or f"a probe failed: {exc.cause[:200]}"
    return failed or raws


def _loop_extrapolate(
    runner: _Runner, first: Any, args: dict[int, int]
) -> tuple[KernelProfile, dict] | str:
    """The loop-extrapolated profile, or why there is none ("" when no loop qualifies)."""
    plan = _plan_probes(first, args, runner.budget)
    if isinstance(plan, str):
        return plan
    raws = runner.run_all([_with_scalar(runner.record, plan.knob, v) for v in plan.values])
    return _fit_probes(runner.record, plan, raws, first.loops, args)


def _fit_probes(
    rec: LaunchRecord, plan: _ProbePlan, raws: list[Any], loops: list[dict], args: dict[int, int]
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
            _loop_entries(r, lp, loops, knob, {**args, knob: v})
            for r, v in zip(raws, values, strict=True)
        ]
    except NotEvaluable:
        return f"trip counts of loop {lp['id']}'s nest not evaluable at the probes"
    if max(entries) - min(entries) > FIT_HIGH * max(entries):
        return (
            f"argument {knob} also changes how many work-items reach loop {lp['id']} "
            f"(entries {', '.join(f'{e:g}' for e in entries)} at {knob} = {values})"
        )
    probes = [_profile(r, rec) for r in raws]
    import numpy as np

    fit_n = degree + 1
    flat = [flatten_stats(p.total) for p in probes]
    keys = set().union(*flat)
    predicted_actual: dict[tuple, float] = {}
    predicted_check: dict[tuple, float] = {}
    for key in keys:
        ys = [f.get(key, 0.0) for f in flat]
        coef = np.polyfit(xs[:fit_n], ys[:fit_n], degree)
        predicted_actual[key] = float(np.polyval(coef, x_actual))
        predicted_check[key] = float(np.polyval(coef, xs[-1]))
    check = rebuild_stats(probes[-1].total, predicted_check)
    err, what = relative_error(check, probes[-1].total)
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
        "knob_actual": _signed(args[knob], 64),
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
        f"argument {knob} = {values[:fit_n]} (degree {degree}), check probe off by {err:.1%}"
    )
    prof.emulation.update(
        confidence=_lower(fit_conf, base.emulation["confidence"]),
        flags=flags,
        loop_extrapolation=detail,
    )
    return prof, detail


def _budget_extrapolate(
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
                        chain, args, key, record.global_size, record.global_offset
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


def emulate_bounded(
    record: LaunchRecord,
    budget: Budget | None = None,
    backend: Any = None,
    speculate: bool = True,
) -> KernelProfile:
    """A kernel profile of ``record`` within ``budget`` (module docstring: the steps).

    ``speculate=False``: one worker process per run and no scout or speculative probes
    (the attempt, then the probes); the same profiles, slower (benchmarks compare them)."""
    from clproj.miniemu.backend import get_backend

    budget = budget or Budget()
    backend = backend or get_backend("oclgrind")
    server = backend.server() if speculate and hasattr(backend, "server") else None
    with (
        tempfile.TemporaryDirectory(prefix="clproj-bounded-", dir=scratch_parent()) as tmp,
        server or contextlib.nullcontext(),
    ):
        runner = _Runner(record, budget, backend, tmp, server)
        args = scalar_args(record)
        first, decided, speculation = _attempt(runner, args)
        method = {"": "full-group", "sampled-work-items": "sampled-work-items"}.get(
            first.stop_reason
        )
        not_probed = ""
        if method is not None:
            prof = _profile(first, record)
            if method == "sampled-work-items":
                prof.emulation["flags"].append(
                    f"sampled-work-items: {prof.emulation['work_items_emulated']} of "
                    f"{prof.launch['group_size']} work-items of group 0 (no barrier)"
                )
        else:
            result: tuple[KernelProfile, dict] | str = ""
            if decided is not None:
                result = decided
            elif first.stop_reason == "instruction-budget":
                try:
                    result = _loop_extrapolate(runner, first, args)
                except ClprojError as exc:
                    result = f"a probe failed: {exc.cause[:200]}"
            if isinstance(result, tuple):
                prof, _ = result
                method = "loop-extrapolated"
            else:
                not_probed = result
                prof = _profile(first, record)
                factor, confidence, flags = _budget_extrapolate(first, args, record)
                wi, gwi = prof.total.get("work_items"), prof.per_group.get("work_items")
                prof.total = scale_stats(prof.total, factor)
                prof.per_group = scale_stats(prof.per_group, factor)
                prof.total["work_items"], prof.per_group["work_items"] = wi, gwi
                if not_probed:
                    flags.append(f"no loop extrapolation: {not_probed}")
                prof.emulation["flags"] += flags
                prof.emulation["confidence"] = _lower(confidence, prof.emulation["confidence"])
                method = "budget-extrapolated"
        # What bounded the emulation: counted budgets give the same profile on any
        # machine; the wall-clock backstop does not, so its profiles say so.
        stopped_by = {
            "": "none",
            "sampled-work-items": "work-items",
            "instruction-budget": "instructions",
            "time-budget": "wall",
        }.get(first.stop_reason, "wall")
        if runner.wall_stops:
            stopped_by = "wall"
            prof.emulation["flags"].append(
                f"wall-clock backstop ({budget.wall_s:g} s of emulation per run) stopped "
                f"{runner.wall_stops} of {runner.runs} runs: the statistics depend on this "
                "machine's speed and load (not cached)"
            )
            prof.emulation["confidence"] = "low"
        prof.emulation.update(
            mode="bounded",
            method=method,
            wall_s=round(time.perf_counter() - runner.start_s, 4),
            emulator_runs=runner.runs,
            instructions_emulated=runner.instructions,
            stop_reason=first.stop_reason,
            budget=stopped_by,
            budget_limits={
                "instructions": budget.instructions,
                "work_items": budget.work_items,
                "probe_trips": budget.probe_trips,
                "wall_s_backstop": budget.wall_s,
            },
            loops=first.loops,
        )
        if speculation:
            prof.emulation["speculation"] = speculation
        return prof


# Instructions of the scout run: the plugin checks its budget every 4096 instructions, so
# the scout stops at its 4th check, enough for the instructions per trip of a loop body.
SCOUT_INSTRUCTIONS = 4 * 4096
# The attempt is not waited for when the probes predict at least this many times its
# instruction budget (the fit's own check error is at most 10% where it is used).
SPECULATION_MARGIN = 1.5


def _attempt(runner: _Runner, args: dict[int, int]) -> tuple[Any, Any, dict[str, Any]]:
    """The attempt's statistics (step 1), the loop extrapolation where the speculation below
    already decided it (else None: step 2 as usual), and what the speculation did.

    Why: an attempt that hits the instruction budget costs the whole budget (2e6
    instructions, 0.4-1 s) before the probes can even start, and every worker paid its
    imports again. With a fork server, beside the attempt a *scout* runs the same launch
    to ``SCOUT_INSTRUCTIONS``: its loops (ScalarEvolution) and instructions per trip plan
    the probes. A scout that finishes is the attempt (same launch, same counted budgets,
    deterministic), so the attempt is dropped. Where the planned probes are not capped by
    the instruction budget and the heaviest loop's trips x instructions per trip x
    emulated work-items reach the budget, the probes start at once, beside the attempt.
    When they end first and their fit predicts the attempt's instructions at >=
    ``SPECULATION_MARGIN`` x the budget (the attempt is paused meanwhile), the attempt
    would certainly stop at the budget
    and plan these same probes: it is killed and the fit is the profile. Otherwise the
    attempt decides as without speculation, and its probes are the speculative ones
    where its plan names the same knob values (else they are dropped and run anew), so
    the profile is the one the attempt-then-probes order gives. (The plugin's wall-clock
    backstop counts the pause too: a pause of the order of ``Budget.wall_s`` would mark
    the profile ``budget: "wall"``; the probes are bounded by the instruction budget.)
    """
    rec, budget = runner.record, runner.budget
    attempt = runner.start(rec)
    if runner.server is None:
        return runner.wait(attempt), None, {}
    try:
        scout = runner.wait(runner.start(rec, instructions=SCOUT_INSTRUCTIONS))
    except ClprojError as exc:
        return runner.wait(attempt), None, {"scout": f"failed: {exc.cause[:120]}"}
    if scout.stop_reason in ("", "sampled-work-items"):
        runner.cancel(attempt)
        return scout, None, {"scout": "finished the sample: it is the attempt"}
    counted = {"scout_instructions": scout.instructions_executed}
    plan = _plan_probes(scout, args, budget) if scout.stop_reason == "instruction-budget" else ""
    if (
        isinstance(plan, str)
        or not plan.uncapped
        or plan.lanes * plan.x_actual * plan.ipi < budget.instructions
    ):
        return runner.wait(attempt), None, {"scout": "no speculative probes", **counted}
    # The attempt pauses while the probes run: on 2 cores four runs would share them, and
    # where the attempt is needed after all it continues from where it stopped.
    runner.server.pause(attempt)
    probes = _start_probes(runner, plan)
    pending = [attempt, *probes]
    while len(pending) > 1:
        h = runner.done(pending[1:], runner.timeout())
        if h is None:
            break
        pending.remove(h)
    raws: list[Any] | str | None = None
    info: dict[str, Any] = {"scout": "speculative probes", "probe_values": plan.values, **counted}
    if attempt in pending and len(pending) == 1:  # the probes ended first
        raws = _wait_probes(runner, probes)
        if not isinstance(raws, str):
            fitted = _fit_probes(rec, plan, raws, scout.loops, args)
            predicted = _predicted_instructions(plan, raws)
            info["predicted_attempt_instructions"] = round(predicted)
            if (
                isinstance(fitted, tuple)
                and predicted >= SPECULATION_MARGIN * budget.instructions
                and not runner.finished(attempt)  # one that ended before its pause decides
            ):
                runner.cancel(attempt)
                info["attempt"] = "not waited for (predicted over the budget)"
                prof, _ = fitted
                prof.emulation["flags"].append(
                    f"attempt not run to its instruction budget: the probes predict "
                    f"{predicted:.3g} instructions for it (budget {budget.instructions:g})"
                )
                return scout, fitted, info
    runner.server.pause(attempt, False)
    first = runner.wait(attempt)
    info["attempt"] = "waited for"
    same = (
        first.stop_reason == "instruction-budget"
        and isinstance(again := _plan_probes(first, args, budget), _ProbePlan)
        and (again.loop["id"], again.knob, again.values)
        == (plan.loop["id"], plan.knob, plan.values)
    )
    if not same:
        for h in probes:
            runner.cancel(h)
        info["probes"] = "dropped"
        return first, None, info
    if raws is None:
        raws = _wait_probes(runner, probes)
    info["probes"] = "used"
    if isinstance(raws, str):
        return first, raws, info
    return first, _fit_probes(rec, plan, raws, first.loops, args), info


def _predicted_instructions(plan: _ProbePlan, raws: list[Any]) -> float:
    """The instructions the attempt would count, fitted on the probes' counted ones."""
    import numpy as np

    n = plan.degree + 1
    ys = [float(r.instructions_executed) for r in raws]
    coef = np.polyfit(plan.xs[:n], ys[:n], plan.degree)
    return float(np.polyval(coef, plan.x_actual))
