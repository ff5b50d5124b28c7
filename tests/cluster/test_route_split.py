"""Route mode ``--split``: qualifying launches run as shares on two devices and are merged.

Real parts only: the preloaded shim, the embedded broker + local node (PoCL ``pthread``
limited to one thread and ``basic``: two one-core devices, where the advisor projects a
split to pay), Oclgrind for the partition-safety check, unmodified pyopencl and C apps.
The split path of the client is also driven directly against a real broker and two node
processes, one of which is killed mid-run (recovery replays split launches unsplit).
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

# Two programs: ``scramble`` and ``matmul`` (1-D and 2-D, get_global_id indexing) qualify;
# ``fill_all`` reads get_global_size(0) (a grid-stride loop) and must be refused. The size
# check is textual per program, hence fill_all's own program.
APP = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    import pyopencl as cl

    SRC1 = '''
    __kernel void scramble(__global const uint *a, __global uint *o, uint rounds) {
      uint i = get_global_id(0), x = a[i] ^ i;
      for (uint k = 0; k < rounds; ++k) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; x *= 0x9E3779B1u; }
      o[i] = x;
    }
    __kernel void matmul(__global const float *a, __global const float *b, __global float *c,
                         uint n) {
      uint col = get_global_id(0), row = get_global_id(1);
      float acc = 0.0f;
      for (uint k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
      c[row * n + col] = acc;
    }
    '''
    SRC2 = '''
    __kernel void fill_all(__global uint *o, uint n) {
      for (uint i = get_global_id(0); i < n; i += get_global_size(0)) o[i] += i * 7u + 1u;
    }
    '''
    reps, n, rounds, m = (int(x) for x in sys.argv[1:5])
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    a = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
    da = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
    do = cl.Buffer(ctx, mf.READ_WRITE, a.nbytes)
    df = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(n, np.uint32))
    rng = np.random.default_rng(5)
    ma = rng.random((m, m), dtype=np.float32)
    mb = rng.random((m, m), dtype=np.float32)
    dma = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ma)
    dmb = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=mb)
    dmc = cl.Buffer(ctx, mf.READ_WRITE, ma.nbytes)
    p1 = cl.Program(ctx, SRC1).build()
    p2 = cl.Program(ctx, SRC2).build()
    scramble, matmul, fill = p1.scramble, p1.matmul, p2.fill_all
    for r in range(reps):
        scramble.set_args(da, do, np.uint32(rounds))
        cl.enqueue_nd_range_kernel(q, scramble, (n,), (64,))
        cl.enqueue_copy(q, da, do)  # the output is the next launch's input
        fill.set_args(df, np.uint32(n))
        cl.enqueue_nd_range_kernel(q, fill, (n // 4,), (64,))
        matmul.set_args(dma, dmb, dmc, np.uint32(m))
        cl.enqueue_nd_range_kernel(q, matmul, (m, m), (16, 16))
        cl.enqueue_copy(q, dmb, dmc)  # B <- A B: each launch depends on the last
    q.finish()
    h = hashlib.sha256()
    for buf, like in ((do, a), (df, a), (dmc, ma)):
        out = np.empty_like(like)
        cl.enqueue_copy(q, out, buf)
        h.update(out.tobytes())
    print("HASH", h.hexdigest(), flush=True)
    """
)
ARGS = ["6", "16384", "100", "64"]


@pytest.fixture()
def split_env(route_env):
    """``split_env(tmp_path, wait=True)``: route_env for the split runs below."""

    def make(tmp_path, wait: bool = True) -> dict[str, str]:
        env = route_env(tmp_path)
        env["POCL_MAX_PTHREAD_COUNT"] = "1"  # two one-core devices: the advisor says split
        # the split's mechanics, not its measured check (tests below), which may revoke a
        # split on this shared machine
        env["CLPROJ_SPLIT_CHECK"] = "0"
        if wait:
            env["CLPROJ_SPLIT_WAIT_S"] = "90"  # first launches wait for their decision
        return env

    return make


