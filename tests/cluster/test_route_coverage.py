"""Route mode's wider OpenCL coverage: rect transfers, migration hints, event callbacks,
the image probe. Unmodified C apps (``tests/c_apps/app_rect.c``, ``app_events.c``) run
once on PoCL itself and once under ``clproj run --mode route`` (local broker and node);
their output, including the error code of every invalid call, must be the same, so the
virtual platform answers invalid calls exactly as the real implementation does.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clproj.runtime.route.transfers import copy_overlap, rect_rows, runs

REPO = Path(__file__).resolve().parents[2]

needs_shim = pytest.mark.skipif(
    not list(REPO.glob("intercept/_shim*.so")), reason="shim not built (make build)"
)


def build(tmp_path: Path, name: str) -> Path:
    exe = tmp_path / name
    src = REPO / "tests" / "c_apps" / f"{name}.c"
    subprocess.run(
        ["gcc", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src), "-lOpenCL", "-lpthread"],
        check=True,
    )  # fmt: skip
    return exe


def env_for(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("POCL_DEVICES", "pthread basic")
    env.pop("LD_PRELOAD", None)
    env["PYTHONPATH"] = str(REPO)
    return env


def plain_and_route(tmp_path: Path, exe: Path) -> tuple[list[str], list[str], str]:
    """The app's stdout lines without the shim and under route mode (summary cut off)."""
    env = env_for(tmp_path)
    plain = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    routed = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--json", "--", str(exe)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert routed.returncode == 0, routed.stdout + routed.stderr
    json.loads(routed.stdout)  # --json: the summary alone on stdout, well formed
    # the app's stdout went to stderr, beside clproj's own lines
    out = [ln for ln in routed.stderr.splitlines() if not ln.startswith("clproj")]
    return plain.stdout.splitlines(), out, routed.stderr


@needs_shim
def test_rect_transfers_and_migration_match_pocl(tmp_path):
    """Read/Write/CopyBufferRect (2D and 3D, explicit and 0 pitches, blocking and
    non-blocking with events and wait lists, between kernels, a one-column read) give the
    same bytes as PoCL; 17 invalid rect calls (and one ending exactly at the buffer end)
    and 6 invalid migrations return PoCL's codes; a migration's event completes in order and says CL_COMMAND_MIGRATE_MEM_OBJECTS."""
    plain, routed, err = plain_and_route(tmp_path, build(tmp_path, "app_rect"))
    assert plain[-1] == "DONE" and "rect.out_of_bounds -30" in plain
    assert routed == plain, err
    assert "not supported" not in err, err


@needs_shim
def test_event_callbacks_and_image_probe(tmp_path):
    """Callbacks run exactly once with their event, status and user data, also for an
    event the app released and never waits on (the main thread blocks on a condition
    variable the callback signals), on a read whose data is in place when it runs, and on
    an event that had already completed; never inside the app's own call; the app exits
    cleanly with one still pending. The virtual device has no images: IMAGE_SUPPORT is
    CL_FALSE and clGetSupportedImageFormats answers 0 formats, consistently."""
    plain, routed, err = plain_and_route(tmp_path, build(tmp_path, "app_events"))

    def common(lines: list[str]) -> list[str]:
        return [ln for ln in lines if not ln.startswith(("IMG ", "ASYNC "))]

    assert plain[-1] == "DONE" and "forget ran 1" in plain
    assert common(routed) == common(plain), err
    assert "IMG support 0 formats 0 0" in routed
    assert "ASYNC inside 0 0 0 0 0 0" in routed  # fired by the callback thread
    assert "not supported" not in err, err


@needs_shim
def test_invalid_calls_return_pocls_codes(tmp_path):
    """Every invalid call of ``tests/c_apps/app_invalid.c`` (NULL and released handles, bad
    flags, sizes, indices, properties, wait lists) returns under route mode the code PoCL
    returns, and every object-returning one the same NULL and error: among them an unknown
    queue property bit and name (CL_INVALID_VALUE), an NDRange with no global size or a zero
    in it (it trivially succeeds, OpenCL 2.1 on) and an SVM argument at an index the kernel
    does not have (CL_INVALID_ARG_INDEX before the unsupported SVM)."""
    plain, routed, err = plain_and_route(tmp_path, build(tmp_path, "app_invalid"))
    assert "Enqueue.null_global 0" in plain and "SetKernelArgSVMPointer.bad_index -49" in plain
    assert routed == plain, err
    # an info parameter no OpenCL header defines is the app's error: no note about it
    assert "info parameter" not in err, err


