"""Reuse of kernel profiles across launches that differ only in NDRange or irrelevant scalars.

A factorisation launches its kernels thousands of times with a shrinking NDRange and a
pivot index that changes every launch: every launch has its own signature, but the work
of one work-item hardly changes. :class:`ReuseCache` emulates a few launches of each
launch *family* (its *anchors*) and answers the others by explicit scaling:

* **Family** = :func:`intercept.identity.reuse_family`: program hash + kernel + work_dim
  + local size. A NULL local size is one family whatever the global size (the emulator
  picks the local size from the global size, so such a family's per-work-item work may
  move with the size: the size rule below re-emulates whenever the NDRange left the
  range the anchors cover).
* **Entry** = the values of the integer arguments read by any loop trip count of the
  kernel (ScalarEvolution, ``emulation.loops`` of the family's first profile). Until that
  profile exists the family is one entry; when it arrives its anchors are re-keyed. Other
  scalars (a pivot row, an offset) are assumed not to change per-work-item work; the
  sampled drift checks test that.
* **Answer**: counters are extensive in work-items, so an anchor of W work-items serves a
  launch of W' work-items with factor W'/W (``total``), and ``per_group`` is ``total`` /
  the new number of groups. Between two anchors of the entry (one smaller, one larger)
  the counters per work-item are interpolated linearly in the number of work-items
  (:func:`interpolate_profile`: boundary work-items make per-work-item work move with the
  size); outside them the nearest anchor (log ratio; ties go to the latest) is scaled.
  ``emulation.method`` = ``"reused"``, with ``reused_from`` (signature), ``scale`` and,
  when interpolated, ``interpolated_from``.
* **Scalar axis** (first, when it applies): at a constant NDRange the work can still
  depend on a scalar through a branch (Gaussian elimination's ``if (gid < size-1-t)``).
  When >= 2 emulated anchors have the launch's number of work-items and an integer
  scalar is distinct and monotone in launch order among them (:func:`scalar_axis`: a
  step), every counter is linear in it (:func:`axis_profile`): interpolated between the
  bracketing anchors, extrapolated from the two nearest beyond them, clamped at >= 0;
  ``emulation.axis`` names the argument and whether it extrapolated. No new emulations:
  the sampled checks test the line like any prediction (``axis=False``: size only).
* **When to emulate** (decided from the launch's metadata alone, before any buffer is
  snapshotted: :meth:`plan`): the first launch of an entry; a launch whose work-items are
  more than 2x away from every anchor (size coverage: at most log2(size range) anchors);
  and sampled drift checks at the 2nd, 8th, 32nd, ... reuse of the entry (geometric in
  the entry's launches, growth 4, or 2 once a check found drift). A family emulates at
  most ``max_emulations`` launches in all; beyond that every launch is reused (flagged).
  An emulation decided by :meth:`plan` is *pending* until :meth:`profile` fills it, and
  counts as an anchor for the size rule at once, so a launch-heavy app is snapshotted
  once per decision however slowly the emulations follow.
* **Drift**: an emulated launch of an entry that already has anchors is compared with
  what the anchors predicted for it (key metrics: instructions, global bytes,
  transactions, local accesses, branches; ``emulation.drift_check``). A difference above
  ``drift_threshold`` is an *invalidation*: the new anchor answers the launches nearest
  to it from then on, and the entry's sampled checks become denser (growth 2).

``stats()`` reports launches, emulations, reuses, drift checks and invalidations: an app
with thousands of launches gets a profile for each while emulating a bounded number of
times. Thread-safe (one lock; emulations run outside it).
"""

from __future__ import annotations

import copy
import itertools
import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clproj.intercept.identity import reuse_family
from clproj.miniemu.counters import flatten_stats, rebuild_stats, relative_error
from clproj.miniemu.profile import KernelProfile, scale_stats
from clproj.miniemu.scev import scalar_args, scev_args

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord


@dataclass
class _Anchor:
    """One emulated (or, while ``profile`` is None, decided-and-pending) launch."""

    signature: str
    work_items: int
    values: dict[int, Any]  # scalar argument values (entry keys are taken from these)
    profile: KernelProfile | None = None
    ints: dict[int, int] = field(default_factory=dict)  # axis candidates (:func:`small_ints`)


