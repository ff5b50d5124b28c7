"""Untrusted input: records, blobs, kernel profiles and wire messages from other machines.

Why this file: users copy launch records (msgpack + blobs) and kernel profiles (JSON)
between machines, and peers send wire messages to the broker. A bad value must give a
one-line ``error: ... / fix: ...`` naming the field, exit code 2, and nothing else: no
traceback, no hang (FIFO, /dev/zero, an endless kernel), no crashed CLI (a driver
SIGSEGV), no process left behind, and never a silently wrong answer. Every case starts
from a real record made by ``clproj run --record`` (module fixture), mutates a copy in
``tmp_path`` and runs the real ``clproj`` CLI as a subprocess; the valid originals are
replayed too, so a check that rejected everything would fail here.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from clproj.runtime.cluster import protocol
from clproj.runtime.cluster.broker import Broker, serve_in_thread

REPO = Path(__file__).resolve().parent.parent
CLI_TIMEOUT_S = 60  # far above any case: a hang fails the test instead of the suite

SPIN_APP = '''
"""Spins until flag[0] == stop: recorded with stop == 0 == flag[0], so it ends at once."""
import numpy as np
import pyopencl as cl

SRC = """
__kernel void spin(volatile __global int *flag, const int stop) {
    while (flag[0] != stop) { flag[1] = flag[1] + 1; }
}
"""
ctx = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(ctx)
flag = np.zeros(2, np.int32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=flag)
cl.Program(ctx, SRC).build().spin(queue, (1,), (1,), buf, np.int32(0))
queue.finish()
'''


# ---- running the CLI ---------------------------------------------------------------------


def _processes_with(mark: str) -> list[int]:
    """PIDs whose environment carries ``mark`` (what a CLI run started and left behind)."""
    needle = f"CLPROJ_TEST_MARK={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def clproj(*args: str) -> subprocess.CompletedProcess:
    """Run ``python -m clproj.cli ARGS``; asserts that no process it started outlives it."""
    mark = uuid.uuid4().hex
    env = dict(os.environ)
    env.update(POCL_DEVICES="pthread basic", CLPROJ_TEST_MARK=mark, COLUMNS="500")
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    deadline = time.monotonic() + 2.0
    while (left := _processes_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left behind: {left}"
    return proc


def assert_one_line_error(proc: subprocess.CompletedProcess, expect: str) -> None:
    """Exit 2; stderr is ``error: <cause>`` plus at most a ``fix:`` line; the cause
    matches ``expect`` (a regular expression naming the field or the reason)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    assert len(lines) == 1 or lines[1].lstrip().startswith("fix: "), proc.stderr
    assert re.search(expect, lines[0]), (expect, lines[0])


