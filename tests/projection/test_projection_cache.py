"""Cached projections and device profiles are files like any other: a bad one is redone.

A cached projection missing a field was a traceback after the app (and its exit status
became 1); one holding NaN was shown as "nan us" and still recommended a device; a cached
device profile that is not UTF-8 was a traceback before the app ran.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from clproj import settings
from tests.conftest import own_cache_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Four kernels, one launch each, then exit status 3: four launch families, so each launch
# is snapshotted and emulated and its projection cached. (Launches of one kernel that
# differ only in a scalar may instead reuse the first one's profile once it exists, and a
# reused projection is never cached: how many were cached then depended on timing.)
FOUR_KERNELS = """
import sys
import numpy as np
import pyopencl as cl

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
src = "".join(
    f"__kernel void k{n}(__global float *a) {{ int i = get_global_id(0); a[i] = a[i] * {n + 2}.0f; }}"
    for n in range(4)
)
prg = cl.Program(ctx, src).build()
a = np.arange(256, dtype=np.float32)
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
for n in range(4):
    getattr(prg, f"k{n}")(q, (256,), (64,), buf)
cl.enqueue_copy(q, a, buf)
q.finish()
print(float(a.sum()))
sys.exit(3)
"""
APP = [sys.executable, "-c", FOUR_KERNELS]


def run_project(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", *flags, "--", *APP],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )


def test_bad_cached_projections_are_projected_again(tmp_path):
    cache = tmp_path / "cache"
    env = own_cache_env(tmp_path)
    first = run_project(env, "--json")
    assert first.returncode == 3, first.stderr[-2000:]
    files = sorted((cache / "projections").glob("*.json"))
    assert len(files) == 4  # one signature per kernel
    damage = [
        lambda d: d.pop("global_size"),
        lambda d: d["projections"][0].update(time_s=float("nan")),
        lambda d: d.update(recommended=7),
    ]
    for path, spoil in zip(files, damage, strict=False):
        doc = json.loads(path.read_text())
        spoil(doc)
        path.write_text(json.dumps(doc))
    files[3].write_bytes(b"\xff\xfe{")  # not UTF-8
    env = own_cache_env(tmp_path)  # the profile the first run measured, if it did, stays
    second = run_project(env)  # the tables: where a missing field was a traceback
    assert second.returncode == 3, second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert second.stderr.count("ignored a bad cached projection") == 4, second.stderr[-3000:]
    assert "nan" not in second.stderr
    third = run_project(env, "--json")  # the redone ones were cached again, whole
    assert third.returncode == 3
    doc = json.loads(third.stdout)
    why = [
        (p["kernel"], p.get("cached"), p.get("emulation", {}).get("method"), p.get("live"))
        for p in doc["projections"]
    ]  # what a run that did not serve them all from the cache did instead
    assert len(doc["projections"]) == 4 and all(p["cached"] for p in doc["projections"]), why
    for p in doc["projections"]:
        assert all(math.isfinite(q["time_s"]) and q["time_s"] > 0 for q in p["projections"])
    assert "ignored a bad cached projection" not in third.stderr


def test_cache_entries_that_are_no_files_or_cannot_be_written_cost_no_projection(tmp_path):
    """A FIFO, a link to /dev/zero and a folder where cached projections were: the run ends
    (a FIFO hung it for ever, /dev/zero grew it to 18 GB), each is ignored with one line
    and projected again; the FIFO and the link are replaced, the folder stays and its
    projection is shown but not kept. A cache that cannot be made at all (``projections``
    is a file) costs the cache, never a projection (every one was an OSError row)."""
    cache = tmp_path / "cache"
    env = own_cache_env(tmp_path)
    first = run_project(env, "--json")
    assert first.returncode == 3, first.stderr[-2000:]
    files = sorted((cache / "projections").glob("*.json"))
    assert len(files) == 4
    for f in files[:3]:
        f.unlink()
    os.mkfifo(files[0])
    files[1].symlink_to("/dev/zero")
    files[2].mkdir()
    second = run_project(env, "--json")
    assert second.returncode == 3, second.stderr[-2000:]
    assert second.stderr.count("ignored a bad cached projection") == 3, second.stderr[-3000:]
    assert "cannot write the projection cache" in second.stderr
    doc = json.loads(second.stdout)
    assert len(doc["projections"]) == 4
    assert all(p["projections"] and not p.get("error") for p in doc["projections"]), doc
    assert files[0].is_file() and files[1].is_file() and not files[1].is_symlink()
    shutil.rmtree(cache / "projections")
    (cache / "projections").write_text("not a folder")
    third = run_project(env, "--json")
    assert third.returncode == 3, third.stderr[-2000:]
    assert third.stderr.count("cannot write the projection cache") >= 1
    doc = json.loads(third.stdout)
    assert len(doc["projections"]) == 4
    assert all(p["projections"] and not p.get("error") for p in doc["projections"]), doc


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe{", b'{"format": "clproj.device-profile", "version": 1, "key": NaN}'],
    ids=["not-utf8", "nan"],
)
def test_bad_cached_device_profile_is_not_used(tmp_path, monkeypatch, content):
    """The cached profile is not served (it is measured again, one line saying why)."""
    from clproj.devices.discovery import opencl_devices
    from clproj.devices.local import cache_path, cached_profile

    monkeypatch.setenv("CLPROJ_CACHE", str(tmp_path))
    settings.reload()
    try:
        dev = opencl_devices()[0]
        with open(cache_path(dev), "wb") as fh:
            fh.write(content)
        assert cached_profile(dev) is None
    finally:
        monkeypatch.undo()
        settings.reload()


@pytest.mark.parametrize("kind", ["fifo", "devzero", "folder", "no-cache"])
def test_a_profile_cache_entry_in_the_way_is_replaced_or_passed_by(tmp_path, monkeypatch, kind):
    """A FIFO, a link to /dev/zero or a folder at the cached profile's path, or a cache
    folder that cannot be made: the entry is refused without blocking, the profile
    measured now is saved in its place (a FIFO hung the save, /dev/zero swallowed it: every
    run measured again), or, where it cannot be, used anyway with one line (a folder made
    the measured profile a failure and the run used a generic one)."""
    from clproj.devices.discovery import opencl_devices
    from clproj.devices.local import cache_path, resolve_device

    monkeypatch.setenv("CLPROJ_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("CLPROJ_COLD_PROFILE", "tiny")
    monkeypatch.setenv("CLPROJ_FOREIGN_MACHINE", "1")
    settings.reload()
    try:
        dev = opencl_devices()[0]
        path = cache_path(dev)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "devzero":
            os.symlink("/dev/zero", path)
        elif kind == "folder":
            os.mkdir(path)
        else:
            shutil.rmtree(tmp_path / "c")
            (tmp_path / "c").write_text("not a folder")
        got = resolve_device(dev, 0, measure_missing=True)
        assert got.how == "measured"
        if kind in ("fifo", "devzero"):
            assert os.path.isfile(path) and not os.path.islink(path)
            # served from the cache now (or measured again into it, where the first was
            # measured on a busy machine that is quiet now: devices.local)
            assert resolve_device(dev, 0, measure_missing=True).path == path
        else:
            assert got.path is None  # used, not kept
    finally:
        monkeypatch.undo()
        settings.reload()


def test_a_record_folder_shared_with_other_runs_reports_this_runs_launches(tmp_path):
    """`clproj run --record DIR` again over a folder holding the first run's records, an
    older clproj's (version 1, blobs named by sha256) and a damaged one: this run reports
    and projects its own four launches only (a run reported every record of the folder:
    two apps recording into one folder each showed the other's kernels), and the others
    cost it nothing, not even a line; `clproj records` still lists the whole folder."""
    import msgpack

    from clproj.intercept.record import RECORDS_SUBDIR

    env = own_cache_env(tmp_path)
    rec = tmp_path / "rec"
    first = run_project(env, "--record", str(rec))
    assert first.returncode == 3, first.stderr[-2000:]
    records = sorted((rec / RECORDS_SUBDIR).glob("*.clrec"))
    assert len(records) == 4
    old = msgpack.unpackb(records[0].read_bytes(), raw=False)
    (rec / RECORDS_SUBDIR / "old-1.clrec").write_bytes(msgpack.packb(dict(old, version=1)))
    (rec / RECORDS_SUBDIR / "torn-1.clrec").write_bytes(records[1].read_bytes()[:40])
    shutil.rmtree(tmp_path / "cache" / "projections")  # this run projects its launches again
    second = run_project(env, "--json", "--record", str(rec))
    assert second.returncode == 3, second.stderr[-2000:]
    assert "Traceback" not in second.stderr and "not projected" not in second.stderr
    doc = json.loads(second.stdout)
    assert sorted(p["kernel"] for p in doc["projections"]) == ["k0", "k1", "k2", "k3"]
    assert all(p["projections"] for p in doc["projections"])
    assert len(list((rec / RECORDS_SUBDIR).glob("*.clrec"))) == 10
