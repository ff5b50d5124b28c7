"""Live records (intercept.live_view): project mode emulates a launch from the app's own
buffers while the app copies them, and projects it exactly as from its record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from clproj.intercept.live_pages import unavailable
from clproj.intercept.record import load
from tests.conftest import clproj_project, own_cache_env

APP = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gather_app.py")]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# what differs run to run: times, and whether the emulation ended before the app did
TIMINGS = ("wall_s", "elapsed_s", "since_launch_s", "record_found_s", "measured_time_ns", "live")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One cache (one device profile) for every run of this module."""
    folder = tmp_path_factory.mktemp("live-view")
    why = unavailable(str(folder))
    if why:  # clproj run turns live records off here, as it should
        pytest.skip(f"live views cannot work on this machine: {why}")
    return folder


def project(shared, tmp_path, record: bool = True, **env: str) -> tuple[dict, str]:
    """The gather app under project mode, projected anew (no cached projection): its
    projections by kernel, and its record folder (``record``: ``--record``, else the
    run's own, gone after it)."""
    shutil.rmtree(shared / "cache" / "projections", ignore_errors=True)
    rec = tmp_path / "rec"
    out = subprocess.run(
        [*clproj_project(*(("--record", str(rec)) if record else ())), "--", *APP],
        capture_output=True,
        text=True,
        timeout=300,
        env=own_cache_env(shared, POCL_DEVICES="pthread", **env),
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    docs = json.loads(out.stdout[out.stdout.index("{") :])["projections"]
    by_kernel = {d["kernel"]: d for d in docs}
    assert sorted(by_kernel) == ["gather", "gather_twice"], docs
    return by_kernel, str(rec)


def untimed(x):
    """``x`` without the fields that are times of this run."""
    if isinstance(x, dict):
        return {
            k: untimed(v)
            for k, v in x.items()
            if k not in TIMINGS and k not in ("live_view", "dropped_snapshots")
        }
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


@pytest.fixture(scope="module")
def from_record(shared, tmp_path_factory):
    """The launch projected from its record (the live view off)."""
    docs, _ = project(shared, tmp_path_factory.mktemp("off"), CLPROJ_SNAPSHOT_VIEW="off")
    assert not any("live_view" in d for d in docs.values())
    return docs


def test_a_live_record_projects_the_launch_as_its_record_does(shared, tmp_path, from_record):
    docs, rec = project(shared, tmp_path)
    # the second kernel's buffers are named by the first launch's blobs, written by then
    assert all(d.get("live_view") is True for d in docs.values()), docs
    # every count of the emulation (the indices decide which table lines the group reads)
    assert untimed(docs) == untimed(from_record)
    # the app removed its live files when it exited; the record proper stays, whole
    # (--record: every copy ends, CLPROJ_SNAPSHOT_VIEW=release or not)
    records = os.listdir(os.path.join(rec, "records"))
    finals = [load(os.path.join(rec, "records", n)) for n in records if n.endswith(".clrec")]
    assert len(finals) == 2 and not [n for n in records if n.endswith(".live")]
    assert not os.path.exists(os.path.join(rec, "live"))
    assert not any(a.dropped for r in finals for a in r.args)
    assert not any("dropped_snapshots" in d for d in docs.values())


def test_once_projected_the_app_stops_copying_the_snapshots_nobody_reads(
    shared, tmp_path, from_record
):
    """Without --record the records are the run's own: once clproj run has projected a
    launch from its live record, the app stops its copies (intercept.live_view.release).
    ``CLPROJ_FAULT=copy-wait`` starts the copies only at the release, so they are dropped
    whatever the machine's speed; the app's results (checked by the app: its exit status)
    and the projections are those of the record."""
    docs, _ = project(shared, tmp_path, record=False, CLPROJ_FAULT="copy-wait")
    assert all(d.get("live_view") is True for d in docs.values()), docs
    # gather's index and table buffers; gather_twice's too (their first snapshots were
    # dropped, so nothing names them), and the output gather wrote
    assert docs["gather"]["dropped_snapshots"] == [0, 1]
    assert docs["gather_twice"]["dropped_snapshots"] == [0, 1, 2]
    assert untimed(docs) == untimed(from_record)


def test_where_the_live_view_fails_the_launch_is_projected_from_its_record(
    shared, tmp_path, from_record
):
    docs, _ = project(shared, tmp_path, CLPROJ_FAULT="live-pages")
    assert not any("live_view" in d for d in docs.values())
    assert untimed(docs) == untimed(from_record)
