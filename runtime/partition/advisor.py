"""Partition-ratio advisor: how much of a data-parallel NDRange each device should run.

``advise(record, devices) -> Advice`` projects each device's share of the launch as a launch
of its own (a run of consecutive *slabs*, the groups sharing one index along the split
dimension; see :mod:`runtime.partition.safety`), adds the transfers the share needs (every
input buffer up, the share's written region down), and picks the slab counts that make the
devices finish together. It compares that with the best single device and recommends the
split only when it is at least ``MIN_GAIN`` faster. With ``objective`` energy or EDP
(``clproj advise-partition --objective``), every share and every single device also get
their projected energy (the kernel's, :mod:`runtime.projection.power`; transfers are not
priced: no model of a link's energy), the single device is the objective's choice among
those the deadline and slowdown bound allow, and the split is recommended only when its
energy (EDP) is at least ``MIN_GAIN`` lower than that device's. ``execute_split(record, advice,
cl_devices) -> SplitResult`` really runs it (:mod:`runtime.partition.execution`).
docs/advisor.md explains the model.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from clproj.console import fmt_time
from clproj.intercept.record import LaunchRecord
from clproj.runtime.partition.safety import Safety

# A split must beat the best single device by this factor to be recommended: below it the
# gain is inside the projection's error and the split costs a second device.
MIN_GAIN = 1.05
# Host cores a GPU's share keeps busy on the machine that drives it (the thread that uploads,
# launches and waits; drivers spin while waiting by default).
GPU_HOST_THREADS = 1


@dataclass
class Share:
    """One device's part of the split and its projected cost."""

    device_key: str
    device_name: str
    first_slab: int
    slabs: int
    fraction: float  # of the NDRange's work-items
    kernel_s: float  # projected kernel time of the sub-launch
    h2d_s: float  # inputs up (paid only when the share is not empty)
    d2h_s: float  # the share's written region down
    total_s: float
    bound: str
    energy_j: float | None = None  # projected kernel energy of the share (None: no power)
    power_w: float | None = None


@dataclass
class Advice:
    """What the advisor recommends for one launch, with everything needed to run it."""

    kernel: str
    devices: list[str]  # device keys, in the caller's order (shares follow it)
    safety: Safety
    shares: list[Share] = field(default_factory=list)  # empty when the launch is unsafe
    split_s: float | None = None  # projected time of the split (max over shares)
    single_s: dict[str, float] = field(default_factory=dict)  # device key -> whole launch
    best_single: str = ""
    split: bool = False  # recommended: split (True) or run on best_single (False)
    gain: float = 1.0  # best single / split
    explanation: str = ""
    explanation_note: str = ""  # e.g. devices sharing CPU cores
    upload_args: list[int] = field(default_factory=list)  # buffers each device receives
    objective: str = "time"
    single_j: dict[str, float | None] = field(default_factory=dict)  # whole launch, J
    split_j: float | None = None  # sum of the shares' energies (None: a share has no power)

    @property
    def fractions(self) -> list[float]:
        return [s.fraction for s in self.shares]

    @property
    def slab_counts(self) -> list[int]:
        return [s.slabs for s in self.shares]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fractions"] = self.fractions
        return d


def share_profile(profile: dict[str, Any], safety: Safety, slabs: int) -> dict[str, Any]:
    """The kernel profile of a sub-launch of ``slabs`` slabs (counts scaled by groups)."""
    from clproj.miniemu.profile import scale_stats

    launch = profile["launch"]
    total_groups = int(launch["num_groups"])
    groups = slabs * safety.groups_per_slab
    sub = copy.copy(profile)
    sub["launch"] = dict(launch)
    sub["launch"]["num_groups"] = groups
    gs = list(launch.get("global_size") or [])
    if gs and safety.dim < len(gs):
        gs[safety.dim] = slabs * safety.slab_items
        sub["launch"]["global_size"] = gs
    sub["launch"]["work_items"] = groups * int(launch["group_size"])
    sub["total"] = scale_stats(profile["total"], groups / max(1, total_groups))
    return sub


