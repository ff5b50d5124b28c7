"""Shared machinery of the microbenchmarks: modes, timing, calibration, result checks.

Every benchmark follows one pattern: build a kernel, run it once (warm-up, which also
pays PoCL's per-local-size JIT), time one launch, scale the number of back-to-back
launches to reach the mode's time target, keep the best of ``reps`` repetitions, and
**verify the output** against a host-side reference. A benchmark whose output is wrong
raises :class:`GarbageResult` and reports no number: a compiler that eliminated the work,
or a driver bug, must never turn into a throughput in a profile.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clproj.errors import ClprojError


class GarbageResult(ClprojError):
    """A kernel's output failed its host-side check; its timing must not be reported."""

    def __init__(self, bench: str, detail: str) -> None:
        super().__init__(
            f"benchmark {bench} computed a wrong result ({detail}); no number reported",
            "this is a driver/compiler problem on this device; report it with `clproj devices --json`",
        )
        self.bench = bench


@dataclass(frozen=True)
class Mode:
    """Problem sizes and time targets of one profiling mode."""

    name: str
    target_s: float  # time of one timed repetition
    reps: int
    gpu_bytes: int  # global-memory test buffer on GPUs
    cpu_bytes: int  # ... on CPUs (must exceed the last-level cache to measure DRAM)
    words: tuple[int, ...]  # global-memory word sizes (bytes)
    full_grid: bool  # all (work-group size, groups per CU) pairs, or a short diagonal
    strides: tuple[int, ...]
    conflicts: tuple[int, ...]
    compute_steps: int  # dependent steps per chain per launch
    transfer_bytes: int


MODES: dict[str, Mode] = {
    # test-only: seconds on a 2-core CPU, numbers are rough
    "tiny": Mode("tiny", 0.002, 1, 8 << 20, 2 << 20, (4, 16), False, (1, 8), (1, 8), 128, 1 << 20),
    "quick": Mode(
        "quick",
        0.03,
        2,
        256 << 20,
        64 << 20,
        (4, 16),
        False,
        (1, 2, 4, 8, 16, 32),
        (1, 2, 4, 8, 16, 32),
        512,
        16 << 20,
    ),
    "full": Mode(
        "full",
        0.04,
        3,
        256 << 20,
        128 << 20,
        (4, 8, 16),
        True,
        tuple(range(1, 33)),
        (1, 2, 4, 8, 16, 32),
        1024,
        64 << 20,
    ),
}


class Bench:
    """One device under test: context, profiling queue, sizes and the timing helpers."""

    def __init__(self, device: Any, mode: Mode) -> None:
        import pyopencl as cl

        self.cl = cl
        self.device = device
        self.mode = mode
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(
            self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self.is_cpu = bool(device.type & cl.device_type.CPU)
        self.cus = int(device.max_compute_units)
        self.max_wg = int(device.max_work_group_size)
        self.local_mem = int(device.local_mem_size)
        self._programs: dict[tuple[str, str], Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}
        self.notes: list[str] = []

    # -- building
    def program(self, source: str, options: str = "") -> Any:
        key = (source, options)
        if key not in self._programs:
            try:
                self._programs[key] = self.cl.Program(self.ctx, source).build(options=options)
            except self.cl.Error as exc:
                raise ClprojError(
                    f"microbenchmark kernel failed to build on {self.device.name.strip()}: {exc}",
                    "check the OpenCL driver (clproj doctor)",
                ) from exc
        return self._programs[key]

    def kernel(self, source: str, name: str, options: str = "") -> Any:
        """One kernel object per (source, name), reused: retrieving it again costs time."""
        key = (source + "\0" + name, options)
        if key not in self._kernels:
            self._kernels[key] = self.cl.Kernel(self.program(source, options), name)
        return self._kernels[key]

    def buffer(self, nbytes: int, host: Any = None) -> Any:
        mf = self.cl.mem_flags
        if host is not None:
            return self.cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)
        return self.cl.Buffer(self.ctx, mf.READ_WRITE, nbytes)

    def read(self, buf: Any, out: Any) -> Any:
        self.cl.enqueue_copy(self.queue, out, buf)
        self.queue.finish()
        return out

    # -- timing
    def time_launches(self, enqueue: Callable[[], Any], n: int) -> float:
        """Seconds from the start of the first to the end of the last of ``n`` launches."""
        first = enqueue()
        last = first
        for _ in range(n - 1):
            last = enqueue()
        last.wait()
        t = (last.profile.end - first.profile.start) * 1e-9
        if t <= 0:  # some drivers report coarse timestamps: fall back to wall clock
            t0 = time.perf_counter()
            for _ in range(n):
                last = enqueue()
            last.wait()
            t = time.perf_counter() - t0
        return t

    def rate(self, enqueue: Callable[[], Any], work_per_launch: float) -> float:
        """Best work/s over ``reps`` repetitions, each about ``target_s`` long."""
        enqueue().wait()  # warm-up (and JIT)
        t1 = self.time_launches(enqueue, 1)
        n = int(min(20000, max(1, math.ceil(self.mode.target_s / max(t1, 1e-7)))))
        best = 0.0
        for _ in range(self.mode.reps):
            t = self.time_launches(enqueue, n)
            best = max(best, work_per_launch * n / t)
        return best


def occupancy_grid(
    bench: Bench, max_items: int, max_groups: int, warp: int
) -> list[tuple[int, int]]:
    """(work-group size, groups per CU) pairs covering occupancy up to the device limit.

    GPUs: work-group sizes from one warp to 1024 and 1..32 groups per CU, with
    ``wg * groups <= max_items``. CPUs (one work-group runs at a time on a core): the
    work-group size alone sets the x axis; groups per CU is fixed at 2 for load balance.
    """
    if bench.is_cpu:
        sizes = [s for s in (16, 64, 256, 1024, 4096) if s <= bench.max_wg]
        if not bench.mode.full_grid:
            sizes = sizes[::2]
        return [(s, 2) for s in sizes]
    sizes = [s for s in (32, 64, 128, 256, 512, 1024) if s <= bench.max_wg and s >= warp // 2]
    pairs = []
    for wg in sizes:
        g = 1
        while g <= max_groups and wg * g <= max_items:
            pairs.append((wg, g))
            g *= 2
    if not bench.mode.full_grid:
        wg = 256 if 256 in sizes else sizes[-1]
        pairs = [(sizes[0], 1)] + [(w, g) for w, g in pairs if w == wg]
    return pairs


def best_per_x(points: list[tuple[float, float]]) -> list[list[float]]:
    """Merge configs that reach the same occupancy: keep the best throughput per x."""
    best: dict[float, float] = {}
    for x, y in points:
        best[x] = max(best.get(x, 0.0), y)
    return [[float(x), float(best[x])] for x in sorted(best)]
