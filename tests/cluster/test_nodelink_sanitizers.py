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
import sys
from pathlib import Path

import pytest

from clproj.runtime.cluster.node import nodelink
from tests.conftest import SANITIZER_FLAGS as FLAGS
from tests.conftest import run_tests_sanitized

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "native"))
import build_nodelink  # noqa: E402  (native/ is a folder of build scripts, not a package)

pytestmark = pytest.mark.skipif(not nodelink.available(), reason="native link not built")

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
    tests = str(REPO / "tests" / "cluster" / "test_fast_launch.py")
    env = dict(os.environ, PYTHONPATH=str(REPO), POCL_DEVICES="pthread", **sanitizer_env)
    run_tests_sanitized(RUNNER.format(so=so, tests=tests), tmp_path, env)
