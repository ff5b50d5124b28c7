"""Measured calibration of a split: trial runs under concurrency, rebalanced until the shares
finish together, then compared with every device alone.

Why: the projection is the cold-start prior only. For CPU devices its per-device times are
off by 1.5-2x, and devices that share host cores (two PoCL devices, a CPU device beside the
thread driving a GPU) slow each other down by an amount that depends on the kernel (compute
bound kernels time-share the cores, memory-bound ones also share the memory bus). A ratio
that balances two wrong numbers is wrong; an adaptive mapper (Qilin) measures instead.
What is measured is the quantity the split is judged by: the host wall time of the whole
split (buffers, uploads, concurrent kernels, downloads) and each share's finish time within
it, *while the other shares run*, so contention and transfer costs are in every number.

Procedure (docs/advisor.md, "Calibration"):

1. Warm-up: the start split once, discarded (PoCL compiles work-group functions at the first
   enqueue of each specialisation).
2. Balance: run the split ``trial_runs`` times and take each share's shortest finish time
   (interference from other work only ever adds time, so the minimum is the cleaner
   estimate of what a share costs under the split's own contention). New counts make all shares
   finish together under a per-device line ``t = a + b*n`` (``a``: fixed cost such as
   buffer creation and uploads of whole inputs) fitted to the device's latest two trials,
   or ``t = b*n`` (proportional to the measured rate) while there is only one point or the
   fit is not physical. Stop when the finish times agree within ``TOLERANCE``, the counts
   repeat, or after ``max_rounds`` trials.
3. Decide: the balanced split and each device alone, interleaved (rotated order per round),
   ``repeat`` rounds. The best single device is the one with the lowest median; the gain is
   the median over rounds of (that device's wall / the split's wall in the same round). The
   split is chosen only when the gain is at least ``MEASURED_MIN_GAIN``; otherwise the
   single device is.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

# Finish times of the shares within this fraction of the slowest share count as "together":
# below it a one-run trial on a shared 2-core host is inside the noise.
TOLERANCE = 0.05
# A measured split must beat the best single device measured beside it by this factor: a
# smaller gain is within run-to-run noise and the split ties up a second device.
MEASURED_MIN_GAIN = 1.03


@dataclass
class Trial:
    """One concurrent run of the split during balancing."""

    counts: list[int]
    wall_s: float
    finish_s: list[float]  # per device, seconds from the common start (0: empty share)

    @property
    def imbalance(self) -> float:
        """(slowest - fastest finish) / slowest, over the non-empty shares."""
        used = [f for n, f in zip(self.counts, self.finish_s, strict=True) if n]
        if len(used) < 2 or max(used) <= 0:
            return 0.0
        return (max(used) - min(used)) / max(used)


@dataclass
class Calibration:
    """What the measurements say: the balanced split, each device alone, and the choice."""

    devices: list[str]
    slabs: int
    prior_counts: list[int]  # where balancing started (the projection's split)
    split_counts: list[int]  # balanced split (may put everything on one device)
    split_s: float | None  # median wall of the balanced split (None: it is a single device)
    split_walls_s: list[float]
    single_s: list[float]  # median wall per device alone
    single_walls_s: list[list[float]]
    best_single: int  # index into devices
    counts: list[int]  # the choice: split_counts, or all slabs on best_single
    split: bool  # the choice is a split over >= 2 devices
    gain: float  # median over rounds of best single wall / split wall (1.0 without a split)
    converged: bool  # finish times agreed within TOLERANCE (or counts repeated)
    trials: list[Trial] = field(default_factory=list)
    runs: int = 0  # launches run in total (warm-up, trials, decision)
    elapsed_s: float = 0.0
    explanation: str = ""

    @property
    def fractions(self) -> list[float]:
        return [n / max(1, self.slabs) for n in self.counts]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fractions"] = self.fractions
        return d


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(a, b) of ``t = a + b*n`` through the latest two points with different ``n``; the
    proportional ``(0, t/n)`` of the latest point when there is no such pair or the line is
    not physical (negative slope or intercept: noise, or a share that ran partly alone)."""
    n2, t2 = points[-1]
    for n1, t1 in reversed(points[:-1]):
        if n1 != n2:
            b = (t2 - t1) / (n2 - n1)
            a = t2 - b * n2
            if b > 0 and a >= -1e-9 * t2:  # rounding of an intercept of 0 is no misfit
                return max(0.0, a), b
            break
    return 0.0, t2 / n2


def balance(lines: list[tuple[float, float] | None], slabs: int) -> list[int]:
    """Integer slab counts summing to ``slabs`` so that every device's line gives the same
    finishing time (devices whose line needs more than that time for one slab get none).
    ``None``: a device with no measurement, which keeps no slabs."""

    def amount(t: float) -> list[float]:
        return [0.0 if ln is None else max(0.0, (t - ln[0]) / ln[1]) for ln in lines]

    live = [ln for ln in lines if ln is not None]
    lo, hi = 0.0, max(a + b * slabs for a, b in live)
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(amount(mid)) >= slabs:
            hi = mid
        else:
            lo = mid
    real = amount(hi)
    scale = slabs / max(1e-12, sum(real))
    real = [x * scale for x in real]
    counts = [int(x) for x in real]
    order = sorted(range(len(real)), key=lambda i: real[i] - counts[i], reverse=True)
    for i in order[: slabs - sum(counts)]:
        counts[i] += 1
    return counts


