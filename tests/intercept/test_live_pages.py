"""Live pages (intercept.live_pages, native/live_pages): a region of the emulator filled
from another process's buffer while that process says it holds still, then from the copy;
and the live section of a ``.live`` record, checked as untrusted input."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from clproj.errors import ClprojError
from clproj.intercept import live_view
from clproj.intercept.live_pages import LiveRegion
from clproj.intercept.live_view import ABANDONED, DONE, check_live
from clproj.intercept.record import ArgRecord
from clproj.untrusted import BadField

SIZE = 8 << 20  # 8 MiB: 128 chunks of the library's 64 KiB
HOLDER = """
import numpy as np, sys
a = np.arange({n}, dtype=np.int64)
print(a.ctypes.data, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder():
    """A process holding ``np.arange`` int64s at an address it prints (the app's buffer)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(n=SIZE // 8)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    address = int(proc.stdout.readline())
    yield proc, address
    proc.kill()
    proc.wait()


def files(tmp_path, copy_value: int) -> tuple[str, str]:
    """A state file saying ``copying`` and a finished copy whose int64s are all ``copy_value``."""
    state = tmp_path / "r.state"
    state.write_bytes(b"\0" * 4096)
    copy = tmp_path / "r.copy"
    np.full(SIZE // 8, copy_value, dtype=np.int64).tofile(copy)
    return str(copy), str(state)


def set_state(path: str, value: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, struct.pack("<I", value), 0)
    finally:
        os.close(fd)


def region_or_skip(*args, **kw) -> LiveRegion:
    try:
        return LiveRegion(*args, **kw)
    except ClprojError as exc:
        if "userfaultfd" in exc.cause:
            pytest.skip(f"this machine refuses userfaultfd: {exc.cause}")
        raise


def test_pages_come_from_the_app_while_it_copies_then_from_the_copy(holder, tmp_path):
    proc, address = holder
    copy, state = files(tmp_path, 7)
    r = region_or_skip(proc.pid, address, SIZE, copy, state)
    try:
        ints = np.frombuffer(r.view, dtype=np.int64)
        picks = [0, 1, 12345, SIZE // 8 - 1]
        assert [int(ints[i]) for i in picks] == picks  # the app's values, not the copy's
        assert r.reads() == (3, 0)  # one 64 KiB chunk per touched place (two share one)
        set_state(state, DONE)
        assert int(ints[SIZE // 16]) == 7  # a page touched after the copy is whole: the copy
        assert int(ints[5]) == 5  # a page read before stays as it was read
        assert r.reads() == (3, 1) and not r.failed
    finally:
        r.close()


def test_an_app_gone_before_its_copy_is_whole_fails_the_region(holder, tmp_path):
    proc, address = holder
    copy, state = files(tmp_path, 7)
    r = region_or_skip(proc.pid, address, SIZE, copy, state, wait_s=5.0)
    try:
        proc.kill()
        proc.wait()
        started = time.monotonic()
        assert int(np.frombuffer(r.view, dtype=np.int64)[100]) == 0  # zeros, never the copy's
        assert r.failed and time.monotonic() - started < 4.0  # without waiting for wait_s
    finally:
        r.close()


def test_an_abandoned_copy_fails_the_region(holder, tmp_path):
    proc, address = holder
    copy, state = files(tmp_path, 7)
    set_state(state, ABANDONED)
    r = region_or_skip(proc.pid, address, SIZE, copy, state)
    try:
        assert int(np.frombuffer(r.view, dtype=np.int64)[9]) == 0 and r.failed
    finally:
        r.close()


def test_a_missing_copy_is_one_clear_error(holder, tmp_path):
    proc, address = holder
    _, state = files(tmp_path, 7)
    with pytest.raises(ClprojError, match="opening the copy"):
        LiveRegion(proc.pid, address, SIZE, str(tmp_path / "nothing"), state)


ARGS = {
    0: ArgRecord(0, "buffer", size=SIZE, flags=1, blob=None),
    1: ArgRecord(1, "buffer", size=SIZE, flags=1, blob="ab" * 32),
    2: ArgRecord(2, "scalar", data=b"\0\0\0\0"),
}


def test_the_live_section_names_only_files_in_its_store_and_blobless_buffers(tmp_path):
    good = {"pid": 4242, "state": "k-1.state", "buffers": [{"index": 0, "address": 4096, "copy": "k-1-0.copy"}]}  # fmt: skip
    live = check_live(good, str(tmp_path), ARGS)
    assert live[0].copy == os.path.join(str(tmp_path), "live", "k-1-0.copy")
    assert live[0].state == os.path.join(str(tmp_path), "live", "k-1.state")
    bad = [
        ({"state": "../../etc/passwd"}, "live.state"),
        ({"state": ".hidden"}, "live.state"),
        ({"pid": -1}, "live.pid"),
        ({"buffers": [{"index": 1, "address": 4096, "copy": "c"}]}, "live.buffers[0].index"),
        ({"buffers": [{"index": 2, "address": 4096, "copy": "c"}]}, "live.buffers[0].index"),
        ({"buffers": [{"index": 0, "address": 0, "copy": "c"}]}, "live.buffers[0].address"),
        ({"buffers": [{"index": 0, "address": 4096, "copy": "/tmp/x"}]}, "live.buffers[0].copy"),
    ]
    for change, field in bad:
        with pytest.raises(BadField) as exc:
            check_live(dict(good, **change), str(tmp_path), ARGS)
        assert exc.value.field == field


def test_with_an_exit_status_a_page_not_to_be_had_ends_the_process(tmp_path):
    """The emulator's regions: Oclgrind may end the process itself once its statistics
    are written, so a failed page must end it first, with the status and a reason."""
    copy, state = files(tmp_path, 7)
    code = (
        "import ctypes; from clproj.intercept.live_pages import LiveRegion, NO_SUCH_PROCESS\n"
        f"r = LiveRegion(NO_SUCH_PROCESS, 4096, {SIZE}, {copy!r}, {state!r}, exit_status=3)\n"
        "print(r.view[0])\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if p.returncode != 3 and "userfaultfd" in p.stderr:
        pytest.skip(f"this machine refuses userfaultfd: {p.stderr.strip()[-200:]}")
    assert p.returncode == 3 and not p.stdout, (p.returncode, p.stdout, p.stderr[-2000:])
    assert "clproj: live pages: a page of the app's buffer could not be had" in p.stderr


def test_the_state_values_are_the_c_librarys():
    header = (
        Path(__file__).resolve().parents[2] / "native" / "live_pages" / "live_pages.h"
    ).read_text()
    found = {m[0]: int(m[1]) for m in re.findall(r"#define (LIVE_[A-Z]+) (\d+)u", header)}
    assert found == {
        "LIVE_COPYING": live_view.COPYING,
        "LIVE_DONE": live_view.DONE,
        "LIVE_ABANDONED": live_view.ABANDONED,
    }
