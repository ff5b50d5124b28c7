"""Benchmark apps: registry contract, plans valid on any device, numpy verification on every
OpenCL device at small sizes, and checks that really reject wrong outputs."""

from __future__ import annotations

import numpy as np
import pytest

from clproj.benchmarks.apps import APPS, get_app
from clproj.benchmarks.apps.base import Plan
from clproj.benchmarks.apps.execute import execute

PAPER = {
    "floydwarshall": 192,
    "fastwalsh": 1048576,
    "matmul_gmem": 1024,
    "matmul_lmem": 1024,
    "reduction": 1048576,
    "nbody": 32768,
    "aes": (1536, 512),
    "transpose_lmem": 1024,
}


def test_registry_has_the_papers_apps_at_paper_sizes_and_more() -> None:
    for name, size in PAPER.items():
        app = get_app(name)
        assert app.paper and app.sizes["paper"] == size
    extra = [a for a in APPS.values() if not a.paper]
    assert len(extra) >= 8
    for app in APPS.values():
        assert app.description and app.stresses, app.name
        assert "small" in app.sizes and ("paper" in app.sizes or "default" in app.sizes)
    with pytest.raises(KeyError, match="known"):
        get_app("no-such-app")


@pytest.mark.parametrize("size", ["small", "paper"])
def test_plans_are_valid_on_any_device(size: str) -> None:
    """Local sizes <= 256 divide the global size; every argument names a real buffer."""
    for app in APPS.values():
        plan = app.plan(size)
        assert isinstance(plan, Plan) and plan.launches and plan.source
        for out in plan.outputs:
            assert out in plan.buffers, (app.name, out)
        for launch in plan.launches:
            assert f"void {launch.kernel}(" in plan.source, (app.name, launch.kernel)
            if launch.local_size is not None:
                assert np.prod(launch.local_size) <= 256, app.name
                assert all(
                    g % loc == 0
                    for g, loc in zip(launch.global_size, launch.local_size, strict=True)
                ), app.name
            for kind, value in launch.args:
                assert kind in ("buf", "scalar", "local"), app.name
                if kind == "buf":
                    assert value in plan.buffers, (app.name, value)
                if kind == "scalar":
                    assert isinstance(value, np.generic), (app.name, value)


@pytest.mark.parametrize("name", list(APPS))
def test_check_rejects_a_wrong_output(name: str) -> None:
    """A test that cannot fail is a defect: the reference passes, a perturbed one does not."""
    app = APPS[name]
    plan = app.plan("small")
    ref = app.reference(plan)
    app.check(plan, {k: v.copy() for k, v in ref.items()})
    bad = {k: v.copy() for k, v in ref.items()}
    out = bad[plan.outputs[0]].reshape(-1)
    if out.dtype.kind == "f":
        out[out.size // 2] = out[out.size // 2] * 1.5 + 1.0
    else:
        out[out.size // 2] += 1
    with pytest.raises(AssertionError, match=name):
        app.check(plan, bad)


def test_aes_reference_matches_fips197() -> None:
    from clproj.benchmarks.apps import aes_ref

    key = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
    plain = np.frombuffer(bytes.fromhex("00112233445566778899aabbccddeeff"), dtype=np.uint8)[None]
    got = aes_ref.encrypt(plain, aes_ref.expand_key(key)).tobytes().hex()
    assert got == "69c4e0d86a7b0430d8cdb78070b4c55a"


@pytest.mark.parametrize("name", list(APPS))
def test_app_verifies_on_device(name: str, cl_queue) -> None:
    app = APPS[name]
    reason = app.unsupported_reason(cl_queue.device)
    if reason:
        pytest.skip(reason)
    plan = app.plan("small", seed=1)
    res = execute(plan, cl_queue)
    assert len(res.launch_times_ns) == len(plan.launches)
    assert all(t > 0 for t in res.launch_times_ns)
    app.check(plan, res.outputs)


def test_execute_repeats_reset_buffers(cl_queue) -> None:
    """In-place apps do the same work every repeat: outputs of the first run still verify
    and every timed run has one time per launch."""
    app = APPS["fastwalsh"]
    plan = app.plan(2048)
    res = execute(plan, cl_queue, repeat=3, warmup=1)
    assert len(res.repeat_times_ns) == 3
    assert all(len(r) == len(plan.launches) == 11 for r in res.repeat_times_ns)
    app.check(plan, res.outputs)
