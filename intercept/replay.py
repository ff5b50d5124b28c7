"""Replay a launch record on any OpenCL device and compare its outputs.

Nothing device-specific is assumed: this runs on PoCL, a GPU driver, and inside Oclgrind
(the miniemu driver LD_PRELOADs ``liboclgrind-rt.so`` and calls :func:`replay`). Every
buffer argument becomes its own buffer initialised with the recorded pre-launch snapshot;
the post-launch content of every buffer is returned.

Records are untrusted input (users copy them between machines), so before anything reaches
the driver the launch is checked against the kernel and the device: NDRange shape and
limits, argument count and kinds (from the built kernel), buffer and local-memory sizes.
Whatever the driver still refuses becomes a :class:`ClprojError` naming the OpenCL error.
What no check can catch (a kernel that never ends, a driver that crashes on an
out-of-bounds access) is why ``clproj replay`` runs :func:`replay` in a time-boxed child
process (:func:`replay_isolated`, as ``clproj emulate`` runs Oclgrind).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from clproj import pyenv
from clproj.errors import ClprojError
from clproj.intercept import built_programs
from clproj.intercept.record import LaunchRecord
from clproj.lifeline import die_with_parent
from clproj.paths import temp_directory
from clproj.untrusted import is_int, read_regular_file

# Replay runs every work-item for real: beyond 2^32 of them a driver either overflows its
# 32-bit group counters (PoCL crashes) or runs for hours. Emulation is not bounded here.
MAX_WORK_ITEMS = 2**32
DEFAULT_TIMEOUT_S = 60.0
_RESULT_MAX_BYTES = 1 << 20
_LOG_TAIL = 1500
_FIX_RECORD = "record the launch again with `clproj run --record DIR -- ...`"
# Non-uniform work-groups (global size not a multiple of the local size) exist from
# OpenCL C 2.0 on, and only when the program is built for it.
_CL2_STD = re.compile(r"-cl-std=CL([0-9]+)\.")
_SOURCE_POSITION = re.compile(r"^\S+:[0-9]+:[0-9]+:\s*")  # "/tmp/x.cl:1:23: " of a message
_SAVED_SOURCE = re.compile(r"\(source saved as (\S+\.cl)\)")


def drop_saved_source(message: str) -> None:
    """Remove the copy of a program's source that pyopencl saved when its build failed.

    Why: pyopencl writes the source of a failed build to a temporary file (its message
    ends "(source saved as /tmp/tmpXXXX.cl)") and leaves it, so every `clproj emulate`,
    `clproj project` or `clproj replay` of an unbuildable record left one in TMPDIR. The
    build was ours, so the file is too; only a file in the temporary folder is touched."""
    tmp = os.path.realpath(tempfile.gettempdir())
    for path in _SAVED_SOURCE.findall(message):
        real = os.path.realpath(path)
        if os.path.dirname(real) == tmp and os.path.basename(real).startswith("tmp"):
            with contextlib.suppress(OSError):
                os.unlink(real)


@dataclass
class ReplayResult:
    outputs: dict[int, bytes]  # buffer arg index -> post-launch content
    time_ns: int | None  # profiling-event time of the replayed launch
    matches: bool | None  # outputs equal the recorded outputs (None: not checked)
    device: str
    mismatched: list[int] | None = None
    built_from: str = "source"  # or "binary": intercept.built_programs


def _default_device():
    import pyopencl as cl

    for platform in cl.get_platforms():
        devs = platform.get_devices()
        if devs:
            return devs[0]
    raise ClprojError("no OpenCL device found", "run `clproj devices` to check the installation")


def _name(record: LaunchRecord) -> str:
    return record.id or record.kernel


def _non_uniform_allowed(options: str) -> bool:
    m = _CL2_STD.search(options or "")
    return m is not None and int(m.group(1)) >= 2


def check_replayable(record: LaunchRecord) -> None:
    """Refuse what cannot be replayed at all: binaries/IL, images, pipes, SVM."""
    if record.source is None:
        raise ClprojError(
            f"launch {_name(record)} has no OpenCL C source ({record.binary_kind or 'binary'} program)",
            "only programs built from source can be replayed",
        )
    bad = [a for a in record.args if a.kind == "unsupported"]
    if bad:
        raise ClprojError(
            f"launch {_name(record)} uses an unsupported argument "
            f"({bad[0].what}, argument {bad[0].index})",
            "images, pipes and SVM are passed through but cannot be replayed",
        )


def check_ndrange(record: LaunchRecord, max_work_items: int | None = MAX_WORK_ITEMS) -> None:  # noqa: C901
    """Device-independent NDRange checks: 1..3 dimensions, positive sizes, the local size
    dividing the global size (unless the program asks for OpenCL C 2.0 or later), at most
    ``max_work_items`` work-items in all (None: no cap, for emulation)."""
    name = _name(record)
    dim = record.work_dim
    if not is_int(dim) or not 1 <= dim <= 3:
        raise ClprojError(f"launch {name}: work_dim is {dim!r}, not 1..3", _FIX_RECORD)
    fields = {
        "global_size": record.global_size,
        "local_size": record.local_size,
        "global_offset": record.global_offset,
    }
    for field_name, sizes in fields.items():
        if sizes is None and field_name != "global_size":
            continue
        if not isinstance(sizes, (list, tuple)) or len(sizes) != dim:
            raise ClprojError(
                f"launch {name}: {field_name} must list {dim} sizes (work_dim), got {sizes!r}",
                _FIX_RECORD,
            )
        low = 0 if field_name == "global_offset" else 1
        for d, x in enumerate(sizes):
            if not isinstance(x, numbers.Integral) or isinstance(x, bool) or x < low:
                raise ClprojError(
                    f"launch {name}: {field_name}[{d}] is {x!r}; it must be an integer >= {low}",
                    _FIX_RECORD,
                )
    total = math.prod(record.global_size)
    if max_work_items is not None and total > max_work_items:
        shape = " x ".join(map(str, record.global_size))
        raise ClprojError(
            f"launch {name}: global_size {shape} is {total} work-items, more than the "
            f"{max_work_items} (2^{int(math.log2(max_work_items))}) a replay runs",
            "replay a smaller launch of the kernel (`clproj run --record` a smaller input)",
        )
    if record.local_size is not None and not _non_uniform_allowed(record.options):
        for d, (g, lo) in enumerate(zip(record.global_size, record.local_size, strict=True)):
            if g % lo:
                raise ClprojError(
                    f"launch {name}: global_size[{d}] {g} is not a multiple of local_size[{d}] {lo}",
                    "non-uniform work-groups need -cl-std=CL2.0 or later in the build "
                    "options; otherwise the record is corrupt: " + _FIX_RECORD,
                )
    if record.global_offset is not None:
        for d, (g, off) in enumerate(zip(record.global_size, record.global_offset, strict=True)):
            if g + off > 2**64 - 1:
                raise ClprojError(
                    f"launch {name}: global_offset[{d}] + global_size[{d}] overflows size_t",
                    _FIX_RECORD,
                )


def check_device(record: LaunchRecord, device: Any) -> None:
    """Limits of ``device`` that the launch must fit: work-group size per dimension and
    in all, largest buffer, local memory."""
    name, dev = _name(record), device.name.strip()
    if record.local_size is not None:
        group = math.prod(record.local_size)
        if group > device.max_work_group_size:
            raise ClprojError(
                f"launch {name}: local_size {record.local_size} is {group} work-items per "
                f"group; {dev} accepts at most {device.max_work_group_size}",
                "replay on a device with larger work-groups, or fix local_size in the record",
            )
        for d, (lo, top) in enumerate(
            zip(record.local_size, device.max_work_item_sizes, strict=False)
        ):
            if lo > top:
                raise ClprojError(
                    f"launch {name}: local_size[{d}] {lo} exceeds the {top} {dev} accepts "
                    f"in dimension {d}",
                    "replay on another device, or fix local_size in the record",
                )
    local_total = 0
    # The device's whole memory, not CL_DEVICE_MAX_MEM_ALLOC_SIZE: that is a minimum the
    # implementation promises (Oclgrind reports 128 MiB and allocates 256 MiB buffers, as
    # PolyBench's LARGE apps need); a real driver refusing a buffer answers
    # CL_INVALID_BUFFER_SIZE, which replay names like any other OpenCL error.
    for a in record.args:
        if a.kind == "buffer" and (a.size or 0) > device.global_mem_size:
            raise ClprojError(
                f"launch {name}: args[{a.index}].size {a.size} bytes exceeds the "
                f"{device.global_mem_size} bytes of global memory of {dev}",
                "replay on a device with more memory, or fix the record",
            )
        if a.kind == "local":
            local_total += int(a.size or 0)
    if local_total > device.local_mem_size:
        raise ClprojError(
            f"launch {name}: its __local arguments need {local_total} bytes; {dev} has "
            f"{device.local_mem_size}",
            "replay on a device with more local memory, or fix the local argument sizes",
        )


def _cl_error_name(exc: Exception) -> str:
    """``CL_INVALID_WORK_GROUP_SIZE`` for a pyopencl error (its routine when known)."""
    import pyopencl as cl

    code = getattr(exc, "code", None)
    try:
        status = f"CL_{cl.status_code.to_string(code)}" if isinstance(code, int) else ""
    except Exception:
        status = ""
    if not status:
        status = f"CL error {code}" if isinstance(code, int) else str(exc)[:200]
    routine = getattr(exc, "routine", None)
    return f"{routine} failed with {status}" if routine else status


def _first_build_error(log: str) -> str:
    """The compiler's first ``error:`` message in a build log, without its temp-file path."""
    for line in log.splitlines():
        if "error:" in line:
            text = line.split("error:", 1)[1].strip()
            return _SOURCE_POSITION.sub("", text)[:200]
    return ""


