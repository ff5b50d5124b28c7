"""Run a :class:`~benchmarks.apps.base.Plan` on one OpenCL queue and time every launch.

Times come from OpenCL profiling events (``COMMAND_END - COMMAND_START``), i.e. device
time without host launch overhead: this is what the projection predicts. All launches of a
run are enqueued back to back and the queue is drained once, so host-side Python does not
stretch the measurement of short kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clproj.benchmarks.apps.base import Plan

_PROGRAM_CACHE: dict[tuple[int, str, str], Any] = {}


@dataclass
class ExecResult:
    outputs: dict[str, np.ndarray]
    launch_times_ns: list[int]  # one per launch of the plan, in order
    repeat_times_ns: list[list[int]] = field(default_factory=list)  # [repeat][launch], timed runs


def _program(ctx: Any, source: str, options: str) -> Any:
    import pyopencl as cl

    key = (id(ctx), source, options)
    prg = _PROGRAM_CACHE.get(key)
    if prg is None:
        prg = cl.Program(ctx, source).build(options=options.split() if options else [])
        _PROGRAM_CACHE[key] = prg
    return prg


def _ensure_profiling(queue: Any) -> Any:
    import pyopencl as cl

    if queue.properties & cl.command_queue_properties.PROFILING_ENABLE:
        return queue
    return cl.CommandQueue(
        queue.context, queue.device, properties=cl.command_queue_properties.PROFILING_ENABLE
    )


def bind_args(kernel: Any, launch: Any, bufs: dict[str, Any]) -> None:
    """Set a launch's arguments (``("buf", name)``, ``("scalar", v)``, ``("local", n)``)."""
    import pyopencl as cl

    for i, (kind, value) in enumerate(launch.args):
        if kind == "buf":
            kernel.set_arg(i, bufs[value])
        elif kind == "scalar":
            kernel.set_arg(i, value)
        elif kind == "local":
            kernel.set_arg(i, cl.LocalMemory(int(value)))
        else:
            raise ValueError(f"{launch.kernel}: unknown argument kind {kind!r}")


def execute(plan: Plan, queue: Any, repeat: int = 1, warmup: int = 0) -> ExecResult:  # noqa: C901
    """Run the plan ``warmup + repeat`` times; outputs are those of the first run.

    Buffers are reset to the plan's initial contents before every run (untimed), so apps
    that update in place (FloydWarshall, FastWalsh) do the same work each time.
    ``launch_times_ns`` is the per-launch median over the timed runs.
    """
    import pyopencl as cl

    queue = _ensure_profiling(queue)
    ctx = queue.context
    prg = _program(ctx, plan.source, plan.options)
    mf = cl.mem_flags
    host = {n: np.ascontiguousarray(a) for n, a in plan.buffers.items()}
    bufs = {n: cl.Buffer(ctx, mf.READ_WRITE, size=max(1, a.nbytes)) for n, a in host.items()}
    kernels: dict[str, Any] = {}
    for launch in plan.launches:
        if launch.kernel not in kernels:
            kernels[launch.kernel] = cl.Kernel(prg, launch.kernel)

    outputs: dict[str, np.ndarray] = {}
    timed: list[list[int]] = []
    for run in range(max(1, warmup + repeat)):
        for n, a in host.items():
            if a.nbytes:
                cl.enqueue_copy(queue, bufs[n], a)
        queue.finish()
        events = []
        for launch in plan.launches:
            k = kernels[launch.kernel]
            bind_args(k, launch, bufs)
            events.append(
                cl.enqueue_nd_range_kernel(queue, k, launch.global_size, launch.local_size)
            )
        queue.finish()
        times = [int(e.profile.end - e.profile.start) for e in events]
        if run == 0:
            for n in plan.outputs:
                out = np.empty_like(host[n])
                cl.enqueue_copy(queue, out, bufs[n])
                outputs[n] = out
            queue.finish()
        if run >= warmup:
            timed.append(times)
    if not timed:
        timed.append(times)
    med = [int(v) for v in np.median(np.array(timed, dtype=np.int64), axis=0)]
    return ExecResult(outputs=outputs, launch_times_ns=med, repeat_times_ns=timed)
