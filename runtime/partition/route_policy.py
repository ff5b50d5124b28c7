"""Route mode's opt-in split: which kernels run as several sub-launches, one per device.

``clproj run --mode route --split`` (``CLPROJ_SPLIT=1`` in the app) lets route mode run a
qualifying launch across devices at once instead of on the one fastest device. A kernel
key (the launch signature route mode places by) qualifies when

* there are at least two live devices in the cluster,
* its launch record passes :func:`runtime.partition.safety.check` (slabs write disjoint
  affine intervals, no size query of the split dimension, an explicit local size), and
* :func:`runtime.partition.advisor.advise` (cold: the projection, with transfers and core sharing)
  says the split beats the best single device by ``MIN_GAIN``.

The decision is made once per key, on a background thread, from the record and kernel
profile the projection hook (runtime.projection.app_hook) produced for the key's first launch;
until it exists launches run unsplit as before. ``CLPROJ_SPLIT_WAIT_S`` (default 0) lets
the first launch of a key wait that long for its decision (tests, benchmarks, apps that
launch a kernel only a few times). Every decision, refusals with their reason included,
is logged once (``clproj.route.split``, info), appended to ``$CLPROJ_SPLIT_FILE`` (JSON
lines; ``clproj run`` prints them) and listed in the route summary at exit.

Device profiles: ``$CLPROJ_SPLIT_DEVICES`` (files ``clproj run --split`` writes with
:func:`runtime.partition.advisor.profile_for_live_device`, so a thread-limited PoCL device is priced
with its live compute units) matched to cluster devices of this host by profile key; any
other cluster device is priced with the profile its node announced.
Execution and merge: :mod:`runtime.cluster.client.split`.

Measured check: the cold decision comes from projections, which on CPU devices are off by
1.5-2x and do not price the synchronous merge well (benchmarks/results/route_split.md: a
projected 1.22x split ran at 0.35x). So a split key's first CHECK_SPLIT split launches and
then CHECK_WHOLE whole launches (on the device placement picks) are timed from issue to
completion (route mode drains the queue first and waits for each: a few synchronous
launches per key); when the split's best is not below KEEP_RATIO x the whole launch's
best (the first of each kind pays one-off buffer moves),
the split is revoked for the rest of the run, with the measured figures as its reason.
``CLPROJ_SPLIT_CHECK=0`` trusts the projection alone (tests of the split's mechanics).
"""

from __future__ import annotations

import copy
import json
import logging
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clproj import settings
from clproj.background_thread import background_thread
from clproj.runtime.cluster.client.split import SplitPlan

if TYPE_CHECKING:
    pass

log = logging.getLogger("clproj.route.split")

CHECK_SPLIT = 3  # split launches timed before the verdict
CHECK_WHOLE = 2  # whole launches timed before the verdict
KEEP_RATIO = 0.95  # the split stays only when measured at least 5% faster


def enabled() -> bool:
    return bool(settings.get("CLPROJ_SPLIT"))


@dataclass
class Decision:
    """The cached answer for one kernel key: a plan, or the reason there is none."""

    key: str
    kernel: str
    split: bool
    reason: str
    plan: SplitPlan | None = None
    fractions: dict[str, float] = field(default_factory=dict)
    gain: float | None = None
    decided_s: float = 0.0  # seconds the analysis took

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kernel": self.kernel,
            "split": self.split,
            "reason": self.reason,
            "fractions": self.fractions,
            "gain": self.gain,
            "decided_s": round(self.decided_s, 3),
        }

    def line(self) -> str:
        return f"{self.kernel}: {self.reason}"


def _pinned() -> list[Any]:
    from clproj.devices.profile import load_profile

    out = []
    for path in settings.get("CLPROJ_SPLIT_DEVICES"):
        try:
            out.append(load_profile(path))
        except Exception as exc:  # a bad file: that device falls back to its node's profile
            log.info("split device profile %s not loaded: %s", path, exc)
    return out


def profiles_for(devices: list[Any], pinned: list[Any]) -> list[Any]:
    """A DeviceProfile per cluster device (RemoteDevice), keys made unique.

    A pinned (live) profile goes to the device of this host with its profile key or its
    name (nodes started without ``--profiles`` announce spec-derived profiles, keyed by
    device name)."""
    from clproj.devices.profile import DeviceProfile

    host = socket.gethostname()
    used: set[int] = set()
    out: list[Any] = []
    for d in devices:
        key = str((d.profile or {}).get("key", ""))
        match = next(
            (
                i
                for i, p in enumerate(pinned)
                if i not in used
                and d.host in ("", host)
                and (p.key.split("@")[0] == key or p.name.strip() == d.name.strip())
            ),
            None,
        )
        if match is not None:
            used.add(match)
            out.append(pinned[match])
        else:
            data = {k: v for k, v in (d.profile or {}).items() if k != "limits"}
            out.append(DeviceProfile(data))
    keys = [p.key for p in out]
    for i, p in enumerate(out):
        if keys.count(p.key) > 1:  # two devices of one model: the advisor keys by profile
            data = copy.deepcopy(p.data)
            data["key"] = f"{p.key}#{devices[i].id}"
            out[i] = DeviceProfile(data, p.path)
    return out


