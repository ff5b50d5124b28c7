"""Ground-truth harness: device keys, grouping, the results file, the CLI, and the C hosts."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import types

import pytest

from clproj.benchmarks import harness
from clproj.benchmarks.apps import APPS
from clproj.errors import ClprojError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fake_device(name: str, vendor: str, platform: str, cus: int = 132) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        name=name,
        vendor=vendor,
        platform=types.SimpleNamespace(name=platform),
        max_compute_units=cus,
    )


def test_device_keys() -> None:
    assert (
        harness.device_key(
            _fake_device("NVIDIA H100 80GB HBM3", "NVIDIA Corporation", "NVIDIA CUDA")
        )
        == "nvidia-h100"
    )
    pocl = _fake_device(
        "pthread-znver3-AMD EPYC 7B13", "AuthenticAMD", "Portable Computing Language", 16
    )
    assert harness.device_key(pocl) == "pocl-pthread-epyc16"


def test_real_device_keys_are_distinct(cl_device) -> None:
    from clproj.devices.discovery import opencl_devices

    keys = [harness.device_key(d) for d in opencl_devices()]
    assert len(set(keys)) == len(keys)
    assert harness.device_key(cl_device) in keys


def test_group_launches_sums_medians() -> None:
    plan = APPS["floydwarshall"].plan("small")
    n = len(plan.launches)
    times = [[100 + r * 10 + i for i in range(n)] for r in range(3)]  # repeat r, launch i
    (group,) = harness.group_launches(plan, times)
    assert group["n_launches"] == n == 32
    assert group["global"] == [32, 32] and group["local"] == [16, 16]
    assert group["total_ns"] == sum(110 + i for i in range(n))
    assert group["min_ns"] < group["median_ns"] < group["max_ns"]


def test_validate_rejects_other_formats_and_newer_versions() -> None:
    with pytest.raises(ClprojError, match="format"):
        harness.validate_results({"format": "x", "version": 1})
    with pytest.raises(ClprojError, match="version"):
        harness.validate_results({"format": harness.FORMAT, "version": harness.VERSION + 1})


def test_bench_cli_writes_valid_results(tmp_path) -> None:
    """The command as the GPU machine runs it: PYTHONPATH, no install, all devices."""
    env = dict(
        os.environ, PYTHONPATH=REPO, POCL_DEVICES=os.environ.get("POCL_DEVICES", "pthread basic")
    )
    out = tmp_path / "bench-{key}-{size}.json"
    proc = subprocess.run(
        [
            os.sys.executable,
            "-m",
            "clproj.cli",
            "bench",
            "--size",
            "small",
            "--apps",
            "reduction,floydwarshall,fp64_fma",
            "--repeat",
            "2",
            "-o",
            str(out),
            "--json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    files = sorted(glob.glob(str(tmp_path / "bench-*-small.json")))
    assert len(files) == len(printed) >= 1
    for path in files:
        res = harness.load_results(path)
        assert res["size"] == "small" and res["repeat"] == 2
        assert path.endswith(f"bench-{res['device']['key']}-small.json")
        fw = res["apps"]["floydwarshall"]
        assert fw["verified"] and fw["kernels"][0]["n_launches"] == 32
        assert fw["total_ns"] == sum(k["total_ns"] for k in fw["kernels"]) > 0
        red = res["apps"]["reduction"]
        assert red["verified"] and [k["global"] for k in red["kernels"]] == [[4096], [8]]


def test_bench_refuses_one_file_for_several_devices(tmp_path) -> None:
    from clproj.devices.discovery import opencl_devices

    if len(opencl_devices()) < 2:
        pytest.skip("needs two devices")
    from clproj.cli import main

    assert (
        main(["bench", "--size", "small", "--apps", "vecadd", "-o", str(tmp_path / "one.json")])
        == 2
    )


def test_committed_results_are_valid_and_verified() -> None:
    files = glob.glob(os.path.join(REPO, "benchmarks", "results", "bench-*.json"))
    if not files:
        pytest.skip("no committed results yet")
    for path in files:
        res = harness.load_results(path)
        for name, app in res["apps"].items():
            assert app["verified"] or app["skipped"], (
                f"{os.path.basename(path)}: {name}: {app['error']}"
            )


@pytest.fixture(scope="module")
def c_hosts(tmp_path_factory) -> dict[str, str]:
    import sys

    sys.path.insert(0, os.path.join(REPO, "native"))
    import build_c_hosts

    out = tmp_path_factory.mktemp("c_hosts_bin")
    return {os.path.basename(p): p for p in build_c_hosts.build(str(out))}


def _run_host(exe: str, size: str, device: int, kernel_dir: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CLPROJ_DEVICE=str(device), CLPROJ_KERNEL_DIR=kernel_dir)
    return subprocess.run([exe, size], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "host,size",
    [
        ("reduction", "100000"),
        ("matmul_lmem", "64"),
        ("transpose_lmem", "64"),
        ("floydwarshall", "48"),
    ],
)
def test_c_host_passes_on_every_device(c_hosts, host: str, size: str) -> None:
    from clproj.devices.discovery import opencl_devices

    assert len(c_hosts) >= 4
    for i in range(len(opencl_devices())):
        proc = _run_host(c_hosts[host], size, i, os.path.join(REPO, "benchmarks", "apps"))
        assert proc.returncode == 0 and proc.stdout.strip().endswith("PASS"), (
            proc.stdout + proc.stderr
        )


def test_c_host_fails_on_a_wrong_kernel(c_hosts, tmp_path) -> None:
    """The C verification is real: a transpose that moves the tiles but does not transpose inside them must FAIL."""
    with open(
        os.path.join(REPO, "benchmarks", "apps", "transpose_lmem.cl"), encoding="utf-8"
    ) as fh:
        src = fh.read()
    broken = src.replace("tile[lx * TILE + ly]", "tile[ly * TILE + lx]")
    assert broken != src
    (tmp_path / "transpose_lmem.cl").write_text(broken)
    proc = _run_host(c_hosts["transpose_lmem"], "32", 0, str(tmp_path))
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stdout + proc.stderr


def _committed_cpu_results() -> str:
    return os.path.join(harness.RESULTS_DIR, "bench-pocl-pthread-epyc2-paper.json")


def test_another_hosts_results_are_never_overwritten(tmp_path) -> None:
    """Two 2-core EPYC hosts share the key ``pocl-pthread-epyc2`` (PoCL's
    ``pthread-skylake-avx512`` and ``pthread-haswell`` builds): the second host's results
    get a key of their own instead of replacing the first's committed ground truth."""
    template = str(tmp_path / "bench-{key}-{size}.json")
    committed = harness.load_results(_committed_cpu_results())
    (tmp_path / "bench-pocl-pthread-epyc2-paper.json").write_text(json.dumps(committed))
    same = _fake_device(
        committed["device"]["name"], "AuthenticAMD", "Portable Computing Language", 2
    )
    other = _fake_device(
        "pthread-haswell-AMD EPYC", "AuthenticAMD", "Portable Computing Language", 2
    )
    assert harness.device_key(other) == harness.device_key(same) == "pocl-pthread-epyc2"
    assert harness.results_target(same, template, "paper")[0] == "pocl-pthread-epyc2"
    key, path = harness.results_target(other, template, "paper")
    assert key.startswith("pocl-pthread-epyc2-") and key != "pocl-pthread-epyc2"
    assert path == str(tmp_path / f"bench-{key}-paper.json")
    assert (
        harness.results_target(other, template, "small")[0] == "pocl-pthread-epyc2"
    )  # no file yet
    # An explicit file of another device is refused, one of the same device is replaced.
    path = str(tmp_path / "bench-pocl-pthread-epyc2-paper.json")
    with pytest.raises(ClprojError, match="holds bench results of 'pthread-skylake-avx512"):
        harness.results_target(other, path, "paper")
    assert harness.results_target(same, path, "paper")[1] == path
    new = str(tmp_path / "new.json")
    assert harness.results_target(other, new, "paper")[1] == new
