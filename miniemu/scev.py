"""Trip counts from the plugin's ScalarEvolution expressions.

The plugin reports each loop's backedge-taken count as an expression over kernel
arguments and work-item ids (``loops`` in the raw statistics). Bounded emulation and the
reuse cache evaluate them for a launch's real argument values: which scalar argument sets
a loop's trip count (the *knob* the probes shrink), and how many trips the launch runs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord


class NotEvaluable(Exception):
    """The trip-count expression depends on something other than kernel arguments."""


@dataclass(frozen=True)
class Launch:
    """The NDRange a trip count may read: ``get_global_size``, ``get_local_size`` and
    ``get_num_groups`` per dimension (the launch as the emulator ran it: a NULL local size
    is the group the emulator chose)."""

    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None = None

    @classmethod
    def of(cls, raw: Any) -> Launch:
        """The launch of an emulator run (``miniemu.backend.RawEmulation``)."""
        local = getattr(raw, "local_size", None)
        return cls(
            tuple(int(x) for x in raw.global_size), tuple(int(x) for x in local or ()) or None
        )

    def value(self, leaf: str, d: int) -> int:
        sizes = self.global_size if leaf == "gsize" else self.local_size
        if sizes is None or d >= len(sizes):
            raise NotEvaluable(f"{leaf} of dimension {d}")
        if leaf == "ngroups":
            return -(-self.global_size[d] // sizes[d]) if d < len(self.global_size) else 1
        return int(sizes[d])


# Leaves a trip count may have beside constants, arguments and ids (loops.cpp).
LAUNCH_LEAVES = ("gsize", "lsize", "ngroups")


def signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def eval_scev(  # noqa: C901
    expr: dict[str, Any] | None,
    args: dict[int, int],
    ids: dict[int, int] | None = None,
    launch: Launch | None = None,
) -> int:
    """Evaluate a plugin SCEV expression (loops.cpp) with integer argument values (unsigned),
    where it reads ``get_global_id(d)`` the work-item's global ids ``ids[d]``, and where it
    reads the launch's sizes (a grid-stride loop's step), those of ``launch``."""
    if not isinstance(expr, dict):
        raise NotEvaluable(f"no expression ({str(expr)[:40]})")
    if "unknown" in expr:
        raise NotEvaluable(expr.get("unknown"))
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
    for leaf in LAUNCH_LEAVES:
        if leaf in expr:
            if launch is None:
                raise NotEvaluable(f"the launch's {leaf}")
            return launch.value(leaf, int(expr[leaf])) & mask
    op, ops = expr.get("op"), expr.get("ops")
    if not isinstance(ops, list):
        raise NotEvaluable(f"expression {str(expr)[:60]}")
    vals = [eval_scev(o, args, ids, launch) for o in ops]
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
        s = [signed(v, bits) for v in vals]
        return (max if op == "smax" else min)(s) & mask
    if op == "zext":
        return vals[0] & mask
    if op == "sext":
        return signed(vals[0], int(ops[0].get("bits", bits))) & mask
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
    launch: Launch | None = None,
) -> int:
    """Header executions per entry of ``loop`` (backedge-taken count + 1)."""
    _check_step(loop, key, args, ids, launch)
    return eval_scev(loop.get(key), args, ids, launch) + 1


def _check_step(
    loop: dict[str, Any],
    key: str,
    args: dict[int, int],
    ids: dict[int, int] | None,
    launch: Launch | None,
) -> None:
    """A count the plugin derived for a loop with a non-constant step (``"derived":
    "stride"``, loops.cpp) holds only for a step that is positive at these values."""
    if key != "exact" or loop.get("derived") != "stride":
        return
    step = loop.get("step")
    bits = int((step or {}).get("bits", 64)) if isinstance(step, dict) else 64
    if signed(eval_scev(step, args, ids, launch), bits) <= 0:
        raise NotEvaluable(f"loop {loop.get('id')}'s step is not positive")


def scev_ids(expr: dict[str, Any] | None) -> set[int]:
    """Dimensions d whose ``get_global_id(d)`` an expression reads."""
    return _scev_leaves(expr, "gid")


# Work-item ids sampled per dimension when a nest's trip count depends on them: the mean
# over an evenly spaced grid of the launch's id range (a triangular nest's product is
# quadratic in the id; 256 points put the mean within 0.01% of the exact sum).
ID_SAMPLES = {1: 256, 2: 64, 3: 16}


def _trips_at(
    loop: dict[str, Any],
    args: dict[int, int],
    key: str,
    ids: dict[int, int],
    launch: Launch | None = None,
) -> int:
    """Trips of one entry for one work-item; a negative count (the loop's guard fails for
    this work-item, e.g. ids past the matrix edge) is one header execution."""
    expr = loop.get(key)
    bits = int((expr or {}).get("bits", 64))
    _check_step(loop, key, args, ids, launch)
    return max(0, signed(eval_scev(expr, args, ids, launch), bits)) + 1


def mean_nest_trips(
    chain: list[dict[str, Any]],
    args: dict[int, int],
    key: str,
    global_size: list[int],
    global_offset: list[int] | None = None,
    launch: Launch | None = None,
) -> float:
    """Mean over the launch's work-items of the header executions of ``chain[0]`` per
    entry of the outermost loop of ``chain`` (the loop, then its ancestors outwards).

    Each ancestor enters its child once per run of its body: as many times as its header
    executes, or once less where the header tests the exit ahead of the body
    (``header_exits``: a loop left unrotated; mixbench's fused loop of 4 trips holds its
    8 compute loops: 4 entries each, not 5).

    Why a mean over ids: a trip count that reads the work-item's id (covariance's
    ``for (j2 = j1; j2 < m; j2++)`` with ``j1 = get_global_id(0)``) differs from one
    work-item to the next, and the emulated ones (group 0: the longest trips here) are no
    sample of the launch. Raises :class:`NotEvaluable` when a count reads anything else.
    """
    return _nest_trips(chain, args, key, global_size, global_offset, launch)[0]


def child_entries(loop: dict[str, Any], header_runs: float) -> float:
    """Entries of a loop nested in ``loop`` per entry of ``loop``, from ``loop``'s header
    executions per entry: as many, or one less where its header tests the exit ahead of
    the body (``header_exits``: the body runs once less than the header)."""
    return max(0.0, header_runs - 1) if loop.get("header_exits") is True else header_runs


def _chain_product(
    chain: list[dict[str, Any]], header_runs: Callable[[dict[str, Any]], float]
) -> float:
    """The header executions of ``chain[0]`` per entry of the chain's outermost loop:
    its own ``header_runs`` times each ancestor's entries into its child."""
    out = float(header_runs(chain[0]))
    for loop in chain[1:]:
        out *= child_entries(loop, header_runs(loop))
    return out