def decide(
    record: Any,
    kernel_profile: dict[str, Any] | None,
    devices: list[Any],
    error: str | None = None,
) -> Decision:
    """The split decision for ``record``'s key over the live cluster ``devices``
    (``error``: why the projection has no profile)."""
    from clproj.errors import ClprojError
    from clproj.runtime.partition import advisor
    from clproj.runtime.partition import safety as partition_safety

    key, kernel = record.signature, record.kernel
    no = Decision(key, kernel, False, "")
    if len(devices) < 2:
        no.reason = f"not split: {len(devices)} live device(s), a split needs two"
        return no
    if not kernel_profile:
        no.reason = f"not split: no kernel profile ({error or 'the projection failed'})"
        return no
    try:
        safety = partition_safety.check(record, timeout_s=60.0)
    except ClprojError as exc:
        no.reason = f"not split: {exc.cause}"
        return no
    if not safety.ok:
        no.reason = f"not split: {safety.reason}"
        return no
    try:
        profs = profiles_for(devices, _pinned())
        adv = advisor.advise(record, profs, profile=kernel_profile, safety=safety)
    except Exception as exc:  # a profile the projection cannot use, a model error
        no.reason = f"not split: the advisor failed: {exc}"
        return no
    ids = {p.key: d.id for p, d in zip(profs, devices, strict=True)}
    no.fractions = {ids[s.device_key]: s.fraction for s in adv.shares}
    no.gain = adv.gain
    explanation = adv.explanation
    for pk, did in sorted(ids.items(), key=lambda kv: -len(kv[0])):  # name cluster devices
        explanation = explanation.replace(pk, did)
    if not adv.split:
        no.reason = explanation
        return no
    upload = set(adv.upload_args)
    plan = SplitPlan(
        devices=[ids[s.device_key] for s in adv.shares],
        first=[s.first_slab for s in adv.shares],
        counts=[s.slabs for s in adv.shares],
        dim=safety.dim,
        slab_items=safety.slab_items,
        written=list(safety.written),
        skip_upload={
            w.arg for w in safety.written if w.arg not in upload and w.hi0 - w.lo0 == abs(w.stride)
        },
        sizes={a.index: int(a.size or 0) for a in record.args if a.kind == "buffer"},
    )
    return Decision(key, kernel, True, explanation, plan, no.fractions, adv.gain)


def unusable(plan: SplitPlan, kernel: Any) -> str | None:
    """Why this launch's arguments differ from the analysed launch's (None: they don't).

    The key fixes program, kernel, NDRange and scalars, not the buffers: a launch with
    other buffer sizes, or one buffer bound to a written argument and another argument
    (the analysis saw separate buffers), runs unsplit."""
    from clproj.runtime.cluster.client.platform import RemoteBuffer

    seen: dict[int, int] = {}
    for i, size in plan.sizes.items():
        b = kernel.args.get(i)
        if not isinstance(b, RemoteBuffer) or b.size != size:
            return f"argument {i} is not a buffer of {size} bytes"
        seen[b.h] = seen.get(b.h, 0) + 1
    for w in plan.written:
        if seen.get(kernel.args[w.arg].h, 0) > 1:
            return f"the buffer of written argument {w.arg} is bound to another argument too"
    return None