@contextlib.contextmanager
def _cl_step(what: str, fix: str) -> Iterator[None]:
    """Turn a pyopencl error of one replay step into a one-line ClprojError."""
    import pyopencl as cl

    try:
        yield
    except cl.Error as exc:
        raise ClprojError(f"{what}: {_cl_error_name(exc)}", fix) from None


def set_scalar(kernel: Any, index: int, data: bytes) -> None:
    """Set a by-value argument from the bytes the app set.

    A three-component vector (``int3``, ``float3``) is as large as a four-component one in
    OpenCL C, but PoCL also accepts the three components alone (12 bytes for an ``int3``),
    which Oclgrind and other drivers refuse: such a value is set again padded to the
    vector's size (the fourth component is undefined in OpenCL C; zeros here)."""
    import numpy as np
    import pyopencl as cl

    value = np.frombuffer(data, dtype=np.uint8).copy()
    try:
        kernel.set_arg(index, value)
    except cl.Error as exc:
        third, rest = divmod(len(data), 3)
        if exc.code != cl.status_code.INVALID_ARG_SIZE or rest or third not in (1, 2, 4, 8):
            raise
        kernel.set_arg(index, np.concatenate([value, np.zeros(third, np.uint8)]))


# address qualifier -> record argument kinds the kernel accepts there
_KINDS_FOR = {"GLOBAL": ("buffer", "null"), "CONSTANT": ("buffer", "null"), "LOCAL": ("local",)}
_QUALIFIED = {
    "GLOBAL": "__global pointer",
    "CONSTANT": "__constant pointer",
    "LOCAL": "__local pointer",
}