def _nest_trips(
    chain: list[dict[str, Any]],
    args: dict[int, int],
    key: str,
    global_size: list[int],
    global_offset: list[int] | None,
    launch: Launch | None,
) -> tuple[float, float, float]:
    """(mean, least, most) over the sampled work-item ids of the nest's trip product."""
    launch = launch or Launch(tuple(int(x) for x in global_size))
    dims = sorted(set().union(*(scev_ids(c.get(key)) for c in chain)))
    if not dims:
        t = float(_chain_product(chain, lambda c: trip_count(c, args, key, launch=launch)))
        return t, t, t
    offset = list(global_offset or [0] * len(global_size))
    per_dim = []
    for d in dims:
        if d >= len(global_size):
            raise NotEvaluable(f"get_global_id({d}) beyond the launch's {len(global_size)} dims")
        n, k = int(global_size[d]), ID_SAMPLES.get(len(dims), 16)
        k = min(n, k)
        per_dim.append([offset[d] + (2 * j + 1) * n // (2 * k) for j in range(k)])
    trips = [
        float(
            _chain_product(
                chain,
                lambda c, p=p: _trips_at(c, args, key, dict(zip(dims, p, strict=True)), launch),
            )
        )
        for p in itertools.product(*per_dim)
    ]
    return sum(trips) / len(trips), min(trips), max(trips)


# How far a loop's trip count may differ between the launch's work-items for one count to
# stand for all of them in a loop extrapolation (the fit's own "high" tolerance).
UNIFORM_TRIPS = 0.02


def uniform_trips(
    loop: dict[str, Any], args: dict[int, int], launch: Launch, key: str = "exact"
) -> float:
    """Trips per entry of ``loop``, alike for every work-item of the launch: its count
    where that reads no id; where it reads ids, the mean over the launch's ids when no two
    differ by more than :data:`UNIFORM_TRIPS` (a grid-stride loop: ceil((n - gid) / size),
    within one trip). Why: a loop extrapolation fits the emulated work-items' counters
    against one trip count per probe; for a count that differs across ids (a triangular
    nest) the emulated group is no sample of the launch, and :class:`NotEvaluable` leaves
    it to the budget extrapolation, which averages over the launch's ids."""
    mean, least, most = _nest_trips([loop], args, key, list(launch.global_size), None, launch)
    if most - least > UNIFORM_TRIPS * most:
        raise NotEvaluable(f"loop {loop.get('id')}'s trip count differs between work-items")
    return mean
