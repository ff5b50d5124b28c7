"""The work-group size a device's driver picks for a NULL local size, observed.

Drivers document their choice in source at best (PoCL, AMD) and not at all (NVIDIA), so a
measured profile records what the driver did: a probe kernel writes ``get_local_size``
for launches of many global sizes (1-3 dimensions, powers of two, a prime, BabelStream's
array sizes). :func:`identify` then names the rule of ``devices.launch_rules`` that
reproduces every observation, trying PoCL's rule and the divisor rule at the device's
maximum work-group size and at each smaller power of two; the first that reproduces all
of them becomes the profile's ``driver.null_local``. None reproducing all leaves the
vendor's rule in place and the observations in ``detail.null_local`` for a reader.
Choosing among documented rules by exact agreement with the driver is identification,
not fitting: no number is tuned to a kernel's time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clproj.devices.launch_rules import NullLocalRule

PROBE_SRC = """
__kernel void probe(__global uint *out) {
  if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) {
    out[0] = get_local_size(0); out[1] = get_local_size(1); out[2] = get_local_size(2);
  }
}
"""
SIZES: tuple[tuple[int, ...], ...] = (
    (1,), (7,), (64,), (100,), (1000,), (1024,), (4096,), (65536,), (1_000_003,),
    (50_000_000,), (52_428_800,), (33_554_432,), (512, 512), (2048, 2048), (10, 30),
    (3, 4096), (64, 64, 64), (6, 6, 6), (1000, 1000), (96, 250),
)  # fmt: skip


def observe(bench: Any) -> list[dict[str, list[int]]]:
    """``[{"global": [...], "local": [...]}]``: the driver's choice for every probe size."""
    cl = bench.cl
    kernel = bench.kernel(PROBE_SRC, "probe")
    out = cl.Buffer(bench.ctx, cl.mem_flags.READ_WRITE, 16)
    kernel.set_arg(0, out)
    seen = []
    for gs in SIZES:
        cl.enqueue_nd_range_kernel(bench.queue, kernel, gs, None).wait()
        host = np.zeros(4, np.uint32)
        cl.enqueue_copy(bench.queue, host, out)
        seen.append({"global": list(gs), "local": [int(x) for x in host[: len(gs)]]})
    return seen


def preferred_multiple(bench: Any) -> int:
    kernel = bench.kernel(PROBE_SRC, "probe")
    info = bench.cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE
    return int(kernel.get_work_group_info(info, bench.device))


def candidates(max_wg: int, cus: int, multiple: int) -> list[NullLocalRule]:
    """The rules :func:`identify` tries, in order."""
    rules = [NullLocalRule("pocl", max_wg, cus, multiple)]
    limit = max_wg
    while limit >= 32:
        rules.append(NullLocalRule("divisor", limit, cus, 1))
        limit = 1 << (limit.bit_length() - 1) if limit & (limit - 1) else limit // 2
    return rules


def identify(
    seen: list[dict[str, list[int]]], max_wg: int, cus: int, multiple: int
) -> dict[str, Any] | None:
    """The ``driver.null_local`` section of the first rule that reproduces ``seen``."""
    for rule in candidates(max_wg, cus, multiple):
        if all(rule.choose(s["global"]) == s["local"] for s in seen):
            section: dict[str, Any] = {
                "rule": rule.rule,
                "limit": rule.limit,
                "source": f"measured: reproduces the driver's choice for all {len(seen)} "
                "probe sizes (devices/microbench/null_local.py)",
            }
            if rule.rule == "pocl":
                section["multiple"] = rule.multiple
            return section
    return None
