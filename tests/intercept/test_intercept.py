"""The LD_PRELOAD shim under real apps: C programs (system ICD loader) and pyopencl."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from clproj.intercept import record as R
from clproj.intercept.environment import read_summary, shim_environment
from clproj.intercept.replay import replay

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
C_APPS = os.path.join(REPO, "tests", "c_apps")


@pytest.fixture(scope="session")
def c_app(tmp_path_factory):
    out = tmp_path_factory.mktemp("capps")

    def build(name: str) -> str:
        exe = str(out / name)
        if not os.path.exists(exe):
            subprocess.run(
                [
                    "gcc",
                    "-O1",
                    "-Wall",
                    "-o",
                    exe,
                    os.path.join(C_APPS, name + ".c"),
                    "-lOpenCL",
                    "-lpthread",
                ],
                check=True,
            )
        return exe

    return build


def run(cmd, tmp_path, shim=True, **kw):
    """Run cmd with or without the shim; returns (completed process, summary rows)."""
    summary = str(tmp_path / "summary.tsv")
    env = shim_environment(summary_file=summary, **kw) if shim else dict(os.environ)
    env.setdefault("POCL_DEVICES", "pthread basic")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    return p, read_summary(summary) if shim else []


def test_c_app_observe_output_unchanged(c_app, tmp_path):
    app = c_app("app_basic")
    plain, _ = run([app, "20", "3"], tmp_path, shim=False)
    shimmed, rows = run([app, "20", "3"], tmp_path)
    assert plain.returncode == shimmed.returncode == 0, shimmed.stderr
    assert sorted(plain.stdout.splitlines()) == sorted(shimmed.stdout.splitlines())
    by = {r["kernel"]: r for r in rows}
    assert by["scale"]["launches"] == 60 and by["scale"]["timed"] == 60
    assert by["scale"]["total_ns"] > 0 and by["scale"]["device"]
    for k in ("rev", "one", "twice"):  # kernels-in-program, task, compile+link
        assert by[k]["launches"] == 1 and by[k]["timed"] == 1
    assert "clproj" not in shimmed.stdout


STACKED = r"""
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <CL/cl.h>
/* Another tool's interposer: wraps two entry points, finds the next definition with
 * dlsym(RTLD_NEXT, ...) as such tools do, and counts what it saw (the app launches from
 * several threads: the count is atomic, the recursion depth per thread). */
