"""``benchmarks/energy_run.py`` (run by ``scripts/gpu/energy.sh`` on a GPU machine):
importable here, its arguments checked, and on this driverless machine one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clproj.benchmarks import energy_run
from clproj.benchmarks.apps import get_app

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_and_known_apps() -> None:
    args = energy_run.parser().parse_args(["-o", "x.json"])
    assert args.apps is None and args.suite == [] and args.shapes == 2  # all our apps
    assert args.window >= 2.0 and args.size == "paper"
    args = energy_run.parser().parse_args(["--apps", "vecadd, nbody", "--window", "3", "-o", "y"])
    assert args.apps == ["vecadd", "nbody"] and args.window == 3.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "1.5"], "window must be 2 to 60 s"),
        (["--window", "x"], "expected seconds"),
        (["--apps", "vecadd,nosuchapp"], "unknown app nosuchapp"),
        (["--apps", ","], "unknown app (none)"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        energy_run.parser().parse_args([*argv, "-o", "x.json"])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_shapes_are_distinct_launches() -> None:
    plan = get_app("reduction").plan("paper")
    got = energy_run.shapes(plan, per_kernel=10)
    assert len(got) == len({(s.kernel, tuple(s.global_size), s.local_size) for s in got})
    assert len(got) == 3 and len(plan.launches) >= len(got)
    # a shrinking NDRange (LU: one shape per launch) keeps the first shapes of each kernel,
    # as the preload library does for C apps
    lu = energy_run.shapes(get_app("lu_factor").plan("paper"))
    assert sorted(s.kernel for s in lu) == ["lu_column", "lu_column", "lu_update", "lu_update"]
    assert energy_run.shapes(plan)[:2] == got[:2]


def test_no_driver_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    out = tmp_path / "e.json"
    proc = subprocess.run(
        [sys.executable, "-m", "clproj.benchmarks.energy_run", "--apps", "vecadd", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: NVML energy: no NVIDIA driver here")
    assert len(proc.stderr.strip().splitlines()) == 2  # the error and its fix
    assert not out.exists()


def test_script_is_valid_bash_and_calls_the_runner() -> None:
    script = ROOT / "scripts" / "gpu" / "energy.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "python3 -m clproj.benchmarks.energy_run" in text and "--suite" in text
    assert "${OUT:-" in text and "profile-device --power" in text
    assert "setup-env.sh" in text
