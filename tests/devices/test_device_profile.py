"""Device profile format: the validator names the wrong field; shipped profiles validate."""

from __future__ import annotations

import copy
import json
import math

import pytest

from clproj.devices import specs
from clproj.devices.profile import (
    INSTRUCTION_CLASSES,
    DeviceProfile,
    known_profiles,
    load_profile,
    profile_paths,
)
from clproj.devices.profile_check import validate
from clproj.errors import ClprojError

# The devices the published-result suites name (docs/devices.md, spec profiles).
PUBLISHED_RESULT_DEVICES = (
    "r9-290x-spec",
    "r9-295x2-spec",
    "r9-fury-x-spec",
    "firepro-s9150-spec",
    "firepro-s10000-spec",
    "a10-7850k-gpu-spec",
    "gtx-580-spec",
    "gtx-780-ti-spec",
    "gtx-980-spec",
    "gtx-980-ti-spec",
    "k20c-spec",
    "k40c-spec",
    "k80-spec",
    "v100-pcie-spec",
    "mi100-spec",
    "xeon-phi-se10p-spec",
)


@pytest.fixture
def h100() -> dict:
    return specs.build(next(s for s in specs.SPECS if s.key == "h100-sxm-spec"))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("key"), "key"),
        (lambda d: d.update(format="something"), "format"),
        (lambda d: d.update(version=99), "version"),
        (lambda d: d["identity"].update(kind="FPGA"), "identity.kind"),
        (lambda d: d.update(compute_units=0), "compute_units"),
        (lambda d: d.update(warp_width=32.5), "warp_width"),
        (lambda d: d["memory"].update(local_banks=-1), "memory.local_banks"),
        (lambda d: d["memory"].update(segment_bytes=[]), "memory.segment_bytes"),
        (lambda d: d["memory"].update(l1_data_bytes=0), "memory.l1_data_bytes"),
        (lambda d: d["memory"].update(l1_data_bytes="32K"), "memory.l1_data_bytes"),
        (lambda d: d["occupancy"].pop("registers_per_cu"), "occupancy.registers_per_cu"),
        (lambda d: d["throughput"].update(fp32_fma="fast"), "throughput.fp32_fma"),
        (lambda d: d["throughput"].update(fp33_fma=1.0), "throughput.fp33_fma"),
        (lambda d: d["curves"]["global_read"].reverse(), "curves.global_read[1]"),
        (lambda d: d["curves"]["local"][0].__setitem__(1, -5.0), "curves.local[0]"),
        (lambda d: d["curves"].pop("strided_read"), "curves.strided_read"),
        (lambda d: d.update(launch_overhead_s=float("nan")), "launch_overhead_s"),
        (lambda d: d["transfer"].pop("d2h_bytes_per_s"), "transfer.d2h_bytes_per_s"),
        (lambda d: d["provenance"].update({"clock_mhz": "guessed"}), "provenance.clock_mhz"),
        (lambda d: d.update(detail=[1]), "detail"),
        (
            lambda d: d.update(detail={"raw_loop": {"raw_round_s": 0, "fma_round_s": 1e-9}}),
            "detail.raw_loop.raw_round_s",
        ),
        (
            lambda d: d.update(detail={"launch": {"groups": [[2, 1e-6], [1, 2e-6]]}}),
            "detail.launch.groups[1]",
        ),
        # optional measured values the model divides by (random mutations found these)
        (
            lambda d: d.update(detail={"latency": {"global_latency_s": [[-1, 5]]}}),
            "detail.latency.global_latency_s",
        ),
        (
            lambda d: d.update(detail={"straight_bandwidth": {"rates": {"copy": math.nan}}}),
            "detail.straight_bandwidth.rates.copy",
        ),
        (
            lambda d: d.update(detail={"cache": {"read_bytes_per_s": -1.0}}),
            "detail.cache.read_bytes_per_s",
        ),
        (
            lambda d: d.update(detail={"special": {"special_sin": "x"}}),
            "detail.special.special_sin",
        ),
        (lambda d: d.update(detail={"loop_throughput": [1]}), "detail.loop_throughput"),
        (lambda d: d["memory"].update(cache_bytes=0), "memory.cache_bytes"),
        (lambda d: d.update(compute_units=10**30), "compute_units"),
    ],
)
def test_validator_names_the_field(h100: dict, mutate, field: str) -> None:
    doc = copy.deepcopy(h100)
    mutate(doc)
    with pytest.raises(ClprojError) as exc:
        validate(doc)
    assert f"field {field}:" in exc.value.cause