def set_kinds(record: LaunchRecord, kernel: Any) -> dict[int, str]:
    """The record's arguments against the built kernel: one per parameter index, each of
    a kind the parameter takes (when the driver reports argument information). Returns
    the kind each argument is set as.

    A NULL value is ambiguous to the shim when the app's driver gave no argument
    information: ``clSetKernelArg(k, i, 8, NULL)`` sets a NULL buffer on a pointer
    parameter and 8 bytes of local memory on a ``__local`` one (a work-group of two
    reducing ``uint``s). The record keeps the size with the NULL, and the replay, whose
    build asks for argument information, sets it as local memory where the parameter is
    ``__local``."""
    import pyopencl as cl

    name = _name(record)
    n = int(kernel.num_args)
    indices = sorted(a.index for a in record.args)
    kinds = {a.index: a.kind for a in record.args}
    if indices != list(range(n)):
        missing = sorted(set(range(n)) - set(indices))
        extra = sorted(set(indices) - set(range(n)))
        detail = (
            f"argument(s) {', '.join(map(str, missing))} missing"
            if missing
            else f"argument(s) {', '.join(map(str, extra))} beyond the kernel's"
        )
        raise ClprojError(
            f"launch {name}: kernel {record.kernel} takes {n} argument(s), the record's "
            f"field 'args' sets {len(record.args)} ({detail})",
            "the record does not belong to this program: " + _FIX_RECORD,
        )
    for a in sorted(record.args, key=lambda a: a.index):
        try:
            q = kernel.get_arg_info(a.index, cl.kernel_arg_info.ADDRESS_QUALIFIER)
        except cl.Error:
            return kinds  # no argument information from this driver: clSetKernelArg checks
        qual = cl.kernel_arg_address_qualifier.to_string(q)
        if qual == "LOCAL" and a.kind == "null" and a.size:
            kinds[a.index] = "local"
            continue
        allowed = _KINDS_FOR.get(qual, ("scalar",))
        if a.kind not in allowed:
            try:
                type_name = kernel.get_arg_info(a.index, cl.kernel_arg_info.TYPE_NAME)
            except cl.Error:
                type_name = "?"
            what = _QUALIFIED.get(qual, "by-value")
            raise ClprojError(
                f"launch {name}: field 'args[{a.index}]' is {a.kind}, but argument {a.index} "
                f"of {record.kernel} is a {what} ({type_name})",
                "the record does not belong to this program: " + _FIX_RECORD,
            )
    return kinds