def upload_args(record: LaunchRecord, safety: Safety) -> list[int]:
    """Buffer arguments each device needs: all but outputs written densely and never read."""
    skip = {w.arg for w in safety.written if w.dense and not w.read}
    return [a.index for a in record.args if a.kind == "buffer" and a.index not in skip]


class ShareCost:
    """Projected time of ``n`` slabs on one device, cached (the solver asks repeatedly)."""

    def __init__(
        self,
        profile: dict[str, Any],
        device: Any,
        record: LaunchRecord,
        safety: Safety,
        slowdown: float = 1.0,
    ) -> None:
        self.profile, self.device, self.record, self.safety = profile, device, record, safety
        self.slowdown = slowdown  # kernel time stretch from sharing cores with other devices
        self.h2d_bytes = sum(int(record.arg(i).size or 0) for i in upload_args(record, safety))
        self._cache: dict[int, Share] = {}
        self._projections: dict[int, tuple[Any, dict[str, Any]]] = {}

    def priced(self, first: int, n: int) -> Share:
        """:meth:`share` with its projected kernel energy and power (asked for the final
        shares only: the solver's many trial sizes need time alone)."""
        from clproj.runtime.projection.power import project_power

        s = self.share(first, n)
        if n and n in self._projections:
            p, sub = self._projections[n]
            pw = project_power(p, sub, self.device)
            # a share slowed by sharing cores draws its power for longer
            s.power_w = pw.power_w
            s.energy_j = None if pw.power_w is None else pw.power_w * s.kernel_s
        return s

    def share(self, first: int, n: int) -> Share:
        from clproj.runtime.projection.model import project

        if n not in self._cache:
            dev = self.device
            if n == 0:
                kernel_s, h2d, d2h, bound = 0.0, 0.0, 0.0, "-"
            else:
                sub = share_profile(self.profile, self.safety, n)
                p = project(sub, dev)
                kernel_s, bound = p.time_s * self.slowdown, p.bound
                self._projections[n] = (p, sub)
                h2d = self.h2d_bytes / dev.h2d_bytes_per_s
                down = 0
                for w in self.safety.written:
                    lo, hi = w.region(0, n, int(self.record.arg(w.arg).size or 0))
                    down += hi - lo
                d2h = down / dev.d2h_bytes_per_s
            self._cache[n] = Share(
                dev.key,
                dev.name,
                0,
                n,
                0.0,
                kernel_s,
                h2d,
                d2h,
                kernel_s + h2d + d2h,
                bound,
                0.0 if n == 0 else None,
            )
        s = copy.copy(self._cache[n])
        s.first_slab = first
        s.fraction = n / max(1, self.safety.slabs)
        return s

    def time(self, n: int) -> float:
        return self.share(0, n).total_s

    def max_slabs(self, t: float, limit: int) -> int:
        """Most slabs this device finishes within ``t`` (times grow with n)."""
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.time(mid) <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo


def solve(costs: list[ShareCost], slabs: int) -> list[int]:
    """Slab counts (summing to ``slabs``) that minimise the slowest device's time."""
    hi = min(c.time(slabs) for c in costs)
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(c.max_slabs(mid, slabs) for c in costs) >= slabs:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-9 * hi:
            break
    counts = [c.max_slabs(hi, slabs) for c in costs]
    while sum(counts) > slabs:  # give back the excess from whoever finishes last
        i = max(
            (k for k in range(len(counts)) if counts[k] > 0),
            key=lambda k: costs[k].time(counts[k]),
        )
        counts[i] -= 1
    while sum(counts) < slabs:  # rounding: add to whoever finishes first with one more
        i = min(range(len(counts)), key=lambda k: costs[k].time(counts[k] + 1))
        counts[i] += 1
    return counts


