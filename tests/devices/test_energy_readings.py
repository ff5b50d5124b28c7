"""The energy arithmetic and the power fit against real counter readings: the NVIDIA H200
windows committed in benchmarks/results/energy/ (NVML total-energy counter, driver 580).

Every figure in those files was made on the GPU machine from its raw readings; here the
same readings are turned into figures again, and the fitted power section into the
committed profile's, so a change to the rules shows against real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clproj.devices.energy import CounterReading, Window, validate_results, window_figures
from clproj.devices.power_fit import power_section

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "results" / "energy" / "h200-20261127"
FILES = [
    "power-microbench.json",
    "power-microbench-settling.json",
    "energy-apps-run1.json",
    "energy-apps-run2.json",
]


def window_of(raw: dict) -> Window:
    return Window(
        raw["kernel"],
        raw["launches"],
        raw["start_s"],
        raw["end_s"],
        [CounterReading(t, e) for t, e in raw["readings"]],
        raw["idle_power_w"],
        raw["sm_clock_mhz"],
        raw["temperature_c"],
        raw["counter"],
    )


@pytest.mark.parametrize("name", FILES)
def test_figures_are_remade_from_the_raw_readings(name: str) -> None:
    doc = validate_results(json.loads((RUN / name).read_text()))
    assert doc["device"]["name"] == "NVIDIA H200"
    windows = [k for k in doc["kernels"] if k.get("raw")]
    assert len(windows) >= 20
    for k in windows:
        got = window_figures(window_of(k["raw"]))
        want = k["figures"]
        for field in ("average_power_w", "energy_per_launch_j", "time_per_launch_s"):
            assert got[field] == pytest.approx(want[field], rel=1e-9), (k.get("kernel"), field)
        # the counter stepped often enough inside >= 2 s, and the GPU ran at its clock
        assert got["counter_steps"] >= 10 and got["window_s"] >= 2.0
        assert 100.0 < got["average_power_w"] < doc["device"]["power_limit_w"]


def test_polybench_windows_ran_on_the_gpu_at_the_truths_speed() -> None:
    """The C apps' windows (energy-window preload) repeat the app's own launch: their time
    per launch is the truth file's median for that shape (measured another day)."""
    import csv

    truth = {}
    tsv = REPO.parent / "shared" / "validation" / "polybench" / "truth" / "h200.tsv"
    if not tsv.exists():
        pytest.skip("../shared/validation/polybench is not beside this checkout")
    with tsv.open() as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            truth[(r["app"], r["kernel"], r["global"])] = float(r["median_ns"]) * 1e-9
    doc = json.loads((RUN / "energy-apps-run2.json").read_text())
    suite = [k for k in doc["kernels"] if k.get("suite") == "polybench"]
    assert len(suite) == 18
    for k in suite:
        g = ",".join(str(x) for x in [*k["global_size"], 1, 1][:3])
        want = truth[(k["app"], k["kernel"], g)]
        got = k["figures"]["time_per_launch_s"]
        assert got == pytest.approx(want, rel=0.25, abs=2e-6), (k["app"], k["kernel"])
        assert k["figures"]["sm_clock_mhz"]["median"] == 1980.0


def test_the_fit_remakes_the_committed_power_section() -> None:
    doc = json.loads((RUN / "power-microbench.json").read_text())
    got = power_section(doc, "power-microbench.json")
    profile = REPO / "devices" / "profiles" / "measured" / "nvidia-h200-opencl.json"
    want = json.loads(profile.read_text())["power"]
    for key in ("static_active_w", "idle_w", "energy_per_dram_byte_j", "energy_per_l2_byte_j"):
        assert got[key] == pytest.approx(want[key], rel=1e-6), key
    for cls, joules in want["energy_per_op_j"].items():
        assert got["energy_per_op_j"][cls] == pytest.approx(joules, rel=1e-6), cls
    # idle power is what the counter said before the windows, not a spec fraction
    assert 100.0 < got["idle_w"] < 140.0 and got["rule"] == "measured"
    # float4 reads only: no load energy, version 2, and the whole section as committed
    assert got["version"] == 2 and "energy_per_global_load_j" not in got
    got["fit"].pop("date")
    # to the last bits a solver release may move (NNLS in another SciPy): rel 1e-9
    assert got == _to_9_digits(
        {**want, "fit": {k: v for k, v in want["fit"].items() if k != "date"}}
    )


def _to_9_digits(value: object) -> object:
    """``value`` with every float a ``pytest.approx`` of rel 1e-9 (dicts and lists walked)."""
    if isinstance(value, dict):
        return {k: _to_9_digits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_9_digits(v) for v in value]
    return pytest.approx(value, rel=1e-9) if isinstance(value, float) else value