static __thread int depth = 0;
static int launches = 0;
static void *next_of(const char *name) {
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL) { fprintf(stderr, "stacked: no next %s\n", name); exit(41); }
    return fn;
}
cl_int clFinish(cl_command_queue q) {
    static cl_int (*next)(cl_command_queue);
    if (!next) next = (cl_int (*)(cl_command_queue))next_of("clFinish");
    if (++depth > 100) { fprintf(stderr, "stacked: clFinish found itself\n"); exit(42); }
    cl_int r = next(q);
    depth--;
    return r;
}
typedef cl_int (*nd_fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                        const size_t *, cl_uint, const cl_event *, cl_event *);
cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                              const size_t *g, const size_t *l, cl_uint n, const cl_event *w,
                              cl_event *e) {
    static nd_fn next;
    if (!next) next = (nd_fn)next_of("clEnqueueNDRangeKernel");
    __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
    return next(q, k, d, o, g, l, n, w, e);
}
__attribute__((destructor)) static void report(void) { fprintf(stderr, "stacked launches %d\n", launches); }
"""


@pytest.mark.parametrize("order", ["before", "after"])
def test_other_interposers_stack_with_the_shim(c_app, tmp_path, order):
    """A tool preloaded beside the shim that finds the next definition with
    dlsym(RTLD_NEXT, ...) gets the next object after *itself*: the shim's interposed
    dlsym must not change whom the C library takes for the caller. Preloaded after the
    shim, such a wrapper once got itself back (endless recursion); before it, it skipped
    the shim (no launch seen). Both tools now see every launch, and the app's output is
    its own."""
    src = tmp_path / "stacked.c"
    src.write_text(STACKED)
    lib = str(tmp_path / "stacked.so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", lib, str(src), "-ldl"], check=True)
    app = c_app("app_basic")
    plain, _ = run([app, "20", "3"], tmp_path, shim=False)
    summary = str(tmp_path / "summary.tsv")
    env = shim_environment(summary_file=summary)
    env.setdefault("POCL_DEVICES", "pthread basic")
    shim = env["LD_PRELOAD"]
    env["LD_PRELOAD"] = f"{shim}:{lib}" if order == "after" else f"{lib}:{shim}"
    p = subprocess.run([app, "20", "3"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(p.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    rows = read_summary(summary)
    seen = sum(r["launches"] for r in rows)
    assert seen == 63  # 60 x scale, rev, one, twice
    assert "stacked launches 62" in p.stderr  # "one" is a clEnqueueTask, not wrapped


def test_c_app_record_verify_replay(c_app, tmp_path, cl_device):
    app = c_app("app_basic")
    rec_dir = tmp_path / "rec"
    p, _ = run([app, "5", "2"], tmp_path, record=str(rec_dir), verify=True)
    assert p.returncode == 0, p.stderr
    recs = {R.load(x).kernel: R.load(x) for x in R.list_records(str(rec_dir))}
    assert set(recs) == {"scale", "rev", "one", "twice"}  # first launch per signature only
    rev = recs["rev"]
    assert [a.kind for a in rev.args] == ["buffer", "buffer", "local", "null"]
    assert rev.args[1].origin == 512 and rev.args[1].parent == 1024  # sub-buffer
    assert rev.args[0].flags & (1 << 3)  # CL_MEM_USE_HOST_PTR
    assert rev.buffer_bytes(0) == np.arange(128, dtype=np.int32).tobytes()
    assert rev.local_size == [32] and rev.args[2].size == 128 and rev.measured_time_ns > 0
    assert recs["one"].global_size == [1]  # clEnqueueTask
    assert "helper" in recs["twice"].source  # linked from two compiled programs
    assert recs["scale"].options == "-cl-mad-enable"
    for r in recs.values():
        assert r.emulatable and r.outputs
        assert replay(r, cl_device, check_outputs=True).matches, r.kernel


def test_record_all_and_kernel_filter(c_app, tmp_path):
    app = c_app("app_basic")
    p, _ = run([app, "4", "2"], tmp_path, record=str(tmp_path / "all"), which="all")
    assert p.returncode == 0
    kernels = [R.load(x).kernel for x in R.list_records(str(tmp_path / "all"))]
    assert kernels.count("scale") == 8 and len(kernels) == 11
    # one blob per distinct buffer content (scale changes its buffer at every launch)
    assert len(os.listdir(tmp_path / "all" / "blobs")) <= 12
    p, _ = run([app, "4", "2"], tmp_path, record=str(tmp_path / "f"), kernels=["rev", "twice"])
    assert sorted(R.load(x).kernel for x in R.list_records(str(tmp_path / "f"))) == ["rev", "twice"]


def test_invalid_calls_return_real_codes(c_app, tmp_path):
    app = c_app("app_invalid")
    plain, _ = run([app], tmp_path, shim=False)
    shimmed, _ = run([app], tmp_path, record=str(tmp_path / "r"), which="all")
    assert plain.returncode == shimmed.returncode == 0
    lines = plain.stdout.splitlines()
    assert sum(1 for x in lines if not x.startswith(" ")) >= 30
    assert shimmed.stdout.splitlines() == lines
    # profiling stays invisible on a queue the app created without it
    assert "GetEventProfilingInfo.not_enabled -7" in lines


def test_calls_across_contexts_and_host_flags_return_real_codes(c_app, tmp_path):
    """``app_contexts.c`` with every launch recorded: a launch naming another context's
    buffer is refused by the driver with its own code, and the shim, whose snapshot read
    of that buffer the driver refused first, says nothing (no "internal error")."""
    app = c_app("app_contexts")
    plain, _ = run([app], tmp_path, shim=False)
    shimmed, _ = run([app], tmp_path, record=str(tmp_path / "r"), which="all")
    assert plain.returncode == shimmed.returncode == 0
    assert "ctx2.launch -34" in plain.stdout
    assert shimmed.stdout == plain.stdout
    assert "internal error" not in shimmed.stderr, shimmed.stderr[-2000:]


@pytest.mark.parametrize("fault", ["launch", "start", "unwritable"])
def test_internal_failures_pass_through(c_app, tmp_path, fault):
    app = c_app("app_basic")
    plain, _ = run([app, "5", "2"], tmp_path, shim=False)
    rec_dir = tmp_path / "rec"
    if fault == "unwritable":
        (tmp_path / "file").write_text("x")
        rec_dir = tmp_path / "file" / "rec"  # cannot be created, even by root
    else:
        os.environ["CLPROJ_FAULT"] = fault
    try:
        p, rows = run([app, "5", "2"], tmp_path, record=str(rec_dir))
    finally:
        os.environ.pop("CLPROJ_FAULT", None)
    assert p.returncode == 0
    assert sorted(p.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    errors = [x for x in p.stderr.splitlines() if x.startswith("clproj:")]
    assert len(errors) == 1, p.stderr  # logged once
    assert {r["kernel"] for r in rows} == {"scale", "rev", "one", "twice"}


PYAPP = r'''
import sys
import numpy as np
import pyopencl as cl
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
src = """
__kernel void add(__global const float *a, __global const float *b, __global float *c, int n) {
  int i = get_global_id(0); if (i < n) c[i] = a[i] + b[i]; }
