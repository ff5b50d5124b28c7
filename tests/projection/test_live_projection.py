"""Project mode while the app runs (runtime/projection/live_run.py): a projection exists
before the app ends, snapshots go through the blob store's scratch files, and nothing
clproj starts outlives ``clproj run``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from clproj.intercept.blobs import BlobStore
from clproj.intercept.record import from_arrays, load, save
from tests.conftest import clproj_project, emulations_of, emulators_of, own_cache_env, running

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "live_app.py")


def _env(tmp_path, **extra: str) -> dict[str, str]:
    """An empty projection cache of this test's own, with the session's device profiles."""
    return own_cache_env(tmp_path, POCL_DEVICES="pthread", **extra)


def _clproj_run(tmp_path, app: list[str]) -> list[str]:
    return [*clproj_project("--record", str(tmp_path / "rec")), "--", *app]


def _run_app(tmp_path, env: dict[str, str], *app_args: str) -> subprocess.CompletedProcess[str]:
    """``live_app.py APP_ARGS`` under ``clproj run --mode project``, to its end."""
    out = subprocess.run(
        _clproj_run(tmp_path, [sys.executable, APP, *app_args]),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_a_projection_exists_before_the_app_ends(tmp_path):
    """The app waits (idle) after its one launch until a projection of it is on disk: the
    default ``CLPROJ_LIVE_EMULATION``; with the post-app method (``0``) it never sees one
    (and gives up after 60 s)."""
    env = _env(tmp_path)
    env.pop("CLPROJ_LIVE_EMULATION", None)
    out = _run_app(tmp_path, env, "wait")
    assert "projection seen while running" in out.stderr, out.stderr[-3000:]
    doc = json.loads(out.stdout[out.stdout.index("{") :])
    (proj,) = [p for p in doc["projections"] if p["kernel"] == "scale"]
    assert proj["live"] == "during app" and proj["projections"], proj
    assert 0 < proj["since_launch_s"] < 60
    assert "(1 while the app ran, 0 after it)" in out.stderr
    # the 2 MiB snapshots were read into scratch files and renamed to their hashes
    blobs = os.listdir(tmp_path / "rec" / "blobs")
    assert blobs and not [n for n in blobs if n.startswith(".")], blobs
    (rec,) = [load(str(p)) for p in (tmp_path / "rec" / "records").iterdir()]
    data = np.frombuffer(rec.buffer_bytes(0), np.float32)  # read back, hash checked
    assert np.array_equal(data, np.arange(1 << 19, dtype=np.float32))


def test_killing_clproj_run_during_a_live_emulation_leaves_no_emulator(tmp_path):
    """An emulation started while the app runs is a child of ``clproj run``; a SIGKILL of
    ``clproj run`` takes it (and the app) down: nothing keeps running."""
    env = _env(tmp_path, CLPROJ_LIVE_EMULATION="1", CLPROJ_EMULATION_MODE="single")
    proc = subprocess.Popen(
        _clproj_run(tmp_path, [sys.executable, APP, "loop", "100000000"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (emulations := emulations_of(proc.pid)) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        assert emulations, "no emulation started while the app ran"
        # it yields to the app: the worker lowers its priority first thing after start-up
        # (clproj run's own thread keeps its priority, miniemu.oclgrind.runs_at_nice)
        deadline = time.monotonic() + 20
        while True:
            with open(f"/proc/{emulations[0]}/stat") as fh:
                nice = int(fh.read().rsplit(")", 1)[1].split()[16])
            if nice == 19 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert nice == 19
        # the run's fork server too: it dies with clproj run
        emulators = emulators_of(proc.pid) + emulations
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while any(running(p) for p in emulators) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(running(p) for p in emulators)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_verify_records_large_outputs_through_scratch_files(tmp_path):
    """``--record --verify``: the 2 MiB inputs and outputs are read into scratch files and
    stored under their hashes; the outputs are the kernel's."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "run",
            "--record",
            str(tmp_path / "rec"),
            "--verify",
            "--",
            sys.executable,
            APP,
            "once",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = [load(str(p)) for p in (tmp_path / "rec" / "records").iterdir()]
    host = np.arange(1 << 19, dtype=np.float32)
    assert np.array_equal(np.frombuffer(rec.buffer_bytes(0), np.float32), host)
    assert np.array_equal(np.frombuffer(rec.output_bytes(1) or b"", np.float32), 2 * host)
    assert not [n for n in os.listdir(tmp_path / "rec" / "blobs") if n.startswith(".")]


def test_scratch_snapshots_are_named_by_their_hash_once(tmp_path):
    """Two scratch files with the same content become one blob; a dropped record leaves
    no scratch file behind."""
    store = BlobStore(str(tmp_path))
    rec = from_arrays("__kernel void k(__global int *a, __global int *b) {}", "k", [], [1])
    content = np.arange(1 << 18, dtype=np.int32).tobytes()
    keys = []
    for _ in range(2):
        path, view = store.scratch(len(content))
        view[:] = content
        keys.append(rec.add_blob(view, scratch=path))
    from clproj.intercept.record import ArgRecord

    rec.args = [
        ArgRecord(i, "buffer", size=len(content), flags=1, blob=k) for i, k in enumerate(keys)
    ]
    save(rec, str(tmp_path))
    rec.drop_blobs()
    assert os.listdir(store.path) == [rec.args[0].blob] == [rec.args[1].blob]
    assert load(rec.path).buffer_bytes(1) == content
    other = from_arrays("__kernel void k() {}", "k", [], [1])
    path, view = store.scratch(4096)
    other.add_blob(view, scratch=path)
    other.drop_blobs()
    assert not os.path.exists(path)


def test_a_record_is_published_at_its_launch_in_project_mode(tmp_path):
    """Project mode hands a record to its writer before the launch runs (its snapshots are
    copies), so a kernel that runs for seconds is emulated from its launch on; the record
    is then written again with the launch's measured time, which the projection shows."""
    out = _run_app(tmp_path, _env(tmp_path), "long", "2000000000")
    ran = float(out.stderr.split("launch ran ")[1].split(" s")[0])
    doc = json.loads(out.stdout[out.stdout.index("{") :])
    (proj,) = [p for p in doc["projections"] if p["kernel"] == "chain"]
    assert ran > 1.0, ran  # long enough that a record written after it would be late
    assert proj["record_found_s"] < ran / 2, (proj["record_found_s"], ran)
    assert 0.5 * ran < proj["measured_time_ns"] / 1e9 <= ran
    (rec,) = [load(str(p)) for p in (tmp_path / "rec" / "records").iterdir()]
    assert rec.measured_time_ns == proj["measured_time_ns"]
