"""Projected power and energy (runtime/projection/power.py) and ``clproj project
--objective``, on the committed spec and measured profiles and on kernel profiles our
Oclgrind pipeline emulated from the benchmark apps (benchmarks/results/kernel-profiles/)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clproj.devices.profile import DeviceProfile, load_profile
from clproj.errors import ClprojError
from clproj.runtime.projection.model import project
from clproj.runtime.projection.power import objective_value, project_power, rank_by

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "benchmarks" / "results" / "kernel-profiles"


def kernel(app: str) -> dict[str, Any]:
    """The emulated kernel profile of an app's first launch group, with its footprint."""
    doc = json.loads((PROFILES / f"{app}-paper-single.json").read_text())
    group = doc["groups"][0]
    profile = copy.deepcopy(group["variants"][0]["profile"])
    profile["launch"]["footprint_bytes"] = group["footprint_bytes"]
    return profile


def powered(app: str, key: str) -> tuple[Any, Any]:
    kp, dev = kernel(app), load_profile(key)
    proj = project(kp, dev, kp["launch"]["footprint_bytes"])
    return proj, project_power(proj, kp, dev)


@pytest.mark.parametrize("app", ["nbody", "heavy_gather", "vecadd", "tiny_launch", "stencil2d"])
@pytest.mark.parametrize("key", ["h100-sxm-spec", "v100-pcie-spec", "mi300x-spec"])
def test_energy_is_power_times_time_and_bounded(app: str, key: str) -> None:
    proj, pw = powered(app, key)
    section = load_profile(key).data["power"]
    assert pw.energy_j == pytest.approx(pw.power_w * proj.time_s)
    assert section["idle_w"] <= pw.power_w <= section["tdp_w"] == pw.limit_w
    assert pw.rule == "spec" and pw.confidence == "low"


def test_compute_bound_kernel_draws_more_than_an_idle_one() -> None:
    busy_proj, busy = powered("nbody", "h100-sxm-spec")
    _, idle = powered("tiny_launch", "h100-sxm-spec")
    assert busy_proj.bound == "C"
    assert busy.power_w > 5 * idle.power_w
    assert idle.power_w == pytest.approx(70.0, rel=0.02)  # 10% of the sheet's 700 W


def measured_section(device: DeviceProfile, joules_per_op: float) -> DeviceProfile:
    """The same device with a measured-rule power section of the given op energy."""
    data = copy.deepcopy(device.data)
    data["power"] = {
        "version": 1,
        "rule": "measured",
        "confidence": "normal",
        "tdp_w": 700.0,
        "idle_w": 60.0,
        "static_active_w": 90.0,
        "energy_per_op_j": {"fp32_fma": joules_per_op, "fp32_mul": joules_per_op},
        "energy_per_dram_byte_j": 2e-11,
        "provenance": {"energy_per_op_j": "measured"},
    }
    return DeviceProfile(data)


def test_power_rises_with_energy_per_op_and_stops_at_the_limit() -> None:
    kp = kernel("nbody")
    base = load_profile("h100-sxm-spec")
    proj = project(kp, base, kp["launch"]["footprint_bytes"])
    last = 0.0
    for e in (0.0, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9):
        pw = project_power(proj, kp, measured_section(base, e))
        assert pw.rule == "measured" and pw.confidence == "normal"
        assert 90.0 <= pw.power_w <= 700.0 and pw.power_w >= last
        assert pw.energy_j == pytest.approx(pw.power_w * proj.time_s)
        last = pw.power_w
    assert pw.limited and pw.power_w == 700.0
    assert project_power(proj, kp, measured_section(base, 0.0)).power_w >= 90.0


# A hand-made measured section's energies (H200-like magnitudes), and a load energy.
HAND = {
    "energy_per_dram_byte_j": 2.0e-11,
    "energy_per_dram_read_byte_j": 5.0e-12,
    "energy_per_l2_byte_j": 6.0e-12,
    "energy_per_local_byte_j": 1.0e-12,
}
PER_LOAD_J = 4.0e-11