@dataclass
class _Entry:
    anchors: list[_Anchor] = field(default_factory=list)
    launches: int = 0
    next_check: int = 2
    growth: int = 4


@dataclass
class _Family:
    relevant: tuple[int, ...] | None = None  # None until the first profile says
    entries: dict[tuple, _Entry] = field(default_factory=dict)
    emulations: int = 0  # decided or done, drift checks included


def relevant_arguments(profile: KernelProfile) -> tuple[int, ...]:
    """Integer scalars that a loop trip count reads (they change per-work-item work)."""
    out: set[int] = set()
    for lp in profile.emulation.get("loops", []) or []:
        out |= scev_args(lp.get("exact")) | scev_args(lp.get("max"))
    return tuple(sorted(out))


def _work_items(record: LaunchRecord) -> int:
    return max(1, math.prod(int(x) for x in record.global_size))


def _log_distance(a: int, b: int) -> float:
    return abs(math.log(max(1, a) / max(1, b)))


AXIS_LIMIT = 1 << 24


def small_ints(record: LaunchRecord) -> dict[int, int]:
    """Signed values of the integer-like scalar arguments (candidate axes).

    The record has no argument types: a scalar of 1-8 bytes whose signed value is below
    2^24 in magnitude is taken as an integer (a step, an offset); every float or double
    whose bits are that small is denormal, so a float argument is never an axis."""
    out: dict[int, int] = {}
    for a in record.args:
        if a.kind == "scalar" and a.data is not None and len(a.data) in (1, 2, 4, 8):
            v = int.from_bytes(a.data, "little", signed=True)
            if abs(v) < AXIS_LIMIT:
                out[a.index] = v
    return out


def scalar_axis(anchors: list[_Anchor], point: dict[int, int]) -> int | None:
    """The scalar argument along which ``anchors`` (in launch order) vary, if any: the
    lowest index whose values are known for the launch (``point``), pairwise distinct
    among the anchors and strictly monotone in launch order (a step counter; a seed or a
    ping-pong index is not an axis). Collinear candidates (``t`` and ``t + 1``) give the
    same interpolation, so the lowest index is as good as any."""
    if len(anchors) < 2:
        return None
    for i in sorted(point):
        vs = [a.ints.get(i) for a in anchors]
        if None in vs:
            continue
        steps = [b - a for a, b in itertools.pairwise(vs)]  # type: ignore[operator]
        if all(d > 0 for d in steps) or all(d < 0 for d in steps):
            return i
    return None


