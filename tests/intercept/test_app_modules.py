"""clproj stays out of the app's imports, and the app out of clproj's.

An app's folder may hold modules with the names of clproj's parts (``devices.py``,
``runtime/``, ``intercept.py``, ``miniemu.py``, ``benchmarks.py``, even ``clproj.py``).
Each here raises on import, so a run passes only when neither the shim's code inside the
app nor the embedded broker and node import any of them. Before one namespace: route mode
failed ("broker did not answer") and project mode projected nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOSTILE = ("devices", "intercept", "miniemu", "benchmarks", "clproj")

APP = """\
import os, sys
import numpy as np
import pyopencl as cl
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
a = np.arange(4096, dtype=np.float32)
mf = cl.mem_flags
src = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
out = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
prg = cl.Program(ctx, "__kernel void twice(__global const float *a, __global float *o)"
                 " { int i = get_global_id(0); o[i] = 2 * a[i]; }").build()
prg.twice(q, a.shape, (64,), src, out)
r = np.empty_like(a)
cl.enqueue_copy(q, r, out)
q.finish()
assert (r == 2 * a).all()
print("APP OK", "PYTHONPATH=" + repr(os.environ.get("PYTHONPATH")))
sys.exit(3)
"""


def _hostile_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    folder.mkdir()
    for name in HOSTILE:
        (folder / f"{name}.py").write_text(
            f"raise SystemExit('the app module {name} was imported')\n"
        )
    (folder / "runtime").mkdir()
    (folder / "runtime" / "__init__.py").write_text("raise SystemExit('app runtime imported')\n")
    (folder / "app.py").write_text(APP)
    return folder


def _run(folder: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        # the console script, as a user runs it (``python -m`` would put the app's folder,
        # with its clproj.py, on clproj's own path)
        [
            str(Path(sys.executable).with_name("clproj")),
            "run",
            *args,
            "--",
            sys.executable,
            "app.py",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**(env or os.environ), "COLUMNS": "250"},  # table rows on one line each
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["project", "route"])
def test_modules_named_like_clprojs_beside_the_app(tmp_path: Path, mode: str) -> None:
    p = _run(_hostile_folder(tmp_path), "--mode", mode)
    assert p.returncode == 3, p.stderr
    assert "APP OK" in p.stdout, p.stderr
    assert "was imported" not in p.stderr + p.stdout
    assert "Traceback" not in p.stderr, p.stderr
    if mode == "project":
        assert "twice[4096]" in p.stderr, p.stderr  # a projection, not only the observed table
    else:
        assert re.search(r"twice .* local/\d", p.stderr), p.stderr  # ran on a cluster device


def test_the_apps_pythonpath_is_its_own(tmp_path: Path) -> None:
    """clproj hands the app no PYTHONPATH (its checkout and site-packages would come before
    the app's own modules, and reach its child processes: another Python's pip)."""
    folder = _hostile_folder(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = _run(folder, "--mode", "observe", env=env)
    assert p.returncode == 3, p.stderr
    assert "PYTHONPATH=None" in p.stdout
    p = _run(folder, "--mode", "observe", env={**env, "PYTHONPATH": "/nonexistent/app/lib"})
    assert "PYTHONPATH='/nonexistent/app/lib'" in p.stdout


def test_route_mode_runs_natively_where_its_python_cannot_start(tmp_path: Path) -> None:
    """The shim's Python part fails to start (here: clproj's path names a broken copy):
    the app runs on its own devices, says so in one line, and keeps its exit status,
    instead of getting a platform whose every call fails."""
    from clproj.intercept.environment import shim_environment

    broken = tmp_path / "broken"
    (broken / "clproj").mkdir(parents=True)
    (broken / "clproj" / "__init__.py").write_text("raise ImportError('a broken clproj')\n")
    env = shim_environment(mode="route")
    env["CLPROJ_PYTHON_PATH"] = str(broken)
    folder = _hostile_folder(tmp_path)
    p = subprocess.run(
        [sys.executable, "app.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 3, p.stderr
    assert "APP OK" in p.stdout
    assert "route mode could not start its Python part" in p.stderr


OWN_CLPROJ_APP = """\
import sys
import clproj  # the app's own module, imported before its first OpenCL call
import numpy as np
import pyopencl as cl
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
a = np.arange(1024, dtype=np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
prg = cl.Program(ctx, "__kernel void inc(__global float *a) { a[get_global_id(0)] += 1; }")
prg.build().inc(q, a.shape, None, buf)
cl.enqueue_copy(q, a, buf)
q.finish()
import clproj as again  # still the app's, after clproj's start-up
print("APP OK", clproj.WHO, again.WHO, float(a.sum()))
sys.exit(3)
"""


@pytest.mark.parametrize("mode", ["project", "route"])
def test_an_app_that_imported_its_own_clproj_runs_as_natively(tmp_path: Path, mode: str) -> None:
    """One interpreter has one ``clproj``: an app that imported its own keeps it, clproj
    stays out of that app (its calls pass through) and says so in one line, no
    traceback."""
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "clproj.py").write_text("WHO = 'the-apps-own'\n")
    (folder / "app.py").write_text(OWN_CLPROJ_APP)
    p = _run(folder, "--mode", mode)
    assert p.returncode == 3, p.stderr
    assert "APP OK the-apps-own the-apps-own 524800.0" in p.stdout, p.stderr
    assert "Traceback" not in p.stderr and "CFFI" not in p.stderr, p.stderr
    assert "this app's own module clproj" in p.stderr and "hides clproj's package" in p.stderr
