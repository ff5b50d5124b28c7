"""Energy beside time in ``clproj validate``: projected joules summed over the matched
launches like the times, average power = joules / seconds, the spec rule's low
confidence carried through, and the HTML report's time-vs-energy plots (Pareto front)
and GOPS/W table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clproj.runtime.evaluation import energy_html
from clproj.runtime.evaluation import validate_match as vmatch
from clproj.runtime.evaluation import validate_truth as vtruth

H100 = "NVIDIA H100 80GB HBM3"
EPYC = "pthread-skylake-avx512-AMD EPYC"
HEADER = "app\tdevice\tkernel\twork_dim\tglobal\tlocal\tlaunches\tmean_ns\tmedian_ns\tmin_ns\n"


def truth(path: Path, device: str, rows: list[tuple]) -> Any:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(HEADER)
        for app, kernel, glob, local, launches, mean in rows:
            dims = glob.count(",") + 1
            fh.write(
                f"{app}\t{device}\t{kernel}\t{dims}\t{glob}\t{local}\t{launches}\t{mean}\t{mean}\t{mean}\n"
            )
    return vtruth.read_truth_file(str(path))


def launch(glob: list[int], per_dev: dict[str, tuple[float, float | None]], fp32: int) -> dict:
    return {
        "kernel": "k",
        "global_size": glob,
        "local_size": [16, 4],
        "emulation": {"method": "full", "confidence": "high"},
        "profile": {
            "total": {"instructions": {"fp32_fma": fp32, "int_add": 10, "memory_global": 99}}
        },
        "projections": [
            {
                "device": name,
                "name": name,
                "time_s": t,
                "bound": "C",
                "energy_j": e,
                "power_w": None if e is None else e / t,
                "power_confidence": "low" if name == H100 else "normal",
            }
            for name, (t, e) in per_dev.items()
        ],
    }


def test_energy_sums_like_time_and_power_is_their_ratio(tmp_path: Path) -> None:
    rows = [("app", "k", "64,64,1", "16,4,1", 3, 1000), ("app", "k", "32,64,1", "16,4,1", 2, 500)]
    h100 = truth(tmp_path / "h100.tsv", H100, rows)
    epyc = truth(tmp_path / "epyc.tsv", EPYC, rows)
    run = {
        "kernels": [{"kernel": "k", "launches": 5, "total_ns": 1}],
        "projections": [
            launch([64, 64], {H100: (1e-6, 3e-4), EPYC: (4e-6, 2e-4)}, 100),
            launch([32, 64], {H100: (1e-6, 2e-4), EPYC: (2e-6, None)}, 50),
        ],
    }
    (k,), _ = vmatch.judge_app("app", run, [h100, epyc])
    assert k.projected_j["h100"] == pytest.approx(3 * 3e-4 + 2 * 2e-4)
    assert k.power_w("h100") == pytest.approx(k.projected_j["h100"] / k.projected_s["h100"])
    assert "epyc" not in k.projected_j  # one shape had no power: no partial sum posing as whole
    assert k.power_low == {"h100"}
    assert k.ops == pytest.approx(3 * 110 + 2 * 60)
    d = k.to_dict()
    assert d["power_confidence"] == {"h100": "low"} and d["projected_w"]["h100"] > 0


def test_pareto_front() -> None:
    pts = {"fast": (1.0, 10.0), "frugal": (3.0, 4.0), "worse": (3.5, 11.0), "tie": (1.0, 10.0)}
    assert energy_html.pareto_front(pts) == {"fast", "frugal", "tie"}
    assert energy_html.pareto_front({"a": (1.0, 1.0)}) == {"a"}


class K:
    def __init__(self, app: str, s: dict[str, float], j: dict[str, float], ops: float | None):
        self.app, self.kernel, self.projected_s, self.projected_j, self.ops = app, "k", s, j, ops
        self.power_low: set[str] = set()


def test_gops_per_watt_and_report_section(tmp_path: Path) -> None:
    ks = [
        K("a", {"x": 1.0, "y": 2.0}, {"x": 10.0, "y": 5.0}, 2e10),
        K("a", {"x": 1.0, "y": 2.0}, {"x": 10.0}, 2e10),
        K("b", {"x": 1.0, "y": 2.0}, {"x": 1.0, "y": 4.0}, None),  # no counts: not in the table
    ]
    table = energy_html.gops_per_watt(ks)
    assert table == {"a": {"x": pytest.approx(4e10 / 20 / 1e9), "y": pytest.approx(2e10 / 5 / 1e9)}}
    html = energy_html.section(ks, str(tmp_path), low={"x"})
    assert "Pareto" in html and "GOPS/W" in html and "x (low)" in html
    pngs = sorted(p.name for p in tmp_path.glob("energy_*.png"))
    assert pngs == ["energy_000.png", "energy_001.png"]  # a and b: two devices each
    empty = energy_html.section([K("c", {"x": 1.0}, {}, 1.0)], str(tmp_path / "none"))
    assert "No kernel has a projected energy" in empty


def test_evaluate_projects_energy_where_a_device_has_power(evaluation, evaluate_cli_report) -> None:
    """``clproj evaluate`` on the committed results: the H200's power is its fitted section
    (normal confidence), the H100's the spec rule from its NVML power limit (low), the
    CPUs have none (no RAPL, no sheet TDP), and the report (``clproj evaluate --report``:
    ``write_report`` of the same evaluation) carries the energy plots and the GOPS/W
    table."""
    ev = evaluation
    a = ev.apps[0]
    assert set(a.projected_j) == {"nvidia-h100", "nvidia-h200"}
    assert all(j > 0 for j in a.projected_j.values()) and a.ops and a.ops > 0
    assert a.power_confidence == {"nvidia-h100": "low", "nvidia-h200": "normal"}
    out, report = evaluate_cli_report
    assert out.returncode == 0, out.stderr
    page = (report / "index.html").read_text()
    assert "GOPS/W" in page and "nvidia-h100 (low)" in page and "per app (one run)" in page
    assert len(list(report.glob("energy_*.png"))) == len(ev.apps)
