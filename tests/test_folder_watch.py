"""clproj.folder_watch: a rename or a write into the folder wakes the caller, nothing
else does, and a folder that cannot be watched leaves the caller to its poll."""

from __future__ import annotations

import os
import threading

from clproj.folder_watch import FolderWatch


def test_a_file_renamed_into_the_folder_wakes_the_watcher(tmp_path):
    """As the record writer publishes a record: written under a temporary name elsewhere,
    renamed into the watched folder."""
    woke = threading.Event()
    watched = tmp_path / "records"
    watched.mkdir()
    with FolderWatch(str(watched), woke.set) as watch:
        assert watch.active
        (tmp_path / "other.txt").write_text("not in the folder")
        assert not woke.wait(0.3)  # the other folder's write does not count
        (tmp_path / "r.tmp").write_bytes(b"record")
        os.replace(tmp_path / "r.tmp", watched / "k-1.clrec")
        assert woke.wait(30)
        woke.clear()
        (watched / "k-2.clrec").write_bytes(b"written in place")
        assert woke.wait(30)


def _watch_threads() -> int:
    return sum(t.name == "clproj-folder-watch" for t in threading.enumerate())


def test_close_stops_the_thread_and_is_idempotent(tmp_path):
    calls = []
    before = _watch_threads()
    watch = FolderWatch(str(tmp_path), lambda: calls.append(1))
    assert _watch_threads() == before + 1
    watch.close()
    watch.close()
    assert _watch_threads() == before and not watch.active
    (tmp_path / "late").write_bytes(b"x")
    assert calls == []


def test_a_folder_that_cannot_be_watched_is_inactive(tmp_path):
    watch = FolderWatch(str(tmp_path / "missing"), lambda: None)
    assert not watch.active
    watch.close()  # nothing to close
