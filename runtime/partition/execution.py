"""Run a split launch for real: sub-ranges by global offset on several devices at once.

Each device gets its own worker process (:mod:`runtime.partition.worker`) with its own
context, program and copies of the input buffers; its share is a run of consecutive slabs
launched with ``global_work_offset``; afterwards only the share's written byte interval of
each output buffer is copied back, straight into the merged host array (shared memory).
All devices run concurrently. The measured wall time covers buffer
creation, uploads, the kernels and the downloads: what a user of the split waits for.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from clproj import pyenv
from clproj.errors import ClprojError
from clproj.intercept.record import LaunchRecord
from clproj.runtime.partition.safety import Safety

# Merged outputs may differ from the single-device run in the last bits of floating point
# results (two devices, two compilations); float32 data within this relative tolerance of
# the largest magnitude counts as equal.
FLOAT_RTOL = 1e-5
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(proc: subprocess.Popen) -> dict[str, Any]:
    """One JSON answer from a worker (an error answer when it died)."""
    line = proc.stdout.readline()
    if not line:
        return {"error": f"worker exited with status {proc.poll()}"}
    return json.loads(line)


def _shutdown(procs: list[subprocess.Popen], blocks: list[shared_memory.SharedMemory]) -> None:
    for proc in procs:
        try:
            proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
    for block in blocks:
        with contextlib.suppress(BufferError):  # a caller still holds a view
            block.close()
        block.unlink()


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
    """Prepared programs and kernels on every device; ``run(counts)`` times one split.

    Each device is driven by a worker process of its own (:mod:`runtime.partition.worker`),
    not a thread: pyopencl holds the GIL inside enqueue calls and PoCL's ``basic`` device
    executes a ready command inside the enqueue, so threads of one Python process ran the
    shares one after the other. Inputs and merged outputs live in shared memory; the
    workers copy each share's written interval straight into the merged block. Call
    :meth:`close` (or use ``with``) to stop the workers; they also stop with the runner.
    """

    def __init__(  # noqa: C901
        self, record: LaunchRecord, safety: Safety, upload: list[int], cl_devices: list[Any]
    ) -> None:
        from clproj.devices.discovery import opencl_devices

        if not safety.ok:
            raise ClprojError(
                f"{record.kernel} may not be split: {safety.reason}",
                "run it on one device (the advice's best_single)",
            )
        if record.source is None:
            raise ClprojError(f"{record.kernel}: no OpenCL C source", "record a source program")
        for a in record.args:
            if a.kind not in ("buffer", "scalar", "local", "null"):
                raise ClprojError(
                    f"{record.kernel}: argument {a.index} is {a.kind}", "cannot split it"
                )
        self.record, self.safety, self.upload = record, safety, set(upload)
        self.devices = list(cl_devices)
        self.sizes = {a.index: max(1, int(a.size or 1)) for a in record.args if a.kind == "buffer"}
        self.host: dict[int, np.ndarray] = {}
        self._blocks: list[shared_memory.SharedMemory] = []
        inputs, outputs = {}, {}
        for a in record.args:
            if a.kind != "buffer":
                continue
            data = np.frombuffer(record.buffer_bytes(a.index), dtype=np.uint8)
            block = self._block(self.sizes[a.index])
            view = np.ndarray((self.sizes[a.index],), np.uint8, buffer=block.buf)
            view[: data.size] = data
            self.host[a.index] = view[: data.size]
            inputs[str(a.index)] = block.name
        self.merged: dict[int, np.ndarray] = {}
        for w in safety.written:
            block = self._block(self.sizes[w.arg])
            self.merged[w.arg] = np.ndarray((self.sizes[w.arg],), np.uint8, buffer=block.buf)
            outputs[str(w.arg)] = block.name
        everything = opencl_devices()
        spec = {
            "source": record.source,
            "options": record.options or "",
            "kernel": record.kernel,
            "args": [
                {
                    "index": a.index,
                    "kind": a.kind,
                    "size": max(1, int(a.size or 1)),
                    "data": (a.data or b"").hex(),
                }
                for a in record.args
                if a.kind != "buffer"
            ],
            "inputs": inputs,
            "outputs": outputs,
            "sizes": {str(k): v for k, v in self.sizes.items()},
            "upload": sorted(self.upload),
            "written": [
                {"arg": w.arg, "lo0": w.lo0, "hi0": w.hi0, "stride": w.stride}
                for w in safety.written
            ],
            "dim": safety.dim,
            "local_size": list(record.local_size or []),
            "global_size": list(record.global_size),
            "global_offset": list(record.global_offset or [0] * record.work_dim),
        }
        self._procs: list[subprocess.Popen] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._blocks)
        for dev in self.devices:
            index = next((i for i, d in enumerate(everything) if d == dev), None)
            if index is None:
                raise ClprojError(
                    f"{dev.name.strip()} is not an OpenCL device of this process",
                    "pass devices from devices.discovery.opencl_devices()",
                )
            proc = subprocess.Popen(
                [pyenv.helper_python(), "-m", "clproj.runtime.partition.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=_ROOT,
                env=pyenv.helper_environment(dict(os.environ)),
            )
            self._procs.append(proc)
            proc.stdin.write(
                json.dumps({**spec, "device_index": index, "device_name": dev.name.strip()}) + "\n"
            )
            proc.stdin.flush()
        for dev, proc in zip(self.devices, self._procs, strict=True):
            answer = _read(proc)
            if not answer.get("ok"):
                self.close()
                raise ClprojError(
                    f"split worker for {dev.name.strip()} failed: {answer.get('error')}",
                    "check that the kernel builds on every device",
                )

    def _block(self, size: int) -> shared_memory.SharedMemory:
        block = shared_memory.SharedMemory(create=True, size=max(1, size))
        self._blocks.append(block)
        return block

    def close(self) -> None:
        """Stop the worker processes and free the shared memory."""
        self.host, self.merged = {}, {}  # views into the blocks must go before they close
        self._finalizer()

    def __enter__(self) -> SplitRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, counts: list[int]) -> tuple[float, dict[int, np.ndarray]]:
        """Run shares of ``counts`` slabs concurrently; wall seconds and merged outputs
        (copies: the next run reuses the merged blocks)."""
        wall, _, merged = self.run_detail(counts)
        return wall, merged

    def run_detail(self, counts: list[int]) -> tuple[float, list[float], dict[int, np.ndarray]]:
        """Like :meth:`run`, plus each share's finish time (seconds from the common start,
        0 for an empty share): what calibration balances (runtime.partition.calibration)."""
        if len(counts) != len(self.devices) or sum(counts) != self.safety.slabs:
            raise ClprojError(
                f"slab counts {counts} do not cover the {self.safety.slabs} slabs on "
                f"{len(self.devices)} devices",
                "pass one count per device, summing to the slab count",
            )
        for arg, view in self.merged.items():  # unwritten bytes keep the buffer's content
            view[: self.host[arg].size] = self.host[arg]
        finish = [0.0] * len(counts)
        busy, first = [], 0
        start = time.perf_counter()
        for i, n in enumerate(counts):
            if n:
                proc = self._procs[i]
                proc.stdin.write(json.dumps({"cmd": "run", "first": first, "n": n}) + "\n")
                proc.stdin.flush()
                busy.append(i)
            first += n
        errors = []
        for i in busy:
            answer = _read(self._procs[i])
            if "finish" in answer:
                finish[i] = answer["finish"] - start
            else:
                errors.append(f"{self.devices[i].name.strip()}: {answer.get('error')}")
        wall = time.perf_counter() - start
        if errors:
            raise ClprojError(f"split run failed: {errors[0]}", "check the devices and the record")
        size = {arg: self.host[arg].size for arg in self.merged}
        return wall, finish, {a: v[: size[a]].copy() for a, v in self.merged.items()}

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