BARE_APP = """
import numpy as np, pyopencl as cl
ctx = cl.create_some_context(False); q = cl.CommandQueue(ctx)
k = cl.Kernel(cl.Program(ctx, "__kernel void t(__global float* a) { a[get_global_id(0)] *= 2.0f; }").build(), "t")
a = np.arange(1024, dtype=np.float32)
b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
for _ in range(5):
    k(q, (1024,), (64,), b)
cl.enqueue_copy(q, a, b)
print(a[1])
"""


@needs_shim
def test_route_mode_preloaded_without_clproj_run_exits_cleanly(tmp_path):
    """The shim preloaded by hand in route mode (no ``clproj run``, so no pinned device
    list): the app's projections use the cluster's devices, never a query of the local
    OpenCL devices from clproj's projection thread (that reached the virtual platform,
    failed, and, still inside pyopencl when the interpreter finalised, aborted the app at
    exit in 5 of 8 runs of this script). The records it makes for its projections go to a
    temporary folder removed when the app exits."""
    from clproj.intercept.environment import shim_environment

    script = tmp_path / "app.py"
    script.write_text(BARE_APP)
    env = shim_environment(mode="route", summary_file=str(tmp_path / "summary.tsv"))
    env["POCL_DEVICES"] = "pthread"
    env.pop("CLPROJ_DEVICES", None)
    scratch = tmp_path / "tmp"  # the app's temporary folder: its records must not outlive it
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    for _ in range(3):
        p = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.split() == ["32.0"]
        assert "failed" not in p.stderr, p.stderr
        assert [n.name for n in scratch.iterdir() if n.name.startswith("clproj-records-")] == []


PY_APP = textwrap.dedent(
    """
    import threading
    import numpy as np
    import pyopencl as cl

    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    a = np.arange(64 * 32, dtype=np.float32).reshape(32, 64)
    mf = cl.mem_flags
    buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
    out = np.zeros((10, 20), np.float32)
    ev = cl.enqueue_copy(q, out, buf, buffer_origin=(12, 5), host_origin=(0, 0),
                         region=(80, 10), buffer_pitches=(256,), host_pitches=(80,),
                         is_blocking=False)
    done, seen = threading.Event(), []
    ev.set_callback(cl.command_execution_status.COMPLETE, lambda s: (seen.append(s), done.set()))
    print("callback", done.wait(10), seen)
    print("read", np.array_equal(out, a[5:15, 3:23]))
    cl.enqueue_copy(q, buf, np.full((4, 8), 7, np.float32), buffer_origin=(0, 0),
                    host_origin=(0, 0), region=(32, 4), buffer_pitches=(256,),
                    host_pitches=(32,))
    ref = a.copy()
    ref[0:4, 0:8] = 7
    b2 = cl.Buffer(ctx, mf.READ_WRITE, a.nbytes)
    cl.enqueue_copy(q, b2, buf, src_origin=(0, 0), dst_origin=(0, 0), region=(256, 32),
                    src_pitches=(256,), dst_pitches=(256,)).wait()
    cl.enqueue_migrate_mem_objects(q, [buf, b2]).wait()
    full = np.empty_like(a)
    cl.enqueue_copy(q, full, b2)
    print("write+copy", np.array_equal(full, ref))
    """
)


@needs_shim
def test_pyopencl_rect_copies_and_callback(tmp_path):
    """pyopencl's own paths: enqueue_copy with origins/region/pitches (rect read, write,
    buffer-to-buffer), Event.set_callback (pyopencl's trampoline, on our callback
    thread), enqueue_migrate_mem_objects: same output as on PoCL."""
    (tmp_path / "app.py").write_text(PY_APP)
    env = env_for(tmp_path)
    env["PYOPENCL_CTX"] = "0"
    env["PYOPENCL_NO_CACHE"] = "1"
    cmd = [sys.executable, str(tmp_path / "app.py")]
    plain = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    routed = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--", *cmd],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert routed.returncode == 0, routed.stderr
    assert plain.stdout == "callback True [0]\nread True\nwrite+copy True\n", plain.stdout
    assert routed.stdout.startswith(plain.stdout), routed.stdout + routed.stderr


