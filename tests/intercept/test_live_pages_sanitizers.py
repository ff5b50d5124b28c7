"""The emulator's live pages (``native/live_pages/live_pages.c``) under AddressSanitizer and
UndefinedBehaviorSanitizer.

Why: its thread answers page faults with chunks read from another process or a file, at
offsets computed from fault addresses; a wrong bound there corrupts an emulation or kills
the emulator. The library is rebuilt with ``-fsanitize=address,undefined``
(``native/build_live_pages.py``) and ``test_live_pages.py`` runs against it in a process
that preloads the sanitizer runtime: it must pass, with no report.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.conftest import SANITIZER_FLAGS as FLAGS
from tests.conftest import run_tests_sanitized

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "native"))
import build_live_pages  # noqa: E402  (native/ is a folder of build scripts, not a package)

# Points the wrapper at the sanitized build before any region is opened, then runs the tests.
RUNNER = """
import sys
from clproj.intercept import live_pages
live_pages.LIBRARY = {so!r}
import pytest
rc = pytest.main(["-q", "-s", "-p", "no:cacheprovider", {tests!r}])
assert {so!r} in open('/proc/self/maps').read()  # the sanitized build ran
sys.exit(rc)
"""


def test_live_pages_are_clean_under_sanitizers(tmp_path, sanitizer_env) -> None:
    so = build_live_pages.build(str(tmp_path / "libclproj_live_pages.so"), extra=FLAGS)
    tests = str(REPO / "tests" / "intercept" / "test_live_pages.py")
    env = dict(os.environ, PYTHONPATH=str(REPO), **sanitizer_env)
    run_tests_sanitized(RUNNER.format(so=so, tests=tests), tmp_path, env)