def test_every_shipped_profile_validates_and_answers() -> None:
    profiles = known_profiles()
    keys = {p.key for p in profiles}
    for want in (
        "hd5870-spec",
        "hd7970-spec",
        "c1060-spec",
        "c2050-spec",
        "h100-sxm-spec",
        "h200-spec",
        "a100-sxm-spec",
        "mi250x-gcd-spec",
        "mi300x-spec",
        *PUBLISHED_RESULT_DEVICES,
    ):
        assert want in keys
    assert len(keys) == len(profiles), "profile keys must be unique"
    for p in profiles:
        for cls in INSTRUCTION_CLASSES:
            assert p.throughput(cls) > 0, (p.key, cls)
        assert p.throughput("no_such_class") == p.throughput("other")
        for name in ("global_read", "global_write", "global_copy", "local"):
            lo, hi = p.curve(name, 1), p.curve(name, 1e9)
            assert lo > 0 and hi > 0, (p.key, name)
            # GPUs need occupancy to reach bandwidth. On CPUs the x axis is the
            # work-group size, and small groups can stream faster (measured on PoCL
            # basic: writes 12.5 GB/s at 16 work-items, 4.2 GB/s at 4096).
            if p.kind == "GPU":
                assert lo <= hi * 1.5, (p.key, name)
        assert p.strided_read(1) >= p.strided_read(32) > 0
        # Bank conflicts exist only in banked local memory; CPUs (local_banks 0) read the
        # "conflicting" stride from ordinary caches, measured faster or slower by chance.
        if p.local_banks:
            assert p.local_conflict(32) <= p.local_conflict(1)
        for path in p.data["provenance"]:
            assert p.provenance(path) in ("measured", "spec") or p.provenance(path).startswith(
                "derived: "
            )


def test_spec_profiles_are_in_sync_with_specs_py() -> None:
    for s in specs.SPECS:
        path = next(p for p in profile_paths() if p.stem == s.key)
        assert json.loads(path.read_text()) == json.loads(json.dumps(specs.build(s))), (
            f"{path} is stale: run python -m clproj.devices.specs"
        )


def test_sheet_numbers(h100: dict) -> None:
    p = DeviceProfile(h100)
    assert p.throughput("fp32_fma") == pytest.approx(132 * 128 * 1.98e9)
    assert p.max_work_items_per_cu == 2048 and p.max_groups_per_cu == 32
    assert p.registers_per_cu == 65536 and p.local_bytes_per_cu == 228 * 1024
    # paper GPUs: Table I compute units and bandwidths (sheet values for the AMD pair)
    c2050 = load_profile("c2050-spec")
    assert c2050.compute_units == 14 and c2050.data["memory"]["peak_bandwidth_gbs"] == 144.0
    assert 2 * c2050.throughput("fp32_fma") == pytest.approx(1030e9, rel=0.01)
    assert load_profile("hd5870-spec").data["memory"]["peak_bandwidth_gbs"] == 153.6


def test_interpolation_is_loglinear_and_clamped(h100: dict) -> None:
    doc = copy.deepcopy(h100)
    doc["curves"]["global_read"] = [[64.0, 1.0e12], [256.0, 2.0e12]]
    p = DeviceProfile(doc)
    assert p.curve("global_read", 128) == pytest.approx(1.5e12)
    assert p.curve("global_read", 1) == 1.0e12 and p.curve("global_read", 4096) == 2.0e12
    with pytest.raises(ClprojError):
        p.curve("nonsense", 1)


def test_fallbacks_follow_documented_rules(h100: dict) -> None:
    doc = copy.deepcopy(h100)
    for cls in ("fp32_div", "int_div", "fp64_add"):
        doc["throughput"].pop(cls, None)
    p = DeviceProfile(doc)
    assert p.throughput("fp32_div") == pytest.approx(p.throughput("special") / 2)
    assert p.throughput("int_div") == pytest.approx(p.throughput("int_mul") / 20)
    assert p.throughput("fp64_add") == pytest.approx(p.throughput("fp64_fma"))