def advise(  # noqa: C901
    record: LaunchRecord,
    devices: list[Any],
    *,
    profile: dict[str, Any] | None = None,
    safety: Safety | None = None,
    mode: str = "single",
    timeout_s: float = 120.0,
    min_gain: float = MIN_GAIN,
    objective: str = "time",
    deadline_s: float = 0.0,
    max_slowdown: float = 0.0,
) -> Advice:
    """Partition advice for ``record`` over ``devices`` (device profiles, in order).

    ``profile`` (a kernel-profile dict) and ``safety`` skip the emulations when the caller
    has them already (route mode caches both per kernel signature).
    """
    from clproj.runtime.partition import safety as partition_safety

    if len(devices) < 1:
        from clproj.errors import ClprojError

        raise ClprojError("advise needs at least one device", "pass --devices A,B")
    if profile is None:
        from clproj import miniemu

        profile = miniemu.emulate(record, mode=mode, timeout_s=timeout_s).to_dict()
    if safety is None:
        safety = partition_safety.check(record, timeout_s=timeout_s)
    alone = [ShareCost(profile, d, record, safety) for d in devices]
    single = {d.key: c.time(safety.slabs) for d, c in zip(devices, alone, strict=True)}
    slowdowns = core_sharing(devices)
    costs = [
        ShareCost(profile, d, record, safety, f) for d, f in zip(devices, slowdowns, strict=True)
    ]
    from clproj.runtime.projection.power import pick

    single_j = {
        d.key: c.priced(0, safety.slabs).energy_j for d, c in zip(devices, alone, strict=True)
    }
    rows = [{"device": k, "time_s": single[k], "energy_j": single_j[k]} for k in single]
    best = pick(objective, rows, deadline_s, max_slowdown) or min(single, key=lambda k: single[k])
    advice = Advice(
        kernel=record.kernel,
        devices=[d.key for d in devices],
        safety=safety,
        single_s=single,
        best_single=best,
        upload_args=upload_args(record, safety),
        objective=objective,
        single_j=single_j,
    )
    if not safety.ok:
        advice.explanation = (
            f"not split: {safety.reason}; run it on {best} (projected {fmt_time(single[best])})"
        )
        return advice
    counts = solve(costs, safety.slabs)
    first = 0
    for c, n in zip(costs, counts, strict=True):
        advice.shares.append(c.priced(first, n))
        first += n
    advice.split_s = max(s.total_s for s in advice.shares)
    advice.gain = single[best] / advice.split_s if advice.split_s else 1.0
    if all(s.energy_j is not None for s in advice.shares):
        advice.split_j = sum(float(s.energy_j or 0.0) for s in advice.shares)
    if objective != "time":
        return _by_energy(advice, min_gain, deadline_s)
    used = [s for s in advice.shares if s.slabs]
    ratio = ", ".join(f"{s.device_key} {s.fraction:.1%}" for s in advice.shares)
    shared = [
        s.device_key for s, f in zip(advice.shares, slowdowns, strict=True) if f > 1 and s.slabs
    ]
    if len(shared) > 1:
        advice.explanation_note = (
            f"{', '.join(shared)} share the same CPU cores: each runs {max(slowdowns):.2f}x "
            "slower while the others run"
        )
    if len(used) < 2:
        advice.explanation = (
            f"splitting does not pay: the best split gives everything to {used[0].device_key}; "
            f"run it on {best} (projected {fmt_time(single[best])})"
        )
    elif advice.gain < min_gain:
        why = _why_not(advice.shares, single[best], bool(advice.explanation_note))
        advice.explanation = (
            f"splitting does not pay: best split ({ratio}) projected {fmt_time(advice.split_s)} vs "
            f"{fmt_time(single[best])} on {best} alone (gain {advice.gain:.2f}x < {min_gain}x; {why}); "
            f"run it on {best}"
        )
    else:
        advice.split = True
        advice.explanation = (
            f"split {ratio}: projected {fmt_time(advice.split_s)}, {advice.gain:.2f}x faster than "
            f"{best} alone ({fmt_time(single[best])})"
        )
    return advice


