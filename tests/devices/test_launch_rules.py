"""The NULL-local rules of devices/launch_rules.py: PoCL's against the PoCL driver itself,
AMD's divisor rule on its documented cases, and the profile section that names a rule."""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pyopencl as cl
import pytest

from clproj.devices.launch_rules import divisor_local_size, largest_divisor, rule_for
from clproj.devices.profile import PROFILES_DIR, DeviceProfile
from clproj.errors import ClprojError

PROBE = """
__kernel void probe(__global uint *out) {
  if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) {
    out[0] = get_local_size(0); out[1] = get_local_size(1); out[2] = get_local_size(2);
  }
}
"""


def _sizes() -> list[tuple[int, ...]]:
    """Shapes a driver meets: BabelStream's two array sizes, a prime, powers of two,
    sizes below a preferred multiple, 2-D and 3-D grids, and random mixes of them."""
    fixed = [(1,), (7,), (64,), (100,), (1024,), (4096,), (50_000_000,), (52_428_800,)]
    fixed += [(1_000_003,), (512, 512), (2048, 2048), (10, 30), (64, 64, 64), (3, 4096), (6, 6, 6)]
    rng = random.Random(7)
    parts = [1, 2, 3, 5, 8, 12, 16, 24, 30, 64, 96, 100, 128, 250, 256, 1000, 1024]
    mixed = [tuple(rng.choice(parts) for _ in range(rng.randint(1, 3))) for _ in range(40)]
    return fixed + mixed


def test_pocl_rule_is_what_the_pocl_driver_picks(cl_device):
    if "Portable Computing Language" not in cl_device.platform.name:
        pytest.skip("the pocl rule describes PoCL's drivers")
    ctx = cl.Context([cl_device])
    queue = cl.CommandQueue(ctx)
    kernel = cl.Program(ctx, PROBE).build().probe
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)
    # The profile fields the rule reads, as a profile of this device holds them.
    doc = {
        "identity": {
            "vendor": cl_device.vendor,
            "name": cl_device.name,
            "kind": "CPU",
            "platform": cl_device.platform.name,
        },
        "occupancy": {"max_work_group_size": cl_device.max_work_group_size},
        "compute_units": cl_device.max_compute_units,
    }
    rule = rule_for(doc)
    assert rule.rule == "pocl"
    wg_multiple = kernel.get_work_group_info(
        cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, cl_device
    )
    assert rule.multiple == wg_multiple
    wrong = []
    for gs in _sizes():
        kernel(queue, gs, None, out)
        host = np.zeros(4, np.uint32)
        cl.enqueue_copy(queue, host, out)
        real = [int(x) for x in host[: len(gs)]]
        if rule.choose(gs) != real:
            wrong.append((gs, real, rule.choose(gs)))
    assert not wrong, f"global size, driver's choice, rule's choice: {wrong[:5]}"


def test_divisor_rule_takes_the_largest_divisor_dimension_by_dimension():
    assert divisor_local_size([52_428_800], 256) == [256]
    assert divisor_local_size([50_000_000], 256) == [250]  # 2^7 x 5^8: 256 does not divide
    assert divisor_local_size([1_000_003], 256) == [1]  # a prime
    assert divisor_local_size([100], 256) == [100]
    assert divisor_local_size([2048, 2048], 256) == [256, 1]
    assert divisor_local_size([8, 100], 256) == [8, 25]  # what is left of 256 after 8: 32
    assert largest_divisor(360, 100) == 90


def _profile(key: str) -> dict:
    path = next(PROFILES_DIR.glob(f"*/{key}.json"))
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("key", "rule", "local"),
    [
        ("hd7970-spec", "divisor", [256]),  # AMD: the kernel's work-group size, 256
        ("mi300x-spec", "divisor", [256]),
        ("h100-sxm-spec", "divisor", [1024]),  # NVIDIA: assumed, the device maximum
        ("pocl-pthread-amd-epyc", "pocl", [4096]),
    ],
)
def test_every_profile_has_its_drivers_rule(key, rule, local):
    prof = DeviceProfile(_profile(key))
    assert prof.null_local_rule.rule == rule
    assert prof.null_local_rule.source
    assert prof.null_local_size([52_428_800]) == local


def test_a_profile_may_name_its_rule_and_a_bad_one_is_refused():
    doc = _profile("h100-sxm-spec")
    doc["driver"] = {"null_local": {"rule": "divisor", "limit": 128, "source": "measured"}}
    assert DeviceProfile(doc).null_local_size([52_428_800]) == [128]
    for bad, why in (
        ({"rule": "magic", "limit": 1, "source": "x"}, "rule must be one of"),
        ({"rule": "divisor", "limit": 0, "source": "x"}, "limit must be an integer"),
        ({"rule": "divisor", "limit": True, "source": "x"}, "limit must be an integer"),
        ({"rule": "divisor", "limit": 64}, "source must name"),
        ([], "expected an object"),
    ):
        broken = copy.deepcopy(doc)
        broken["driver"] = {"null_local": bad}
        with pytest.raises(ClprojError, match=f"driver.null_local: {why}"):
            DeviceProfile(broken)


def test_the_probe_identifies_the_drivers_rule(cl_device):
    from clproj.devices.microbench import null_local
    from clproj.devices.microbench.common import MODES, Bench

    bench = Bench(cl_device, MODES["tiny"])
    seen = null_local.observe(bench)
    assert len(seen) == len(null_local.SIZES)
    rule = null_local.identify(seen, bench.max_wg, bench.cus, null_local.preferred_multiple(bench))
    assert rule is not None and rule["source"].startswith("measured")
    if "Portable Computing Language" in cl_device.platform.name:
        assert rule["rule"] == "pocl" and rule["multiple"] == 8
    # A driver no rule reproduces is left to its vendor's rule.
    assert null_local.identify([{"global": [64], "local": [3]}], 64, 1, 8) is None