def test_load_errors_name_the_problem(tmp_path, h100: dict) -> None:
    with pytest.raises(ClprojError, match="no device profile with key"):
        load_profile("no-such-device")
    bad = copy.deepcopy(h100)
    bad["occupancy"]["max_groups_per_cu"] = "many"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ClprojError, match=r"field occupancy\.max_groups_per_cu"):
        load_profile(str(path))
    good = DeviceProfile(h100)
    good.save(tmp_path / "good.json")
    assert load_profile(str(tmp_path / "good.json")).to_dict() == good.to_dict()


def test_devices_profiles_command(repo_root: str, python_exe: str) -> None:
    import subprocess

    out = subprocess.run(
        [python_exe, "-m", "clproj.cli", "devices", "--profiles", "--json"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = json.loads(out)["profiles"]
    assert {r["source"] for r in rows} >= {"spec"}
    h = next(r for r in rows if r["key"] == "h100-sxm-spec")
    assert h["host"] is None and h["spec_fields"] > 0
    measured = [r for r in rows if r["source"] in ("measured", "mixed")]
    for r in measured:
        assert r["host"] and r["date"]
    cmp = subprocess.run(
        [python_exe, "-m", "clproj.cli", "profile-device", "--compare", "c1060-spec", "c2050-spec"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "c1060-spec" in cmp and "c2050-spec" in cmp and "fp32_fma" in cmp


def test_xeon_launch_floor_curve_is_what_the_script_derives(tmp_path) -> None:
    """The Xeon's ``detail.launch.groups`` (no Xeon here to measure it) is reproducible
    from the committed bench results by ``scripts/profile_curves.py derive``."""
    import shutil
    import subprocess
    import sys

    committed = "devices/profiles/measured/pocl-xeon16-h100-host.json"
    copy = tmp_path / "xeon.json"
    shutil.copy(committed, copy)
    subprocess.run(
        [
            sys.executable,
            "scripts/profile_curves.py",
            "derive",
            str(copy),
            "--bench",
            "benchmarks/results/bench-pocl-cpu-xeon16-paper.json",
            "--kernel",
            "lu_factor/lu_column",
        ],
        check=True,
        capture_output=True,
    )
    derived = json.loads(copy.read_text())["detail"]["launch"]
    with open(committed) as fh:
        want = json.load(fh)["detail"]["launch"]
    assert derived["groups"] == want["groups"] and len(want["groups"]) == 16
    assert want["groups"][0][1] < want["groups"][-1][1]  # more groups, a higher floor


def test_xeon_loop_rounds_are_derived_from_published_latencies(tmp_path) -> None:
    """The Xeon's ``detail.raw_loop`` (no Xeon here to measure it) is what
    ``scripts/profile_curves.py spec-rounds`` derives from its core's published latencies
    at its clock; a core not in the table (the EPYC, although its PoCL build targets the
    same skylake-avx512) gets nothing rather than another core's numbers."""
    import shutil
    import subprocess
    import sys

    from clproj.devices.specs import cpu_rounds_from_spec

    committed = "devices/profiles/measured/pocl-xeon16-h100-host.json"
    copy = tmp_path / "xeon.json"
    shutil.copy(committed, copy)
    cmd = [sys.executable, "scripts/profile_curves.py", "spec-rounds"]
    subprocess.run([*cmd, str(copy)], check=True, capture_output=True)
    derived = json.loads(copy.read_text())
    with open(committed) as fh:
        want = json.load(fh)
    assert derived["detail"]["raw_loop"] == want["detail"]["raw_loop"]
    assert want["provenance"]["detail.raw_loop"].startswith("derived: published latencies")
    assert want["detail"]["raw_loop"]["fma_round_s"] == pytest.approx(4 / 2.1e9)
    with open("devices/profiles/measured/pocl-pthread-amd-epyc.json") as fh:
        epyc = json.load(fh)
    assert cpu_rounds_from_spec(epyc) is None
    assert epyc["provenance"]["detail.raw_loop"] == "measured"
    bad = subprocess.run(
        [*cmd, "devices/profiles/measured/pocl-pthread-amd-epyc.json"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "no published latencies" in bad.stderr


def test_published_result_devices_match_their_sheets() -> None:
    """Sheet peaks (fp32 flop/s = 2 x fma rate, fp64 by the architecture's ratio) and each
    entry's sources; the dual-GPU boards are one GPU each, as OpenCL sees them."""
    tflops = {  # (fp32, fp64) TFLOPS printed on the vendor sheets, per GPU
        "r9-290x-spec": (5.63, 0.70),
        "firepro-s9150-spec": (5.07, 2.53),
        "r9-fury-x-spec": (8.6, 0.54),
        "firepro-s10000-spec": (5.91 / 2, 1.48 / 2),
        "k20c-spec": (3.52, 1.17),
        "k40c-spec": (4.29, 1.43),
        "v100-pcie-spec": (14.1, 7.07),
        "mi100-spec": (23.1, 11.5),
        "xeon-phi-se10p-spec": (2.11, 1.06),  # 60 of the 61 cores run OpenCL work
    }
    for key, (sp, dp) in tflops.items():
        p = load_profile(key)
        assert 2 * p.throughput("fp32_fma") / 1e12 == pytest.approx(sp, rel=0.01), key
        assert 2 * p.throughput("fp64_fma") / 1e12 == pytest.approx(dp, rel=0.01), key
    for key in PUBLISHED_RESULT_DEVICES:
        p = load_profile(key)
        assert p.source_kind == "spec" and p.data["source"]["sheets"], key
    assert load_profile("xeon-phi-se10p-spec").kind == "ACCELERATOR"
    assert not load_profile("xeon-phi-se10p-spec").has_bank_conflicts
    assert load_profile("a10-7850k-gpu-spec").data["memory"]["peak_bandwidth_gbs"] == 34.1


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("GeForce GTX 980 Ti", "gtx-980-ti-spec"),
        ("GeForce GTX 980", "gtx-980-spec"),
        ("GeForce GTX 780 Ti", "gtx-780-ti-spec"),
        ("GeForce GTX 580", "gtx-580-spec"),
        ("Tesla K20c", "k20c-spec"),
        ("Tesla K40c", "k40c-spec"),
        ("Tesla K80", "k80-spec"),
        ("Tesla V100-PCIE-16GB", "v100-pcie-spec"),
        ("gfx908:sramecc+:xnack-", "mi100-spec"),
        ("Hawaii", "r9-290x-spec"),
        ("AMD FirePro S9150", "firepro-s9150-spec"),
        ("Fiji", "r9-fury-x-spec"),
        ("Tahiti", "hd7970-spec"),
        ("Spectre", "a10-7850k-gpu-spec"),
        ("Intel(R) Many Integrated Core Acceleration Card", "xeon-phi-se10p-spec"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm-spec"),
        ("Some Unknown GPU", None),
    ],
)
def test_spec_for_probes_longest_name_first(name: str, key: str | None) -> None:
    spec = specs.spec_for(name)
    assert (spec.key if spec else None) == key


def test_bandwidth_efficiency_is_measured_peak_over_sheet() -> None:
    """eff = mean over the measured GPUs with a sheet of (measured curve peak / sheet
    bandwidth); copy counts bytes read plus written on both sides of the division."""
    eff, evidence = specs.measured_efficiency()
    for curve in ("global_read", "global_write", "global_copy"):
        ratios = [
            load_profile(f"devices/profiles/measured/{f}").peak(curve)
            / (load_profile(key).data["memory"]["peak_bandwidth_gbs"] * 1e9)
            for f, key in (
                ("nvidia-h100-opencl.json", "h100-sxm-spec"),
                ("nvidia-h200-opencl.json", "h200-spec"),
            )
        ]
        assert eff[curve] == pytest.approx(sum(ratios) / 2, rel=1e-12)
        assert 0.5 < eff[curve] < 1.0
    v100 = load_profile("v100-pcie-spec")
    assert v100.peak("global_read") == pytest.approx(900e9 * eff["global_read"])
    assert v100.peak("global_copy") == pytest.approx(900e9 * eff["global_copy"])
    prov = v100.provenance("curves.global_copy")
    assert "derived from measured: nvidia-h100-opencl.json" in prov and evidence in prov