def test_rect_geometry_helpers():
    """rect_rows/runs cover exactly the rect's bytes (checked byte by byte against the
    OpenCL definition); copy_overlap flags every same-buffer copy whose bytes overlap."""
    rng = random.Random(7)
    for _ in range(300):
        region = [rng.randint(1, 6), rng.randint(1, 4), rng.randint(1, 3)]
        row = region[0] + rng.choice([0, 0, 3])
        sl = region[1] * row + rng.choice([0, row, 2 * row])
        org = [rng.randint(0, 5), rng.randint(0, 3), rng.randint(0, 2)]
        expect = [
            org[0] + x + (org[1] + y) * row + (org[2] + z) * sl
            for z, y, x in itertools.product(*(range(r) for r in reversed(region)))
        ]
        rows = rect_rows(org, region, row, sl)
        got = [o + x for o in rows for x in range(region[0])]
        assert got == expect
        packed = list(range(0, len(rows) * region[0], region[0]))
        merged = [a + i for a, _, n in runs(rows, packed, region[0]) for i in range(n)]
        assert merged == expect
        if row == region[0] and sl == region[1] * row:
            assert len(runs(rows, packed, region[0])) == 1
        dst = [rng.randint(0, 5), rng.randint(0, 3), rng.randint(0, 2)]
        drows = rect_rows(dst, region, row, sl)
        dbytes = {o + x for o in drows for x in range(region[0])}
        if dbytes & set(expect):
            assert copy_overlap(org, dst, region, row, sl), (org, dst, region, row, sl)


@needs_shim
def test_a_kernels_printf_reaches_the_apps_stdout(tmp_path):
    """The embedded node's stdout is the app's: a kernel's printf lines appear there, in
    order between the app's own flushed lines, as on PoCL itself."""
    exe = build(tmp_path, "app_printf")
    plain, routed, err = plain_and_route(tmp_path, exe)
    assert plain == ["before", "kernel says 40", "kernel says 41", "after"]
    assert routed == plain, err[-2000:]


@needs_shim
def test_contexts_host_flags_and_destructors_answer_as_pocl(tmp_path):
    """``tests/c_apps/app_contexts.c`` under route mode prints what it prints on PoCL: an
    enqueue naming another context's kernel, buffer or event is CL_INVALID_CONTEXT and
    changes nothing, a context of a type the device is not is CL_DEVICE_NOT_FOUND,
    reqd_work_group_size is checked at the enqueue, CL_MEM_HOST_* flags are checked and
    enforced, a set __local argument counts in CL_KERNEL_LOCAL_MEM_SIZE, destructor
    callbacks run last set first. The virtual device has no partitions: CL_INVALID_VALUE."""
    plain, routed, err = plain_and_route(tmp_path, build(tmp_path, "app_contexts"))
    assert "ctx2.launch -34" in plain and "dtor.order 2 1 3" in plain
    assert [x for x in routed if not x.startswith("SUBDEV")] == [
        x for x in plain if not x.startswith("SUBDEV")
    ], err[-2000:]
    assert "SUBDEV count -30" in routed


@needs_shim
def test_route_records_within_the_record_budget(tmp_path):
    """Route mode records a launch's snapshots under project mode's budget: past
    CLPROJ_RECORD_MAX_BYTES (or the disk's free-space floor) recording stops with one line
    and the app runs on with its own output and status (a full disk failed the app's
    launch with CL_OUT_OF_RESOURCES and exit 1)."""
    exe = build(tmp_path, "app_basic")
    env = env_for(tmp_path)
    plain = subprocess.run(
        [str(exe), "5", "2"], env=env, capture_output=True, text=True, timeout=60
    )
    env["CLPROJ_RECORD_MAX_BYTES"] = "1"
    p = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "route", "--", str(exe), "5", "2"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == plain.returncode == 0, p.stderr[-2000:]
    assert sorted(p.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    assert "recording stopped" in p.stderr, p.stderr[-2000:]