# ---- real records to start from ----------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``vecadd`` (three 16 KiB buffers, 4096/256) and ``spin`` (a buffer and an int), each
    recorded once by the real shim."""
    base = tmp_path_factory.mktemp("recorded")
    (base / "spin_app.py").write_text(SPIN_APP)
    apps = {
        "vecadd": [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "--size", "small"],
        "spin": [sys.executable, str(base / "spin_app.py")],
    }
    out = {}
    for name, cmd in apps.items():
        proc = clproj("run", "--record", str(base / name), "--", *cmd)
        assert proc.returncode == 0, proc.stderr
        assert len(list((base / name / "records").glob("*.clrec"))) == 1
        out[name] = base / name
    return out


@dataclass
class Ctx:
    """A copy of a recorded directory: mutate ``m`` (the record map), or set ``raw`` (bytes
    written instead of it) or ``target`` (the RECORD argument instead of the file)."""

    m: dict[str, Any]
    dir: Path
    raw: bytes | None = None
    target: str | None = None

    def blob(self, i: int) -> Path:
        return self.dir / "blobs" / self.m["args"][i]["blob"]


@dataclass(frozen=True)
class RecordCase:
    id: str
    mutate: Callable[[Ctx], None]
    expect: str  # regular expression the error line must match
    app: str = "vecadd"
    args: tuple[str, ...] = field(default_factory=tuple)


def put(path: str, value: Any) -> Callable[[Ctx], None]:
    """Mutator setting the dotted ``path`` (list indices as numbers) of the record map."""

    def mutate(c: Ctx) -> None:
        keys = path.split(".")
        obj: Any = c.m
        for k in keys[:-1]:
            obj = obj[int(k)] if isinstance(obj, list) else obj[k]
        last = keys[-1]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value

    return mutate


def drop(key: str) -> Callable[[Ctx], None]:
    return lambda c: c.m.pop(key)


def _fifo_blob_path(c: Ctx) -> None:
    os.mkfifo(c.dir / "fifo")
    c.m["args"][2]["blob"] = str(c.dir / "fifo")


def _blob_replaced_by_fifo(c: Ctx) -> None:
    c.blob(0).unlink()
    os.mkfifo(c.blob(0))


def _blob_symlink_dev_zero(c: Ctx) -> None:
    c.blob(1).unlink()
    c.blob(1).symlink_to("/dev/zero")


def _blob_flip_byte(c: Ctx) -> None:
    data = bytearray(c.blob(0).read_bytes())
    data[100] ^= 1
    c.blob(0).write_bytes(bytes(data))


def _blob_truncate(c: Ctx) -> None:
    c.blob(0).write_bytes(c.blob(0).read_bytes()[:100])


def _blob_grow(c: Ctx) -> None:
    c.blob(0).write_bytes(c.blob(0).read_bytes() + bytes(1 << 20))


def _blob_delete(c: Ctx) -> None:
    c.blob(2).unlink()


def _two_dims_2_40(c: Ctx) -> None:
    c.m.update(work_dim=2, global_size=[2**20, 2**20], local_size=[256, 1])


def _local_over_device(c: Ctx) -> None:
    c.m.update(global_size=[16384], local_size=[8192])


def _too_many_args(c: Ctx) -> None:
    c.m["args"].append({"index": 3, "kind": "null"})


def _garbage(c: Ctx) -> None:
    c.raw = b"\xc1\xc1 not msgpack at all"


def _truncated(c: Ctx) -> None:
    c.raw = msgpack.packb(c.m, use_bin_type=True)[:200]


def _joined(c: Ctx) -> None:
    c.raw = msgpack.packb(c.m, use_bin_type=True) * 2


def _top_list(c: Ctx) -> None:
    c.raw = msgpack.packb([1, 2, 3])


def _path_dev_zero(c: Ctx) -> None:
    c.target = "/dev/zero"


def _path_fifo(c: Ctx) -> None:
    os.mkfifo(c.dir / "record.clrec")
    c.target = str(c.dir / "record.clrec")


def _path_directory(c: Ctx) -> None:
    c.target = str(c.dir / "records")


def _unchanged(c: Ctx) -> None:
    return None


SCALAR_8 = {"index": 0, "kind": "scalar", "bytes": bytes(8)}

RECORD_CASES = [
    # blob references: content hashes and nothing else; the store read is bounded and checked
    RecordCase("blob-dev-zero", put("args.0.blob", "/dev/zero"), r"'args\[0\]\.blob'"),
    RecordCase("blob-dotdot", put("args.0.blob", "../../../../etc/passwd"), r"'args\[0\]\.blob'"),
    RecordCase("blob-absolute", put("args.1.blob", "/etc/passwd"), r"'args\[1\]\.blob'"),
    RecordCase("blob-fifo-path", _fifo_blob_path, r"'args\[2\]\.blob'"),
    RecordCase("blob-uppercase-hash", put("args.0.blob", "A" * 64), r"'args\[0\]\.blob'"),
    RecordCase("blob-not-a-string", put("args.0.blob", 12345), r"'args\[0\]\.blob'"),
    RecordCase("blob-store-fifo", _blob_replaced_by_fifo, r"blob .* is a FIFO"),
    RecordCase("blob-store-dev-zero", _blob_symlink_dev_zero, r"blob .* character device"),
    RecordCase("blob-bad-hash", _blob_flip_byte, r"corrupt \(content hash differs\)"),
    RecordCase("blob-truncated", _blob_truncate, r"corrupt: 100 bytes, the record declares 16384"),
    RecordCase("blob-oversized", _blob_grow, r"blob .* more than the 16384 accepted"),
    RecordCase("blob-missing", _blob_delete, r"blob [0-9a-f]{64} is missing"),
    RecordCase("outputs-path", put("outputs", {"2": "../blobs/x"}), r"'outputs\[2\]'"),
    RecordCase("outputs-not-buffer", put("outputs", {"9": "0" * 64}), r"'outputs\['9'\]'"),
    # NDRange
    RecordCase("work-dim-0", put("work_dim", 0), r"'work_dim'"),
    RecordCase("work-dim-4", put("work_dim", 4), r"'work_dim'"),
    RecordCase("work-dim-string", put("work_dim", "1"), r"'work_dim'"),
    RecordCase("global-2^40", put("global_size", [2**40]), r"more than the 4294967296 \(2\^32\)"),
    RecordCase("global-2^20x2^20", _two_dims_2_40, r"more than the 4294967296 \(2\^32\)"),
    RecordCase("global-0", put("global_size", [0]), r"'global_size\[0\]'"),
    RecordCase("global-negative", put("global_size", [-4096]), r"'global_size\[0\]'"),
    RecordCase("global-float", put("global_size", [4096.0]), r"'global_size\[0\]'"),
    RecordCase("global-too-many-dims", put("global_size", [4096, 1]), r"'global_size'"),
    RecordCase("local-0", put("local_size", [0]), r"'local_size\[0\]'"),
    RecordCase("local-string", put("local_size", ["256"]), r"'local_size\[0\]'"),
    RecordCase(
        "local-not-dividing", put("local_size", [100]), r"4096 is not a multiple of local_size"
    ),
    RecordCase("local-over-device", _local_over_device, r"8192 work-items per group; .* at most"),
    RecordCase("offset-negative", put("global_offset", [-1]), r"'global_offset\[0\]'"),
    RecordCase(
        "out-of-bounds-crash",
        put("global_size", [2**24]),
        r"crashed: the OpenCL driver process died with SIG|did not finish within 3 s",
        args=("--timeout", "3"),
    ),
    # arguments against the kernel
    RecordCase("missing-kernel", put("kernel", "nope"), r"field 'kernel': .* no kernel 'nope'"),
    RecordCase("too-few-args", lambda c: c.m["args"].pop(), r"takes 3 argument\(s\).* sets 2"),
    RecordCase("too-many-args", _too_many_args, r"takes 3 argument\(s\).* sets 4"),
    RecordCase("duplicate-index", put("args.1.index", 0), r"'args\[1\]\.index'"),
    RecordCase("unknown-kind", put("args.0.kind", "pointer"), r"'args\[0\]\.kind'"),
    RecordCase("scalar-for-buffer", put("args.0", SCALAR_8), r"'args\[0\]' is scalar.*__global"),
    RecordCase(
        "local-for-buffer",
        put("args.1", {"index": 1, "kind": "local", "size": 64}),
        r"'args\[1\]' is local.*__global",
    ),
    RecordCase(
        "scalar-bytes-string",
        put("args.0", {"index": 0, "kind": "scalar", "bytes": "abc"}),
        r"'args\[0\]\.bytes'",
    ),
    RecordCase("buffer-size-string", put("args.0.size", "16384"), r"'args\[0\]\.size'"),
    RecordCase("buffer-size-0", put("args.0.size", 0), r"'args\[0\]\.size'"),
    RecordCase(
        "buffer-size-huge",
        put("args.0", {"index": 0, "kind": "buffer", "size": 2**62, "flags": 1, "blob": None}),
        r"args\[0\]\.size 4611686018427387904 bytes exceeds the \d+ bytes of global memory",
    ),
    RecordCase("flags-exclusive", put("args.0.flags", 6), r"'args\[0\]\.flags'"),
    RecordCase(
        "subbuffer-outside-parent",
        lambda c: c.m["args"][0].update(origin=4096, parent=8192),
        r"'args\[0\]\.origin'",
    ),
    RecordCase("args-not-a-list", put("args", {"0": 1}), r"'args'"),
    RecordCase(
        "scalar-wrong-size",
        put("args.1.bytes", b"\x01\x00"),
        r"'args\[1\]'.*CL_INVALID_ARG_SIZE",
        app="spin",
    ),
    RecordCase(
        "local-for-int",
        put("args.1", {"index": 1, "kind": "local", "size": 4}),
        r"'args\[1\]' is local.*by-value \(int\)",
        app="spin",
    ),
    # the file itself and its other fields
    RecordCase("msgpack-garbage", _garbage, r"not a record's encoding"),
    RecordCase("msgpack-truncated", _truncated, r"ends inside the record \(truncated\)"),
    RecordCase("msgpack-joined", _joined, r"more data follows the record's end"),
    RecordCase("top-level-list", _top_list, r"top level is not a map"),
    RecordCase("program-missing", drop("program"), r"'program'"),
    RecordCase("source-not-string", put("program.source", 42), r"'program\.source'"),
    RecordCase(
        "source-does-not-build",
        put("program.source", "__kernel void vecadd( { oops"),
        r"building vecadd .* CL_BUILD_PROGRAM_FAILURE \(expected",
    ),
    RecordCase("kernel-not-string", put("kernel", ["vecadd"]), r"'kernel'"),
    RecordCase("kernel-nul", put("kernel", "vecadd\x00x"), r"'kernel'.*not an OpenCL C identifier"),
    RecordCase("id-with-path", put("id", "../../evil"), r"'id'"),
    RecordCase("measured-negative", put("measured_time_ns", -5), r"'measured_time_ns'"),
    RecordCase("device-not-a-map", put("device", "gpu"), r"'device'"),
    RecordCase("version-newer", put("version", 3), r"'version'"),
    RecordCase(
        "version-1-sha256-blobs",
        put("version", 1),
        r"'version' is 1 \(its blobs are named by sha256\)",
    ),
    RecordCase("record-is-dev-zero", _path_dev_zero, r"/dev/zero is a character device"),
    RecordCase("record-is-fifo", _path_fifo, r"record\.clrec is a FIFO"),
    RecordCase("record-is-directory", _path_directory, r"records is a directory"),
    # a kernel that never ends: killed at --timeout, nothing left running
    RecordCase(
        "endless-kernel",
        put("args.1.bytes", np.int32(1).tobytes()),
        r"did not finish within 3 s and was killed",
        app="spin",
        args=("--timeout", "3"),
    ),
]


def _prepare(recorded: dict[str, Path], app: str, tmp_path: Path) -> tuple[Ctx, Path]:
    d = tmp_path / app
    shutil.copytree(recorded[app], d)
    (path,) = (d / "records").glob("*.clrec")
    return Ctx(msgpack.unpackb(path.read_bytes(), raw=False), d), path


@pytest.mark.parametrize("case", RECORD_CASES, ids=[c.id for c in RECORD_CASES])
def test_bad_record_is_one_line_error(recorded, tmp_path, case: RecordCase) -> None:
    ctx, path = _prepare(recorded, case.app, tmp_path)
    case.mutate(ctx)
    path.write_bytes(ctx.raw if ctx.raw is not None else msgpack.packb(ctx.m, use_bin_type=True))
    start = time.monotonic()
    proc = clproj("replay", ctx.target or str(path), *case.args)
    assert_one_line_error(proc, case.expect)
    assert time.monotonic() - start < 20  # bounded: never a wait on a FIFO or /dev/zero


@pytest.mark.parametrize("app", ["vecadd", "spin"])
def test_unmodified_records_replay(recorded, tmp_path, app: str) -> None:
    """The control: the records every case starts from are valid and replay (the spin
    kernel ends with its recorded arguments: the endless case is the mutation's doing)."""
    _, path = _prepare(recorded, app, tmp_path)
    proc = clproj("replay", str(path), "--json", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kernel"] == app


def test_replay_timeout_must_be_positive(recorded, tmp_path) -> None:
    _, path = _prepare(recorded, "vecadd", tmp_path)
    for bad in ("0", "nan", "-3"):
        proc = clproj("replay", str(path), "--timeout", bad)
        assert proc.returncode == 2 and "--timeout" in proc.stderr, proc.stderr
        assert "not a positive" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


# ---- kernel profiles ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel_profile() -> dict[str, Any]:
    """A real kernel profile (committed, from `clproj emulate`): the start of every case."""
    path = REPO / "benchmarks/results/kernel-profiles/vecadd-paper-single.json"
    doc = json.loads(path.read_text())
    return doc["groups"][0]["variants"][0]["profile"]


@dataclass(frozen=True)
class ProfileCase:
    id: str
    mutate: Callable[[dict[str, Any], Path], Any]  # returns the new document (or None)
    expect: str


def pset(path: str, value: Any) -> Callable[[dict[str, Any], Path], None]:
    def mutate(doc: dict[str, Any], _: Path) -> None:
        *parents, last = path.split(".")
        obj = doc
        for k in parents:
            obj = obj[k]
        obj[last] = value

    return mutate


def pdel(path: str) -> Callable[[dict[str, Any], Path], None]:
    def mutate(doc: dict[str, Any], _: Path) -> None:
        *parents, last = path.split(".")
        obj = doc
        for k in parents:
            obj = obj[k]
        del obj[last]

    return mutate


PROFILE_CASES = [
    ProfileCase("missing-kernel", pdel("kernel"), r"field kernel: missing"),
    ProfileCase("missing-num-groups", pdel("launch.num_groups"), r"launch\.num_groups: missing"),
    ProfileCase("missing-total", pdel("total"), r"field total: missing"),
    ProfileCase(
        "missing-instructions", pdel("total.instructions"), r"total\.instructions: missing"
    ),
    ProfileCase(
        "count-string",
        pset("total.instructions.fp32_add", "many"),
        r"total\.instructions\.fp32_add",
    ),
    ProfileCase(
        "count-nan", pset("total.global.load_bytes", math.nan), r"total\.global\.load_bytes: .*nan"
    ),
    ProfileCase(
        "count-inf",
        pset("per_group.instructions.int_add", math.inf),
        r"per_group\.instructions\.int_add: .*inf",
    ),
    ProfileCase(
        "count-minus-inf", pset("total.local.accesses", -math.inf), r"total\.local\.accesses"
    ),
    ProfileCase(
        "count-negative", pset("total.instructions.fp32_add", -5), r"fp32_add: must not be negative"
    ),
    ProfileCase("count-bool", pset("total.barriers", True), r"total\.barriers"),
    ProfileCase(
        "count-huge-int",
        pset("total.instructions.fp32_fma", 10**400),
        r"total\.instructions\.fp32_fma",
    ),
    ProfileCase(
        "num-groups-0", pset("launch.num_groups", 0), r"launch\.num_groups: must be a positive"
    ),
    ProfileCase(
        "num-groups-inconsistent",
        pset("launch.num_groups", 17),
        r"launch\.num_groups: 17 disagrees",
    ),
    ProfileCase("group-size-string", pset("launch.group_size", "256"), r"launch\.group_size"),
    ProfileCase("work-dim-5", pset("launch.work_dim", 5), r"launch\.work_dim"),
    ProfileCase("global-size-string", pset("launch.global_size", "4096"), r"launch\.global_size"),
    ProfileCase(
        "footprint-negative", pset("launch.footprint_bytes", -1), r"launch\.footprint_bytes"
    ),
    ProfileCase("wall-nan", pset("emulation.wall_s", math.nan), r"emulation\.wall_s"),
    ProfileCase(
        "confidence-unknown", pset("emulation.confidence", "certain"), r"emulation\.confidence"
    ),
    ProfileCase(
        "transactions-list",
        pset("total.global.transactions", [1, 2]),
        r"total\.global\.transactions",
    ),
    ProfileCase("version-99", pset("version", 99), r"field version"),
    ProfileCase("format-wrong", pset("format", "clproj.device-profile"), r"field format"),
    ProfileCase("top-level-list", lambda doc, _: [doc], r"kernel profile is a JSON object"),
    ProfileCase("invalid-json", lambda doc, _: b'{"format": ', r"is not valid JSON"),
    ProfileCase("fifo", lambda doc, path: os.mkfifo(path) or path, r"is a FIFO"),
]


@pytest.mark.parametrize("case", PROFILE_CASES, ids=[c.id for c in PROFILE_CASES])
def test_bad_kernel_profile_is_one_line_error(kernel_profile, tmp_path, case: ProfileCase) -> None:
    doc = json.loads(json.dumps(kernel_profile))
    path = tmp_path / "profile.json"
    new = case.mutate(doc, path)
    if isinstance(new, bytes):
        path.write_bytes(new)
    elif new is not path:
        path.write_text(json.dumps(doc if new is None else new))
    proc = clproj("project", str(path), "--devices", "measured")
    assert_one_line_error(proc, case.expect)
    assert "recommended" not in proc.stdout and " us " not in proc.stdout


def test_valid_kernel_profile_projects(kernel_profile, tmp_path) -> None:
    """The control: the unmodified profile passes the validator and is ranked."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(kernel_profile))
    proc = clproj("project", str(path), "--devices", "measured", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert all(math.isfinite(p["time_s"]) and p["time_s"] > 0 for p in doc["projections"])


# ---- wire messages: projections posted to a real broker -----------------------------------


def _device_profile(name: str) -> dict[str, Any]:
    return json.loads((REPO / "devices/profiles/measured" / name).read_text())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    """A real broker thread with a registered two-device node, and a client socket."""
    tmp = tmp_path_factory.mktemp("broker")
    # a hand-made node: it answers the first probe (its devices are offered then) and no
    # later one, so the broker waits as long for probes as for heartbeats
    b = Broker(f"ipc://{tmp}/broker", liveness_s=120.0, probe_floor_s=120.0)
    reasons: list[str] = []
    b.on_reject = lambda ident, why: reasons.append(why)
    th = serve_in_thread(b, until=time.time() + 120)
    ctx = zmq.Context.instance()
    node = ctx.socket(zmq.DEALER)
    node.connect(b.endpoint)
    devices = [
        {"name": "basic", "profile": _device_profile("pocl-basic-amd-epyc.json")},
        {"name": "pthread", "profile": _device_profile("pocl-pthread-amd-epyc.json")},
    ]
    node.send(protocol.pack("register", node="n", host="h", devices=devices, pid=os.getpid()))
    assert node.poll(10_000), f"no probe from the broker: {reasons}"
    probe, _ = protocol.decode(node.recv_multipart())
    node.send(protocol.pack("probe_ok", id=probe["id"], node="n"))
    deadline = time.monotonic() + 10
    while len(b.devices) < 2:
        assert time.monotonic() < deadline, f"devices not registered: {reasons}"
        time.sleep(0.02)
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.RCVTIMEO, 5000)
    client.setsockopt(zmq.LINGER, 0)
    client.connect(b.endpoint)
    yield {"broker": b, "client": client, "reasons": reasons}
    client.close(0)
    node.close(0)
    b.stop()
    th.join(3)


def _call(client: zmq.Socket, t: str, **fields: Any) -> dict[str, Any]:
    client.send(protocol.pack(t, **fields))
    header, _ = protocol.decode(client.recv_multipart())
    return header


_ids = iter(range(1, 10**6))


def _place(client: zmq.Socket, key: str) -> str:
    return _call(client, "place", id=next(_ids), key=key, move={}, remaining=1)["dev"]


BAD_TIMES = [math.nan, math.inf, -math.inf, -1.0, -3, "fast", True]


@pytest.mark.parametrize("bad", BAD_TIMES, ids=[repr(v) for v in BAD_TIMES])
def test_broker_rejects_bad_projected_times(broker, bad: Any) -> None:
    """A projection with a NaN, infinite, negative or non-numeric time is rejected whole,
    naming the field; what was posted before stays and placement follows it."""
    b, client, reasons = broker["broker"], broker["client"], broker["reasons"]
    key = f"kernel-{uuid.uuid4().hex[:8]}"
    good, other = "n/0", "n/1"
    client.send(protocol.pack("projection", key=key, times={good: 0.001, other: 0.1}))
    assert _place(client, key) == good  # the valid post is in (same socket: in order)
    before = (b.rejects, len(reasons))
    # if accepted, this would make `other` the winner (or poison the comparison)
    client.send(protocol.pack("projection", key=key, times={good: 0.1, other: bad}))
    status = _call(client, "status", id=next(_ids))["status"]
    assert status["rejects"] == before[0] + 1
    assert re.search(r"projection: times\['n/1'\] is .*finite seconds >= 0", reasons[before[1]])
    assert b.projections[key] == {good: 0.001, other: 0.1}
    assert _place(client, key) == good


@pytest.mark.parametrize(
    "header",
    [
        {"t": "heartbeat", "node": "n", "load": {}, "inflight": 0, "lt": {"0": math.nan}},
        {"t": "heartbeat", "node": "n", "load": {}, "inflight": 0, "lt": {"0": -1.0}},
        {
            "t": "heartbeat",
            "node": "n",
            "load": {},
            "inflight": 0,
            "measured": {"k": {"0": math.inf}},
        },
        {"t": "place", "id": 1, "key": "k", "move": {}, "remaining": math.nan},
        {"t": "place", "id": 1, "key": "k", "move": {}, "remaining": -2},
    ],
    ids=["lt-nan", "lt-negative", "measured-inf", "remaining-nan", "remaining-negative"],
)
def test_other_reported_times_must_be_finite(header: dict[str, Any]) -> None:
    """Every time a peer reports is checked like a projection: the message is refused."""
    raw = msgpack.packb({"v": protocol.PROTOCOL_VERSION, **header})
    with pytest.raises(protocol.ProtocolError, match=r"finite"):
        protocol.decode([raw])
    ok = dict(header)
    for k, v in {"lt": {"0": 0.5}, "measured": {"k": {"0": 0.5}}, "remaining": 1}.items():
        if k in ok:
            ok[k] = v
    protocol.decode([msgpack.packb({"v": protocol.PROTOCOL_VERSION, **ok})])  # control


# ---- output paths that cannot be made ---------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--record", "{bad}", "--", sys.executable, "-c", "pass"),
        ("evaluate", "--report", "{bad}"),
        ("validate", "{suite}", "--truth", "{truth}", "--report", "{bad}"),
        ("validate", "{suite}", "--truth", "{truth}", "--build-dir", "{bad}"),
    ],
    ids=["run-record", "evaluate-report", "validate-report", "validate-build-dir"],
)
def test_unmakeable_output_folder_is_one_line_error(tmp_path, args) -> None:
    """A folder the user names under a regular file (or a read-only parent) is the
    system's reason and the path in one line, at once (before any app runs), exit 2."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    suite = tmp_path / "suite"  # a suite of its own: validate reads its truth first
    (suite / "truth").mkdir(parents=True)
    (suite / "build.sh").write_text('#!/bin/sh\nmkdir -p "$1"\n')
    (suite / "truth" / "epyc2.tsv").write_text(
        "app\tdevice\tkernel\twork_dim\tglobal\tlocal\tlaunches\tmean_ns\tmedian_ns\tmin_ns\n"
        "app\tdev\tk\t1\t64,1,1\t64,1,1\t1\t1000\t1000\t1000\n"
    )
    values = {"bad": str(blocker / "out"), "suite": str(suite), "truth": str(suite / "truth")}
    start = time.monotonic()
    proc = clproj(*(a.format(**values) for a in args))
    assert_one_line_error(proc, "Not a directory")
    assert str(blocker) in proc.stderr
    assert time.monotonic() - start < 30  # refused up front, not after the apps ran


# ---- the user's config file ----------------------------------------------------------------


def test_config_file_not_utf8_is_one_line_error(tmp_path, monkeypatch) -> None:
    """A config.toml that is not UTF-8 (it was a traceback): one line naming the file, and
    the app is not run under settings clproj could not read."""
    conf = tmp_path / "config.toml"
    conf.write_bytes(b'timeout = "\xff\xfe"\n')
    monkeypatch.setenv("CLPROJ_CONFIG", str(conf))
    proc = clproj("run", "--", "sh", "-c", "echo RAN")
    assert_one_line_error(proc, r"config\.toml is not UTF-8")
    assert "RAN" not in proc.stdout


# ---- clproj status pointed at something else ---------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [[b"HTTP/1.1 400 Bad Request\r\n\r\n"], [msgpack.packb({"t": "hello"})]],
    ids=["http-text", "unknown-type"],
)
def test_status_of_another_service_is_one_line_error(reply: list[bytes]) -> None:
    """A ZeroMQ service on that port that is no broker answers with something else (it was
    a ProtocolError traceback): one line naming the address."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = False

    def answer() -> None:
        while not stop:
            if router.poll(50):
                frames = router.recv_multipart()
                router.send_multipart([frames[0], *reply])

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        proc = clproj("status", "--broker", f"tcp://127.0.0.1:{port}", "--curve", "off")
    finally:
        stop = True
        t.join(5)
        router.close(0)
    assert_one_line_error(proc, rf"127\.0\.0\.1:{port} answered, but not as a clproj broker")


@pytest.mark.parametrize("where", ["records", "folder"])
def test_records_on_a_symlink_loop_is_one_line_error(tmp_path, where: str) -> None:
    """A ``records`` link that loops (it listed nothing and exited 0), or a folder that is
    itself a loop: one line naming the loop."""
    if where == "records":
        (tmp_path / "records").symlink_to("records")
        folder, loop = tmp_path, tmp_path / "records"
    else:
        (tmp_path / "a").symlink_to("b")
        (tmp_path / "b").symlink_to("a")
        folder = loop = tmp_path / "a"
    proc = clproj("records", str(folder))
    assert_one_line_error(proc, rf"{re.escape(str(loop))} leads nowhere: a loop of symbolic")


@pytest.mark.parametrize("target", ["loop", "missing"])
def test_run_record_on_a_link_to_nowhere_names_it(tmp_path, target: str) -> None:
    """``clproj run --record LINK`` where LINK loops or points at nothing: one line naming
    that (before: "File exists", the answer of making a folder there)."""
    link = tmp_path / "rec"
    link.symlink_to("rec" if target == "loop" else str(tmp_path / "none"))
    proc = clproj("run", "--record", str(link), "--", "true")
    why = "is a symbolic-link loop" if target == "loop" else "which does not exist"
    assert_one_line_error(proc, rf"--record {re.escape(str(link))} .*{why}")
    assert "File exists" not in proc.stderr


def test_recording_into_a_read_only_file_system_names_that(tmp_path) -> None:
    """Recording into a folder on a read-only file system stops with a line saying so
    (before: "would have less than 1 GiB free", as a read-only tmpfs reports its size as
    nearly nothing free). A real read-only mount, in a mount namespace of its own."""
    ro = tmp_path / "ro"
    ro.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro,size=4m none {ro}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip("no mount namespace here (unshare -m needs root)")
    code = (
        "import sys; from intercept import shim_runtime as s; "
        f"sys.exit(0 if not s.within_record_budget(1, {str(ro / 'rec')!r}) else 3)"
    )
    proc = subprocess.run(
        [
            *("unshare", "-m", "sh", "-c"),
            f'mount -t tmpfs -o ro,size=4m none {ro} && exec {sys.executable} -c "{code}"',
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=CLI_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert "is not writable (a read-only folder or file system)" in proc.stderr, proc.stderr
    assert "GiB free" not in proc.stderr


@pytest.mark.parametrize("command", ["emulate", "project", "replay"])
def test_unbuildable_record_leaves_nothing_in_tmpdir(tmp_path, monkeypatch, command) -> None:
    """pyopencl saves the source of a failed build as TMPDIR/tmpXXXX.cl and leaves it: one
    file per run of an unbuildable record, before. Nothing stays now, and the error is one
    line."""
    from clproj.intercept import record as R

    rec = R.from_arrays(
        "__kernel void k(__global float *a) { a[get_global_id(0)] = no_such_name; }",
        "k",
        [np.zeros(16, np.float32)],
        [16],
    )
    path = R.save(rec, str(tmp_path / "rec"))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    args = ("--devices", "measured") if command == "project" else ()
    proc = clproj(command, path, *args)
    # one line naming the build failure (the emulator's raw output spread it over four)
    assert_one_line_error(proc, r"building k .*CL_BUILD_PROGRAM_FAILURE.*no_such_name")
    assert os.listdir(tmpdir) == []
