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
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "native"))
import build_live_pages  # noqa: E402  (native/ is a folder of build scripts, not a package)

FLAGS = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
    "-g",
)

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
    runner = tmp_path / "runner.py"
    tests = str(REPO / "tests" / "intercept" / "test_live_pages.py")
    runner.write_text(RUNNER.format(so=so, tests=tests))
    env = dict(os.environ, PYTHONPATH=str(REPO), **sanitizer_env)
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
