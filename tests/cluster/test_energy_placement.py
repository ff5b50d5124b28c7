"""Placement by energy: the real broker and two real PoCL nodes (basic, pthread), a
profile pair whose power sections make the faster device (pthread, two threads) the
hungrier one, and a real kernel's projected times and energies on that pair. The
client's ``--objective`` (setting CLPROJ_OBJECTIVE) reaches the broker in each ``place``
request: by time the kernel goes to pthread, by energy to basic, and a slowdown bound
that basic misses sends it back to pthread."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clproj import settings
from clproj.runtime.cluster import placement
from clproj.runtime.cluster.client.platform import MEM_READ_ONLY, RemotePlatform
from clproj.runtime.projection.model import project
from clproj.runtime.projection.power import pick, project_power

ROOT = Path(__file__).resolve().parents[2]


PAIR = {"basic/0": ("pocl-basic-amd-epyc", 15.0), "pthread/0": ("pocl-pthread-amd-epyc", 150.0)}


@pytest.fixture()
def projected(powered_profile) -> dict[str, tuple[float, float]]:
    """device id -> (projected seconds, projected joules) of heavy_fma's kernel."""
    doc = json.loads(
        (ROOT / "benchmarks/results/kernel-profiles/heavy_fma-paper-single.json").read_text()
    )
    group = doc["groups"][0]
    kp = group["variants"][0]["profile"]
    out = {}
    for dev, (key, tdp) in PAIR.items():
        prof = powered_profile(key, tdp)
        p = project(kp, prof, group["footprint_bytes"])
        pw = project_power(p, kp, prof)
        assert pw.energy_j is not None
        out[dev] = (p.time_s, pw.energy_j)
    t, e = {d: v[0] for d, v in out.items()}, {d: v[1] for d, v in out.items()}
    # the premise: pthread is faster, basic uses less energy
    assert t["pthread/0"] < t["basic/0"] and e["basic/0"] < e["pthread/0"]
    return out


@pytest.fixture(scope="module")
def cluster(module_cluster):
    return module_cluster


SRC = """
__kernel void advance(__global float *a, __global const float *b, const float s, const int reps) {
    int i = get_global_id(0);
    float x = a[i];
    for (int r = 0; r < reps; ++r) x = x * 0.999f + b[i] * s;
    a[i] = x;
}
"""


def _placed(
    endpoint: str, n: int, projected: dict[str, tuple[float, float]], energies: bool = True
) -> tuple[str, str]:
    """(device, reason) of the last of four launches of a kernel of global size ``n``
    (a key of its own) after posting its projection; the output is checked."""
    plat = RemotePlatform(endpoint)
    try:
        a0 = np.linspace(0, 1, n, dtype=np.float32)
        b0 = np.full(n, 0.5, np.float32)
        prog = plat.create_program(SRC)
        plat.build_program(prog)
        k = plat.create_kernel(prog, "advance")
        A = plat.create_buffer(a0.nbytes, hostbuf=a0)
        B = plat.create_buffer(b0.nbytes, MEM_READ_ONLY, hostbuf=b0)
        k.set_args(A, B, np.float32(0.25), np.int32(2))
        key = plat.kernel_key(k, [n])
        plat.post_projection(
            key,
            {d: v[0] for d, v in projected.items()},
            energies={d: v[1] for d, v in projected.items()} if energies else None,
        )
        for _ in range(4):
            plat.enqueue_launch(k, [n])
        out = np.empty_like(a0)
        plat.enqueue_read(A, out)
        x = a0.astype(np.float64)
        for _ in range(4 * 2):
            x = x * 0.999 + 0.5 * 0.25
        np.testing.assert_allclose(out, x, rtol=1e-4)
        return plat.placements[-1][1], plat.placements[-1][2]
    finally:
        plat.close()


@pytest.fixture()
def objective_env(monkeypatch: pytest.MonkeyPatch):
    def set_(objective: str | None = None, max_slowdown: float | None = None) -> None:
        for name, v in (("CLPROJ_OBJECTIVE", objective), ("CLPROJ_MAX_SLOWDOWN", max_slowdown)):
            if v is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(v))
        settings.reload()

    yield set_
    settings.reload()


