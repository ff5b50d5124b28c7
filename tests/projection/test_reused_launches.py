"""Launches the reuse cache answers after the app (project mode's deferred launches): the
same projections whether one process or several make them, and in launch order."""

from __future__ import annotations

from clproj.benchmarks.reused_projection import meta, seeded_cache
from clproj.runtime.projection import device_set
from clproj.runtime.projection.live import project_reused

N = 256


def test_reused_launches_project_alike_in_one_process_or_several():
    """LU's update step at N rows: two pivots emulated (0 and N/2, the anchors), the other
    launches answered by the reuse cache."""
    cache = seeded_cache(N)
    devices = device_set.resolve("measured")
    deferred = [meta(N, k) for k in range(1, N - 2) if k != N // 2]
    serial = list(project_reused(deferred, cache, devices, "bounded", workers=1))
    forked = list(project_reused(deferred, cache, devices, "bounded", workers=2))
    assert len(serial) == len(forked) == len(deferred)
    assert [d["signature"] for d in forked] == [r.signature for r in deferred]
    for d in serial + forked:
        assert d.pop("elapsed_s") >= 0  # wall time: the one field that may differ
    assert forked == serial
    assert all(d.get("projections") and d["emulation"]["method"] == "reused" for d in forked)


def test_a_kernel_of_many_shapes_is_one_row_of_the_table():
    """Thousands of launch shapes (PolyBench lu) make one row per kernel: the mean
    projected time per device and how many shapes chose the recommended device; a kernel
    of one shape shows that launch's own measured time."""
    import io

    from rich.console import Console

    from clproj.runtime.projection.table import SHAPES_PER_ROW, print_projections

    def doc(kernel: str, n: int, pick: str) -> dict:
        return {
            "kernel": kernel,
            "global_size": [n],
            "recommended": pick,
            "emulation": {"confidence": "medium"},
            "projections": [
                {"device": "gpu", "time_s": n * 1e-6, "bound": "G"},
                {"device": "cpu", "time_s": 2e-6, "bound": "C"},
            ],
        }

    many = [doc("step", n, "gpu" if n > 2 else "cpu") for n in range(1, SHAPES_PER_ROW + 3)]
    once = {**doc("once", 7, "cpu"), "measured_time_ns": 5300, "measured_device": "cpu0"}
    measured = [
        {"kernel": "step", "mean_ns": 42000, "device": "cpu0"},
        {"kernel": "once", "mean_ns": 99000, "device": "cpu0"},
    ]
    out = io.StringIO()
    print_projections([*many, once], measured, to=Console(file=out, width=400))
    lines = [ln for ln in out.getvalue().splitlines() if "step" in ln or "once" in ln]
    assert len(lines) == 2, out.getvalue()
    mean_us = sum(range(1, SHAPES_PER_ROW + 3)) / len(many)
    assert f"step[{len(many)} shapes]" in lines[0]
    assert f"{mean_us:.1f} us G (mean of {len(many)})" in lines[0]
    assert f"gpu ({len(many) - 2} of {len(many)})" in lines[0]
    assert "once[7]" in lines[1] and "7.0 us G" in lines[1]
    # the measured column: a kernel of one shape, its mean over its launches; a row over
    # many shapes, the kernel's mean, marked
    assert "99.0 us on cpu0" in lines[1] and "5.3" not in lines[1]
    assert "42.0 us on cpu0 (kernel mean)" in lines[0]
    # a kernel of two shapes: each row its own recorded launch
    two = [{**doc("pair", n, "cpu"), "measured_time_ns": n * 1000} for n in (3, 5)]
    out = io.StringIO()
    print_projections(two, [{"kernel": "pair", "mean_ns": 4000}], to=Console(file=out, width=400))
    rows = [ln for ln in out.getvalue().splitlines() if "pair[" in ln]
    assert "3.0 us on  (first)" in rows[0] and "5.0 us on  (first)" in rows[1], out.getvalue()
