"""BabelStream (unmodified, ../shared/validation/babelstream) in every mode: its own output
and exit status as natively, and in project mode its NULL-local streaming kernels
projected in the groups each device's driver picks (docs/devices.md "NULL local size")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

SRC = os.path.join(os.path.dirname(REPO), "shared", "validation", "babelstream", "src")
ARGS = ["-s", "65536", "-n", "3"]
DEVICE_LINES = ("Using OpenCL device", "Driver:", "Reduction kernel config")


@pytest.fixture(scope="module")
def babelstream(tmp_path_factory) -> str:
    if not os.path.isdir(SRC):
        pytest.skip(f"BabelStream sources not found at {SRC} (../shared/validation)")
    if not shutil.which("g++"):
        pytest.skip("no C++ compiler")
    exe = str(tmp_path_factory.mktemp("babelstream") / "babelstream-ocl")
    defs = ["-DOCL", "-DCL_TARGET_OPENCL_VERSION=120", "-DCL_HPP_TARGET_OPENCL_VERSION=120"]
    defs.append("-DCL_HPP_MINIMUM_OPENCL_VERSION=120")
    subprocess.run(
        ["g++", "-O1", "-std=c++20", *defs, f"-I{SRC}", f"-I{SRC}/ocl",
         f"{SRC}/main.cpp", f"{SRC}/ocl/OCLStream.cpp", "-lOpenCL", "-o", exe],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return exe


def shape(stdout: str) -> list[str]:
    """The output with numbers and device lines taken out: what must not change."""
    lines = [line for line in stdout.splitlines() if not line.startswith(DEVICE_LINES)]
    return [" ".join(re.sub(r"[0-9][0-9.e+-]*", "#", line).split()) for line in lines]


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, POCL_DEVICES="pthread")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def app_output(stdout: str) -> str:
    """The app's own stdout: what comes before clproj's summary table, if any."""
    lines = stdout.splitlines()
    cut = next((i for i, line in enumerate(lines) if re.search(r"clproj \w+: ", line)), len(lines))
    return "\n".join(lines[:cut])


def test_babelstream_runs_as_natively_in_every_mode(babelstream, tmp_path):
    native = run([babelstream, *ARGS])
    assert native.returncode == 0, native.stderr
    expected = shape(native.stdout)
    assert any(line.startswith("Copy") for line in native.stdout.splitlines())
    for mode in ("observe", "project", "route"):
        extra = ["--record", str(tmp_path / "rec")] if mode == "project" else []
        res = run([sys.executable, "-m", "clproj.cli", "run", "--mode", mode, *extra, "--",
                   babelstream, *ARGS])  # fmt: skip
        assert res.returncode == 0, f"{mode}: {res.stderr[-2000:]}"
        assert "FAILED" not in res.stderr, mode
        assert shape(app_output(res.stdout)) == expected, mode
    # The streaming kernels were left to the driver: each device runs its driver's groups.
    copy = next((tmp_path / "rec" / "records").glob("copy-*.clrec"))
    keys = ("hd7970-spec", "h100-sxm-spec", "pocl-pthread-amd-epyc")
    res = run([sys.executable, "-m", "clproj.cli", "project", str(copy), "--devices",
               ",".join(keys), "--json"])  # fmt: skip
    assert res.returncode == 0, res.stderr
    groups = {
        p["device_key"]: p["occupancy"]["group_size"] for p in json.loads(res.stdout)["projections"]
    }
    assert groups == {"hd7970-spec": 256, "h100-sxm-spec": 1024, "pocl-pthread-amd-epyc": 4096}
    # Its dot kernel is sized from the device's answers (OCLStream.cpp: compute units):
    # its projection says so; the streaming kernels, sized by the array, say nothing.
    assert "note" not in json.loads(res.stdout)
    dot = next((tmp_path / "rec" / "records").glob("stream_dot-*.clrec"))
    res = run([sys.executable, "-m", "clproj.cli", "project", str(dot), "--devices", keys[1],
               "--json"])  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "per compute unit" in json.loads(res.stdout)["note"]
    res = run([sys.executable, "-m", "clproj.cli", "records", str(tmp_path / "rec"), "--json"])
    asked = {r["kernel"]: r["asked"] for r in json.loads(res.stdout)["records"]}
    assert asked["stream_dot"]["CL_DEVICE_MAX_COMPUTE_UNITS"] >= 1
