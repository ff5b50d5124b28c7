"""Plugin counters the projection's cache and special-function terms rely on, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from clproj import miniemu
from clproj.intercept.record import from_arrays


@pytest.mark.parametrize("halo", [0, 1, 2])
def test_unique_sector_bytes_of_a_stencil_group(halo):
    """A group of 256 reads floats [g*256, g*256 + 256 + halo) and writes 256 floats."""
    terms = " + ".join(f"a[i + {k}]" for k in range(halo + 1))
    src = f"__kernel void k(__global const float* a, __global float* o) {{ int i = get_global_id(0); o[i] = {terms}; }}"
    n = 1024
    rec = from_arrays(src, "k", [np.ones(n + 8, np.float32), np.zeros(n, np.float32)], [n], [256])
    group = miniemu.emulate(rec, mode="single").to_dict()["per_group"]["global"]
    read_sectors = -(-(256 + halo) * 4 // 32)  # ceil: the buffer starts sector-aligned
    write_sectors = 256 * 4 // 32
    assert group["unique_sector_bytes"] == 32 * (read_sectors + write_sectors)
    assert group["load_bytes"] == 4 * 256 * (halo + 1)


def test_special_functions_are_counted_per_family():
    src = """__kernel void k(__global const float* a, __global float* o) {
        int i = get_global_id(0); float x = a[i];
        o[i] = sqrt(x) + native_sqrt(x) + rsqrt(x) + exp(x) + pow(x, 1.5f) + log(x) + sin(x) + cos(x) + fmod(x, 2.0f); }"""
    a = np.linspace(1, 2, 128, dtype=np.float32)
    rec = from_arrays(src, "k", [a, np.zeros_like(a)], [128], [64])
    total = miniemu.emulate(rec, mode="full").to_dict()["total"]
    fam = total["special_functions"]
    assert fam == {"sqrt": 256, "rsqrt": 128, "exp": 256, "log": 128, "sin": 256, "other": 128}
    assert total["instructions"]["special"] == sum(fam.values())