def test_objective_energy_changes_the_placement_time_does_not(
    cluster, projected, objective_env
) -> None:
    ep = cluster["endpoint"]
    objective_env()
    assert _placed(ep, 1024, projected)[0] == "pthread/0"
    objective_env("time")
    assert _placed(ep, 1040, projected)[0] == "pthread/0"
    objective_env("energy")
    dev, reason = _placed(ep, 1056, projected)
    assert dev == "basic/0" and "energy" in reason
    # EDP: basic's energy saving outweighs its delay on this pair only if it does
    (tb, eb), (tp, ep_) = projected["basic/0"], projected["pthread/0"]
    objective_env("edp")
    assert _placed(ep, 1072, projected)[0] == ("basic/0" if eb * tb < ep_ * tp else "pthread/0")
    # a slowdown bound basic misses: the fastest again, whatever the objective
    slow = tb / tp - 1
    objective_env("energy", max_slowdown=slow / 2)
    assert _placed(ep, 1088, projected)[0] == "pthread/0"
    objective_env("energy", max_slowdown=slow * 2)
    assert _placed(ep, 1104, projected)[0] == "basic/0"


def test_energy_without_posted_energies_places_by_time(cluster, projected, objective_env) -> None:
    """No device has a projected energy: nothing is placed by a made-up figure."""
    objective_env("energy")
    assert _placed(cluster["endpoint"], 1120, projected, energies=False)[0] == "pthread/0"


def test_place_refuses_an_unknown_objective() -> None:
    from clproj.runtime.cluster import protocol

    msg = protocol.pack("place", id=1, key="k", move={}, remaining=1.0, objective="joy")
    with pytest.raises(protocol.ProtocolError, match="objective"):
        protocol.decode([msg])


# ---- the rule itself (pure) ------------------------------------------------------------
def _views() -> dict[str, placement.DeviceView]:
    return {d: placement.DeviceView(d, 1e9) for d in ("fast", "frugal", "dark")}


TIMES = {"fast": 1.0, "frugal": 1.5, "dark": 1.2}
JOULES: dict[str, Any] = {"fast": 300.0, "frugal": 120.0, "dark": None}


@pytest.mark.parametrize(
    ("objective", "want"),
    [
        (placement.Objective("time"), "fast"),
        (placement.Objective("energy"), "frugal"),
        (placement.Objective("edp"), "frugal"),  # 180 J s against 300
        (placement.Objective("energy", max_slowdown=0.25), "fast"),  # frugal 50% slower
        (placement.Objective("energy", max_slowdown=0.6), "frugal"),
        (placement.Objective("energy", deadline_s=1.1), "fast"),
        (placement.Objective("energy", deadline_s=0.5), "fast"),  # none meets it: fastest
        (placement.Objective("time", deadline_s=2.0), "fast"),
    ],
)
def test_decide_by_objective(objective: placement.Objective, want: str) -> None:
    dec = placement.decide(TIMES, _views(), {}, 10, energies=JOULES, objective=objective)
    assert dec.device == want, dec
    rows = [{"device": d, "time_s": t, "energy_j": JOULES[d]} for d, t in TIMES.items()]
    assert pick(objective.name, rows, objective.deadline_s, objective.max_slowdown) == want


def test_decide_energy_hysteresis_and_unknown_energy() -> None:
    near = {"fast": 100.0, "frugal": 98.0, "dark": None}
    dec = placement.decide(
        TIMES,
        _views(),
        {},
        1,
        current="fast",
        energies=near,
        objective=placement.Objective("energy"),
    )
    assert dec.device == "fast" and "hysteresis" in dec.reason
    none = dict.fromkeys(TIMES)
    dec = placement.decide(
        TIMES, _views(), {}, 1, energies=none, objective=placement.Objective("energy")
    )
    assert dec.device == "fast"
