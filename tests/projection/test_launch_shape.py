"""A NULL-local launch is projected in the groups each device's driver would run it with:
the same time as the launch with that local size written out, on every kind of device."""

from __future__ import annotations

import numpy as np
import pytest

from clproj import miniemu
from clproj.devices.profile import load_profile
from clproj.intercept.record import from_arrays
from clproj.runtime.projection.launch_shape import for_device
from clproj.runtime.projection.model import project

COPY = """
__kernel void copy(__global const double *a, __global double *c) {
  const size_t i = get_global_id(0);
  c[i] = a[i];
}
"""
N = 1 << 20
DEVICES = ("hd7970-spec", "h100-sxm-spec", "nvidia-h100-80gb-hbm3-nvidia", "pocl-pthread-amd-epyc")


@pytest.fixture(scope="module")
def profiles():
    a = np.arange(N, dtype=np.float64)

    def emulate(local):
        rec = from_arrays(COPY, "copy", [a, np.zeros_like(a)], [N], local)
        return miniemu.emulate(rec, mode="single").to_dict()

    shapes = {n: emulate([n]) for n in (1, 256, 1024)}  # Oclgrind runs at most 1024
    return {"null": emulate(None), **shapes}


@pytest.mark.parametrize("key", DEVICES)
def test_null_local_is_projected_as_the_drivers_groups(profiles, key):
    device = load_profile(key)
    null = profiles["null"]
    assert null["launch"]["local_size_was_null"]
    assert null["launch"]["local_size"] == [256]  # the representative group emulated
    shaped = for_device(null, device)
    chosen = device.null_local_size([N])
    assert shaped["launch"]["local_size"] == chosen
    assert shaped["launch"]["num_groups"] == N // chosen[0]
    assert shaped["per_group"]["work_items"] == chosen[0]
    t_null = project(null, device).time_s
    if chosen[0] <= 1024:  # PoCL's 4096 is beyond what Oclgrind emulates written out
        t_explicit = project(profiles[chosen[0]], device).time_s
        assert t_null == pytest.approx(t_explicit, rel=0.03)
    # One-work-item groups, how the emulator alone would run it, cost GPUs far more.
    t_single_items = project(profiles[1], device).time_s
    if device.kind == "GPU":
        assert t_single_items > 4 * t_null


def test_explicit_local_sizes_are_left_alone(profiles):
    device = load_profile("hd7970-spec")
    assert for_device(profiles[1024], device) is profiles[1024]
