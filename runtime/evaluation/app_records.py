"""Launch records for the benchmark apps, one per distinct launch shape.

The evaluation projects an app the way the shim would see it: every distinct
(kernel, global size, local size) of the app's plan is one launch group; its first launch
is recorded with the buffers exactly as they are at that moment (the preceding launches
are really executed on a local OpenCL device).

Launches of one group may differ in scalar arguments that change the work (FastWalsh's
stride, Floyd-Warshall's pivot): each distinct launch signature is a *variant*. Up to
``MAX_VARIANTS`` variants, spread evenly over the run, are recorded, and each stands for
the launches nearest to it, so the group's projected time is the weighted sum of its
variants' projections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clproj.benchmarks.apps.execute import bind_args
from clproj.intercept.record import LaunchRecord, LocalArg, from_arrays

MAX_VARIANTS = 8


@dataclass
class LaunchGroup:
    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    n_launches: int
    records: list[LaunchRecord]  # sampled variants, in launch order
    weights: list[float]  # launches each variant stands for (sums to n_launches)

    @property
    def record(self) -> LaunchRecord:
        return self.records[0]

    @property
    def key(self) -> str:
        return group_key(self.kernel, self.global_size, self.local_size)


def group_key(kernel: str, global_size: Any, local_size: Any) -> str:
    g = "x".join(str(int(v)) for v in global_size)
    loc = "x".join(str(int(v)) for v in local_size) if local_size else "NULL"
    return f"{kernel}[{g}/{loc}]"


def _variant_key(launch: Any) -> str:
    scalars = [bytes(np.asarray(v).tobytes()) for kind, v in launch.args if kind == "scalar"]
    return group_key(launch.kernel, launch.global_size, launch.local_size) + repr(scalars)


def _sample(indices: list[int], limit: int) -> list[int]:
    """At most ``limit`` entries of ``indices``, evenly spread, first and last included."""
    if len(indices) <= limit:
        return indices
    step = (len(indices) - 1) / (limit - 1)
    return sorted({indices[round(i * step)] for i in range(limit)})


def launch_groups(plan: Any, queue: Any, transform: Any = None) -> list[LaunchGroup]:  # noqa: C901
    """Record sampled variants of every distinct launch shape of ``plan``, in order.

    With ``transform``, each record is passed to it as soon as it is made and the group
    keeps what it returns instead (e.g. the kernel profile): an app with thousands of
    launch shapes then never holds all its buffer snapshots at once.
    """
    import pyopencl as cl

    # Which launches to record: per group, the first launch of each variant, sampled.
    by_group: dict[str, list[int]] = {}
    seen_variants: set[str] = set()
    first_of_variant: dict[str, list[int]] = {}
    for i, launch in enumerate(plan.launches):
        key = group_key(launch.kernel, launch.global_size, launch.local_size)
        by_group.setdefault(key, []).append(i)
        v = _variant_key(launch)
        if v not in seen_variants:
            seen_variants.add(v)
            first_of_variant.setdefault(key, []).append(i)
    to_record = {key: _sample(idx, MAX_VARIANTS) for key, idx in first_of_variant.items()}
    wanted = {i for idx in to_record.values() for i in idx}

    ctx = queue.context
    prg = cl.Program(ctx, plan.source).build(options=plan.options.split() if plan.options else [])
    host = {n: np.ascontiguousarray(a) for n, a in plan.buffers.items()}
    bufs = {}
    for n, a in host.items():
        bufs[n] = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=max(1, a.nbytes))
        if a.nbytes:
            cl.enqueue_copy(queue, bufs[n], a)
    kernels = {name: cl.Kernel(prg, name) for name in {launch.kernel for launch in plan.launches}}
    device = {"name": queue.device.name.strip(), "vendor": queue.device.vendor.strip()}
    recorded: dict[int, Any] = {}
    for i, launch in enumerate(plan.launches):
        if i in wanted:
            queue.finish()
            args: list[Any] = []
            for kind, value in launch.args:
                if kind == "buf":
                    snap = np.empty_like(host[value])
                    cl.enqueue_copy(queue, snap, bufs[value])
                    args.append(snap)
                elif kind == "scalar":
                    args.append(value)
                elif kind == "local":
                    args.append(LocalArg(int(value)))
                else:
                    raise ValueError(f"{launch.kernel}: unknown argument kind {kind!r}")
            queue.finish()
            record = from_arrays(
                plan.source,
                launch.kernel,
                args,
                list(launch.global_size),
                list(launch.local_size) if launch.local_size else None,
                options=plan.options,
                device=device,
            )
            recorded[i] = transform(record) if transform else record
        k = kernels[launch.kernel]
        bind_args(k, launch, bufs)
        cl.enqueue_nd_range_kernel(queue, k, launch.global_size, launch.local_size)
    queue.finish()

    groups = []
    for key, launches in by_group.items():
        samples = to_record[key]
        # Each launch of the group is represented by the nearest sampled variant.
        weights = [0.0] * len(samples)
        for i in launches:
            nearest = min(range(len(samples)), key=lambda s: abs(samples[s] - i))
            weights[nearest] += 1
        first = plan.launches[launches[0]]
        groups.append(
            LaunchGroup(
                first.kernel,
                tuple(first.global_size),
                tuple(first.local_size) if first.local_size else None,
                len(launches),
                [recorded[i] for i in samples],
                weights,
            )
        )
    return groups
