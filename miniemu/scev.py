"""Trip counts from the plugin's ScalarEvolution expressions.

The plugin reports each loop's backedge-taken count as an expression over kernel
arguments and work-item ids (``loops`` in the raw statistics). Bounded emulation and the
reuse cache evaluate them for a launch's real argument values: which scalar argument sets
a loop's trip count (the *knob* the probes shrink), and how many trips the launch runs.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord


class NotEvaluable(Exception):
    """The trip-count expression depends on something other than kernel arguments."""


def signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def eval_scev(  # noqa: C901
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
    return max(0, signed(eval_scev(expr, args, ids), bits)) + 1


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