def hand_section(device: DeviceProfile, per_load: float | None) -> DeviceProfile:
    """``device`` with a hand-made measured section: version 2 without a load energy,
    version 3 with one (a version 2 section carrying it is refused on loading)."""
    data = copy.deepcopy(device.data)
    data["power"] = {
        "version": 2 if per_load is None else 3,
        "rule": "measured",
        "confidence": "normal",
        "tdp_w": 5000.0,  # above any sum here: the parts are compared, not the limit
        "idle_w": 60.0,
        "static_active_w": 90.0,
        "energy_per_op_j": {"fp32_fma": 1e-12, "fp32_add": 1e-12, "int_add": 1e-12},
        **HAND,
        "provenance": {"energy_per_op_j": "hand-made"},
    }
    if per_load is not None:
        data["power"]["energy_per_global_load_j"] = per_load
    return DeviceProfile(data)


@pytest.mark.parametrize("app", ["heavy_gather", "vecadd", "stencil2d", "spmv_csr"])
def test_load_energy_is_priced_only_where_the_section_has_it(app: str) -> None:
    """Without ``energy_per_global_load_j`` the memory part is the bytes' energies alone
    (the version 2 projection); with it, exactly the plugin's global load instructions x
    the load energy more, and nothing else moves."""
    kp = kernel(app)
    base = load_profile("nvidia-h200-nvidia")
    proj = project(kp, base, kp["launch"]["footprint_bytes"])
    d = proj.details
    assert "dram_bytes" in d  # the hierarchy split the traffic
    bytes_j = (
        d["dram_bytes"] * HAND["energy_per_dram_byte_j"]
        + d.get("dram_read_bytes", 0.0) * HAND["energy_per_dram_read_byte_j"]
        + d.get("l2_bytes", 0.0) * HAND["energy_per_l2_byte_j"]
    )
    without = project_power(proj, kp, hand_section(base, None))
    assert without.memory_w * proj.time_s == pytest.approx(bytes_j, rel=1e-12)
    loads = float(kp["total"]["global"]["load_accesses"])
    assert loads > 0
    with_loads = project_power(proj, kp, hand_section(base, PER_LOAD_J))
    assert with_loads.memory_w * proj.time_s == pytest.approx(
        bytes_j + loads * PER_LOAD_J, rel=1e-12
    )
    assert with_loads.compute_w == without.compute_w
    assert with_loads.static_w == without.static_w and not with_loads.limited
    assert with_loads.power_w == pytest.approx(without.power_w + loads * PER_LOAD_J / proj.time_s)
    bad = copy.deepcopy(hand_section(base, PER_LOAD_J).data)
    bad["power"]["version"] = 2  # what a reader of version 2 would misread
    with pytest.raises(ClprojError, match=r"needs power\.version 3"):
        DeviceProfile(bad)


def test_committed_measured_sections_price_no_load_instructions() -> None:
    """The committed H200 section was fitted from float4 reads only: it has no load
    energy and stays version 2, so its projections are the version 2 ones."""
    section = load_profile("nvidia-h200-nvidia").data["power"]
    assert section["rule"] == "measured" and section["version"] == 2
    assert "energy_per_global_load_j" not in section


def test_measured_gpu_profile_takes_its_sheet_and_cpu_has_none() -> None:
    _, h100 = powered("nbody", "nvidia-h100-80gb-hbm3-nvidia")
    assert h100.rule == "spec" and h100.limit_w == 700 and "NVML power limit" in h100.source
    measured = load_profile("nvidia-h100-80gb-hbm3-nvidia")
    data = copy.deepcopy(measured.data) | {"nvml": None}  # measured without a driver
    kp = kernel("nbody")
    proj = project(kp, measured, kp["launch"]["footprint_bytes"])
    by_sheet = project_power(proj, kp, DeviceProfile(data))
    assert by_sheet.limit_w == 700 and "h100-sxm-spec sheet" in by_sheet.source
    _, cpu = powered("nbody", "pocl-pthread-amd-epyc")
    assert cpu.power_w is None and cpu.energy_j is None and cpu.reason
    assert objective_value("energy", 1.0, cpu) is None
    assert objective_value("time", 2.0, cpu) == 2.0


