"""Route mode end to end: unmodified apps (pyopencl and plain C) on the virtual platform.

Real parts only: the preloaded shim, a broker, node *processes* with genuinely different
PoCL drivers (``basic`` = 1 thread, ``pthread`` = all cores), pyopencl and C apps linked
against the system loader. Projections are posted by a hook (as project mode would) so
the test controls where the projection says a kernel should run; a node is killed for
real in the middle of a run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not list(REPO.glob("intercept/_shim*.so")), reason="shim not built (make build)"
)

APP = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import pyopencl as cl

    SRC = '''
    __kernel void advance(__global float *a, __global const float *b, const float s,
                          const int reps) {
        int i = get_global_id(0);
        float x = a[i];
        for (int r = 0; r < reps; ++r) x = x * 0.999f + b[i] * s;
        a[i] = x;
    }
    '''
    n1, n2, reps, pause = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    n = 4096
    rng = np.random.default_rng(1)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    mf = cl.mem_flags
    da = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
    db = cl.Buffer(ctx, mf.READ_ONLY, b.nbytes)
    cl.enqueue_copy(q, db, b, is_blocking=False)
    k = cl.Program(ctx, SRC).build().advance
    k.set_args(da, db, np.float32(0.5), np.int32(reps))
    for i in range(n1):
        cl.enqueue_nd_range_kernel(q, k, (n,), None)
    q.finish()
    print("PHASE1", flush=True)
    time.sleep(pause)
    evs = [cl.enqueue_nd_range_kernel(q, k, (n,), None) for _ in range(n2)]
    evs[-1].wait()
    out = np.empty_like(a)
    cl.enqueue_copy(q, out, da)
    ref = a.copy()
    for _ in range((n1 + n2) * reps):
        ref = (ref * np.float32(0.999) + b * np.float32(0.5)).astype(np.float32)
    ok = np.allclose(out, ref, rtol=1e-4, atol=1e-5)
    print("PASS" if ok else f"FAIL {out[:4]} {ref[:4]}", flush=True)
    sys.exit(int(sys.argv[5]) if len(sys.argv) > 5 and ok else 0 if ok else 1)
    """
)


