"""``clproj advise-partition --objective energy``: on the PoCL profile pair where pthread
is faster and hungrier, the single device by time is pthread and by energy basic; every
share and single device carries its projected kernel energy and power, and the table
shows them beside the times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from clproj.devices.profile import load_profile
from clproj.intercept.record import from_arrays, save
from clproj.runtime.partition import advisor

REPO = Path(__file__).resolve().parents[2]
APPS = REPO / "benchmarks" / "apps"


def _matmul(n: int = 64):
    rng = np.random.default_rng(2)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    src = (APPS / "matmul_gmem.cl").read_text()
    return from_arrays(
        src, "matmul_gmem", [a, b, np.zeros((n, n), np.float32), np.uint32(n)], [n, n], [16, 16]
    )


def test_advise_by_energy_picks_the_frugal_device(power_pair: dict[str, str]) -> None:
    profs = [load_profile(p) for p in power_pair.values()]
    rec = _matmul()
    from clproj import miniemu
    from clproj.runtime.partition import safety as partition_safety

    profile = miniemu.emulate(rec, mode="single").to_dict()
    safe = partition_safety.check(rec)
    by_time = advisor.advise(rec, profs, profile=profile, safety=safe)
    by_energy = advisor.advise(rec, profs, profile=profile, safety=safe, objective="energy")
    s, j = by_energy.single_s, by_energy.single_j
    assert s["pocl-pthread-amd-epyc"] < s["pocl-basic-amd-epyc"]
    assert j["pocl-basic-amd-epyc"] < j["pocl-pthread-amd-epyc"]
    assert by_time.best_single == "pocl-pthread-amd-epyc"
    assert by_energy.best_single == "pocl-basic-amd-epyc" and by_energy.objective == "energy"
    used = [sh for sh in by_energy.shares if sh.slabs]
    assert used and all(sh.energy_j and sh.power_w for sh in used)
    assert by_energy.split_j == sum(sh.energy_j for sh in by_energy.shares)
    # a slowdown bound basic misses: pthread again, whatever the objective
    slow = s["pocl-basic-amd-epyc"] / s["pocl-pthread-amd-epyc"] - 1
    bounded = advisor.advise(
        rec, profs, profile=profile, safety=safe, objective="energy", max_slowdown=slow / 2
    )
    assert bounded.best_single == "pocl-pthread-amd-epyc"


def test_cli_shows_energy_beside_time(tmp_path: Path, power_pair: dict[str, str]) -> None:
    path = save(_matmul(), str(tmp_path))
    devices = ",".join(power_pair.values())
    env = dict(os.environ)

    def cli(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "clproj.cli",
                "advise-partition",
                path,
                "--devices",
                devices,
                *extra,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )

    table = cli("--objective", "energy")
    assert table.returncode == 0, table.stderr
    assert "alone energy" in table.stdout and " J" in table.stdout and " W" in table.stdout
    doc = json.loads(cli("--objective", "energy", "--json").stdout)
    assert doc["advice"]["best_single"] == "pocl-basic-amd-epyc"
    assert doc["advice"]["single_j"]["pocl-basic-amd-epyc"] > 0