def test_rank_by_energy_differs_from_time_and_puts_unknown_power_last() -> None:
    kp = kernel("heavy_gather")
    devs = [load_profile(k) for k in ("pocl-pthread-amd-epyc", "v100-pcie-spec", "h100-sxm-spec")]
    projs = [project(kp, d, kp["launch"]["footprint_bytes"]) for d in devs]
    powers = {p.device_key: project_power(p, kp, d) for p, d in zip(projs, devs, strict=True)}
    by = {o: [p.device_key for p in rank_by(o, projs, powers)] for o in ("time", "energy", "edp")}
    assert by["time"] == ["h100-sxm-spec", "v100-pcie-spec", "pocl-pthread-amd-epyc"]
    assert by["energy"] == ["v100-pcie-spec", "h100-sxm-spec", "pocl-pthread-amd-epyc"]
    assert by["edp"][-1] == "pocl-pthread-amd-epyc"


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", "project", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_objective_energy_picks_the_frugal_device(tmp_path: Path) -> None:
    path = tmp_path / "heavy_gather.json"
    path.write_text(json.dumps(kernel("heavy_gather")))
    devices = "--devices=h100-sxm-spec,v100-pcie-spec"
    by_time = json.loads(run_cli(str(path), devices, "--json").stdout)
    proc = run_cli(str(path), devices, "--objective", "energy", "--json")
    assert proc.returncode == 0, proc.stderr
    by_energy = json.loads(proc.stdout)
    assert by_time["recommended"] == "h100-sxm-spec" and by_time["objective"] == "time"
    assert by_energy["recommended"] == "v100-pcie-spec"
    first, second = by_energy["projections"]
    assert first["energy_j"] < second["energy_j"] and first["time_s"] > second["time_s"]
    assert first["power"]["confidence"] == "low" and first["power_w"] > 0
    table = run_cli(str(path), devices, "--objective", "edp")
    assert table.returncode == 0 and "ranked by edp" in table.stdout
    assert "(low)" in table.stdout and " J " in table.stdout


def test_cli_energy_without_any_power_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(json.dumps(kernel("vecadd")))
    proc = run_cli(str(path), "--devices=pocl-pthread-amd-epyc", "--objective", "energy")
    assert proc.returncode != 0
    assert "has a power projection" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tdp_w": -5}, "power.tdp_w"),
        ({"idle_w": 900}, "power.idle_w"),
        ({"confidence": "normal"}, "power.confidence"),
        ({"version": 5}, "power.version"),
        ({"power_per_active_unit_w": 0.5}, "power.power_per_active_unit_w"),
        ({"energy_per_global_load_j": 1e-11}, "power.energy_per_global_load_j"),
        ({"static_active_w": 10}, "power.static_active_w"),
        ({"rule": "guess"}, "power.rule"),
        ({"rule": "measured", "confidence": "normal"}, "power.energy_per_op_j"),
        ({"energy_per_op_j": {"fp99": 1e-12}}, "power.energy_per_op_j.fp99"),
    ],
)
def test_bad_power_section_is_refused_naming_the_field(change: dict, field: str) -> None:
    data = copy.deepcopy(load_profile("h100-sxm-spec").data)
    data["power"].update(change)
    with pytest.raises(ClprojError, match=f"device profile field {field}"):
        DeviceProfile(data)


def test_every_spec_sheet_has_a_tdp_and_its_profile_a_power_section() -> None:
    from clproj.devices.spec_sheets import SPECS

    for spec in SPECS:
        assert 50 <= spec.tdp_w <= 1000, spec.key
        assert load_profile(spec.key).data["power"]["tdp_w"] == spec.tdp_w