def clproj_run(cmd: list[str], env: dict[str, str], broker: str | None = None, timeout: int = 150):
    args = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--json"]
    if broker:
        args += ["--broker", broker]
    return subprocess.Popen(
        [*args, "--", *cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def devices_of(summary: dict, kernel: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in summary.get("kernels", []):
        if row["kernel"] == kernel:
            dev = row["device"].split()[0]
            out[dev] = out.get(dev, 0) + row["launches"]
    return out


def test_pyopencl_vecadd_embedded_cluster(tmp_path, route_env, finish):
    """Without --broker: embedded broker + local node; output correct, launches summarised."""
    (tmp_path / "app.py").write_text(APP)
    env = route_env(tmp_path)
    proc = clproj_run([sys.executable, str(tmp_path / "app.py"), "5", "5", "3", "0"], env)
    out, err, summary = finish(proc)
    assert proc.returncode == 0, err
    assert "PASS" in out
    assert sum(devices_of(summary, "advance").values()) == 10
    assert all(d.startswith("local/") for d in devices_of(summary, "advance"))


def default_and_other(cluster: dict) -> tuple[str, str]:
    """(the node whose device a first, unprojected launch goes to, the other node).

    The client sends it to the device with the higher announced peak
    (``Directory.default_target``). With the committed profiles that is pthread; on a
    machine no committed profile matches, each node announces what ``devices.local``
    resolves (a profile cached by an earlier run, perhaps measured under load, else a
    generic one), so either may rank first: read it from the broker, as the client does.
    """
    devs = cluster["broker"].devices
    best = max(devs, key=lambda d: (devs[d].view.peak_flops, d))
    default = devs[best].node
    return default, next(n for n in cluster["nodes"] if n != default)


def test_migration_follows_late_projection(tmp_path, cluster, route_env, finish):
    """First launches run at once on the default device (the higher peak); a projection
    that arrives later says the other device is faster, and later launches move there."""
    (tmp_path / "app.py").write_text(APP)
    default, other = default_and_other(cluster)
    env = route_env(tmp_path, fast=f"{other}/", delay=0.3)
    cmd = [sys.executable, str(tmp_path / "app.py"), "20", "40", "20", "1.0"]
    proc = clproj_run(cmd, env, broker=cluster["endpoint"])
    out, err, summary = finish(proc)
    assert proc.returncode == 0, err
    assert "PASS" in out
    devs = devices_of(summary, "advance")
    assert devs.get(f"{default}/0", 0) >= 1, (devs, err)  # first launch: at once, default
    assert devs.get(f"{other}/0", 0) >= 40, (devs, err)  # after the projection: where it says
    assert sum(devs.values()) == 60


def test_c_app_goes_where_projection_says(tmp_path, cluster, route_env, finish):
    """An unmodified C app (system ICD loader) on the virtual platform: correct output,
    and with the projection known at the first launch every launch runs on basic."""
    exe = tmp_path / "app_many"
    subprocess.run(
        ["gcc", "-O1", "-o", str(exe), str(REPO / "tests/c_apps/app_many.c"), "-lOpenCL"],
        check=True,
    )
    plain = subprocess.run([str(exe), "40"], capture_output=True, text=True, timeout=60)
    env = route_env(tmp_path, fast="nb/", delay=0)
    proc = clproj_run([str(exe), "40"], env, broker=cluster["endpoint"])
    out, err, summary = finish(proc)
    assert proc.returncode == 0, err
    assert plain.stdout.strip() and plain.stdout.strip() in out
    devs = devices_of(summary, summary["kernels"][0]["kernel"])
    assert devs == {"nb/0": 40}, (devs, err)


@pytest.mark.parametrize("app_status", [0, 4])
def test_node_killed_mid_run_is_recovered(tmp_path, cluster, route_env, finish, app_status):
    """Kill the node running the launches while many are in flight: the client replays
    them elsewhere from its last consistent state; the app's output is still correct.
    "Recovered" is said only when the app then succeeded (it was said of a failed app)."""
    (tmp_path / "app.py").write_text(APP)
    env = route_env(tmp_path)
    cmd = [sys.executable, str(tmp_path / "app.py"), "10", "60", "400", "0", str(app_status)]
    proc = clproj_run(cmd, env, broker=cluster["endpoint"])
    assert proc.stderr is not None
    seen = []  # --json: the app's stdout comes on stderr
    while not seen or seen[-1].strip() not in ("PHASE1", ""):
        seen.append(proc.stderr.readline())
    assert seen[-1].strip() == "PHASE1", "".join(seen) + proc.stderr.read()
    victim = cluster["nodes"][default_and_other(cluster)[0]]  # the default device runs them
    time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    out, err, summary = finish(proc)
    assert proc.returncode == app_status, err
    assert "PASS" in out, err
    if app_status == 0:
        assert "recovered from 1 node failure" in err
    else:
        assert "recovered" not in err
        assert "1 node failure(s) during the run, and the app failed (exit status 4)" in err
    rows = [r for r in summary["kernels"] if r["kernel"] == "advance"]
    assert sum(r["launches"] for r in rows) == 70
    assert any("replayed" in r["device"] for r in rows), rows  # in flight when it died


def test_sub_buffers_and_compile_link_match_native(tmp_path, route_env, finish):
    """Sub-buffers (a kernel argument, a read) and clCompileProgram + clLinkProgram are
    part of the virtual platform: the C app prints under route mode what it prints on
    PoCL directly (it used to get CL_INVALID_OPERATION)."""
    exe = tmp_path / "app_basic"
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-o",
            str(exe),
            str(REPO / "tests/c_apps/app_basic.c"),
            "-lOpenCL",
            "-lpthread",
        ],
        check=True,
    )
    env = route_env(tmp_path)
    native = subprocess.run(
        [str(exe), "4", "1"], env=env, capture_output=True, text=True, timeout=120
    )
    assert native.returncode == 0, native.stderr
    proc = clproj_run([str(exe), "4", "1"], env)
    out, err, _ = finish(proc)
    assert proc.returncode == 0, err
    assert "rev checksum" in native.stdout and "twice" in native.stdout
    for line in native.stdout.splitlines():
        assert line in out, (line, out)
    assert "is not supported" not in err


def test_same_host_shm_data_path(tmp_path, monkeypatch, embedded_cluster):
    """Large writes/reads to a node on this host go through /dev/shm files named in the
    commands (not through the sockets); the bytes arrive intact both ways."""
    import numpy as np

    from clproj.runtime.cluster.client import platform as client_mod
    from clproj.runtime.cluster.client.platform import RemotePlatform

    sent: list[dict] = []
    pack = client_mod.protocol.pack

    def spy(t, **fields):
        if t == "cmd":
            sent.append({"op": fields["op"], **fields["a"]})
        return pack(t, **fields)

    monkeypatch.setattr(client_mod.protocol, "pack", spy)
    c = embedded_cluster(node="process", lifetime_s=120)
    p = RemotePlatform(c.endpoint, wait_devices_s=60)
    try:
        dev = next(iter(p.devices))
        x = np.random.default_rng(3).random(1 << 20).astype(np.float32)  # 4 MiB
        b = p.create_buffer(x.nbytes)
        p.enqueue_write(b, x, device=dev)
        k = p.create_kernel(
            p.create_program(
                "__kernel void dbl(__global float *a) { a[get_global_id(0)] *= 2.0f; }"
            ),
            "dbl",
        )
        k.set_args(b)
        p.enqueue_launch(k, [x.size], device=dev)
        out = np.empty_like(x)
        p.enqueue_read(b, out)
        assert np.array_equal(out, x * 2)
    finally:
        p.close()
    shm_ops = {s["op"] for s in sent if str(s.get("shm", "")).startswith("/dev/shm/clproj-")}
    assert {"buf_read"} <= shm_ops and shm_ops & {"buf_create", "buf_write"}, sent


EVENTS_APP = textwrap.dedent(
    """
    import numpy as np
    import pyopencl as cl
    from clproj.runtime.route import platform as route_runtime

    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096 * 4)
    cl.enqueue_fill_buffer(q, x, np.float32(0), 0, 4096 * 4)
    src = "__kernel void inc(__global float *x) { x[get_global_id(0)] += 1.0f; }"
    k = cl.Program(ctx, src).build().inc
    k.set_args(x)
    kept = cl.enqueue_nd_range_kernel(q, k, (4096,), None)
    for _ in range(600):  # each event dropped right after its wait (pyopencl releases it)
        cl.enqueue_nd_range_kernel(q, k, (4096,), None, wait_for=[kept]).wait()
    kept.wait()
    assert kept.command_execution_status == cl.command_execution_status.COMPLETE
    out = np.empty(4096, np.float32)
    cl.enqueue_copy(q, out, x)
    r = route_runtime.route()
    live = sum(type(o).__name__ == "VEvent" for o in r.objs.values())
    print("EVENTS", live, out[0], flush=True)
    """
)


def test_released_events_reach_python_without_their_own_callback(tmp_path, route_env, finish):
    """Events released in C ride along with the next call into Python (route.c): Python
    drops them in batches (its table stays small, bounded by RT_REL_MAX), an event that
    is kept stays usable, and every launch ran."""
    (tmp_path / "events_app.py").write_text(EVENTS_APP)
    proc = clproj_run([sys.executable, str(tmp_path / "events_app.py")], route_env(tmp_path))
    out, err, _ = finish(proc)
    assert proc.returncode == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("EVENTS"))
    live, value = int(line.split()[1]), float(line.split()[2])
    assert value == 601.0
    assert 1 <= live <= 257, live  # `kept` + at most one batch not yet handed over


