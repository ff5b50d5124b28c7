"""`clproj run --mode route --objective energy`, end to end: an unmodified C app on the
virtual platform, the real broker and two real PoCL nodes (nb: basic, np: pthread). A
hook projects every recorded kernel as faster and hungrier on pthread (times and joules
per launch, posted to the broker as route mode's projection hook posts them); the flag
reaches the app's client through its environment and the broker through each placement
request. By time every launch runs on pthread, by energy on basic."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HOOK = textwrap.dedent(
    """
    def on_record(rec):
        from clproj.runtime.route import platform as route_runtime

        r = route_runtime.route()
        ids = [d.id for d in r.p.devices.values()]
        times = {d: (0.0005 if d.startswith("np/") else 0.001) for d in ids}
        joules = {d: (0.05 if d.startswith("np/") else 0.01) for d in ids}
        route_runtime.post_projection(rec.signature, times, joules)
    """
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("app") / "app_many"
    subprocess.run(
        ["gcc", "-O1", "-o", str(exe), str(REPO / "tests/c_apps/app_many.c"), "-lOpenCL"],
        check=True,
    )
    return exe


@pytest.mark.parametrize(("objective", "device"), [("time", "np/0"), ("energy", "nb/0")])
def test_route_objective_places_by_energy(
    tmp_path, cluster, route_env, finish, app, objective, device
) -> None:
    env = route_env(tmp_path)
    (tmp_path / "energy_hook.py").write_text(HOOK)
    env["CLPROJ_HOOKS"] = "energy_hook:on_record"
    env["CLPROJ_RECORD_DIR"] = str(tmp_path / "records")
    env["CLPROJ_DEVICES"] = "h100-sxm-spec"  # the app's own projection maps to no node
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "run",
            "--mode",
            "route",
            "--json",
            "--broker",
            cluster["endpoint"],
            "--objective",
            objective,
            "--",
            str(app),
            "40",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _out, err, summary = finish(proc)
    assert proc.returncode == 0, err
    devs: dict[str, int] = {}
    for row in summary.get("kernels", []):
        d = row["device"].split()[0]
        devs[d] = devs.get(d, 0) + row["launches"]
    assert devs == {device: 40}, (devs, err)
