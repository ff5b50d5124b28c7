"""Reuse of kernel profiles across launches that differ only in NDRange or irrelevant scalars.

A factorisation launches its kernels thousands of times with a shrinking NDRange and a
pivot index that changes every launch: every launch has its own signature, but the work
of one work-item hardly changes. :class:`ReuseCache` emulates a launch *family* once and
answers later launches by explicit scaling:

* **Family** = program hash + kernel + work_dim + local size (+ the global size when the
  local size is NULL, because the emulator then picks the local size from it).
* **Per-group-work scalars**: the integer arguments read by any loop trip count of the
  kernel (ScalarEvolution, ``emulation.loops`` of the first profile); launches with other
  values of these get their own entry (one emulation each). Other scalars (a pivot row, an
  offset) are assumed not to change per-work-item work; the drift check tests that.
* **Scaling**: counters are extensive in work-items, so a cached profile of W work-items
  serves a launch of W' work-items with factor W'/W (``total``), and ``per_group`` is
  ``total`` / the new number of groups. ``emulation.method`` = ``"reused"``, with
  ``reused_from`` (signature) and ``scale``.
* **Drift check**: whenever the NDRange moved by more than 2x from the entry's, and at
  the 2nd, 8th, 32nd, ... reuse of an entry (``check_every`` growing
  by ``check_growth``) re-emulates the launch and compares the key metrics per work-item
  (instructions, global bytes, transactions, local accesses, branches); a difference above
  ``drift_threshold`` replaces the entry (an *invalidation*) and starts its checks again.

``stats()`` reports emulations, reuses, drift checks and invalidations: an app with
thousands of launches gets a profile for each while emulating a bounded number of times.
Thread-safe (one lock; emulations run outside it).
"""

from __future__ import annotations

import copy
import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from miniemu.bounded import relative_error, scalar_args, scev_args
from miniemu.profile import KernelProfile, scale_stats

if TYPE_CHECKING:
    from intercept.record import LaunchRecord


@dataclass
class _Entry:
    profile: KernelProfile
    reuses: int = 0
    next_check: int = 2


@dataclass
class _Family:
    relevant: tuple[int, ...]  # argument indices whose values key the entries
    entries: dict[tuple, _Entry] = field(default_factory=dict)


def family_key(record: LaunchRecord) -> tuple:
    local = tuple(record.local_size) if record.local_size else None
    g = None if local else tuple(record.global_size)
    return (record.program_hash, record.kernel, record.work_dim, local, g)


def relevant_arguments(profile: KernelProfile) -> tuple[int, ...]:
    """Integer scalars that a loop trip count reads (they change per-work-item work)."""
    out: set[int] = set()
    for lp in profile.emulation.get("loops", []) or []:
        out |= scev_args(lp.get("exact")) | scev_args(lp.get("max"))
    return tuple(sorted(out))