@pytest.fixture()
def run_route(finish):
    """``run_route(cmd, env, split)``: (output, stderr, summary) of a route-mode run."""

    def run(cmd: list[str], env: dict[str, str], split: bool) -> tuple[str, str, dict]:
        args = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--json"]
        if split:
            args.append("--split")
        proc = subprocess.Popen(
            [*args, "--", *cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out, err, summary = finish(proc, timeout=240)
        assert proc.returncode == 0, err[-3000:]
        return out, err, summary

    return run


def plain_hash(cmd: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=True)
    return next(ln for ln in out.stdout.splitlines() if ln.startswith("HASH"))


def test_split_app_is_bit_identical_and_reported(tmp_path, split_env, run_route):
    """With --split the qualifying kernels (1-D and 2-D) run as shares on both devices,
    the refused one runs unsplit with its reason, and the app's output is bit-identical to
    a plain run (no shim)."""
    (tmp_path / "app.py").write_text(APP)
    cmd = [sys.executable, str(tmp_path / "app.py"), *ARGS]
    env = split_env(tmp_path)
    want = plain_hash(cmd, env)
    out, err, summary = run_route(cmd, env, split=True)
    assert want in out, (out, err[-2000:])
    decisions = {d["kernel"]: d for d in summary["splits"]}
    assert set(decisions) == {"scramble", "matmul", "fill_all"}, decisions
    for name in ("scramble", "matmul"):
        d = decisions[name]
        assert d["split"], d
        assert len(d["fractions"]) == 2 and all(0 < f < 1 for f in d["fractions"].values()), d
        rows = [r for r in summary["kernels"] if r["kernel"] == name]
        assert sum(r["launches"] for r in rows) == 6, rows
        assert all(r["device"].startswith("split local/") for r in rows), rows
    assert not decisions["fill_all"]["split"]
    assert "get_global_size(0)" in decisions["fill_all"]["reason"]
    rows = [r for r in summary["kernels"] if r["kernel"] == "fill_all"]
    assert rows and not any("split" in r["device"] for r in rows), rows


def test_measured_check_in_a_real_run_keeps_output_and_explains_itself(
    tmp_path, split_env, run_route
):
    """With the measured check on (the default), each split kernel is timed split and
    whole and then either keeps its split or is revoked with the measured figures; the
    output is bit-identical either way."""
    (tmp_path / "app.py").write_text(APP)
    cmd = [sys.executable, str(tmp_path / "app.py"), *ARGS]
    env = split_env(tmp_path)
    env.pop("CLPROJ_SPLIT_CHECK")
    want = plain_hash(cmd, env)
    out, err, summary = run_route(cmd, env, split=True)
    assert want in out, (out, err[-2000:])
    decisions = {d["kernel"]: d for d in summary["splits"]}
    for name in ("scramble", "matmul"):
        d = decisions[name]
        rows = [r for r in summary["kernels"] if r["kernel"] == name]
        assert sum(r["launches"] for r in rows) == 6, rows
        whole = sum(r["launches"] for r in rows if not r["device"].startswith("split"))
        if d["split"]:  # kept: only the two timed whole launches ran unsplit
            assert whole == 2, rows
        else:
            assert d["reason"].startswith("not split: measured"), d
            assert whole >= 3, rows


def test_without_the_flag_nothing_is_split(tmp_path, split_env, run_route):
    """Route mode without --split: no decision, no split row, same output."""
    (tmp_path / "app.py").write_text(APP)
    cmd = [sys.executable, str(tmp_path / "app.py"), "2", "4096", "20", "32"]
    env = split_env(tmp_path)
    want = plain_hash(cmd, env)
    out, err, summary = run_route(cmd, env, split=False)
    assert want in out, err[-2000:]
    assert "splits" not in summary
    assert not any("split" in r["device"] for r in summary["kernels"]), summary["kernels"]
    assert "clproj: split" not in err


def test_c_app_with_group_relative_writes_is_refused(tmp_path, split_env, run_route):
    """An unmodified C app (matmul_lmem host: tiles indexed by get_group_id, which restarts
    at 0 in a sub-launch) under --split: refused with the reason, output still correct."""
    exe = tmp_path / "matmul_lmem"
    hosts = REPO / "benchmarks" / "apps" / "c_hosts"
    src = str(hosts / "matmul_lmem.c")
    inc = [f"-I{hosts}", f"-I{REPO / 'native'}"]  # clhost.h reads settings via native/
    subprocess.run(["gcc", "-O1", "-o", str(exe), src, *inc, "-lOpenCL", "-lm"], check=True)
    env = split_env(tmp_path)
    env["CLPROJ_KERNEL_DIR"] = str(REPO / "benchmarks" / "apps")
    out, err, summary = run_route([str(exe), "64"], env, split=True)
    assert "0 of 4096 elements outside tolerance" in out, (out, err[-2000:])
    (d,) = summary["splits"]
    assert d["kernel"] == "matmul_lmem" and not d["split"], d
    assert "not a region that moves with the slab" in d["reason"], d


# ---- the client's split path against real nodes, one of them killed ---------------------


@pytest.fixture()
def two_nodes(tmp_path, broker_and_two_nodes):
    """Broker thread + a ``basic`` node (nb) and a ``pthread`` node (np), as processes."""
    with broker_and_two_nodes(tmp_path, liveness_s=2.0) as cluster:
        yield cluster


def _advance_plan(src: str, n: int, local: int, devices: list[str], counts: list[int]):
    """The plan for ``src``'s ``advance`` from the real safety check of its record."""
    from clproj.intercept.record import from_arrays
    from clproj.runtime.cluster.client.split import SplitPlan
    from clproj.runtime.partition import safety as partition_safety

    args = [np.ones(n, np.float32), np.ones(n, np.float32), np.float32(0.5), np.int32(3)]
    rec = from_arrays(src, "advance", args, [n], [local])
    s = partition_safety.check(rec)
    assert s.ok, s.reason
    (w,) = s.written
    assert (w.arg, w.stride, w.read) == (0, local * 4, True)
    firsts = [0, counts[0]]
    return SplitPlan(devices, firsts, counts, s.dim, s.slab_items, s.written, set(), {0: n * 4})


def test_split_launches_merge_bookkeeping_and_survive_node_loss(
    tmp_path, two_nodes, add_kernel_source, reference_step
):
    """Split launches of an in-place kernel on two nodes: after each, the written buffer
    is valid on the primary only and reads give the merged result; an unsplit launch on
    the other device afterwards sees it; then the secondary's node is killed while split
    launches go on, and the client's replay (launches logged whole) keeps the result right."""
    from clproj.runtime.cluster.client.platform import RemotePlatform

    n, local = 4096, 64
    p = RemotePlatform(two_nodes["endpoint"], curve="off", wait_devices_s=30)
    try:
        devs = sorted(p.devices)
        assert devs == ["nb/0", "np/0"], devs
        plan = _advance_plan(
            add_kernel_source, n, local, devs, [40, 24]
        )  # primary: nb/0 (larger share)
        rng = np.random.default_rng(4)
        a0, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        da = p.create_buffer(a0.nbytes, hostbuf=a0)
        db = p.create_buffer(b.nbytes, hostbuf=b)  # READ_WRITE, but the kernel only reads it
        k = p.create_kernel(p.create_program(add_kernel_source), "advance")
        k.set_args(da, db, np.float32(0.5), np.int32(3))
        out = np.empty_like(a0)
        p.enqueue_split_launch(k, [n], [local], None, plan, key="adv").wait()
        assert da.valid == {"nb/0"} and not da.host_valid
        assert db.valid == {"nb/0", "np/0"}  # not written: both copies stay valid
        p.enqueue_read(da, out)
        np.testing.assert_allclose(out, reference_step(a0, b, 0.5, 3, 1), rtol=1e-5)
        p.enqueue_launch(k, [n], [local], device="np/0")  # migrates the merged buffer
        p.enqueue_read(da, out)
        np.testing.assert_allclose(out, reference_step(a0, b, 0.5, 3, 2), rtol=1e-5)
        done = 2
        for _ in range(3):
            p.enqueue_split_launch(k, [n], [local], None, plan, key="adv")
            done += 1
        p.finish()
        os.kill(two_nodes["nodes"]["np"].pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not p.recoveries and time.monotonic() < deadline:
            p.enqueue_split_launch(k, [n], [local], None, plan, key="adv")
            done += 1
            p.finish()
        assert p.recoveries == 1
        for _ in range(2):  # after the loss: the plan's device is dead, launches run unsplit
            p.enqueue_split_launch(k, [n], [local], None, plan, key="adv")
            done += 1
        p.enqueue_read(da, out)
        np.testing.assert_allclose(out, reference_step(a0, b, 0.5, 3, done), rtol=1e-4)
        assert da.valid == {"nb/0"}
    finally:
        p.close()


# ---- the measured check: keep a split only when it measured faster -----------------------


def _checked_splitter():
    from clproj.runtime.cluster.client.split import SplitPlan
    from clproj.runtime.partition.route_policy import Decision, Splitter

    sp = Splitter(lambda: [])
    plan = SplitPlan(["a/0", "b/0"], [0, 1], [1, 1], 0, 1, [], set(), {})
    sp.decisions["k"] = Decision("k", "kern", True, "split a/0 50%, b/0 50%", plan, gain=1.4)
    return sp, plan


@pytest.mark.parametrize("split_s, kept", [(0.010, False), (0.006, True)])
def test_measured_check_keeps_only_a_split_that_measured_faster(split_s, kept):
    """Three timed split launches, then two timed whole ones: a split not at least 5%
    faster than the whole launch is revoked, with the measured figures as its reason."""
    from clproj.runtime.partition.route_policy import CHECK_SPLIT, CHECK_WHOLE

    sp, plan = _checked_splitter()
    kernel = type("K", (), {"args": {}})()
    for _ in range(CHECK_SPLIT):
        assert sp.plan("k", kernel) is plan and sp.timing("k", True)
        sp.observe("k", split_s, True)
    for _ in range(CHECK_WHOLE):
        assert sp.plan("k", kernel) is None and sp.timing("k", False)
        sp.observe("k", 0.010, False)
    got = sp.plan("k", kernel)
    assert (got is plan) == kept and not sp.timing("k", got is not None)
    d = sp.decisions["k"]
    assert d.split == kept
    if not kept:
        assert d.reason.startswith("not split: measured 10 ms split vs 10 ms whole"), d.reason
    assert (sp.plan("k", kernel) is plan) == kept  # the verdict stands
