"""Microbenchmarks on the real PoCL devices: a tiny run gives a valid, sane profile, and a
kernel that computes the wrong result is rejected instead of reported."""

from __future__ import annotations

import dataclasses

import pytest

from clproj.devices.discovery import opencl_devices
from clproj.devices.microbench import common, compute, gmem
from clproj.devices.microbench.common import MODES, Bench, GarbageResult
from clproj.devices.microbench.runner import profile_device
from clproj.devices.profile import DeviceProfile
from clproj.devices.profile_check import validate
from clproj.errors import ClprojError


@pytest.fixture(scope="module")
def pocl_device():
    devs = [d for d in opencl_devices() if "pthread" in d.name]
    if not devs:
        pytest.skip("PoCL pthread device not present")
    return devs[0]


@pytest.fixture(scope="module")
def tiny_doc(pocl_device):
    return profile_device(pocl_device, "tiny", key="test-tiny")


def test_tiny_run_gives_a_valid_sane_profile(tiny_doc, pocl_device) -> None:
    validate(tiny_doc)
    p = DeviceProfile(tiny_doc)
    assert p.kind == "CPU" and p.compute_units == pocl_device.max_compute_units
    assert p.warp_width in (4, 8, 16)
    assert p.local_banks == 0 and not p.has_bank_conflicts
    assert tiny_doc["source"]["rejected"] == []
    ghz = pocl_device.max_clock_frequency * 1e-3
    cores = p.compute_units
    for cls in (
        "fp32_add",
        "fp32_mul",
        "fp32_fma",
        "fp64_fma",
        "int_add",
        "int_mul",
        "special",
        "conversion",
        "int_div",
        "fp32_div",
    ):
        ops = tiny_doc["throughput"][cls]
        # at least one op per 1000 cycles, at most 64 lanes x 4 pipes per cycle per core
        assert cores * ghz * 1e9 / 1000 < ops < cores * ghz * 1e9 * 256, (cls, ops)
        assert tiny_doc["provenance"][f"throughput.{cls}"] == "measured"
    for name in ("global_read", "global_write", "global_copy", "local", "strided_read"):
        for _, y in tiny_doc["curves"][name]:
            assert 1e7 < y < 1e12, (name, y)  # 10 MB/s .. 1 TB/s on a CPU
    assert 1e-7 < p.launch_overhead_s < 0.05
    assert 1e7 < p.h2d_bytes_per_s < 1e12 and 1e7 < p.d2h_bytes_per_s < 1e12
    assert set(tiny_doc["detail"]["global_by_word"]) == {"4", "16"}
    # the launch floor per group count: 1 .. at least 32 groups, each a real device time
    groups = tiny_doc["detail"]["launch"]["groups"]
    assert groups[0][0] == 1 and groups[-1][0] >= 32
    assert all(1e-8 < t < 0.05 for _, t in groups)
    assert tiny_doc["provenance"]["detail.launch.groups"] == "measured"
    assert p.launch_floor(1) == groups[0][1] and p.launch_floor(10_000) == groups[-1][1]
    # a loop's accumulator round per work-item: at most a microsecond, at least a cycle
    # shared by 64 SIMD lanes (a PoCL that runs the loop across work-items, as PoCL 5 can,
    # overlaps the work-items' chains)
    rounds = tiny_doc["detail"]["raw_loop"]
    for key in ("raw_round_s", "reload_round_s", "fma_round_s", "add_round_s"):
        assert 1 / (ghz * 1e9 * 64) < rounds[key] < 1e-6, (key, rounds[key])


@pytest.fixture
def bench(pocl_device) -> Bench:
    return Bench(pocl_device, dataclasses.replace(MODES["tiny"], reps=1))


# Real kernels that compute the wrong thing: they skip every other word.
HALF_READ_GPU = gmem.READ_SRC.replace("a += src[i];", "a += src[i] & (T)(0);")
HALF_READ_CPU = gmem.READ_BLOCK_SRC.replace("k < BLOCK; ++k", "k < BLOCK; k += 2")


def test_wrong_global_read_is_rejected(bench, monkeypatch) -> None:
    monkeypatch.setattr(gmem, "READ_BLOCK_SRC", HALF_READ_CPU)
    monkeypatch.setattr(gmem, "READ_SRC", HALF_READ_GPU)
    gm = gmem.GlobalMemory(bench)
    with pytest.raises(GarbageResult, match="global_read"):
        gm.read(4, 64, 2)
    assert gm.write(4, 64, 2, seed=5) > 0  # the others still check out


def test_strided_reads_stay_inside_the_buffer(bench, pocl_device) -> None:
    """Every group size the device allows, every stride: the last word a strided read
    touches is inside the source buffer (it was not with 4096-item groups at stride 8)."""
    gm = gmem.GlobalMemory(bench)
    words = gm.nbytes // 4
    wg = 1
    while wg <= pocl_device.max_work_group_size:
        for stride in (1, 2, 8, 32):
            _, gsize, group, nreads = gm.stride_grid(stride, wg, 1)
            assert gsize % group == 0 and nreads * stride <= words, (wg, stride)
        wg *= 2


def test_wrong_compute_kernel_is_rejected(bench) -> None:
    op = next(o for o in compute.OPS if o.name == "fp32_fma")
    wrong = dataclasses.replace(op, body="fma(x, a, b) * 1.001f")
    with pytest.raises(GarbageResult, match="fp32_fma"):
        compute.Compute(bench).run(wrong)
    intop = next(o for o in compute.OPS if o.name == "int_add")
    with pytest.raises(GarbageResult):
        compute.Compute(bench).run(dataclasses.replace(intop, body="(x ^ a) + b + 1u"))


def test_wrong_reload_chain_is_rejected(bench, monkeypatch) -> None:
    """The reload round's second accumulator is checked too: a kernel that drops it
    (one accumulator: the fast register-forwarded form) is garbage, not a fast round."""
    from clproj.devices.microbench import raw_loop

    one = raw_loop.SRC.replace("acc2[i] += a[(j + 7u) & 255u] * s;", "")
    assert one != raw_loop.SRC
    monkeypatch.setattr(raw_loop, "SRC", one)
    with pytest.raises(GarbageResult, match="raw_loop reload"):
        raw_loop.measure(bench)


def test_profiling_refuses_to_report_garbage(pocl_device, monkeypatch) -> None:
    bad = [
        o if o.name != "fp32_fma" else dataclasses.replace(o, body="fma(x, a, b) + 0.5f")
        for o in compute.OPS
        if o.cls in ("fp32_fma", "int_add")
    ]
    monkeypatch.setattr(compute, "OPS", tuple(bad))
    monkeypatch.setitem(
        common.MODES,
        "tiny",
        dataclasses.replace(MODES["tiny"], words=(4,), strides=(1,), conflicts=(1,)),
    )
    monkeypatch.setattr(common, "occupancy_grid", lambda *a, **k: [(64, 2)])
    import clproj.devices.microbench.runner as runner

    monkeypatch.setattr(runner, "occupancy_grid", lambda *a, **k: [(64, 2)])
    with pytest.raises(ClprojError, match=r"throughput\.fp32_fma") as exc:
        profile_device(pocl_device, "tiny")
    assert "fp32_fma computed a wrong result" in exc.value.cause