def scale_profile(base: KernelProfile, record: LaunchRecord, reason: str) -> KernelProfile:
    """``base`` scaled per work-item to ``record``'s NDRange (same local size)."""
    gs = [int(x) for x in record.global_size]
    ls = [int(x) for x in base.launch["local_size"]]
    work_items = math.prod(gs)
    groups_per_dim = [-(-g // max(1, loc)) for g, loc in zip(gs, ls, strict=False)]
    num_groups = math.prod(groups_per_dim)
    factor = work_items / max(1, base.launch["work_items"])
    total = scale_stats(base.total, factor)
    total["work_items"] = work_items
    per_group = scale_stats(total, 1.0 / num_groups)
    launch = dict(
        base.launch,
        global_size=gs,
        num_groups=num_groups,
        num_groups_per_dim=groups_per_dim,
        work_items=work_items,
    )
    emulation = copy.deepcopy(base.emulation)
    emulation.update(
        method="reused",
        reused_from=base.signature,
        reused_method=base.emulation.get("method", base.emulation.get("mode")),
        scale=round(factor, 6),
        wall_s=0.0,
        emulator_runs=0,
    )
    emulation["flags"] = [
        *[f for f in emulation.get("flags", []) if not f.startswith("reused")],
        f"reused: {reason}; scaled x{factor:.4g} per work-item",
    ]
    return KernelProfile(record.kernel, record.signature, launch, emulation, per_group, total)


class ReuseCache:
    """Per-family profile cache with explicit scaling and sampled drift checks."""

    def __init__(
        self,
        mode: str = "bounded",
        timeout_s: float = 60.0,
        budget: Any = None,
        drift_threshold: float = 0.05,
        first_check: int = 2,
        check_growth: int = 4,
        emulate: Any = None,
    ) -> None:
        self.mode, self.timeout_s, self.budget = mode, timeout_s, budget
        self.drift_threshold = drift_threshold
        self.first_check, self.check_growth = first_check, check_growth
        self._emulate = emulate  # tests inject a counting wrapper; default miniemu.emulate
        self._families: dict[tuple, _Family] = {}
        self._pending: set[tuple] = set()  # families whose first emulation is under way
        self._lock = threading.Lock()
        self.counts = {
            "launches": 0,
            "emulations": 0,
            "reuses": 0,
            "drift_checks": 0,
            "invalidations": 0,
        }

    def _run(self, record: LaunchRecord) -> KernelProfile:
        import miniemu

        fn = self._emulate or miniemu.emulate
        kwargs = {"budget": self.budget} if self.mode == "bounded" else {}
        prof = fn(record, mode=self.mode, timeout_s=self.timeout_s, **kwargs)
        with self._lock:
            self.counts["emulations"] += 1
        return prof

    def _values(self, record: LaunchRecord, relevant: tuple[int, ...]) -> tuple:
        ints = scalar_args(record)
        by_index = {a.index: a for a in record.args}
        return tuple(ints.get(i, by_index[i].data if i in by_index else None) for i in relevant)

    def profile(self, record: LaunchRecord) -> KernelProfile:
        """A profile of ``record``: emulated, or reused (scaled) from its family."""
        fkey = family_key(record)
        with self._lock:
            self.counts["launches"] += 1
            fam = self._families.get(fkey)
            entry = None
            if fam is not None:
                vkey = self._values(record, fam.relevant)
                entry = fam.entries.get(vkey)
                if entry is not None:
                    entry.reuses += 1
                    ratio = math.prod(record.global_size) / max(
                        1, entry.profile.launch["work_items"]
                    )
                    # Boundary work (padding work-items, partial groups) drifts as the
                    # NDRange shrinks: re-emulate whenever it moved 2x from the entry.
                    far = not 0.5 <= ratio <= 2.0
                    check = far or entry.reuses >= entry.next_check
                    if check:
                        entry.next_check = entry.reuses * self.check_growth
                        self.counts["drift_checks"] += 1
                    else:
                        self.counts["reuses"] += 1
                        return scale_profile(
                            entry.profile, record, "same kernel, local size and loop bounds"
                        )
        try:
            fresh = self._run(record)
        except Exception:
            with self._lock:
                self._pending.discard(fkey)  # let a later launch of the family try again
            raise
        with self._lock:
            if fam is None:
                fam = self._families.setdefault(fkey, _Family(relevant_arguments(fresh)))
                self._pending.discard(fkey)
            vkey = self._values(record, fam.relevant)
            if entry is not None:
                predicted = scale_profile(entry.profile, record, "drift check")
                err, what = relative_error(predicted.total, fresh.total)
                fresh.emulation["drift_check"] = {"error": round(err, 4), "in": what}
                if err > self.drift_threshold:
                    self.counts["invalidations"] += 1
                    fresh.emulation["flags"].append(
                        f"drift: the cached profile was {err:.0%} off in {what}; cache entry replaced"
                    )
                    fam.entries[vkey] = _Entry(fresh, next_check=self.first_check)
                else:  # keep the check schedule, but scale from the nearest shape
                    fam.entries[vkey] = _Entry(fresh, entry.reuses, entry.next_check)
            else:
                fam.entries[vkey] = _Entry(fresh, next_check=self.first_check)
        return fresh

    def plan(self, record: LaunchRecord) -> str:
        """What a launch needs, decided before its buffers are snapshotted.

        ``"record"``: emulate it (first of its family, or a drift check is due), so the
        shim must snapshot its buffers; ``"reuse"``: a cached entry will answer it;
        ``"defer"``: its family's first emulation is still running, and the entry it will
        leave answers this launch too. Only ``"record"`` launches cost a snapshot, so an
        app with thousands of launch shapes is recorded a bounded number of times.
        """
        fkey = family_key(record)
        with self._lock:
            fam = self._families.get(fkey)
            if fam is None:
                if fkey in self._pending:
                    return "defer"
                self._pending.add(fkey)
                return "record"
            entry = fam.entries.get(self._values(record, fam.relevant))
            if entry is None:
                return "record"
            ratio = math.prod(record.global_size) / max(1, entry.profile.launch["work_items"])
            due = not 0.5 <= ratio <= 2.0 or entry.reuses + 1 >= entry.next_check
            return "record" if due else "reuse"

    def seed(self, record: LaunchRecord, profile: KernelProfile) -> None:
        """Enter an emulated profile of ``record`` (e.g. from a disk cache of an earlier run)."""
        fkey = family_key(record)
        with self._lock:
            fam = self._families.setdefault(fkey, _Family(relevant_arguments(profile)))
            fam.entries.setdefault(
                self._values(record, fam.relevant), _Entry(profile, next_check=self.first_check)
            )
            self._pending.discard(fkey)

    def scaled(self, record: LaunchRecord) -> KernelProfile | None:
        """The family's nearest cached profile scaled to ``record`` (no emulation), if any."""
        with self._lock:
            fam = self._families.get(family_key(record))
            if fam is None or not fam.entries:
                return None
            entry = fam.entries.get(self._values(record, fam.relevant))
            if entry is None:
                size = math.prod(record.global_size)
                entry = min(
                    fam.entries.values(),
                    key=lambda e: abs(
                        math.log(max(1, e.profile.launch["work_items"]) / max(1, size))
                    ),
                )
            entry.reuses += 1
            self.counts["launches"] += 1
            self.counts["reuses"] += 1
        return scale_profile(
            entry.profile, record, "same kernel and local size (decided before snapshot)"
        )

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