class Splitter:
    """Decisions per kernel key, made on a background thread, cached for the run."""

    def __init__(
        self,
        devices: Callable[[], list[Any]],
        wait_s: float = 0.0,
        out: str | None = None,
        lock: Any = None,
        check: bool = True,
    ) -> None:
        self.devices = devices  # live cluster devices (a snapshot per call, no lock)
        self.check = check  # the measured check (module docstring)
        self.wait_s = wait_s
        # A first launch waits on this condition of the route lock, which releases the lock
        # meanwhile: the projection thread that feeds the decisions posts projections
        # under that lock, so holding it while waiting would stall both until the timeout.
        self._cond = threading.Condition(lock if lock is not None else threading.RLock())
        self.out = out
        self.decisions: dict[str, Decision] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Any, dict[str, Any] | None, str | None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._queued: set[str] = set()
        self._refused_use: set[str] = set()
        # measured check (module docstring): key -> seconds per launch, split / whole
        self._timed: dict[str, dict[str, list[float]]] = {}
        self._verdict: dict[str, str] = {}

    @classmethod
    def from_env(cls, devices: Callable[[], list[Any]], lock: Any = None) -> Splitter | None:
        """The splitter of this process (None without ``CLPROJ_SPLIT=1``); ``lock``: the
        route lock held by launches (see ``_cond``)."""
        if not enabled():
            return None
        wait = settings.get("CLPROJ_SPLIT_WAIT_S")
        check = settings.get("CLPROJ_SPLIT_CHECK")
        return cls(devices, wait, settings.get("CLPROJ_SPLIT_FILE") or None, lock, check)

    def consider(self, record: Any, doc: dict[str, Any] | None) -> None:
        """Queue ``record``'s key for a decision (once per key); returns at once. Called by
        the projection thread with its projection document (which holds the profile)."""
        with self._lock:
            key = record.signature
            if key in self._queued:
                return
            self._queued.add(key)
            if self._thread is None:
                self._thread = background_thread(self._work, "clproj-split")
                self._thread.start()
        doc = doc or {}
        self._queue.put((record, doc.get("profile"), doc.get("error")))

    def _work(self) -> None:
        while True:
            record, profile, error = self._queue.get()
            start = time.perf_counter()
            try:
                d = decide(record, profile, self.devices(), error)
            except Exception as exc:  # never let the thread die or reach the app
                d = Decision(record.signature, record.kernel, False, f"not split: {exc!r}")
            d.decided_s = time.perf_counter() - start
            self._publish(d)

    def _publish(self, d: Decision) -> None:
        with self._lock:
            self.decisions[d.key] = d
        log.info("%s", d.line())
        if self.out:
            try:
                with open(self.out, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(d.to_dict()) + "\n")
            except OSError as exc:
                log.info("split decisions not written to %s: %s", self.out, exc)
        with self._cond:
            self._cond.notify_all()

    def plan(self, key: str, kernel: Any, first: bool = False) -> SplitPlan | None:
        """The plan for a launch of ``key`` (None: run it unsplit). ``first``: the key's
        first launch, which waits up to ``wait_s`` for the decision."""
        d = self.decisions.get(key)
        if d is None and first and self.wait_s > 0:
            deadline = time.monotonic() + self.wait_s
            with self._cond:
                while key not in self.decisions and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
            d = self.decisions.get(key)
        if d is None or d.plan is None:
            return None
        if self.check and key not in self._verdict:
            timed = self._timed.setdefault(key, {"split": [], "whole": []})
            if len(timed["split"]) >= CHECK_SPLIT:
                if len(timed["whole"]) < CHECK_WHOLE:
                    return None  # a timed whole launch, to compare with
                self._judge(d, timed)
                d = self.decisions[key]
                if d.plan is None:
                    return None
        why = unusable(d.plan, kernel)
        if why:
            if key not in self._refused_use:
                self._refused_use.add(key)
                log.info("%s: a launch runs unsplit: %s", d.kernel, why)
            return None
        return d.plan

    def timing(self, key: str, split: bool) -> bool:
        """Is this launch of ``key`` (split or whole, as :meth:`plan` just said) one of
        the measured check's timed launches?"""
        timed = self._timed.get(key)
        if timed is None or key in self._verdict:
            return False
        kind = "split" if split else "whole"
        return len(timed[kind]) < (CHECK_SPLIT if split else CHECK_WHOLE)

    def observe(self, key: str, seconds: float, split: bool) -> None:
        """A timed launch of ``key`` took ``seconds`` from issue to completion."""
        timed = self._timed.get(key)
        if timed is not None:
            timed["split" if split else "whole"].append(seconds)

    def _judge(self, d: Decision, timed: dict[str, list[float]]) -> None:
        """Keep or revoke ``d``'s split from the timed launches (module docstring)."""
        # the best of each: a first launch of either kind pays one-off moves (inputs to a
        # second device, outputs back to the whole launch's device), later ones do not
        split_s, whole_s = min(timed["split"]), min(timed["whole"])
        measured = f"measured {split_s * 1e3:.3g} ms split vs {whole_s * 1e3:.3g} ms whole"
        if split_s < KEEP_RATIO * whole_s:
            self._verdict[d.key] = "kept"
            log.info("%s: split kept: %s (%.2fx)", d.kernel, measured, whole_s / split_s)
            return
        self._verdict[d.key] = "revoked"
        self._publish(
            Decision(
                d.key,
                d.kernel,
                False,
                f"not split: {measured} ({whole_s / split_s:.2f}x; projected "
                f"{d.gain or 0:.2f}x, {d.reason})",
                decided_s=d.decided_s,
            )
        )

    def summary_lines(self) -> list[str]:
        with self._lock:
            ds = sorted(self.decisions.values(), key=lambda d: (not d.split, d.kernel))
        return [d.line() for d in ds]


def print_summary(splitter: Splitter | None) -> None:
    """The decisions, one line each, on stderr (route mode's exit summary)."""
    if splitter is None:
        return
    lines = splitter.summary_lines()
    if not lines:
        print("clproj: route split: no kernel was analysed (none decided yet)", file=sys.stderr)
    for line in lines:
        print(f"clproj: route split: {line}", file=sys.stderr)
