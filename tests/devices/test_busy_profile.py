"""A profile measured on a busy machine is not cached as if quiet: it keeps its warning, and
the first resolution that finds the machine quiet measures it again, with one line saying
so. The busy machine is real: a CPU-bound process beside the measurement (as
scripts/with-load.sh makes one). Serial: the quiet half needs the machine to itself
(scripts/run-suite.sh runs these tests after the rest, alone)."""

from __future__ import annotations

import subprocess
import time

import pytest

from clproj.devices import local
from clproj.devices.discovery import opencl_devices
from clproj.lifeline import die_with_parent

pytestmark = pytest.mark.serial


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPROJ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CLPROJ_FOREIGN_MACHINE", "1")  # no committed profile matches
    monkeypatch.setenv("CLPROJ_COLD_PROFILE", "tiny")
    return tmp_path


def _hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """CPU-bound processes that end with the test's process, also when pytest is killed
    before its ``finally`` runs (they kept two cores busy for the next hour)."""
    return [
        subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=die_with_parent)
        for _ in range(n)
    ]


def test_a_profile_measured_under_load_is_measured_again_when_quiet(fresh_cache, capsys):
    index, dev = len(opencl_devices()) - 1, opencl_devices()[-1]
    hogs = _hogs(2)
    try:
        time.sleep(0.5)
        assert local.busy_note(), "two CPU-bound processes should make the machine busy"
        first = local.resolve_device(dev, index, measure_missing=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert first.how == "measured" and "busy" in first.note
    assert "busy" in local.cached_profile(dev).data["source"]["load_warning"]
    capsys.readouterr()
    deadline = time.monotonic() + 30
    while local.busy_note():  # other work on this machine: wait for a quiet moment
        if time.monotonic() > deadline:
            pytest.skip("the machine stayed busy: the quiet half cannot be checked here")
    again = local.resolve_device(dev, index, measure_missing=True)
    err = capsys.readouterr().err
    assert again.how == "measured", "a busy-measured profile was taken as if quiet"
    assert "measured on a busy machine" in err and "measuring it again" in err
    assert "load_warning" not in local.cached_profile(dev).data["source"]
    later = local.resolve_device(dev, index, measure_missing=True)
    assert later.how == "cached" and not later.note


def test_a_busy_measured_profile_is_kept_while_the_machine_stays_busy(fresh_cache):
    """Measuring again while still busy would only replace one slow profile by another."""
    index, dev = len(opencl_devices()) - 1, opencl_devices()[-1]
    hogs = _hogs(2)
    try:
        time.sleep(0.5)
        local.resolve_device(dev, index, measure_missing=True)
        again = local.resolve_device(dev, index, measure_missing=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert again.how == "cached" and "busy" in again.note