def replay(  # noqa: C901
    record: LaunchRecord,
    device=None,
    *,
    check_outputs: bool = False,
    max_work_items: int | None = None,
    device_limits: bool = True,
    map_buffers: bool = False,
    read_outputs: bool = True,
    binaries: str | None = None,
    before_launch: Callable[[Any], None] | None = None,
) -> ReplayResult:
    """Run ``record`` once on ``device`` (pyopencl device; default: the first one).

    ``max_work_items`` caps the NDRange (``clproj replay`` passes :data:`MAX_WORK_ITEMS`;
    emulation runs a few groups of any NDRange and passes none). ``device_limits=False``
    skips :func:`check_device`: Oclgrind reports nominal limits (128 MiB of memory) that it
    does not enforce, and the device the record is emulated for is another one.

    ``map_buffers``: each buffer is the record's snapshot mapped copy-on-write and handed
    to the device as its storage (``CL_MEM_USE_HOST_PTR``, :meth:`LaunchRecord.buffer_view`),
    so only the pages the kernel touches are read; ``read_outputs=False`` reads nothing
    back. The emulator uses both: its sampled work-items touch kilobytes of gigabyte
    buffers, and its statistics, not the outputs, are the result. ``binaries``: a folder
    of programs built by earlier replays (``intercept.built_programs``; the emulator's
    server replays one launch several times). ``before_launch(kernel)``: called with the
    kernel, its arguments set, right before the launch (the emulator's fork server prepares
    a launch once and forks each run from there: miniemu.fork_server)."""
    import numpy as np
    import pyopencl as cl

    check_replayable(record)
    check_ndrange(record, max_work_items)
    if check_outputs and not record.outputs:
        raise ClprojError(
            f"launch {_name(record)} has no recorded outputs to compare",
            "record with `clproj run --record DIR --verify -- ...`",
        )
    if device is None:
        device = _default_device()
    if device_limits:
        check_device(record, device)
    dev = device.name.strip()
    name = _name(record)
    fix_driver = "check the record against its kernel, or replay it on another device"
    with _cl_step(f"replay of {name}: creating a context on {dev}", "run `clproj devices`"):
        ctx = cl.Context([device])
        try:
            props = cl.command_queue_properties.PROFILING_ENABLE
            queue = cl.CommandQueue(ctx, device, properties=props)
        except cl.Error:
            queue = cl.CommandQueue(ctx, device)
    # Argument information (kinds of the parameters) is metadata only: asking for it does
    # not change the code the driver generates.
    options = ((record.options or "") + " -cl-kernel-arg-info").strip()
    try:
        program, built_from = built_programs.build(ctx, device, record.source, options, binaries)
    except cl.Error as exc:
        drop_saved_source(str(exc))
        first = _first_build_error(str(exc))
        raise ClprojError(
            f"building {record.kernel} for {dev} failed: {_cl_error_name(exc)}"
            + (f" ({first})" if first else ""),
            "check the recorded build options and the device's OpenCL C version",
        ) from None
    try:
        kernel = cl.Kernel(program, record.kernel)
    except cl.Error as exc:
        try:
            known = ", ".join(k.function_name for k in program.all_kernels()) or "none"
        except cl.Error:
            known = "?"
        raise ClprojError(
            f"launch {name}: field 'kernel': the program has no kernel {record.kernel!r} "
            f"(it has: {known}; {_cl_error_name(exc)})",
            "the record is corrupt: " + _FIX_RECORD,
        ) from None
    kinds = set_kinds(record, kernel)
    if record.local_size is not None:
        with _cl_step(f"replay of {name}: querying the kernel on {dev}", fix_driver):
            kmax = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device)
        if math.prod(record.local_size) > kmax:
            raise ClprojError(
                f"launch {name}: local_size {record.local_size} is {math.prod(record.local_size)} "
                f"work-items per group; kernel {record.kernel} accepts at most {kmax} on {dev}",
                "replay on another device, or fix local_size in the record",
            )
    buffers: dict[int, cl.Buffer] = {}
    mapped: list[Any] = []  # the storage of USE_HOST_PTR buffers lives as long as they do
    mf = cl.mem_flags
    access = mf.READ_WRITE | mf.WRITE_ONLY | mf.READ_ONLY
    for a in sorted(record.args, key=lambda a: a.index):
        kind = kinds[a.index]
        step = f"replay of {name}: setting field 'args[{a.index}]' ({kind})"
        if kind == "scalar":
            with _cl_step(
                step, "the record's scalar size differs from the kernel's parameter type"
            ):
                set_scalar(kernel, a.index, a.data or b"")
        elif kind == "null":
            with _cl_step(step, fix_driver):
                kernel.set_arg(a.index, None)
        elif kind == "local":
            with _cl_step(step, fix_driver):
                kernel.set_arg(a.index, cl.LocalMemory(max(1, int(a.size or 1))))
        elif kind == "buffer":
            data = b"" if map_buffers else record.buffer_bytes(a.index)
            size = max(1, int(a.size or len(data)))
            flags = (a.flags or mf.READ_WRITE) & access or mf.READ_WRITE
            if bin(flags).count("1") > 1:  # e.g. READ_ONLY | WRITE_ONLY: no valid buffer
                raise ClprojError(
                    f"launch {name}: field 'args[{a.index}].flags' {a.flags} combines "
                    "exclusive access flags (read-write, write-only, read-only)",
                    _FIX_RECORD,
                )
            if map_buffers:
                with _cl_step(step, fix_driver):
                    host = record.buffer_view(a.index)
                    mapped.append(host)
                    buf = cl.Buffer(ctx, flags | mf.USE_HOST_PTR, hostbuf=host)
                    kernel.set_arg(a.index, buf)
                buffers[a.index] = buf
                continue
            with _cl_step(step, fix_driver):
                buf = cl.Buffer(ctx, flags, size)
                if data:
                    cl.enqueue_copy(
                        queue, buf, np.frombuffer(data, dtype=np.uint8), is_blocking=True
                    )
                kernel.set_arg(a.index, buf)
            buffers[a.index] = buf
    gsz = tuple(record.global_size)
    lsz = None if record.local_size is None else tuple(record.local_size)
    off = None if record.global_offset is None else tuple(record.global_offset)
    if before_launch is not None:
        before_launch(kernel)
    with _cl_step(
        f"replay of {name}: launching global_size {list(gsz)} local_size "
        f"{None if lsz is None else list(lsz)} on {dev}",
        "check work_dim, global_size and local_size in the record against the device",
    ):
        event = cl.enqueue_nd_range_kernel(queue, kernel, gsz, lsz, global_work_offset=off)
        event.wait()
    time_ns = None
    with contextlib.suppress(cl.Error):
        time_ns = int(event.profile.end - event.profile.start)
    outputs: dict[int, bytes] = {}
    with _cl_step(f"replay of {name}: reading the buffers back from {dev}", fix_driver):
        for index, buf in buffers.items() if read_outputs else ():
            host = np.empty(buf.size, dtype=np.uint8)
            cl.enqueue_copy(queue, host, buf, is_blocking=True)
            size = int(record.arg(index).size or buf.size)
            outputs[index] = host[:size].tobytes()
        queue.finish()
    matches = None
    mismatched = None
    if check_outputs:
        mismatched = [i for i in sorted(record.outputs) if outputs.get(i) != record.output_bytes(i)]
        matches = not mismatched
    return ReplayResult(outputs, time_ns, matches, dev, mismatched, built_from)


