"""The interception shim under AddressSanitizer and UndefinedBehaviorSanitizer.

Why: the shim runs inside applications we did not write; a memory error in it corrupts
their results or crashes them, far from its cause. Here the shim is rebuilt from the same
sources and flags with ``-fsanitize=address,undefined`` (``native/build_shim.py``
``builder``), preloaded after the sanitizer runtime into each C test app (valid and
invalid OpenCL calls, events and callbacks, threads, rectangles) and a pyopencl script, in
observe, project and route modes (project mode records launches and emulates them; route
mode serves them through a local broker and node): no sanitizer report, and the app's
output and exit status are its own.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from clproj.intercept.environment import read_summary, shim_environment
from tests.conftest import SANITIZER_FLAGS as FLAGS
from tests.conftest import build_key, kept_build, sanitizer_reports

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "native"))
import build_shim  # noqa: E402  (native/ is a folder of build scripts, not a package)

SHIM_FILENAME = "_shim" + sysconfig.get_config_var("EXT_SUFFIX")  # what cffi names it
APPS = {  # C test app -> arguments
    "app_basic": ["20", "3"],
    "app_events": [],
    "app_invalid": [],
    "app_many": ["2000"],
    "app_order": [],
    "app_rect": [],
    # forks while project mode's Python start may still run; a routed app's child runs natively
    "app_prestart": ["fork"],
}
PY_APP = """
import numpy as np, pyopencl as cl
ctx = cl.create_some_context(False); q = cl.CommandQueue(ctx)
src = "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }"
k = cl.Kernel(cl.Program(ctx, src).build(), "twice")
a = np.arange(1024, dtype=np.float32)
b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
for _ in range(5):
    k(q, (1024,), (64,), b)
cl.enqueue_copy(q, a, b)
print(a[:4])
"""


@pytest.fixture(scope="module")
def sanitized_shim() -> str:
    """The shim built with the sanitizers: kept from an earlier run when the same C code
    (cffi's generated module, the shim's sources and headers), flags, compiler and Python
    built it (tests/conftest.py ``kept_build``), else now."""
    ffi = build_shim.builder(FLAGS)
    with tempfile.TemporaryDirectory() as tmp:
        generated = os.path.join(tmp, "_shim.c")
        ffi.emit_c_code(generated)
        with open(generated) as fh:
            code = fh.read()
    native = os.path.join(REPO, "native")
    own = [*glob.glob(os.path.join(native, "shim", "*")), *glob.glob(os.path.join(native, "*.h"))]
    command = ["gcc", *FLAGS, sys.version, code, repr(build_shim.source_options(FLAGS))]
    key = build_key(command, own)

    def build(folder: str) -> str:
        return str(build_shim.builder(FLAGS).compile(tmpdir=folder))

    return kept_build("asan-shim", key, SHIM_FILENAME, build)


@pytest.fixture(scope="module")
def apps(tmp_path_factory) -> dict[str, list[str]]:
    out = tmp_path_factory.mktemp("capps")
    cmds = {}
    for name, args in APPS.items():
        exe = str(out / name)
        src = os.path.join(REPO, "tests", "c_apps", name + ".c")
        subprocess.run(["gcc", "-O1", "-w", "-o", exe, src, "-lOpenCL", "-lpthread"], check=True)
        cmds[name] = [exe, *args]
    script = out / "py_app.py"
    script.write_text(PY_APP)
    cmds["pyopencl"] = [sys.executable, str(script)]
    return cmds


def own_lines(text: str) -> list[str]:
    # Whether a callback ran inside the API call that completed its event is timing; how
    # route mode's virtual platform describes an image is its own (test_route_coverage).
    return sorted(ln for ln in text.splitlines() if not ln.startswith(("ASYNC ", "IMG ")))


CASES = [(app, mode) for app in [*APPS, "pyopencl"] for mode in ("observe", "project", "route")]


@pytest.mark.parametrize(("app", "mode"), CASES)
def test_shim_is_clean_under_sanitizers(
    app, mode, apps, sanitized_shim, sanitizer_env, tmp_path
) -> None:
    from clproj.native import shim_library

    cmd = apps[app]
    base = dict(os.environ, POCL_DEVICES="pthread")
    plain = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=300)
    summary = str(tmp_path / "summary.tsv")
    record = str(tmp_path / "rec") if mode == "project" else None
    env = shim_environment(mode=mode, summary_file=summary, record=record)
    env["POCL_DEVICES"] = "pthread"
    # The sanitizer runtime must be the first library of the process.
    preload = env["LD_PRELOAD"].replace(
        shim_library(), f"{sanitizer_env['LD_PRELOAD']}:{sanitized_shim}"
    )
    env.update(sanitizer_env, LD_PRELOAD=preload)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    reports = sanitizer_reports(p.stderr)
    assert not reports, p.stderr[-4000:]
    assert p.returncode == plain.returncode, p.stderr[-2000:]
    assert own_lines(p.stdout) == own_lines(plain.stdout)
    assert read_summary(summary), "the sanitized shim did not intercept the app"