STEP_APP = textwrap.dedent(
    """
    import sys
    import numpy as np
    import pyopencl as cl

    n, launches = 1024, int(sys.argv[1])
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4)
    cl.enqueue_fill_buffer(q, x, np.int32(0), 0, n * 4)
    k = cl.Program(ctx, '''
    __kernel void step_from(__global int *x, const int t) {
        int i = get_global_id(0);
        if (i >= t) x[i] += 1;
    }''').build().step_from
    for t in range(launches):  # a new scalar, hence a new signature, every launch
        k.set_args(x, np.int32(t))
        ev = cl.enqueue_nd_range_kernel(q, k, (n,), None)
        if t % 3 == 0:
            ev.wait()
    out = np.empty(n, np.int32)
    cl.enqueue_copy(q, out, x)
    ref = np.minimum(np.arange(n) + 1, launches)
    print("PASS" if (out == ref).all() else "FAIL", flush=True)
    """
)


def test_new_signature_every_launch_snapshots_only_what_it_emulates(tmp_path, route_env):
    """A step index passed as a scalar makes every launch a new signature. Route mode
    projects them from the reuse cache's anchors: only the launches the cache emulates
    are snapshotted (read back) and recorded, not every one (before: 300 of 300, about
    1.4 ms per launch), and placement takes the kernel family's decision instead of
    asking the broker for each new key. Output is exact."""
    (tmp_path / "app.py").write_text(STEP_APP)
    env = route_env(tmp_path)
    records = tmp_path / "records"
    proc = subprocess.run(
        [
            sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--record",
            str(records), "--json", "--", sys.executable, str(tmp_path / "app.py"), "300",
        ],
        env=env, capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "PASS" in proc.stderr, proc.stderr[-2000:]  # --json: the app's stdout
    saved = list((records / "records").glob("*.clrec"))
    assert 1 <= len(saved) <= 40, len(saved)


ZERO_APP = """\
import numpy as np
import pyopencl as cl
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
n = 1 << 19  # 2 MiB of float32 each
z = np.zeros(n, np.float32)
a = np.arange(n, dtype=np.float32)
mf = cl.mem_flags
bz = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=z)
ba = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
src = "__kernel void addto(__global float *z, __global const float *a)"
src += " { size_t i = get_global_id(0); z[i] += a[i]; }"
cl.Program(ctx, src).build().addto(q, (n,), None, bz, ba)
out = np.empty_like(z)
cl.enqueue_copy(q, out, bz)
q.finish()
print("PASS" if (out == a).all() else "FAIL")
"""


def test_route_records_a_zero_buffer_as_no_blob_and_the_rest_exactly(tmp_path, route_env):
    """Route mode records a launch as project mode does: a snapshot of 1 MiB or more that
    is all zeros is no blob (read as zeros), neither hashed nor stored; the others are
    stored by the record writer, byte for byte."""
    from clproj.intercept.record import load

    (tmp_path / "app.py").write_text(ZERO_APP)
    records = tmp_path / "records"
    proc = subprocess.run(
        [
            sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--record",
            str(records), "--", sys.executable, str(tmp_path / "app.py"),
        ],
        env=route_env(tmp_path), capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stderr[-2000:]
    (path,) = (records / "records").glob("addto-*.clrec")
    rec = load(str(path))
    zero, ramp = sorted((a for a in rec.args if a.kind == "buffer"), key=lambda a: a.index)
    assert zero.blob is None and zero.size == 1 << 21
    assert ramp.blob is not None
    assert bytes(rec.buffer_view(ramp.index)) == np.arange(1 << 19, dtype=np.float32).tobytes()
