"""Run a split launch for real: sub-ranges by global offset on several devices at once.

Each device gets its own context, program and copies of the input buffers; its share is a
run of consecutive slabs launched with ``global_work_offset``; afterwards only the share's
written byte interval of each output buffer is copied back, straight into the merged host
array. All devices run concurrently (one host thread each: PoCL's ``basic`` device executes
commands in the thread that waits for them). The measured wall time covers buffer
creation, uploads, the kernels and the downloads: what a user of the split waits for.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clproj.errors import ClprojError
from intercept.record import LaunchRecord
from runtime.partition_safety import Safety

# Merged outputs may differ from the single-device run in the last bits of floating point
# results (two devices, two compilations); float32 data within this relative tolerance of
# the largest magnitude counts as equal.
FLOAT_RTOL = 1e-5


@dataclass
class SplitResult:
    """Measured result of one split configuration."""

    counts: list[int]  # slabs per device
    fractions: list[float]
    devices: list[str]
    wall_s: float  # median over repeats
    walls_s: list[float]
    matches: bool | None = None  # merged outputs == single-device run (None: not checked)
    identical: bool | None = None  # bit-identical (matches may allow FLOAT_RTOL)
    max_rel_diff: float = 0.0
    reference_device: str = ""
    reference_wall_s: float | None = None
    outputs: dict[int, bytes] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "outputs"}


class SplitRunner:
    """Prepared programs and kernels on every device; ``run(counts)`` times one split."""

    def __init__(
        self, record: LaunchRecord, safety: Safety, upload: list[int], cl_devices: list[Any]
    ) -> None:
        import pyopencl as cl

        if not safety.ok:
            raise ClprojError(
                f"{record.kernel} may not be split: {safety.reason}",
                "run it on one device (the advice's best_single)",
            )
        if record.source is None:
            raise ClprojError(f"{record.kernel}: no OpenCL C source", "record a source program")
        self.record, self.safety, self.upload = record, safety, set(upload)
        self.devices = list(cl_devices)
        self.host: dict[int, np.ndarray] = {
            a.index: np.frombuffer(record.buffer_bytes(a.index), dtype=np.uint8)
            for a in record.args
            if a.kind == "buffer"
        }
        self.sizes = {a.index: max(1, int(a.size or 1)) for a in record.args if a.kind == "buffer"}
        self.ctx, self.queues, self.kernels = [], [], []
        for dev in self.devices:
            ctx = cl.Context([dev])
            prg = cl.Program(ctx, record.source).build(options=record.options or "")
            k = cl.Kernel(prg, record.kernel)
            for a in record.args:
                if a.kind == "scalar":
                    k.set_arg(a.index, np.frombuffer(a.data or b"", dtype=np.uint8).copy())
                elif a.kind == "local":
                    k.set_arg(a.index, cl.LocalMemory(max(1, int(a.size or 1))))
                elif a.kind == "null":
                    k.set_arg(a.index, None)
                elif a.kind != "buffer":
                    raise ClprojError(
                        f"{record.kernel}: argument {a.index} is {a.kind}", "cannot split it"
                    )
            self.ctx.append(ctx)
            self.queues.append(cl.CommandQueue(ctx, dev))
            self.kernels.append(k)

    def _share(
        self, i: int, first: int, n: int, merged: dict[int, np.ndarray], errors: list
    ) -> None:
        import pyopencl as cl

        try:
            ctx, queue, kernel = self.ctx[i], self.queues[i], self.kernels[i]
            bufs = {}
            for index, size in self.sizes.items():
                buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
                if index in self.upload and self.host[index].size:
                    cl.enqueue_copy(queue, buf, self.host[index], is_blocking=False)
                kernel.set_arg(index, buf)
                bufs[index] = buf
            d, loc = self.safety.dim, self.record.local_size
            offset = list(self.record.global_offset or [0] * self.record.work_dim)
            gsize = list(self.record.global_size)
            offset[d] += first * loc[d]
            gsize[d] = n * loc[d]
            cl.enqueue_nd_range_kernel(queue, kernel, gsize, loc, global_work_offset=offset)
            for w in self.safety.written:
                lo, hi = w.region(first, n, self.sizes[w.arg])
                if hi > lo:
                    cl.enqueue_copy(
                        queue, merged[w.arg][lo:hi], bufs[w.arg], src_offset=lo, is_blocking=False
                    )
            queue.finish()
        except Exception as exc:  # reported by run() in the caller's thread
            errors.append(exc)

    def run(self, counts: list[int]) -> tuple[float, dict[int, np.ndarray]]:
        """Run shares of ``counts`` slabs concurrently; wall seconds and merged outputs."""
        if len(counts) != len(self.devices) or sum(counts) != self.safety.slabs:
            raise ClprojError(
                f"slab counts {counts} do not cover the {self.safety.slabs} slabs on "
                f"{len(self.devices)} devices",
                "pass one count per device, summing to the slab count",
            )
        merged = {w.arg: self.host[w.arg].copy() for w in self.safety.written}
        errors: list = []
        threads, first = [], 0
        for i, n in enumerate(counts):
            if n:
                threads.append(
                    threading.Thread(target=self._share, args=(i, first, n, merged, errors))
                )
            first += n
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        if errors:
            raise ClprojError(f"split run failed: {errors[0]}", "check the devices and the record")
        return wall, merged

    def timed(self, counts: list[int], repeat: int = 3, warmup: int = 1) -> SplitResult:
        for _ in range(warmup):
            self.run(counts)
        walls, outputs = [], {}
        for _ in range(max(1, repeat)):
            wall, outputs = self.run(counts)
            walls.append(wall)
        total = max(1, sum(counts))
        return SplitResult(
            counts=list(counts),
            fractions=[n / total for n in counts],
            devices=[d.name.strip() for d in self.devices],
            wall_s=statistics.median(walls),
            walls_s=walls,
            outputs={k: v.tobytes() for k, v in outputs.items()},
        )

    def execute(
        self, counts: list[int], repeat: int = 3, warmup: int = 1, check: bool = True
    ) -> SplitResult:
        """Time the split; with ``check``, compare with the whole launch on the device that
        has the largest share (also timed: the single-device baseline)."""
        result = self.timed(counts, repeat, warmup)
        if check:
            ref = max(range(len(counts)), key=lambda i: counts[i])
            single = [0] * len(counts)
            single[ref] = self.safety.slabs
            base = self.timed(single, repeat, warmup)
            result.reference_device = self.devices[ref].name.strip()
            result.reference_wall_s = base.wall_s
            result.matches, result.identical, result.max_rel_diff = compare(
                result.outputs, base.outputs
            )
        return result


def compare(got: dict[int, bytes], want: dict[int, bytes]) -> tuple[bool, bool, float]:
    """(matches, identical, max relative difference as float32) of two output sets."""
    identical = all(got[k] == want[k] for k in want)
    if identical:
        return True, True, 0.0
    worst = 0.0
    for k in want:
        if got[k] == want[k]:
            continue
        if len(want[k]) % 4:
            return False, False, float("inf")
        a = np.frombuffer(got[k], dtype=np.float32).astype(np.float64)
        b = np.frombuffer(want[k], dtype=np.float32).astype(np.float64)
        with np.errstate(invalid="ignore"):
            scale = max(float(np.nanmax(np.abs(b))), 1e-30)
            diff = float(np.nanmax(np.abs(a - b))) / scale
            if np.isnan(a).sum() != np.isnan(b).sum():
                diff = float("inf")
        worst = max(worst, diff)
    return worst <= FLOAT_RTOL, False, worst