def _by_energy(advice: Advice, min_gain: float, deadline_s: float) -> Advice:
    """The split decision by energy or EDP: split when its value is at least ``min_gain``
    below the chosen single device's (and within the deadline); a split or device without
    a power projection is decided by time, and the explanation says so."""
    best = advice.best_single
    unit = "J" if advice.objective == "energy" else "J s"
    one_j = advice.single_j.get(best)
    split_s = advice.split_s or 0.0

    def value(j: float, t: float) -> float:
        return j if advice.objective == "energy" else j * t

    used = [s for s in advice.shares if s.slabs]
    if one_j is None or advice.split_j is None or len(used) < 2:
        why = "a device has no power projection" if len(used) >= 2 else "one device takes it all"
        advice.split = advice.gain >= min_gain and len(used) >= 2
        advice.explanation = f"by time ({why}): " + (
            f"split {fmt_time(split_s)}" if advice.split else f"run it on {best}"
        )
        return advice
    one, both = value(one_j, advice.single_s[best]), value(advice.split_j, split_s)
    late = deadline_s > 0 and split_s > deadline_s
    ratio = ", ".join(f"{s.device_key} {s.fraction:.1%}" for s in advice.shares)
    if both * min_gain <= one and not late:
        advice.split = True
        advice.explanation = (
            f"split {ratio}: projected {advice.objective} {both:.3g} {unit} vs {one:.3g} {unit} "
            f"on {best} alone ({fmt_time(split_s)} vs {fmt_time(advice.single_s[best])})"
        )
    else:
        advice.split = False
        advice.explanation = (
            f"run it on {best}: projected {advice.objective} {one:.3g} {unit} "
            f"({fmt_time(advice.single_s[best])}); the split: {both:.3g} {unit} "
            f"({fmt_time(split_s)})" + ("; misses the deadline" if late else "")
        )
    return advice


def execute_split(
    record: LaunchRecord,
    advice: Advice,
    cl_devices: list[Any],
    *,
    counts: list[int] | None = None,
    repeat: int = 3,
    warmup: int = 1,
    check: bool = True,
    runner: Any = None,
) -> Any:
    """Run the advised split on ``cl_devices`` (pyopencl devices, in ``advice.devices``
    order), merge the outputs and check them against a single-device run.

    ``counts`` overrides the projection's slab counts (e.g. a :class:`Calibration`'s
    ``split_counts``); ``runner`` reuses a prepared ``SplitRunner`` (programs built once).
    Returns a :class:`runtime.partition.execution.SplitResult`; raises ``ClprojError`` when the
    launch may not be split (``advice.safety.reason``).
    """
    from clproj.runtime.partition.execution import SplitRunner

    if runner is None:
        runner = SplitRunner(record, advice.safety, advice.upload_args, cl_devices)
    chosen = list(counts) if counts is not None else advice.slab_counts
    return runner.execute(chosen, repeat=repeat, warmup=warmup, check=check)


def prior_counts(advice: Advice) -> list[int]:
    """Where calibration starts: the projection's balanced split when it uses two or more
    devices; otherwise counts proportional to each device's projected speed alone, at least
    one slab each (so every device is measured under concurrency at least once)."""
    slabs = advice.safety.slabs
    if sum(1 for n in advice.slab_counts if n) >= 2:
        return advice.slab_counts
    speed = [1.0 / max(1e-12, advice.single_s[k]) for k in advice.devices]
    from clproj.runtime.partition.calibration import balance

    counts = balance([(0.0, 1.0 / s) for s in speed], slabs)
    for i in range(len(counts)):
        if counts[i] == 0 and slabs >= len(counts):
            j = max(range(len(counts)), key=lambda k: counts[k])
            counts[i], counts[j] = 1, counts[j] - 1
    return counts


def calibrate(
    record: LaunchRecord,
    advice: Advice,
    cl_devices: list[Any],
    *,
    repeat: int = 5,
    max_rounds: int = 4,
    trial_runs: int = 2,
    runner: Any = None,
) -> Any:
    """Measured advice (:class:`runtime.partition.calibration.Calibration`) for ``record`` on
    ``cl_devices``, starting from the projection's advice (the cold-start prior).

    Costs at most ``1 + max_rounds * trial_runs + repeat * (len(devices) + 1)`` runs of the launch; use it
    when the launch repeats (route mode, ``--execute``) or when the projection is known to
    be off (CPU devices, devices sharing cores). Raises ``ClprojError`` when the launch may
    not be split.
    """
    from clproj.runtime.partition.calibration import calibrate as measure
    from clproj.runtime.partition.execution import SplitRunner

    if runner is None:
        runner = SplitRunner(record, advice.safety, advice.upload_args, cl_devices)
    return measure(
        runner,
        prior_counts(advice),
        devices=advice.devices,
        repeat=repeat,
        max_rounds=max_rounds,
        trial_runs=trial_runs,
    )


