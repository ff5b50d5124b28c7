"""Pointer-chase latency benchmark on PoCL: sane numbers, and a chase whose loads skip
hops (the end node is wrong) is rejected instead of reported."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from clproj.devices.discovery import opencl_devices
from clproj.devices.microbench import latency
from clproj.devices.microbench.common import MODES, Bench, GarbageResult


@pytest.fixture(scope="module")
def bench() -> Bench:
    devs = [d for d in opencl_devices() if "pthread" in d.name]
    if not devs:
        pytest.skip("PoCL pthread device not present")
    return Bench(devs[0], dataclasses.replace(MODES["tiny"], reps=2))


def test_chase_layout_is_one_cycle(bench: Bench) -> None:
    c = latency.Chase(bench, 64 << 10, lanes=8)
    assert c.node_words * 4 >= 128  # consecutive hops never share a cache line
    host = np.empty(c.n * c.node_words, np.uint32)
    bench.read(c.buf, host)
    node, seen = 0, set()
    for _ in range(c.n):
        seen.add(node)
        row = host[node * c.node_words : node * c.node_words + 8]
        assert (row == row[0]).all()  # every lane of a warp reads the same pointer
        node = int(row[0]) // c.node_words
    assert node == 0 and len(seen) == c.n  # a single cycle through all nodes


def test_measure_gives_sane_latencies(bench: Bench) -> None:
    r = latency.measure(bench, warp=8)
    assert 1e-10 < r["cache_latency_s"] < 1e-5
    assert 1e-9 < r["global_latency_s"] < 1e-4
    assert 0 < r["departure_delay_s"] < 1e-4
    assert len(r["points"]) >= 2 and all(t > 0 for _, t in r["points"])
    assert r["node_bytes"] >= 128


def test_wrong_chase_is_rejected(bench: Bench, monkeypatch) -> None:
    # A kernel that hops twice per step walks the cycle too fast: its end nodes are wrong.
    bad = latency.chase_source

    def skip(ilp: int) -> str:
        return bad(ilp).replace("p0 = nxt[p0 + lane];", "p0 = nxt[nxt[p0 + lane] + lane];")

    monkeypatch.setattr(latency, "chase_source", skip)
    c = latency.Chase(bench, 64 << 10, lanes=8, seed=3)
    with pytest.raises(GarbageResult, match="latency"):
        c.run(1, 1, 0.001, 1, single=True)
