"""Energy windows: the arithmetic on readings built from the counter's documented
behaviour (a mJ counter that steps every 20-100 ms), the NVML layer's one-line refusal on
this driverless machine, and the powercap reader on a sysfs tree of the same format."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from clproj.devices import energy, rapl
from clproj.devices.energy import CounterReading, Window, window_figures
from clproj.errors import ClprojError


def stepping_counter(
    power_w: float,
    start_s: float,
    end_s: float,
    step_s: tuple[float, float] = (0.02, 0.1),
    poll_s: float = 0.002,
    seed: int = 1,
) -> list[CounterReading]:
    """Polls of a counter that integrates ``power_w`` but only updates every 20-100 ms,
    in whole millijoules, as NVML's total-energy counter does."""
    rng = random.Random(seed)
    updates = []
    t = 0.0
    while t < end_s + 1:
        t += rng.uniform(*step_s)
        updates.append((t, int(power_w * t * 1000) / 1000.0))
    out = []
    t = start_s
    i = 0
    value = 0.0
    while t <= end_s:
        while i < len(updates) and updates[i][0] <= t:
            value = updates[i][1]
            i += 1
        out.append(CounterReading(t, 1000.0 + value))
        t += poll_s
    return out


def window(power_w: float = 300.0, wall: float = 2.5, launches: int = 1000) -> Window:
    return Window(
        "k",
        launches,
        start_s=1.0,
        end_s=1.0 + wall,
        readings=stepping_counter(power_w, 0.8, 1.2 + wall),
        idle_power_w=[70.0, 72.0, 71.0],
        sm_clock_mhz=[1980.0, 1755.0, 1980.0],
        temperature_c=[40.0, 45.0],
    )


def test_figures_recover_power_and_energy_per_launch() -> None:
    f = window_figures(window(300.0, 2.5, 1000))
    assert f["average_power_w"] == pytest.approx(300.0, rel=0.01)
    assert f["time_per_launch_s"] == pytest.approx(2.5e-3)
    assert f["energy_per_launch_j"] == pytest.approx(300.0 * 2.5e-3, rel=0.01)
    assert f["idle_power_w"] == pytest.approx(71.0)
    assert f["power_above_idle_w"] == pytest.approx(229.0, rel=0.02)
    assert f["sm_clock_mhz"] == {"min": 1755.0, "median": 1980.0, "max": 1980.0}
    assert 2.5 * 0.8 <= f["integrated_s"] <= 2.5
    assert f["counter_steps"] >= 2.5 / 0.1


def test_short_window_is_refused() -> None:
    with pytest.raises(ClprojError, match=r"1\.500 s is shorter than 2 s"):
        window_figures(window(wall=1.5))


def test_few_counter_steps_are_refused() -> None:
    w = window()
    # The counter updated only three times in the window (a stuck or slow counter).
    w.readings = [
        CounterReading(t / 100, 5.0 + (t // 80)) for t in range(int(0.8 * 100), int(3.7 * 100))
    ]
    with pytest.raises(ClprojError, match="stepped 3 times in the window, fewer than 10"):
        window_figures(w)


def test_integration_is_between_steps_not_polls() -> None:
    # Integrating between the window's first and last polls would add up to one update
    # period of error at each end (100 ms of 2 s: 5%); between step edges it stays small.
    for seed in range(5):
        w = window()
        w.readings = stepping_counter(250.0, 0.8, 3.7, step_s=(0.09, 0.1), seed=seed)
        assert window_figures(w)["average_power_w"] == pytest.approx(250.0, rel=0.01)


def test_counter_going_backwards_is_refused() -> None:
    w = window()
    w.readings.insert(600, CounterReading(w.readings[599].t_s + 1e-4, 0.0))
    with pytest.raises(ClprojError, match="went backwards"):
        window_figures(w)


def test_results_keep_raw_readings_and_refusals() -> None:
    kernels = [energy.kernel_entry(window(), app="a"), energy.kernel_entry(window(wall=1.0))]
    doc = energy.results({"name": "x"}, [*kernels, {"app": "b", "error": "build failed"}])
    json.loads(json.dumps(doc))
    assert energy.validate_results(doc) is doc
    ok, short, failed = doc["kernels"]
    assert ok["figures"]["average_power_w"] > 0 and ok["error"] is None and ok["app"] == "a"
    assert failed == {"app": "b", "error": "build failed"}
    assert short["figures"] is None and "shorter than" in short["error"]
    assert len(short["raw"]["readings"]) > 100
    with pytest.raises(ClprojError, match="version"):
        energy.validate_results(doc | {"version": 2})
    with pytest.raises(ClprojError, match=r"kernels\[2\]\.raw\.readings"):
        energy.validate_results(doc | {"kernels": [*doc["kernels"][:2], {"app": "c"}]})


def test_nvml_absent_is_one_line() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    from clproj.devices.energy_nvml import open_nvml

    with pytest.raises(ClprojError) as exc:
        open_nvml(0)
    assert "NVML energy: no NVIDIA driver here" in exc.value.cause
    assert "\n" not in exc.value.cause and "\n" not in exc.value.fix


def make_zone(root: Path, name: str, energy_uj: int, max_uj: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text("package-0\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def test_rapl_reads_package_zones_with_wraparound(tmp_path: Path) -> None:
    z0 = make_zone(tmp_path, "intel-rapl:0", 262_143_000_000, 262_143_328_850)
    make_zone(tmp_path, "intel-rapl:0:0", 5, 262_143_328_850)  # a core sub-zone: skipped
    w = rapl.RaplWindow(tmp_path)
    assert [z.path.name for z in w.zones] == ["intel-rapl:0"] and w.reason is None
    w.start()
    (z0 / "energy_uj").write_text("1000000\n")  # wrapped past the range
    got = w.stop()
    assert got.reason is None
    assert got.joules == {"intel-rapl:0 (package-0)": pytest.approx(1.328851)}


def test_rapl_delta_without_wrap() -> None:
    assert rapl.delta_uj(100, 350, 1000) == 250
    assert rapl.delta_uj(900, 99, 1000) == 200


def test_rapl_absent_here_is_none_with_reason(tmp_path: Path) -> None:
    got = rapl.RaplWindow(tmp_path / "nothing")
    got.start()
    e = got.stop()
    assert e.joules is None and "no powercap driver" in (e.reason or "")
    real = rapl.RaplWindow()
    if not real.zones:  # this VM: /sys/class/powercap is absent
        real.start()
        assert real.stop().joules is None
        assert real.reason and "\n" not in real.reason


def test_batch_grows_until_it_runs_the_target_time() -> None:
    from clproj.devices.energy_nvml import batch_size

    calls = []

    def launch() -> None:
        calls.append(time.monotonic())
        time.sleep(0.004)

    n = batch_size(launch, lambda: None, 0.05)
    assert n in (16, 32)  # 4 ms launches: 8 take 32 ms, 16 take 64 ms
    assert len(calls) == 2 * n - 1  # 1 + 2 + ... + n: the doublings are the warm-up