def rebalance(trials: list[Trial], slabs: int) -> list[int]:
    """Next slab counts from the trials so far (each device's line from its own points)."""
    lines: list[tuple[float, float] | None] = []
    for i in range(len(trials[-1].counts)):
        pts = [(t.counts[i], t.finish_s[i]) for t in trials if t.counts[i] > 0]
        lines.append(fit_line(pts) if pts else None)
    return balance(lines, slabs)


def calibrate(
    runner: Any,
    start: list[int],
    *,
    devices: list[str] | None = None,
    repeat: int = 5,
    max_rounds: int = 4,
    trial_runs: int = 2,
    tolerance: float = TOLERANCE,
    min_gain: float = MEASURED_MIN_GAIN,
) -> Calibration:
    """Balance a split on ``runner`` (a :class:`runtime.partition.execution.SplitRunner`) from
    ``start`` slab counts, then measure it against each device alone and choose."""
    t_begin = time.perf_counter()
    slabs = sum(start)
    ndev = len(start)
    names = devices or [d.name.strip() for d in runner.devices]
    runs = 0
    counts = list(start)
    trials: list[Trial] = []
    converged = False
    if sum(1 for n in counts if n) >= 2:
        runner.run_detail(counts)  # warm-up, discarded
        runs += 1
        seen: set[tuple[int, ...]] = set()
        for _ in range(max(1, max_rounds)):
            trial_walls, finishes = [], []
            for _ in range(max(1, trial_runs)):
                wall, finish, _merged = runner.run_detail(counts)
                trial_walls.append(wall)
                finishes.append(finish)
                runs += 1
            best_finish = [min(f[i] for f in finishes) for i in range(ndev)]
            trials.append(Trial(list(counts), min(trial_walls), best_finish))
            seen.add(tuple(counts))
            if trials[-1].imbalance <= tolerance:
                converged = True
                break
            counts = rebalance(trials, slabs)
            if tuple(counts) in seen or sum(1 for n in counts if n) < 2:
                converged = tuple(counts) in seen
                break
    split_counts = counts
    is_split = sum(1 for n in split_counts if n) >= 2
    singles = [[0] * ndev for _ in range(ndev)]
    for i in range(ndev):
        singles[i][i] = slabs
    configs = ([split_counts] if is_split else []) + singles
    walls: list[list[float]] = [[] for _ in configs]
    for r in range(max(1, repeat)):
        for k in range(len(configs)):
            j = (k + r) % len(configs)  # rotate the order: no config always runs first
            wall, _ = runner.run(configs[j])
            walls[j].append(wall)
            runs += 1
    split_walls = walls[0] if is_split else []
    single_walls = walls[1:] if is_split else walls
    single_s = [statistics.median(w) for w in single_walls]
    best = min(range(ndev), key=lambda i: single_s[i])
    split_s = statistics.median(split_walls) if is_split else None
    # Gain from paired rounds (split and best single ran back to back in each round), so a
    # slow phase of the shared machine hits both sides of each ratio.
    gain = (
        statistics.median(a / b for a, b in zip(single_walls[best], split_walls, strict=True))
        if is_split
        else 1.0
    )
    choose_split = is_split and gain >= min_gain
    cal = Calibration(
        devices=list(names),
        slabs=slabs,
        prior_counts=list(start),
        split_counts=list(split_counts),
        split_s=split_s,
        split_walls_s=split_walls,
        single_s=single_s,
        single_walls_s=single_walls,
        best_single=best,
        counts=list(split_counts) if choose_split else singles[best],
        split=choose_split,
        gain=gain,
        converged=converged,
        trials=trials,
        runs=runs,
        elapsed_s=time.perf_counter() - t_begin,
    )
    cal.explanation = explain(cal, min_gain)
    return cal


def explain(cal: Calibration, min_gain: float = MEASURED_MIN_GAIN) -> str:
    """One sentence: the measured choice and why."""
    from clproj.console import fmt_time

    best = cal.devices[cal.best_single]
    alone = f"{best} alone {fmt_time(cal.single_s[cal.best_single])}"
    how = f"{len(cal.trials)} balancing run(s), {cal.runs} runs, {fmt_time(cal.elapsed_s)}"
    ratio = ", ".join(
        f"{d} {n / max(1, cal.slabs):.1%}"
        for d, n in zip(cal.devices, cal.split_counts, strict=True)
    )
    if cal.split_s is None:
        return (
            f"calibrated ({how}): balancing gives everything to one device; run it on {best} "
            f"({alone})"
        )
    if cal.split:
        return (
            f"calibrated ({how}): split {ratio} measured {fmt_time(cal.split_s)}, "
            f"{cal.gain:.2f}x faster than {alone}"
        )
    return (
        f"calibrated ({how}): splitting does not pay when measured: balanced split ({ratio}) "
        f"{fmt_time(cal.split_s)} vs {alone} (gain {cal.gain:.2f}x < {min_gain}x); run it on {best}"
    )
