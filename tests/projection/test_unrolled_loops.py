"""Loops with a compile-time constant trip count: counted by the plugin side, and issued
without their control on GPUs (docs/projection.md "Unrolled loops")."""

from __future__ import annotations

import numpy as np
import pytest

from clproj import miniemu
from clproj.devices.profile import load_profile
from clproj.intercept.record import from_arrays
from clproj.runtime.projection.kernel_stats import issued_instructions

SRC = """
__kernel void fixed(__global float *x, float s) {
  size_t i = get_global_id(0);
  float a = x[i];
  for (int k = 0; k < 64; ++k) a = a * a + s;
  x[i] = a;
}
__kernel void varying(__global float *x, float s, int n) {
  size_t i = get_global_id(0);
  float a = x[i];
  for (int k = 0; k < n; ++k) a = a * a + s;
  x[i] = a;
}
"""


@pytest.fixture(scope="module")
def profiles():
    x = np.full(1024, 0.5, np.float32)
    fixed = from_arrays(SRC, "fixed", [x, np.float32(0.1)], [1024], [256])
    varying = from_arrays(SRC, "varying", [x, np.float32(0.1), np.int32(64)], [1024], [256])
    return (
        miniemu.emulate(fixed, mode="single").to_dict(),
        miniemu.emulate(varying, mode="single").to_dict(),
    )


def test_constant_trip_loops_are_counted(profiles):
    fixed, varying = profiles
    headers = fixed["total"]["loops"]["constant_trip_headers"]
    assert 64 * 1024 <= headers <= 65 * 1024  # one per trip (the entry test may add one)
    assert "loops" not in varying["total"]  # n is an argument: not a constant trip count


def test_gpus_issue_no_control_for_them_and_cpus_do(profiles):
    fixed, varying = profiles
    gpu, cpu = load_profile("v100-pcie-spec"), load_profile("pocl-pthread-amd-epyc")
    on_gpu, on_cpu = (
        issued_instructions(fixed["total"], gpu),
        issued_instructions(fixed["total"], cpu),
    )
    counted = fixed["total"]["instructions"]
    assert on_cpu == pytest.approx({k: float(v) for k, v in counted.items()})
    for cls in ("int_add", "compare_select", "branch"):
        assert (
            on_gpu.get(cls, 0) <= counted.get(cls, 0) - 60 * 1024 or counted.get(cls, 0) < 64 * 1024
        )
    assert on_gpu["fp32_fma"] == counted["fp32_fma"]  # the work itself stays
    assert issued_instructions(varying["total"], gpu) == pytest.approx(
        {k: float(v) for k, v in varying["total"]["instructions"].items()}
    )
