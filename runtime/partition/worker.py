"""One device's side of a split run, in a process of its own (``python -m clproj.runtime.partition.worker``).

Why a process per device and not a thread: pyopencl holds the GIL inside
``enqueue_nd_range_kernel`` and ``enqueue_copy``, and PoCL's ``basic`` device executes a
ready command inside the enqueue call itself, so a ``basic`` share blocks every other
share's host thread for its whole kernel: two threads in one Python process ran the shares
one after the other (a 50/50 split of two one-core devices took as long as one device
alone). Separate processes run them at the same time, as the threads of a C host would.

Protocol: JSON lines on stdin/stdout (no pickle). The first line describes the launch and
names the shared-memory blocks holding the input buffers and the merged outputs; the
worker builds its program and answers ``{"ok": true}``. Then per ``{"cmd": "run", "first":
f, "n": n}`` it creates fresh buffers, uploads the inputs, launches slabs ``[f, f+n)`` with
``global_work_offset``, copies its written interval of each output straight into the
merged block, waits, and answers ``{"finish": perf_counter()}`` (CLOCK_MONOTONIC, shared
with the parent). ``{"cmd": "quit"}`` ends it.
"""

from __future__ import annotations

import json
import sys
import time
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np


def attach(name: str) -> shared_memory.SharedMemory:
    """Attach to the parent's block without letting this process's tracker unlink it."""
    shm = shared_memory.SharedMemory(name=name)
    # Python 3.11 registers attached blocks too (no track=False yet).
    resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001  (the tracked name)
    return shm


class Share:
    """Prepared context, program and kernel for one device; ``run`` executes one share."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import pyopencl as cl

        from clproj.devices.discovery import opencl_devices

        dev = opencl_devices()[spec["device_index"]]
        if dev.name.strip() != spec["device_name"]:
            raise RuntimeError(f"device {spec['device_index']} is {dev.name.strip()!r} here")
        self.spec = spec
        self.ctx = cl.Context([dev])
        self.queue = cl.CommandQueue(self.ctx, dev)
        prg = cl.Program(self.ctx, spec["source"]).build(options=spec["options"])
        self.kernel = cl.Kernel(prg, spec["kernel"])
        for a in spec["args"]:
            if a["kind"] == "scalar":
                self.kernel.set_arg(a["index"], np.frombuffer(bytes.fromhex(a["data"]), np.uint8))
            elif a["kind"] == "local":
                self.kernel.set_arg(a["index"], cl.LocalMemory(a["size"]))
            elif a["kind"] == "null":
                self.kernel.set_arg(a["index"], None)
        self.blocks = {int(k): attach(v) for k, v in spec["inputs"].items()}
        self.outs = {int(k): attach(v) for k, v in spec["outputs"].items()}
        self.sizes = {int(k): int(v) for k, v in spec["sizes"].items()}
        self.upload = set(spec["upload"])

    def run(self, first: int, n: int) -> None:
        import pyopencl as cl

        spec, queue = self.spec, self.queue
        bufs = {}
        for index, size in self.sizes.items():
            buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size)
            if index in self.upload and index in self.blocks:
                host = np.ndarray((size,), np.uint8, buffer=self.blocks[index].buf)
                cl.enqueue_copy(queue, buf, host, is_blocking=False)
            self.kernel.set_arg(index, buf)
            bufs[index] = buf
        d, loc = spec["dim"], spec["local_size"]
        offset = list(spec["global_offset"])
        gsize = list(spec["global_size"])
        offset[d] += first * loc[d]
        gsize[d] = n * loc[d]
        cl.enqueue_nd_range_kernel(queue, self.kernel, gsize, loc, global_work_offset=offset)
        for w in spec["written"]:
            lo, hi = region(w, first, n, self.sizes[w["arg"]])
            if hi > lo:
                out = np.ndarray((self.sizes[w["arg"]],), np.uint8, buffer=self.outs[w["arg"]].buf)
                cl.enqueue_copy(queue, out[lo:hi], bufs[w["arg"]], src_offset=lo, is_blocking=False)
        queue.finish()


def region(w: dict[str, int], first: int, count: int, size: int) -> tuple[int, int]:
    """Byte interval written by ``count`` slabs from ``first`` (as ``WrittenArg.region``)."""
    a = w["lo0"] + first * w["stride"]
    b = w["lo0"] + (first + count - 1) * w["stride"]
    return max(0, min(a, b)), min(size, max(a, b) + (w["hi0"] - w["lo0"]))


def reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        share = Share(json.loads(sys.stdin.readline()))
    except Exception as exc:  # reported to the parent, which raises ClprojError
        reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    reply({"ok": True})
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("cmd") != "run":
            break
        try:
            share.run(int(msg["first"]), int(msg["n"]))
            reply({"finish": time.perf_counter()})
        except Exception as exc:
            reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
