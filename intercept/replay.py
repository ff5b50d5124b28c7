"""Replay a launch record on any OpenCL device and compare its outputs.

Nothing device-specific is assumed: this runs on PoCL, a GPU driver, and inside Oclgrind
(the miniemu driver LD_PRELOADs ``liboclgrind-rt.so`` and calls :func:`replay`). Every
buffer argument becomes its own buffer initialised with the recorded pre-launch snapshot;
the post-launch content of every buffer is returned.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from clproj.errors import ClprojError
from intercept.record import LaunchRecord


@dataclass
class ReplayResult:
    outputs: dict[int, bytes]  # buffer arg index -> post-launch content
    time_ns: int | None  # profiling-event time of the replayed launch
    matches: bool | None  # outputs equal the recorded outputs (None: not checked)
    device: str
    mismatched: list[int] | None = None


# Memory flags the replay keeps from the original buffer: access qualifiers only; host
# pointer flags (USE/ALLOC/COPY_HOST_PTR) belong to the app's host memory, not the kernel.
_ACCESS_MASK = (1 << 0) | (1 << 1) | (1 << 2)  # READ_WRITE | WRITE_ONLY | READ_ONLY


def _default_device():
    import pyopencl as cl

    for platform in cl.get_platforms():
        devs = platform.get_devices()
        if devs:
            return devs[0]
    raise ClprojError("no OpenCL device found", "run `clproj devices` to check the installation")


def replay(record: LaunchRecord, device=None, *, check_outputs: bool = False) -> ReplayResult:
    """Run ``record`` once on ``device`` (pyopencl device; default: the first one)."""
    import numpy as np
    import pyopencl as cl

    if record.source is None:
        raise ClprojError(
            f"launch {record.id or record.kernel} has no OpenCL C source ({record.binary_kind or 'binary'} program)",
            "only programs built from source can be replayed",
        )
    bad = [a for a in record.args if a.kind == "unsupported"]
    if bad:
        raise ClprojError(
            f"launch {record.id or record.kernel} uses an unsupported argument "
            f"({bad[0].what}, argument {bad[0].index})",
            "images, pipes and SVM are passed through but cannot be replayed",
        )
    if device is None:
        device = _default_device()
    ctx = cl.Context([device])
    try:
        props = cl.command_queue_properties.PROFILING_ENABLE
        queue = cl.CommandQueue(ctx, device, properties=props)
    except cl.Error:
        queue = cl.CommandQueue(ctx, device)
    try:
        program = cl.Program(ctx, record.source).build(options=record.options or "")
    except cl.Error as exc:
        raise ClprojError(
            f"building {record.kernel} for {device.name.strip()} failed: {exc}",
            "check the recorded build options and the device's OpenCL C version",
        ) from None
    kernel = cl.Kernel(program, record.kernel)
    buffers: dict[int, cl.Buffer] = {}
    mf = cl.mem_flags
    for a in sorted(record.args, key=lambda a: a.index):
        if a.kind == "scalar":
            kernel.set_arg(a.index, np.frombuffer(a.data or b"", dtype=np.uint8).copy())
        elif a.kind == "null":
            kernel.set_arg(a.index, None)
        elif a.kind == "local":
            kernel.set_arg(a.index, cl.LocalMemory(max(1, int(a.size or 1))))
        elif a.kind == "buffer":
            data = record.buffer_bytes(a.index)
            size = max(1, int(a.size or len(data)))
            flags = (a.flags or mf.READ_WRITE) & _ACCESS_MASK or mf.READ_WRITE
            buf = cl.Buffer(ctx, flags, size)
            if data:
                cl.enqueue_copy(queue, buf, np.frombuffer(data, dtype=np.uint8), is_blocking=True)
            buffers[a.index] = buf
            kernel.set_arg(a.index, buf)
    gsz = tuple(record.global_size)
    lsz = None if record.local_size is None else tuple(record.local_size)
    off = None if record.global_offset is None else tuple(record.global_offset)
    event = cl.enqueue_nd_range_kernel(queue, kernel, gsz, lsz, global_work_offset=off)
    event.wait()
    time_ns = None
    with contextlib.suppress(cl.Error):
        time_ns = int(event.profile.end - event.profile.start)
    outputs: dict[int, bytes] = {}
    for index, buf in buffers.items():
        host = np.empty(buf.size, dtype=np.uint8)
        cl.enqueue_copy(queue, host, buf, is_blocking=True)
        size = int(record.arg(index).size or buf.size)
        outputs[index] = host[:size].tobytes()
    queue.finish()
    matches = None
    mismatched = None
    if check_outputs:
        if not record.outputs:
            raise ClprojError(
                f"launch {record.id or record.kernel} has no recorded outputs to compare",
                "record with `clproj run --record DIR --verify -- ...`",
            )
        mismatched = [i for i in sorted(record.outputs) if outputs.get(i) != record.output_bytes(i)]
        matches = not mismatched
    return ReplayResult(outputs, time_ns, matches, device.name.strip(), mismatched)