def _reused_shell(
    base: KernelProfile, record: LaunchRecord, reason: str
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """The launch and emulation sections of a profile reused from ``base`` for ``record``
    (its NDRange, ``base``'s local size) and the per-work-item scale between them; the
    counters are left to the caller."""
    gs = [int(x) for x in record.global_size]
    ls = [int(x) for x in base.launch["local_size"]]
    factor = math.prod(gs) / max(1, base.launch["work_items"])
    groups_per_dim = [-(-g // max(1, loc)) for g, loc in zip(gs, ls, strict=False)]
    launch = dict(
        base.launch,
        global_size=gs,
        num_groups=math.prod(groups_per_dim),
        num_groups_per_dim=groups_per_dim,
        work_items=math.prod(gs),
    )
    emulation = copy.deepcopy(base.emulation)
    emulation.pop("drift_check", None)
    emulation.update(
        method="reused",
        reused_from=base.signature,
        reused_method=base.emulation.get("method", base.emulation.get("mode")),
        scale=round(factor, 6),
        wall_s=0.0,
        emulator_runs=0,
    )
    emulation["flags"] = [
        *[f for f in emulation.get("flags", []) if not f.startswith(("reused", "drift"))],
        f"reused: {reason}; scaled x{factor:.4g} per work-item",
    ]
    return launch, emulation, factor


def scale_profile(base: KernelProfile, record: LaunchRecord, reason: str) -> KernelProfile:
    """``base`` scaled per work-item to ``record``'s NDRange (same local size)."""
    launch, emulation, factor = _reused_shell(base, record, reason)
    total = scale_stats(base.total, factor)
    total["work_items"] = launch["work_items"]
    per_group = scale_stats(total, 1.0 / launch["num_groups"])
    return KernelProfile(record.kernel, record.signature, launch, emulation, per_group, total)


def interpolate_profile(
    lo: KernelProfile, hi: KernelProfile, record: LaunchRecord, reason: str
) -> KernelProfile:
    """``record``'s profile between two anchors of fewer (``lo``) and more (``hi``)
    work-items: every counter per work-item is interpolated linearly in the number of
    work-items, then multiplied by ``record``'s work-items.

    Why: the per-work-item work of a shrinking NDRange moves with its size (padding
    work-items that fail a bounds check, partial groups); linear interpolation is exact
    when that fraction is linear in the size (LU's padded rows) and bounded by the two
    anchors otherwise, where scaling the nearest anchor is off by the whole difference.
    """
    w, wl, wh = _work_items(record), lo.launch["work_items"], hi.launch["work_items"]
    nearer = lo if _log_distance(wl, w) <= _log_distance(wh, w) else hi
    launch, emulation, _ = _reused_shell(nearer, record, reason)
    f = (w - wl) / max(1, wh - wl)
    fl, fh = flatten_stats(lo.total), flatten_stats(hi.total)
    values = {
        k: w * ((1 - f) * fl.get(k, 0.0) / max(1, wl) + f * fh.get(k, 0.0) / max(1, wh))
        for k in fl.keys() | fh.keys()
    }
    total = rebuild_stats(nearer.total, values)
    total["work_items"] = w
    per_group = scale_stats(total, 1.0 / max(1, launch["num_groups"]))
    emulation["interpolated_from"] = [lo.signature, hi.signature]
    emulation["flags"][-1] = (
        f"reused: {reason}; interpolated per work-item between {wl} and {wh} work-items"
    )
    return KernelProfile(record.kernel, record.signature, launch, emulation, per_group, total)


def axis_profile(
    anchors: list[_Anchor], axis: int, record: LaunchRecord, reason: str
) -> KernelProfile:
    """``record``'s profile from emulated ``anchors`` of its own NDRange size, every
    counter linear in scalar argument ``axis``: interpolated between the two anchors
    bracketing the launch's value, else extrapolated from the two nearest on its side,
    clamped at >= 0 (:func:`rebuild_stats`).

    Why: at a constant NDRange, work can still depend on a scalar through a branch
    (Gaussian elimination's ``if (gid < size - 1 - t)``): the active work-items, hence
    the counters, are linear in the step, where the nearest anchor answers every later
    launch with an earlier step's work. Extrapolation is not capped in distance: a
    line that does not hold is what the sampled drift checks find (and then densify),
    whereas holding the counters at some distance is the same error the nearest anchor
    makes (measured: capping at one anchor spacing turned Fan1's 0% into 7-18%).
    """
    x = small_ints(record)[axis]
    pts = sorted(anchors, key=lambda a: a.ints[axis])
    below = [a for a in pts if a.ints[axis] <= x]
    above = [a for a in pts if a.ints[axis] > x]
    if below and above:
        lo, hi = below[-1], above[0]
    elif below:
        lo, hi = below[-2], below[-1]
    else:
        lo, hi = above[0], above[1]
    xl, xh = lo.ints[axis], hi.ints[axis]
    f = (x - xl) / (xh - xl)
    nearer = lo if abs(x - xl) <= abs(x - xh) else hi
    out = scale_profile(nearer.profile, record, reason)  # factor 1: launch, flags
    fl, fh = flatten_stats(lo.profile.total), flatten_stats(hi.profile.total)
    values = {k: (1 - f) * fl.get(k, 0.0) + f * fh.get(k, 0.0) for k in fl.keys() | fh.keys()}
    total = rebuild_stats(nearer.profile.total, values)  # rounds and clamps at >= 0
    total["work_items"] = _work_items(record)
    out.total = total
    out.per_group = scale_stats(total, 1.0 / max(1, out.launch["num_groups"]))
    extrapolated = not 0.0 <= f <= 1.0
    out.emulation["interpolated_from"] = [lo.signature, hi.signature]
    out.emulation["axis"] = {
        "argument": axis,
        "value": x,
        "anchors": [xl, xh],
        "extrapolated": extrapolated,
    }
    how = "extrapolated" if extrapolated else "interpolated"
    out.emulation["flags"][-1] = (
        f"reused: {reason}; {how} linearly in argument {axis} = {x} from anchors at"
        f" {xl} and {xh} (same NDRange)"
    )
    return out


class ReuseCache:
    """Per-family profile cache: a few emulated anchors, explicit scaling, drift checks."""

    def __init__(
        self,
        mode: str = "bounded",
        timeout_s: float = 60.0,
        budget: Any = None,
        drift_threshold: float = 0.05,
        first_check: int = 2,
        check_growth: int = 4,
        size_ratio: float = 2.0,
        max_emulations: int = 32,
        emulate: Any = None,
        axis: bool = True,
    ) -> None:
        self.mode, self.timeout_s, self.budget = mode, timeout_s, budget
        self.drift_threshold = drift_threshold
        self.first_check, self.check_growth = first_check, check_growth
        self.size_ratio, self.max_emulations = size_ratio, max_emulations
        self._emulate = emulate  # tests inject a counting wrapper; default miniemu.emulate
        self.axis = axis  # answers linear in a scalar at a constant size (False: size only)
        self._families: dict[tuple, _Family] = {}
        self._lock = threading.Lock()
        self.counts = {
            "launches": 0,
            "emulations": 0,
            "reuses": 0,
            "drift_checks": 0,
            "invalidations": 0,
        }

    # ------------------------------------------------------------------ internals

    def _run(self, record: LaunchRecord) -> KernelProfile:
        from clproj import miniemu

        fn = self._emulate or miniemu.emulate
        kwargs = {"budget": self.budget} if self.mode == "bounded" else {}
        prof = fn(record, mode=self.mode, timeout_s=self.timeout_s, **kwargs)
        with self._lock:
            self.counts["emulations"] += 1
        return prof

    @staticmethod
    def _all_values(record: LaunchRecord) -> dict[int, Any]:
        ints: dict[int, Any] = scalar_args(record)
        for a in record.args:
            if a.kind == "scalar" and a.index not in ints:
                ints[a.index] = a.data
        return ints

    @staticmethod
    def _key(fam: _Family, values: dict[int, Any]) -> tuple:
        return tuple(values.get(i) for i in fam.relevant or ())

    def _entry(self, record: LaunchRecord) -> tuple[_Family, _Entry, dict[int, Any]]:
        fam = self._families.setdefault(reuse_family(record), _Family())
        values = self._all_values(record)
        return fam, fam.entries.setdefault(self._key(fam, values), _Entry()), values

    def _nearest(self, entry: _Entry, size: int, done_only: bool) -> _Anchor | None:
        best, best_d = None, math.inf
        for a in entry.anchors:  # later anchors win ties: they saw the latest data
            if done_only and a.profile is None:
                continue
            d = _log_distance(a.work_items, size)
            if d <= best_d:
                best, best_d = a, d
        return best

    def _answer(self, entry: _Entry, record: LaunchRecord, reason: str) -> KernelProfile | None:
        """``record``'s profile from the entry's emulated anchors: linear in a scalar axis
        between anchors of its own size (:func:`axis_profile`), else interpolated between
        the nearest ones below and above its size, else the nearest one scaled."""
        size = _work_items(record)
        done = [a for a in entry.anchors if a.profile is not None]
        if self.axis:
            same = [a for a in done if a.work_items == size]
            axis = scalar_axis(same, small_ints(record))
            if axis is not None:
                return axis_profile(same, axis, record, reason)
        below = [a for a in done if a.work_items <= size]
        above = [a for a in done if a.work_items > size]
        if below and above:
            lo = max(reversed(below), key=lambda a: a.work_items)  # ties: the latest
            hi = min(reversed(above), key=lambda a: a.work_items)
            if lo.work_items == size:
                return scale_profile(lo.profile, record, reason)
            return interpolate_profile(lo.profile, hi.profile, record, reason)
        near = self._nearest(entry, size, True)
        return None if near is None else scale_profile(near.profile, record, reason)

    def _decide(self, record: LaunchRecord) -> tuple[str, _Entry]:
        """``"emulate"`` (a pending anchor is added) or ``"reuse"``, and the entry.

        Called with the lock held, once per launch, in launch order.
        """
        fam, entry, values = self._entry(record)
        size = _work_items(record)
        self.counts["launches"] += 1
        entry.launches += 1
        if not entry.anchors:
            why = "first"
        elif fam.emulations >= self.max_emulations:
            why = ""
        elif _log_distance(self._nearest(entry, size, False).work_items, size) > math.log(
            self.size_ratio
        ):
            why = "size"
        elif entry.launches - 1 >= entry.next_check:  # the 2nd, 8th, 32nd, ... reuse
            entry.next_check = (entry.launches - 1) * entry.growth
            why = "sample"
        else:
            why = ""
        if why:
            fam.emulations += 1
            if why != "first":
                self.counts["drift_checks"] += 1
            entry.anchors.append(_Anchor(record.signature, size, values, ints=small_ints(record)))
            return "emulate", entry
        self.counts["reuses"] += 1
        return "reuse", entry

    def _pending_anchor(self, record: LaunchRecord) -> tuple[_Family, _Entry, _Anchor] | None:
        fam = self._families.get(reuse_family(record))
        if fam is None:
            return None
        for entry in fam.entries.values():
            for a in entry.anchors:
                if a.profile is None and a.signature == record.signature:
                    return fam, entry, a
        return None

    def _rekey(self, fam: _Family, relevant: tuple[int, ...]) -> None:
        """The first profile named the loop-bound arguments: split the anchors by them."""
        fam.relevant = relevant
        if not relevant:
            return
        old = list(fam.entries.values())
        fam.entries = {}
        for e in old:
            for a in e.anchors:
                new = fam.entries.setdefault(self._key(fam, a.values), _Entry())
                new.anchors.append(a)
                new.launches = max(new.launches, len(new.anchors))
                new.next_check = max(new.next_check, self.first_check)

    def _anchor_for(
        self, record: LaunchRecord, reuse_existing: bool
    ) -> tuple[_Family, _Entry, _Anchor]:
        """(family, entry, anchor) of ``record``: its pending anchor from plan(), else a new
        anchor (or, with ``reuse_existing``, the entry's anchor of the same launch).
        The caller holds the lock."""
        found = self._pending_anchor(record)
        if found is not None:
            return found
        fam, entry, values = self._entry(record)
        if reuse_existing:
            for a in entry.anchors:
                if a.signature == record.signature:
                    return fam, entry, a
        anchor = _Anchor(record.signature, _work_items(record), values, ints=small_ints(record))
        entry.anchors.append(anchor)
        return fam, entry, anchor

    def _fill(self, record: LaunchRecord, fresh: KernelProfile) -> None:
        """Store an emulated profile in its pending anchor; compare it with its neighbour."""
        with self._lock:
            # emulated outside plan() (seed-like): it becomes an anchor
            fam, entry, anchor = self._anchor_for(record, reuse_existing=False)
            if fam.relevant is None:
                self._rekey(fam, relevant_arguments(fresh))
                entry = fam.entries[self._key(fam, anchor.values)]
            predicted = self._answer(entry, record, "drift check")
            anchor.profile = fresh
            if predicted is None:
                return
            err, what = relative_error(predicted.total, fresh.total)
            fresh.emulation["drift_check"] = {
                "error": round(err, 4),
                "in": what,
                "against": predicted.emulation.get("interpolated_from")
                or predicted.emulation["reused_from"],
            }
            if err > self.drift_threshold:
                # The new anchor answers the launches nearest to it from now on (kept
                # anchors still bracket sizes between them); sample this entry denser.
                self.counts["invalidations"] += 1
                fresh.emulation.setdefault("flags", []).append(
                    f"drift: the cached profiles predicted it {err:.0%} off in {what}"
                )
                entry.growth = 2
                entry.next_check = min(entry.next_check, max(1, entry.launches - 1) * 2)

    # ------------------------------------------------------------------ public API

    def plan(self, record: LaunchRecord) -> str:
        """What a launch needs, decided from its metadata before its buffers are snapshotted.

        ``"record"``: it is to be emulated (see the module docstring for when), so the
        shim must snapshot its buffers and hand it to :meth:`profile`; ``"reuse"``: the
        family's anchors answer it (:meth:`scaled`, possibly after the app exited). Only
        ``"record"`` launches cost a snapshot, so an app with thousands of launch shapes
        is recorded a bounded number of times.
        """
        with self._lock:
            action, _ = self._decide(record)
        return "record" if action == "emulate" else "reuse"

    def profile(self, record: LaunchRecord) -> KernelProfile:
        """A profile of ``record``: emulated, or reused (scaled) from its family.

        A launch that :meth:`plan` chose for emulation is emulated; any other launch is
        decided here (as :meth:`plan` would) and emulated or scaled.
        """
        with self._lock:
            action = "emulate"
            if self._pending_anchor(record) is None:
                action, entry = self._decide(record)
            if action == "reuse":
                prof = self._answer(entry, record, "same kernel, local size and loop bounds")
                if prof is not None:
                    return prof
                self.counts["reuses"] -= 1  # its anchors are still being emulated elsewhere
        return self.emulated(record)

    def emulated(self, record: LaunchRecord) -> KernelProfile:
        """Emulate ``record`` and make it an anchor of its entry (drift-checked against
        the nearest one). For launches already chosen for emulation (snapshotted by the
        shim because :meth:`plan` said so), whatever the schedule says now."""
        try:
            fresh = self._run(record)
        except Exception:
            with self._lock:  # let a later launch of the family try again
                found = self._pending_anchor(record)
                if found is not None:
                    found[1].anchors.remove(found[2])
            raise
        self._fill(record, fresh)
        return fresh

    def seed(self, record: LaunchRecord, profile: KernelProfile) -> None:
        """Enter an emulated profile of ``record`` (an earlier run's, or the app's) as an
        anchor, without counting an emulation or a drift check."""
        with self._lock:
            fam, _, anchor = self._anchor_for(record, reuse_existing=True)
            if anchor.profile is not None:  # this launch is already an anchor
                return
            if fam.relevant is None:
                self._rekey(fam, relevant_arguments(profile))
            anchor.profile = profile

    def scaled(self, record: LaunchRecord) -> KernelProfile | None:
        """The nearest anchor of ``record``'s entry scaled to it (no emulation), if any.

        Used for launches :meth:`plan` left to reuse. When the entry has no emulated
        anchor (its loop-bound arguments differ from every emulated launch, known only
        after the family's first profile), the family's nearest anchor answers with a
        flag and confidence ``low``.
        """
        size = _work_items(record)
        with self._lock:
            fam = self._families.get(reuse_family(record))
            if fam is None:
                return None
            self.counts["launches"] += 1
            entry = fam.entries.get(self._key(fam, self._all_values(record)))
            reason = "same kernel, local size and loop bounds (decided before snapshot)"
            prof = self._answer(entry, record, reason) if entry else None
            if prof is None:
                every = [a for e in fam.entries.values() for a in e.anchors if a.profile]
                if not every:
                    self.counts["launches"] -= 1
                    return None
                anchor = min(every, key=lambda a: _log_distance(a.work_items, size))
                reason = "same kernel and local size, other loop-bound argument values"
                prof = scale_profile(anchor.profile, record, reason)
                prof.emulation["confidence"] = "low"
            self.counts["reuses"] += 1
        return prof

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(
                self.counts,
                families=len(self._families),
                entries=sum(len(f.entries) for f in self._families.values()),
            )


_default: ReuseCache | None = None
_default_lock = threading.Lock()


def default_cache(mode: str = "bounded", timeout_s: float = 60.0) -> ReuseCache:
    """The process-wide cache (one per mode) the project-mode hook uses."""
    global _default
    with _default_lock:
        if _default is None or _default.mode != mode:
            _default = ReuseCache(mode=mode, timeout_s=timeout_s)
        return _default


def profile_for(
    record: LaunchRecord, mode: str = "bounded", timeout_s: float = 60.0
) -> KernelProfile:
    """Profile of ``record`` through the process-wide :class:`ReuseCache`."""
    return default_cache(mode, timeout_s).profile(record)
