"""A user's device from its vendor sheet (``clproj.device-sheet`` TOML, devices/sheet.py):
built by the spec rules, validated, usable in ``--devices``; a bad sheet is one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from clproj.devices import specs
from clproj.devices.profile import DeviceProfile, load_profile
from clproj.devices.profile_check import validate
from clproj.devices.sheet import profile_from_sheet
from clproj.errors import ClprojError
from clproj.runtime.projection import device_set
from clproj.runtime.projection.model import project

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs/examples/my-gpu.toml"
# A real kernel profile (from `clproj emulate`, committed with the benchmark results).
APP_PROFILES = REPO / "benchmarks/results/kernel-profiles/vecadd-paper-single.json"


def vecadd_profile() -> dict:
    return json.loads(APP_PROFILES.read_text())["groups"][0]["variants"][0]["profile"]


MINIMAL = """format = "clproj.device-sheet"
version = 1
key = "small-gpu"
name = "Small GPU"
vendor = "AMD"
compute_units = 16
clock_mhz = 2000
fp32_lanes_per_cu = 64
memory_bandwidth_gbs = 256.0
global_memory_gib = 8
"""


def test_example_sheet_builds_a_valid_profile_by_the_spec_rules() -> None:
    doc = profile_from_sheet(str(EXAMPLE))
    validate(doc)
    p = DeviceProfile(doc)
    assert p.key == "rtx-4090-sheet" and p.kind == "GPU" and p.source_kind == "spec"
    # sheet numbers: 128 SMs x 128 lanes x 2 flops x 2.52 GHz = 82.6 TFLOPS, fp64 1/64
    assert 2 * p.throughput("fp32_fma") == pytest.approx(82.58e12, rel=1e-3)
    assert p.throughput("fp64_fma") == pytest.approx(p.throughput("fp32_fma") / 64)
    assert (p.max_work_items_per_cu, p.max_groups_per_cu) == (1536, 24)
    assert p.local_bytes_per_cu == 100 * 1024
    # the same measured efficiency as every spec profile
    eff, _ = specs.measured_efficiency()
    assert p.peak("global_read") == pytest.approx(1008e9 * eff["global_read"])
    assert "derived from measured" in p.provenance("curves.global_read")
    # what the sheet omits is the family entry's, and provenance says so
    assert p.provenance("memory.local_banks").startswith("derived: as h100-sxm-spec")
    assert p.provenance("throughput.int_add").startswith("derived: fp32 lanes x h100-sxm-spec")
    assert p.provenance("throughput.fp32_fma") == "spec"


def test_minimal_sheet_takes_the_vendor_family_defaults(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text(MINIMAL)
    p = load_profile(str(path))  # a .toml path loads like a profile file
    mi300x = next(s for s in specs.SPECS if s.key == "mi300x-spec")
    assert p.warp_width == 64 and p.max_work_group_size == mi300x.max_wg
    assert p.throughput("fp64_fma") == pytest.approx(p.throughput("fp32_fma"))  # CDNA3 1:1
    assert p.provenance("warp_width").startswith("derived: as mi300x-spec")
    assert p.provenance("occupancy.max_work_items_per_cu").startswith("derived: as mi300x")


def test_sheet_tdp_gives_a_spec_power_section_and_no_tdp_none(tmp_path: Path) -> None:
    power = profile_from_sheet(str(EXAMPLE))["power"]
    assert power["tdp_w"] == 450 and power["rule"] == "spec" and power["confidence"] == "low"
    assert power["idle_w"] == pytest.approx(45.0)
    path = tmp_path / "small.toml"
    path.write_text(MINIMAL)
    assert "power" not in profile_from_sheet(str(path))  # never the family entry's TDP


def test_sheet_profile_projects_and_ranks_beside_shipped_ones() -> None:
    kernel = vecadd_profile()
    devices = device_set.resolve(f"{EXAMPLE},v100-pcie-spec")
    assert [d.key for d in devices] == ["rtx-4090-sheet", "v100-pcie-spec"]
    times = {d.key: project(kernel, d).time_s for d in devices}
    assert all(t > 0 for t in times.values())
    # a streaming kernel: the card with more sheet bandwidth is faster
    assert times["rtx-4090-sheet"] < times["v100-pcie-spec"]


def test_devices_option_and_sheet_command(python_exe: str, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    kernel = tmp_path / "vecadd.json"
    kernel.write_text(json.dumps(vecadd_profile()))
    shown = subprocess.run(
        [python_exe, "-m", "clproj.cli", "devices", "--sheet", str(EXAMPLE), "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "rtx-4090-sheet" in shown.stdout
    assert load_profile(str(out)).to_dict() == profile_from_sheet(str(EXAMPLE))
    projected = subprocess.run(
        [
            python_exe,
            "-m",
            "clproj.cli",
            "project",
            str(kernel),
            "--json",
            "--devices",
            f"docs/examples/my-gpu.toml,{out},v100-pcie-spec",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keys = json.dumps(json.loads(projected))
    assert "rtx-4090-sheet" in keys and "v100-pcie-spec" in keys


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t.replace("compute_units = 16", "compute_units = nan"), "compute_units"),
        (lambda t: t.replace("compute_units = 16", 'compute_units = "16"'), "compute_units"),
        (lambda t: t.replace("compute_units = 16", "compute_units = true"), "compute_units"),
        (lambda t: t.replace("= 256.0", "= -256.0"), "memory_bandwidth_gbs"),
        (lambda t: t.replace("= 256.0", "= inf"), "memory_bandwidth_gbs"),
        (lambda t: t.replace("= 8\n", "= 1e300\n"), "global_memory_gib"),
        (lambda t: t.replace("clock_mhz = 2000\n", ""), "clock_mhz"),
        (lambda t: t + "fp64_ratio = 2.0\n", "fp64_ratio"),
        (lambda t: t + "colour = 1\n", "colour"),
        (lambda t: t + "local_kib_per_cu = 32\nlocal_kib_per_group = 64\n", "local_kib_per_group"),
        (lambda t: t.replace('"clproj.device-sheet"', '"clproj.device-profile"'), "format"),
        (lambda t: t.replace("version = 1", "version = 2"), "version"),
        (lambda t: t.replace('"small-gpu"', '"Small GPU!"'), "key"),
        (lambda t: t.replace('"small-gpu"', '"h100-sxm-spec"'), "key"),
        (lambda t: t.replace('"AMD"', '"ACME"'), "like"),
        (lambda t: t + 'like = "no-such-spec"\n', "like"),
        (lambda t: t + "sources = [1, 2]\n", "sources"),
        (lambda t: t + "tdp_w = 0\n", "tdp_w"),
        (lambda t: t + 'tdp_w = "450"\n', "tdp_w"),
        (lambda t: t + "wavefront = 7\n", "wavefront"),  # warps are powers of two
    ],
)
def test_bad_sheet_is_one_line_naming_the_field(tmp_path: Path, change, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(change(MINIMAL))
    with pytest.raises(ClprojError) as exc:
        profile_from_sheet(str(path))
    assert f"field {field}:" in exc.value.cause and "\n" not in exc.value.cause
    assert exc.value.fix and "docs/formats.md" in exc.value.fix


def test_unreadable_sheets_are_one_line(tmp_path: Path) -> None:
    cases = {
        "latin1.toml": "name = 'caf\xe9'\n".encode("latin-1"),
        "broken.toml": b"format = \n",
        "huge.toml": b"#" * (70 * 1024),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ClprojError) as exc:
            profile_from_sheet(str(path))
        assert str(path) in exc.value.cause and "\n" not in exc.value.cause, name
    # every number in range, their product (2**20 CUs x 65536 lanes x 100 GHz) not
    path = tmp_path / "absurd.toml"
    path.write_text(
        MINIMAL.replace("= 16\n", "= 1048576\n")
        .replace("= 2000\n", "= 100000\n")
        .replace("= 64\n", "= 65536\n")
    )
    with pytest.raises(ClprojError, match=r"builds an invalid profile: .*throughput"):
        profile_from_sheet(str(path))
    with pytest.raises(ClprojError, match="not a regular file"):
        profile_from_sheet(str(tmp_path))
    with pytest.raises(ClprojError, match="no such file"):
        device_set.resolve(str(tmp_path / "missing.toml"))


def test_bad_sheet_on_the_command_line_is_one_error_line(python_exe: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(MINIMAL.replace("clock_mhz = 2000", "clock_mhz = -1"))
    proc = subprocess.run(
        [python_exe, "-m", "clproj.cli", "devices", "--sheet", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "field clock_mhz" in lines[0] and lines[1].strip().startswith("fix:")