def processor_of(device: Any) -> str | None:
    """CPU devices with the same processor name (PoCL driver prefix removed) share cores."""
    if device.kind == "GPU":
        return None
    name = device.name.strip()
    for prefix in ("pthread-", "basic-", "cpu-", "tbb-"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name


def core_sharing(devices: list[Any]) -> list[float]:
    """Per device, how much slower its kernels run while co-located devices run too.

    CPU devices of one processor draw on one pool of cores (the largest compute-unit count
    measured for that processor, ``detail.host_cores`` for thread-limited profiles). A GPU
    in the same split is driven by a host thread of that machine (uploads, launches, the
    wait), which takes ``GPU_HOST_THREADS`` core(s) from the pool of every CPU device while
    it runs. When the demand adds up to more than the pool, the OS time-shares the cores and
    each CPU device runs ``demand / pool`` times slower. An approximation: it prices cores,
    not the shared memory bus; calibration (runtime.partition.calibration) measures the rest.
    """
    groups: dict[str, list[int]] = {}
    gpus = 0
    for i, d in enumerate(devices):
        proc = processor_of(d)
        if proc is None:
            gpus += 1
        else:
            groups.setdefault(proc, []).append(i)
    out = [1.0] * len(devices)
    for members in groups.values():
        if len(members) < 2 and not gpus:
            continue
        pool = max(
            int(devices[i].data.get("detail", {}).get("host_cores") or devices[i].compute_units)
            for i in members
        )
        demand = sum(devices[i].compute_units for i in members) + GPU_HOST_THREADS * gpus
        if demand > pool:
            for i in members:
                out[i] = demand / pool
    return out


def _why_not(shares: list[Share], best_s: float, sharing: bool = False) -> str:
    transfer = max(s.h2d_s + s.d2h_s for s in shares if s.slabs)
    if transfer > 0.3 * best_s:
        return f"transfers ({fmt_time(transfer)}) eat the gain"
    return "the devices share the same cores" if sharing else "the others add little throughput"


def profile_for_live_device(cl_device: Any, measure_missing: bool = False) -> Any:
    """The profile of a local OpenCL device (:mod:`devices.local`: committed, cached,
    measured now when ``measure_missing``, else generic), adjusted to its live compute units.

    A thread-limited PoCL device (``POCL_MAX_PTHREAD_COUNT``) reports fewer compute units
    than when it was profiled; throughputs and bandwidth curves are scaled by the ratio
    (an approximation: on a CPU both grow about linearly with cores until memory saturates).
    """
    from clproj.devices.local import resolve_device
    from clproj.devices.profile import DeviceProfile

    prof = resolve_device(cl_device, -1, measure_missing).profile
    live = int(cl_device.max_compute_units)
    if prof.kind == "GPU" or live == prof.compute_units or live <= 0:
        return prof
    ratio = live / prof.compute_units
    data = copy.deepcopy(prof.data)
    data["key"] = f"{prof.key}@{live}cu"
    data["compute_units"] = live
    detail = data.setdefault("detail", {})
    detail["host_cores"] = max(prof.compute_units, int(detail.get("host_cores") or 0))
    data["throughput"] = {k: v * ratio for k, v in data["throughput"].items()}
    for name, points in data["curves"].items():
        if name in ("global_read", "global_write", "global_copy", "local", "strided_read"):
            data["curves"][name] = [[x, y * ratio] for x, y in points]
    special = data.get("detail", {}).get("special")
    if isinstance(special, dict):
        data["detail"]["special"] = {
            k: (v * ratio if isinstance(v, (int, float)) else v) for k, v in special.items()
        }
    return DeviceProfile(data, prof.path)