__kernel void img(read_only image2d_t im, __global float4 *out) {
  int i = get_global_id(0); out[i] = read_imagef(im, (int2)(i, 0)); }
"""
prg = cl.Program(ctx, src).build()
a = np.arange(1000, dtype=np.float32); b = np.ones(1000, np.float32)
mf = cl.mem_flags
ab = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
cb = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
k = prg.add
for _ in range(int(sys.argv[1])):
    k(q, (1024,), (64,), ab, bb, cb, np.int32(1000))
c = np.empty_like(a); cl.enqueue_copy(q, c, cb)
print("sum", float(c.sum()))
fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
im = cl.Image(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, fmt, shape=(8, 1), hostbuf=np.ones((1, 8, 4), np.float32))
ob = cl.Buffer(ctx, mf.WRITE_ONLY, 8 * 16)
prg.img(q, (8,), None, im, ob); q.finish()
o = np.empty(32, np.float32); cl.enqueue_copy(q, o, ob); print("img", float(o.sum()))
'''

HOOK = """
import pyopencl as cl
seen = []
def on_record(record):
    # pyopencl calls made by a hook inside the app must not recurse into the shim
    ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
    cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64).release()
    with open(record.path + ".hooked", "w") as f:
        f.write(record.kernel)
"""


def test_pyopencl_app(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(PYAPP)
    (tmp_path / "myhook.py").write_text(HOOK)
    os.environ["CLPROJ_HOOKS"] = "myhook:on_record"
    os.environ["PYTHONPATH"] = str(tmp_path)
    try:
        plain, _ = run([sys.executable, str(script), "50"], tmp_path, shim=False)
        p, rows = run(
            [sys.executable, str(script), "50"], tmp_path, record=str(tmp_path / "r"), verify=True
        )
    finally:
        os.environ.pop("CLPROJ_HOOKS")
        os.environ.pop("PYTHONPATH")
    assert p.returncode == 0, p.stderr
    assert p.stdout == plain.stdout
    by = {r["kernel"]: r for r in rows}
    assert by["add"]["launches"] == 50 and by["add"]["timed"] == 50
    recs = {R.load(x).kernel: R.load(x) for x in R.list_records(str(tmp_path / "r"))}
    assert set(recs) == {"add", "img"}
    assert not recs["img"].emulatable and "image argument 0" in recs["img"].not_emulatable_reason
    add = recs["add"]
    assert add.args[3].data == np.int32(1000).tobytes() and add.local_size == [64]
    assert replay(add, check_outputs=True).matches
    hooked = [x for x in os.listdir(tmp_path / "r" / "records") if x.endswith(".hooked")]
    assert len(hooked) == 2


def test_cli_commands(c_app, tmp_path):
    app = c_app("app_basic")
    env = dict(os.environ, PYTHONPATH=REPO)
    cli = [sys.executable, "-m", "clproj.cli"]
    rec = str(tmp_path / "rec")
    p = subprocess.run(
        [*cli, "run", "--json", "--record", rec, "--verify", "--", app, "3", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout[p.stdout.index("{") :])
    assert {k["kernel"] for k in out["kernels"]} == {"scale", "rev", "one", "twice"}
    p = subprocess.run([*cli, "records", "--json", rec], capture_output=True, text=True, env=env)
    records = json.loads(p.stdout)["records"]
    assert len(records) == 4
    path = next(r["path"] for r in records if r["kernel"] == "rev")
    p = subprocess.run(
        [*cli, "replay", "--verify", "--json", "--device", "0", path],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0 and json.loads(p.stdout)["matches"] is True
    p = subprocess.run(
        [*cli, "run", "--mode", "route", "--", app], capture_output=True, text=True, env=env
    )
    # route mode runs the app on the virtual platform, sub-buffers and compile/link included
    assert p.returncode == 0, p.stderr
    assert "twice 2.0 126.0" in p.stdout + p.stderr
    assert "is not supported" not in p.stderr


@pytest.mark.parametrize("mode", ["observe", "project", "route"])
def test_ctypes_app_through_dlopen_dlsym_is_intercepted(mode):
    """OpenCL reached through dlopen + dlsym (ctypes here; plugins and runtimes alike) is
    intercepted in every mode: the shim interposes dlsym (native/shim/dlsym.c)."""
    app = os.path.join(REPO, "tests", "c_apps", "ctypes_app.py")
    env = dict(os.environ, POCL_DEVICES="pthread")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "run",
            "--mode",
            mode,
            "--json",
            "--",
            sys.executable,
            app,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "PASS" in p.stderr  # --json: the app's stdout
    kernels = json.loads(p.stdout)["kernels"]
    assert [(k["kernel"], k["launches"]) for k in kernels] == [("fill", 1)]


def test_record_budget_stops_recording_not_the_app(c_app, tmp_path, monkeypatch):
    """A launch-heavy app must not fill the disk with snapshots: past
    CLPROJ_RECORD_MAX_BYTES of stored snapshots (a blob already stored counts once) no more
    launches are recorded, but every one still runs and is counted, and the app's output
    is unchanged."""
    app = c_app("app_basic")
    plain, _ = run([app, "6", "2"], tmp_path, shim=False)
    full, rows_full = run([app, "6", "2"], tmp_path, record=str(tmp_path / "all"), which="all")
    recs = sorted(
        (R.load(x) for x in R.list_records(str(tmp_path / "all"))), key=lambda r: (r.created, r.id)
    )
    snapshots = [[(a.blob, a.size) for a in r.args if a.kind == "buffer"] for r in recs]
    assert len(recs) > 4 and all(snapshots)
    limit = sum(n for s in snapshots[:3] for _, n in s)
    monkeypatch.setenv("CLPROJ_RECORD_MAX_BYTES", str(limit))
    cut, rows_cut = run([app, "6", "2"], tmp_path, record=str(tmp_path / "cut"), which="all")
    assert plain.returncode == full.returncode == cut.returncode == 0, cut.stderr
    assert sorted(cut.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    kept = R.list_records(str(tmp_path / "cut"))
    expect, total, stored = 0, 0, set()
    for snaps in snapshots:  # admitted while the stored bytes plus all its snapshots fit
        if total + sum(n for _, n in snaps) <= limit:
            total += sum(n for sha, n in dict(snaps).items() if sha not in stored)
            stored |= {sha for sha, _ in snaps}
            expect += 1
    assert 3 <= len(kept) == expect < len(recs)
    assert "recording stopped" in cut.stderr and "CLPROJ_RECORD_MAX_BYTES" in cut.stderr
    launches = lambda rows: {r["kernel"]: r["launches"] for r in rows}  # noqa: E731
    assert launches(rows_cut) == launches(rows_full)


def test_record_stops_before_the_disk_fills(tmp_path, monkeypatch, capsys):
    from clproj.intercept import shim_runtime

    free = shim_runtime.free_bytes(str(tmp_path / "not" / "made" / "yet"))
    assert free > 0
    monkeypatch.setattr(shim_runtime, "FREE_SPACE_FLOOR", free + (1 << 40))
    assert not shim_runtime.within_record_budget(1, str(tmp_path))
    assert "less than" in capsys.readouterr().err
    monkeypatch.setattr(shim_runtime, "FREE_SPACE_FLOOR", 0)
    assert shim_runtime.within_record_budget(1, str(tmp_path))


@pytest.mark.parametrize("mode", ["observe", "project", "route"])
def test_an_app_that_abandons_a_kernel_exits_as_natively(c_app, mode):
    """The app exits (status 4) with a kernel that never ends still running: natively at
    once; nothing of clproj's may wait for that kernel (recorded launches are not waited
    for, the exit harvest takes only completed events, route mode's exit waits for no
    command and kills a node that cannot stop). A wait would never end: the timeout."""
    app = c_app("app_abandon")
    env = dict(os.environ, POCL_DEVICES="pthread")
    p = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", mode, "--", app],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert p.returncode == 4, p.stderr[-2000:]
    assert p.stdout.strip() == "abandoning the kernel", p.stdout
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("step", ["fail", "subdevice"])
@pytest.mark.parametrize("mode", ["observe", "project", "route"])
def test_a_failed_user_event_and_a_released_sub_device_run_as_natively(c_app, mode, step):
    """A kernel waiting for a user event the app fails (PoCL aborted the app when the shim
    timed it on its twin queue) and a kernel on a sub-device released before exit (the exit
    summary asked PoCL about the released device: a segfault). Output and status as
    natively; route mode's virtual device has no sub-devices (docs/cluster.md). Each in a
    process of its own: both in one process crash inside PoCL's worker thread in project
    mode about once in ten runs (an open issue, not yet understood)."""
    app = c_app("app_subdevice_userfail")
    env = dict(os.environ, POCL_DEVICES="pthread")
    native = subprocess.run([app, step], env=env, capture_output=True, text=True, timeout=60)
    assert native.returncode == 0 and native.stdout, native.stdout
    p = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", mode, "--", app, step],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    want = native.stdout
    if mode == "route" and step == "subdevice":
        want = "subdevice: not supported\n"
    assert p.stdout == want


def test_a_c_app_started_with_stdout_closed_runs_as_natively_in_project_mode(c_app):
    """Started with ``>&-``, the next file the app or its driver opens takes descriptor 1;
    an interpreter started then made it sys.stdout (a directory: "Fatal Python error:
    init_sys_streams", exit 1, in 2 of 5 runs). Such an app gets no interpreter: exit 0
    each time, one line saying its launches are not projected."""
    app = c_app("app_basic")
    env = dict(os.environ, POCL_DEVICES="pthread")
    for _ in range(3):
        p = subprocess.run(
            [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--", app, "5", "2"],
            env=env, stderr=subprocess.PIPE, text=True, timeout=120,
            preexec_fn=lambda: os.close(1),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr[-2000:]
        assert "Fatal Python error" not in p.stderr
        assert "started with stdin, stdout or stderr closed" in p.stderr
