"""Ctrl-C and kill reach a route-mode app as they reach it natively.

A pyopencl app launches kernels in a loop; SIGINT goes to the app's process, or to the
whole process group of ``clproj run`` (what a terminal's Ctrl-C does). The app must end
with a KeyboardInterrupt raised in its own code, as it does on PoCL directly, ``clproj
run`` must exit promptly with the app's status, and the embedded broker and node (in a
session of their own, so the group's signal does not reach them) must be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import helpers_of

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not list(REPO.glob("intercept/_shim*.so")), reason="shim not built (make build)"
)

APP = textwrap.dedent(
    """
    import os
    import pyopencl as cl
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, "__kernel void k(__global int *a) { a[get_global_id(0)] += 1; }")
    k = prg.build().k
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * 4096)
    i = 0
    while True:
        k(q, (4096,), None, buf)
        if i % 16 == 0:
            q.finish()
        if i == 50:
            print("RUNNING", os.getpid(), flush=True)
        i += 1
    """
)


LOOP = range(10, 17)  # the lines of APP's loop


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def interrupted(
    cmd: list[str], target: str, sig: int = signal.SIGINT
) -> tuple[int, str, float, list[int]]:
    """Run ``cmd`` in a session of its own, ``sig`` once the app runs: (status, stderr,
    seconds from the signal to the exit, the app's helpers seen before the signal)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("RUNNING"), line
        pid = int(line.split()[1])
        helpers = helpers_of(pid)
        time.sleep(0.3)
        if target == "group":
            os.killpg(proc.pid, sig)
        else:
            os.kill(pid, sig)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err, time.monotonic() - t0, helpers
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def app_frames(err: str, app: str) -> list[str]:
    """The traceback lines naming the app's own file."""
    return [ln.strip() for ln in err.splitlines() if ln.strip().startswith(f'File "{app}"')]


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> tuple[str, int, str]:
    app = str(tmp_path_factory.mktemp("sig") / "loop.py")
    Path(app).write_text(APP)
    rc, err, took, _ = interrupted([sys.executable, app], "app")
    assert rc == -signal.SIGINT and took < 15, (rc, took, err[-2000:])
    return app, rc, err


@pytest.mark.parametrize("target", ["app", "group"])
def test_sigint_reaches_a_routed_python_app_as_natively(native, target):
    app, _, native_err = native
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--"]
    rc, err, took, helpers = interrupted([*cmd, sys.executable, app], target)
    assert rc == -signal.SIGINT, err[-3000:]
    assert took < 15, took
    assert "killed by SIGINT" in err
    assert "internal error" not in err and "CL_OUT_OF_RESOURCES" not in err, err[-3000:]
    # the KeyboardInterrupt is raised in the app's own loop, as natively
    assert native_err.rstrip().endswith("KeyboardInterrupt")
    assert err.count("KeyboardInterrupt") == 1, err[-3000:]
    for text in (err, native_err):
        frames = app_frames(text, app)
        assert len(frames) == 1 and frames[0].endswith("in <module>"), text[-3000:]
        assert int(frames[0].split("line ")[1].split(",")[0]) in LOOP, frames
    assert len(helpers) >= 2  # the embedded broker and node (and emulators) ran, and are gone
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and any(alive(p) for p in helpers):
        time.sleep(0.1)
    assert not [p for p in helpers if alive(p)]


@pytest.mark.parametrize("target", ["app", "group"])
def test_sigterm_ends_a_routed_python_app_as_natively(native, target):
    """Python leaves SIGTERM to the kernel: the app dies of it at once, natively too."""
    app = native[0]
    rc, err, took, _ = interrupted([sys.executable, app], "app", signal.SIGTERM)
    assert rc == -signal.SIGTERM and took < 15, (rc, err[-2000:])
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--"]
    rc, err, took, helpers = interrupted([*cmd, sys.executable, app], target, signal.SIGTERM)
    assert rc == -signal.SIGTERM and took < 15, (rc, took, err[-3000:])
    assert "killed by SIGTERM" in err and "internal error" not in err
    assert len(helpers) >= 2
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and any(alive(p) for p in helpers):
        time.sleep(0.1)
    assert not [p for p in helpers if alive(p)]


C_APP = textwrap.dedent(
    r"""
    #define CL_TARGET_OPENCL_VERSION 120
    #include <CL/cl.h>
    #include <stdio.h>
    #include <unistd.h>
    int main(void) {
        cl_platform_id plat; cl_device_id dev; cl_int err;
        clGetPlatformIDs(1, &plat, NULL);
        clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
        cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
        cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
        const char *src = "__kernel void k(__global int *a) { a[get_global_id(0)] += 1; }";
        cl_program prg = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        clBuildProgram(prg, 1, &dev, "", NULL, NULL);
        cl_kernel k = clCreateKernel(prg, "k", &err);
        cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4 * 4096, NULL, &err);
        clSetKernelArg(k, 0, sizeof buf, &buf);
        size_t g = 4096;
        for (long i = 0;; ++i) {
            if (clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL)) return 3;
            if (i % 16 == 0 && clFinish(q)) return 4;
            if (i == 50) { printf("RUNNING %d\n", (int)getpid()); fflush(stdout); }
        }
    }
    """
)


@pytest.mark.parametrize("target", ["app", "group"])
def test_sigint_kills_a_routed_c_app_as_natively(tmp_path, target):
    exe = tmp_path / "loop"
    (tmp_path / "loop.c").write_text(C_APP)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(tmp_path / "loop.c"), "-lOpenCL"], check=True)
    rc, err, took, _ = interrupted([str(exe)], "app")
    assert rc == -signal.SIGINT and took < 15, (rc, err[-2000:])
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--"]
    rc, err, took, helpers = interrupted([*cmd, str(exe)], target)
    assert rc == -signal.SIGINT and took < 15, (rc, took, err[-3000:])
    assert "killed by SIGINT" in err and "internal error" not in err
    assert len(helpers) >= 2
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and any(alive(p) for p in helpers):
        time.sleep(0.1)
    assert not [p for p in helpers if alive(p)]


LATE_EXEC = textwrap.dedent(
    """
    import atexit
    atexit.register(lambda: exec("x = 1"))  # runs after clproj's exit work: clears the flag
    from clproj.intercept import hooks
    hooks.at_exit(lambda: None)  # clproj's exit work (intercept.hooks._keep_sigint_death)
    {end}
    """
)


@pytest.mark.parametrize(
    ("end", "status"),
    [
        ("raise KeyboardInterrupt", -signal.SIGINT),  # as natively, though the flag was cleared
        ("raise SystemExit(3)", 3),
        ("raise ValueError('x')", 1),
        ("try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    pass", 0),
    ],
)
def test_an_app_ending_in_keyboardinterrupt_dies_of_sigint_whatever_runs_after(
    tmp_path, end, status
):
    """CPython's "unhandled KeyboardInterrupt" flag is cleared by any exec of a string; an
    exit function the app registered before clproj's (it runs after) did so, and the app
    exited 1 (seen once in a loaded run of the test above). Other endings keep their
    status."""
    app = tmp_path / "app.py"
    app.write_text(LATE_EXEC.format(end=end))
    out = subprocess.run(
        [sys.executable, str(app)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.returncode == status, out.stderr[-2000:]
