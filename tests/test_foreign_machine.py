"""Every feature on a machine nobody profiled (``CLPROJ_FOREIGN_MACHINE=1``, empty cache).

The committed measured profiles match the CPU of the machine they were measured on; a
user's machine matches none of them. These tests make clproj ignore them for local
devices and start from an empty ``CLPROJ_CACHE``, then run what a new user runs: the
``make demo`` command line, project mode on a pyopencl app and an unmodified C binary,
``--devices measured``, route mode, ``route --split`` and ``advise-partition --execute``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_MATMUL = os.path.join(REPO, "benchmarks/apps/bin/matmul_lmem")
MEASURED_KEYS = {
    "nvidia-h100-80gb-hbm3-nvidia",
    "nvidia-h200-nvidia",
    "pocl-basic-amd-epyc",
    "pocl-pthread-amd-epyc",
    "pocl-cpu-intel-r-xeon-r-processor",
}


def foreign_env(cache: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, CLPROJ_FOREIGN_MACHINE="1", CLPROJ_CACHE=cache)
    env.pop("CLPROJ_DEVICES", None)
    env.update(extra)
    return env


def clproj(
    args: list[str], env: dict[str, str], timeout: float = 400
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def json_tail(stdout: str) -> dict:
    """The JSON document ``clproj run --json`` prints: alone on stdout."""
    return json.loads(stdout)


@pytest.fixture(scope="module")
def measured_cache(tmp_path_factory) -> str:
    """A cache holding profiles measured here (test-sized microbenchmarks), made once."""
    cache = str(tmp_path_factory.mktemp("foreign") / "cache")
    out = clproj(
        ["devices", "--profiles", "--json"], foreign_env(cache, CLPROJ_COLD_PROFILE="tiny")
    )
    assert out.returncode == 0, out.stderr
    local = json.loads(out.stdout)["local"]
    assert local and all(lp["how"] == "measured" for lp in local), local
    # Measured while other work kept the cores busy, a profile keeps a load warning and the
    # first resolution in a quiet moment measures it again (tests/devices/test_busy_profile.py):
    # then a test below saw "measuring" where it checks that the cache answered, and paid
    # for another measurement. Here the profiles stand for ones measured on a quiet machine.
    folder = os.path.join(cache, "profiles")
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        with open(path) as fh:
            doc = json.load(fh)
        if doc["source"].pop("load_warning", None) is not None:
            with open(path, "w") as fh:
                json.dump(doc, fh)
    return cache


@pytest.fixture
def cache(measured_cache, tmp_path) -> str:
    """A copy of the measured cache for one test (its projections stay its own)."""
    path = str(tmp_path / "cache")
    shutil.copytree(measured_cache, path)
    return path


def test_demo_command_line_measures_then_projects(tmp_path):
    """`make demo`'s run on an unprofiled machine, empty cache, the quick profiles a user gets."""
    cache = str(tmp_path / "cache")
    env = foreign_env(cache, CLPROJ_COLD_PROFILE="quick")
    app = [sys.executable, "-m", "clproj.benchmarks.apps", "matmul_lmem", "nbody"]
    app += ["atomic_contention", "reduction", "--size", "small"]
    out = clproj(["run", "--mode", "project", "--json", "--", *app], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert "has no profile yet; measuring one (quick" in out.stderr
    doc = json_tail(out.stdout)
    assert {p["kernel"] for p in doc["projections"] if p.get("projections")} >= {
        "matmul_lmem",
        "nbody_step",
        "atomic_contention",
        "reduce_sum",
    }
    keys = {q["device"] for p in doc["projections"] for q in p["projections"]}
    assert keys and all(k.startswith("local-") for k in keys), keys
    # The second resolution is served from the cache, nothing measured again.
    again = clproj(["devices", "--profiles", "--json", "--no-measure"], env)
    local = json.loads(again.stdout)["local"]
    assert [lp["how"] for lp in local] == ["cached"] * len(local)
    assert all(not lp["low_confidence"] for lp in local)


def test_project_mode_pyopencl_app(cache, tmp_path):
    app = [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "reduction", "--size", "small"]
    out = clproj(["run", "--mode", "project", "--json", "--", *app], foreign_env(cache))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "measuring" not in out.stderr  # the cache answered
    doc = json_tail(out.stdout)
    assert {"vecadd", "reduce_sum"} <= {
        p["kernel"] for p in doc["projections"] if p.get("projections")
    }


@pytest.mark.skipif(not os.path.exists(C_MATMUL), reason="C hosts not built")
def test_project_mode_unmodified_c_binary(cache):
    out = clproj(["run", "--mode", "project", "--json", "--", C_MATMUL, "64"], foreign_env(cache))
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json_tail(out.stdout)
    assert doc["exit_code"] == 0
    (proj,) = [p for p in doc["projections"] if p["kernel"] == "matmul_lmem"]
    assert len(proj["projections"]) == 2  # POCL_DEVICES: pthread and basic
    assert all(q["device"].startswith("local-") for q in proj["projections"])


def test_devices_measured_projects_every_launch_on_all_five(cache):
    """In the app and after it exits (no emulation in the app: all of it after exit,
    and floydwarshall's later passes are answered by the reuse cache)."""
    env = foreign_env(cache, CLPROJ_LIVE_EMULATION="0")
    app = [
        sys.executable,
        "-m",
        "clproj.benchmarks.apps",
        "floydwarshall",
        "reduction",
        "--size",
        "small",
    ]
    out = clproj(["run", "--mode", "project", "--devices", "measured", "--json", "--", *app], env)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json_tail(out.stdout)
    assert len(doc["projections"]) > 3
    for p in doc["projections"]:
        assert {q["device"] for q in p.get("projections", [])} == MEASURED_KEYS, p
    assert any(p.get("emulation", {}).get("method") == "reused" for p in doc["projections"])


def test_route_mode(cache):
    app = [
        sys.executable,
        "-m",
        "clproj.benchmarks.apps",
        "vecadd",
        "matmul_lmem",
        "--size",
        "small",
    ]
    out = clproj(["run", "--mode", "route", "--json", "--", *app], foreign_env(cache))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("PASS") == 2, out.stderr  # --json: the app's stdout goes there
    assert json.loads(out.stdout)["exit_code"] == 0  # the summary alone: parseable
    assert "Traceback" not in out.stderr


def test_route_split(cache):
    app = [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "--size", "small"]
    env = foreign_env(cache, CLPROJ_SPLIT_WAIT_S="60")
    out = clproj(["run", "--mode", "route", "--split", "--", *app], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "PASS" in out.stdout
    assert "clproj: split:" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_advise_partition_execute(cache, tmp_path):
    env = foreign_env(cache)
    rec = str(tmp_path / "rec")
    app = [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "--size", "small"]
    out = clproj(["run", "--record", rec, "--", *app], env)
    assert out.returncode == 0, out.stderr
    (path,) = [
        os.path.join(rec, "records", f)
        for f in os.listdir(os.path.join(rec, "records"))
        if f.endswith(".clrec")
    ]
    out = clproj(["advise-partition", path, "--execute", "--json"], env)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert doc["execution"]["matches"] is True, doc["execution"]


def test_without_measuring_profiles_are_generic_and_flagged(tmp_path):
    """CLPROJ_COLD_PROFILE=off: no traceback, a generic profile, flagged in every output."""
    env = foreign_env(str(tmp_path / "cache"), CLPROJ_COLD_PROFILE="off")
    out = clproj(["devices", "--profiles", "--json"], env)
    assert out.returncode == 0, out.stderr
    local = json.loads(out.stdout)["local"]
    assert all(lp["how"] == "generic" and lp["low_confidence"] for lp in local), local
    app = [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "--size", "small"]
    out = clproj(["run", "--mode", "project", "--", *app], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "low-confidence (generic, not measured) profiles" in out.stderr
    assert "LOW confidence" in out.stderr  # clproj run's tables: on stderr
    out = clproj(["run", "--mode", "project", "--json", "--", *app], env)
    doc = json_tail(out.stdout)
    entries = [q for p in doc["projections"] for q in p.get("projections", [])]
    assert entries and all(q.get("low_confidence") for q in entries)


def test_a_bad_cached_profile_is_measured_again(cache):
    env = foreign_env(cache)
    folder = os.path.join(cache, "profiles")
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "w") as fh:
            fh.write('{"format": "clproj.device-profile", "version": 1, "key": 3}')
    out = clproj(["devices", "--profiles", "--json"], env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert all(lp["how"] == "measured" for lp in json.loads(out.stdout)["local"])


def test_remeasure_replaces_cached_profiles(cache):
    env = foreign_env(cache)
    out = clproj(["devices", "--profiles", "--json", "--remeasure"], env)
    assert out.returncode == 0, out.stderr
    assert all(lp["how"] == "measured" for lp in json.loads(out.stdout)["local"])
    out = clproj(["devices", "--profiles", "--json", "--no-measure"], env)
    assert all(lp["how"] == "cached" for lp in json.loads(out.stdout)["local"])


def test_cache_keys_never_collide_with_committed_keys(cl_device):
    from clproj.devices.local import cache_key
    from clproj.devices.profile import known_profiles

    key = cache_key(cl_device)
    assert key.startswith("local-")
    assert key not in {p.key for p in known_profiles()}


def test_a_bad_setting_is_one_line_naming_it(tmp_path):
    env = foreign_env(str(tmp_path / "cache"), CLPROJ_COLD_PROFILE="fast")
    out = clproj(["devices", "--profiles"], env)
    assert out.returncode == 2
    assert "CLPROJ_COLD_PROFILE='fast'" in out.stderr and "quick, tiny, off" in out.stderr
    assert "Traceback" not in out.stderr


def test_make_test_runs_the_foreign_pass_exactly_where_a_committed_profile_matches(tmp_path):
    """`make test` runs the suite a second time as on a machine nobody profiled only where
    the first run was not already that: ``python -m clproj.devices.local --committed-here`` exits
    0 exactly when some local device has a committed profile, and 1 under the flag."""
    from clproj.devices.discovery import opencl_devices
    from clproj.devices.profile import profile_for_device

    matches = any(profile_for_device(d) is not None for d in opencl_devices())
    cmd = [sys.executable, "-m", "clproj.devices.local", "--committed-here"]
    env = dict(os.environ, CLPROJ_CACHE=str(tmp_path))
    env.pop("CLPROJ_FOREIGN_MACHINE", None)
    here = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert here.returncode == (0 if matches else 1), here.stderr
    foreign = subprocess.run(cmd, cwd=REPO, env=foreign_env(str(tmp_path)), capture_output=True)
    assert foreign.returncode == 1