# ---- the time-boxed child process of `clproj replay` ------------------------------------


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # never stack the clproj interception shim under our own replay
    preload = ":".join(p for p in env.get("LD_PRELOAD", "").split(":") if p and "_shim" not in p)
    if preload:
        env["LD_PRELOAD"] = preload
    else:
        env.pop("LD_PRELOAD", None)
    return pyenv.helper_environment(env)


def _child_setup() -> None:
    die_with_parent(signal.SIGKILL)  # a killed `clproj replay` leaves no replay behind


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _LOG_TAIL))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def replay_isolated(
    record_path: str,
    device: str | None = None,
    *,
    check_outputs: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    label: str | None = None,
) -> ReplayResult:
    """:func:`replay` of the record file in a child process, killed after ``timeout_s``.

    Why a child: a driver that crashes (an out-of-bounds kernel on PoCL dies with
    SIGSEGV) or a kernel that never ends would otherwise take the CLI with it. The child
    runs in its own process group (a time-out kills all of it) and dies with us. Returns
    the result without the output contents (only whether they match)."""
    label = label or os.path.basename(record_path)
    with temp_directory("clproj-replay-") as tmp:
        out = os.path.join(tmp, "result.json")
        log = os.path.join(tmp, "replay.log")
        cmd = [sys.executable, "-m", "clproj.intercept.replay_worker", os.path.abspath(record_path)]
        cmd += ["--out", out]
        if device is not None:
            cmd += ["--device", str(device)]
        if check_outputs:
            cmd.append("--verify")
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                cmd,
                env=_worker_env(),
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a time-out kills all of it
                preexec_fn=_child_setup,
            )
            try:
                rc = proc.wait(timeout=timeout_s)
            except BaseException as exc:  # time-out, Ctrl-C: nothing may outlive us
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if isinstance(exc, subprocess.TimeoutExpired):
                    raise ClprojError(
                        f"replay of {label} did not finish within {timeout_s:g} s and was killed",
                        "raise --timeout for a slow kernel; a kernel that never ends needs "
                        "other inputs (record the launch again)",
                    ) from None
                raise
        if rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"signal {-rc}"
            tail = _log_tail(log)
            raise ClprojError(
                f"replay of {label} crashed: the OpenCL driver process died with {sig}"
                + (f" ({tail})" if tail else ""),
                "the record's buffers or NDRange do not fit its kernel (an out-of-bounds "
                "access?); check it with `clproj emulate`, or record the launch again",
            )
        try:
            doc = json.loads(read_regular_file(out, "replay result", _RESULT_MAX_BYTES))
        except (ClprojError, ValueError):
            tail = _log_tail(log)
            raise ClprojError(
                f"replay of {label} failed (exit status {rc}): {tail or 'no output'}",
                "run `clproj doctor` to check the OpenCL installation",
            ) from None
    if not doc.get("ok"):
        raise ClprojError(str(doc.get("cause")), doc.get("fix"))
    return ReplayResult(
        outputs={},
        time_ns=doc.get("time_ns"),
        matches=doc.get("matches"),
        device=str(doc.get("device")),
        mismatched=doc.get("mismatched"),
    )
