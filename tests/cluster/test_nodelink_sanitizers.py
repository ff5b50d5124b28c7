"""The node's native same-host link (``native/nodelink/nodelink.c``) under AddressSanitizer
and UndefinedBehaviorSanitizer.

Why: its C thread parses frames from other processes and enqueues OpenCL commands alone;
a memory error there corrupts a node's answers or kills it. The link is rebuilt with
``-fsanitize=address,undefined`` (``native/build_nodelink.py`` ``builder``) and the
fast-launch tests (``test_fast_launch.py``: repeated launches, slot updates, ordering
across the two sockets, bad frames) run against it in a process that preloads the
sanitizer runtime: they must pass, with no report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clproj.runtime.cluster.node import nodelink

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "native"))
import build_nodelink  # noqa: E402  (native/ is a folder of build scripts, not a package)

pytestmark = pytest.mark.skipif(not nodelink.available(), reason="native link not built")

FLAGS = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
    "-g",
)

# Imports the sanitized build under the link's module name before anything imports the
# link, then runs the fast-launch tests and checks they used it.
RUNNER = """
import importlib.util, sys
name = "clproj.runtime.cluster.node._nodelink"
spec = importlib.util.spec_from_file_location(name, {so!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.modules[name] = mod
import pytest
rc = pytest.main(["-q", "-s", "-p", "no:cacheprovider", {tests!r}])
from clproj.runtime.cluster.node import _nodelink
assert _nodelink.__file__ == {so!r}, _nodelink.__file__
sys.exit(rc)
"""


def test_fast_launches_are_clean_under_sanitizers(tmp_path, sanitizer_env) -> None:
    so = str(build_nodelink.builder(FLAGS).compile(tmpdir=str(tmp_path / "build")))
    runner = tmp_path / "runner.py"
    tests = str(REPO / "tests" / "cluster" / "test_fast_launch.py")
    runner.write_text(RUNNER.format(so=so, tests=tests))
    env = dict(os.environ, PYTHONPATH=str(REPO), POCL_DEVICES="pthread", **sanitizer_env)
    p = subprocess.run(
        [sys.executable, str(runner)],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = p.stdout + p.stderr
    reports = [ln for ln in out.splitlines() if "Sanitizer" in ln or "runtime error:" in ln]
    assert p.returncode == 0 and not reports, out[-4000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]
