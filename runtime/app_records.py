"""Launch records for the benchmark apps, one per distinct launch shape.

The evaluation projects an app the way the shim would see it: every distinct
(kernel, global size, local size) of the app's plan is one launch group; its first launch
is recorded with the buffers exactly as they are at that moment (the preceding launches
are really executed on a local OpenCL device), and the group's projected time is the
projection of that record times the group's number of launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from intercept.record import LaunchRecord, LocalArg, from_arrays


@dataclass
class LaunchGroup:
    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    n_launches: int
    record: LaunchRecord

    @property
    def key(self) -> str:
        return group_key(self.kernel, self.global_size, self.local_size)


def group_key(kernel: str, global_size: Any, local_size: Any) -> str:
    g = "x".join(str(int(v)) for v in global_size)
    loc = "x".join(str(int(v)) for v in local_size) if local_size else "NULL"
    return f"{kernel}[{g}/{loc}]"


def launch_groups(plan: Any, queue: Any) -> list[LaunchGroup]:
    """Record the first launch of every distinct launch shape of ``plan``, in order."""
    import pyopencl as cl

    ctx = queue.context
    prg = cl.Program(ctx, plan.source).build(options=plan.options.split() if plan.options else [])
    host = {n: np.ascontiguousarray(a) for n, a in plan.buffers.items()}
    bufs = {}
    for n, a in host.items():
        bufs[n] = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=max(1, a.nbytes))
        if a.nbytes:
            cl.enqueue_copy(queue, bufs[n], a)
    kernels = {name: cl.Kernel(prg, name) for name in {launch.kernel for launch in plan.launches}}
    counts: dict[str, int] = {}
    groups: dict[str, LaunchGroup] = {}
    device = {"name": queue.device.name.strip(), "vendor": queue.device.vendor.strip()}
    for launch in plan.launches:
        key = group_key(launch.kernel, launch.global_size, launch.local_size)
        counts[key] = counts.get(key, 0) + 1
        if key not in groups:
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
                plan.source, launch.kernel, args, list(launch.global_size),
                list(launch.local_size) if launch.local_size else None,
                options=plan.options, device=device,
            )
            groups[key] = LaunchGroup(launch.kernel, tuple(launch.global_size),
                                      tuple(launch.local_size) if launch.local_size else None, 0, record)
        k = kernels[launch.kernel]
        for i, (kind, value) in enumerate(launch.args):
            if kind == "buf":
                k.set_arg(i, bufs[value])
            elif kind == "scalar":
                k.set_arg(i, value)
            else:
                k.set_arg(i, cl.LocalMemory(int(value)))
        cl.enqueue_nd_range_kernel(queue, k, launch.global_size, launch.local_size)
    queue.finish()
    for key, group in groups.items():
        group.n_launches = counts[key]
    return list(groups.values())
