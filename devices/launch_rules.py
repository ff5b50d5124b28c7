"""How a device's OpenCL driver shapes a launch the app left to it: the NULL local size.

An app that passes ``local_work_size = NULL`` lets the driver choose the work-group size,
and each driver chooses differently. The choice decides how many groups run, how many
are resident per compute unit and whether warps are full, so a projection has to use
the group size the target device's driver would pick, not the emulator's (Oclgrind
picks one work-item per group, which made a streaming kernel 13x-170x too slow on every
GPU). Two rules cover the drivers clproj profiles:

``pocl``
    PoCL's CPU drivers (``pocl_default_local_size_optimizer`` in PoCL's
    ``lib/CL/clEnqueueNDRangeKernel.c`` / ``devices/common.c``): in every dimension the
    largest multiple of ``gcd(preferred multiple, global)`` that divides the global size
    and fits the per-dimension limit; then the group is shrunk to the device's maximum
    work-group size (halving z, then y, then x while the halves still divide; else the
    dimension of smallest grain set to 1); then, while there are fewer groups than
    compute units, a dimension is split (z, y, x first) as long as the group stays at
    least four preferred multiples large. Checked against the PoCL here by
    ``tests/devices/test_launch_rules.py`` (every size it tries, both PoCL drivers).
``divisor``
    AMD's OpenCL runtime (ROCclr ``device/devkernel.cpp``, ``Kernel::FindLocalWorkSize``;
    the same loop in the AMD APP runtime of the GCN era): for each dimension in turn the
    largest divisor of its global size not above what is left of the kernel's work-group
    size (``limit``, 256 on AMD GPUs), the next dimension taking the quotient.

NVIDIA does not document its choice; its profiles use the ``divisor`` rule at the
device's maximum work-group size, marked ``assumed`` in the rule's source until
``scripts/gpu/`` measures it on the device (it writes ``get_local_size`` of NULL-local
launches). A profile can name its rule in ``driver.null_local`` (docs/formats.md); one
that does not gets its vendor's rule (:func:`rule_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from clproj.errors import ClprojError

RULES = ("pocl", "divisor")
# AMD's runtimes report 256 as a kernel's work-group size unless the kernel asks for more
# (CL_KERNEL_WORK_GROUP_SIZE on GCN and CDNA; ROCclr's preferred work-group size).
AMD_KERNEL_WORK_GROUP_SIZE = 256
# PoCL's CPU devices prefer multiples of 8 work-items (CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_
# MULTIPLE, read from the PoCL 3.1 here and the PoCL 5 of the Xeon host alike).
POCL_PREFERRED_MULTIPLE = 8
POCL_SOURCE = (
    "PoCL pocl_default_local_size_optimizer (lib/CL/devices/common.c); checked against "
    "the PoCL driver by tests/devices/test_launch_rules.py"
)
AMD_SOURCE = "AMD ROCclr device/devkernel.cpp Kernel::FindLocalWorkSize (also AMD APP SDK runtime)"
NVIDIA_SOURCE = (
    "assumed: NVIDIA does not document its choice; the divisor rule at the device's "
    "maximum work-group size until scripts/gpu measures it"
)
GENERIC_SOURCE = "assumed: the divisor rule at the device's maximum work-group size"


@dataclass(frozen=True)
class NullLocalRule:
    """One driver's rule for a NULL local size, and the device numbers it reads."""

    rule: str  # one of RULES
    limit: int  # largest work-group the driver picks (divisor) / may use (pocl)
    compute_units: int = 1
    multiple: int = 1  # preferred work-group size multiple (pocl)
    source: str = ""

    def choose(self, global_size: list[int] | tuple[int, ...]) -> list[int]:
        """The local size this driver runs a launch of ``global_size`` with."""
        gs = [int(g) for g in global_size]
        if not 1 <= len(gs) <= 3 or any(g < 1 for g in gs):
            raise ClprojError(
                f"global size {gs} is not 1 to 3 positive sizes",
                "check the launch's work_dim and global_size",
            )
        if self.rule == "pocl":
            return pocl_local_size(gs, self.limit, self.compute_units, self.multiple)
        return divisor_local_size(gs, self.limit)


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` not above ``limit`` (``n`` itself when it fits)."""
    if n <= limit:
        return n
    best = 1
    i = 1
    while i * i <= n:
        if n % i == 0:
            for d in (i, n // i):
                if best < d <= limit:
                    best = d
        i += 1
    return best


def divisor_local_size(global_size: list[int], limit: int) -> list[int]:
    """AMD's rule: dimension by dimension, the largest divisor within what is left."""
    left = max(1, limit)
    local = []
    for g in global_size:
        d = largest_divisor(g, left)
        local.append(d)
        left = max(1, left // d)
    return local


def pocl_local_size(global_size: list[int], max_group: int, cus: int, multiple: int) -> list[int]:  # noqa: C901
    """PoCL's rule (module docstring), written for launches of one to three dimensions."""
    dims = len(global_size)
    g = global_size + [1] * (3 - dims)
    multiple = max(1, multiple)
    grain = [math.gcd(multiple, x) for x in g]
    local = [1, 1, 1]
    for d in range(3):
        most = min(max_group, g[d])
        if d == 0 or most > 1:
            local[d] = largest_divisor(g[d] // grain[d], max(1, most // grain[d])) * grain[d]

    def divides_chain(d: int, size: int) -> bool:
        return size % grain[d] == 0 and g[d] % size == 0

    while math.prod(local) > max_group:
        halved = next(
            (d for d in (2, 1, 0) if local[d] % 2 == 0 and divides_chain(d, local[d] // 2)),
            None,
        )
        if halved is not None:
            local[halved] //= 2
            continue
        order = ((2, 0, 1), (1, 2, 0), (0, 1, 2))
        least = next(
            (
                a
                for a, b, c in order
                if local[a] > 1 and grain[a] <= grain[b] and grain[a] <= grain[c]
            ),
            None,
        )
        if least is None:
            least = next(d for d in (2, 1, 0) if local[d] > 1)
        local[least] = 1
    min_group = min(4 * multiple, max_group)
    groups = [g[d] // local[d] for d in range(3)]
    while (splits := cus // math.prod(groups)) > 1 and math.prod(local) >= splits * min_group:
        done = False
        while splits > 1 and not done:
            for d in (2, 1, 0):
                if local[d] % splits == 0 and divides_chain(d, local[d] // splits):
                    local[d] //= splits
                    groups[d] *= splits
                    done = True
                    break
            else:
                splits -= 1
        if done:
            continue
        order = ((2, 0, 1), (1, 2, 0), (0, 1, 2))
        kill = next(
            (
                a
                for a, b, c in order
                if local[a] > 1
                and local[a] <= local[b]
                and local[a] <= local[c]
                and local[b] * local[c] >= min_group
            ),
            None,
        )
        if kill is None:
            break
        local[kill] = 1
        groups[kill] = g[kill]
    return local[:dims]


def _vendor_rule(doc: dict[str, Any]) -> NullLocalRule:
    ident = doc.get("identity", {})
    text = " ".join(str(ident.get(k) or "") for k in ("vendor", "name", "platform")).lower()
    max_wg = int(doc.get("occupancy", {}).get("max_work_group_size") or 1)
    cus = int(doc.get("compute_units") or 1)
    if "portable computing language" in text or "pocl" in text:
        return NullLocalRule("pocl", max_wg, cus, POCL_PREFERRED_MULTIPLE, POCL_SOURCE)
    amd = "amd" in text or "advanced micro devices" in text or "ati " in text
    if amd and ident.get("kind") == "GPU":
        limit = min(max_wg, AMD_KERNEL_WORK_GROUP_SIZE)
        return NullLocalRule("divisor", limit, cus, 1, AMD_SOURCE)
    if "nvidia" in text:
        return NullLocalRule("divisor", max_wg, cus, 1, NVIDIA_SOURCE)
    return NullLocalRule("divisor", max_wg, cus, 1, GENERIC_SOURCE)


def rule_for(doc: dict[str, Any]) -> NullLocalRule:
    """The NULL-local rule of a (validated) device profile: its own, else its vendor's."""
    own = (doc.get("driver") or {}).get("null_local")
    if not own:
        return _vendor_rule(doc)
    cus = int(doc.get("compute_units") or 1)
    return NullLocalRule(
        own["rule"], int(own["limit"]), cus, int(own.get("multiple", 1)), str(own["source"])
    )


def validate_rule(section: Any) -> str | None:
    """Why ``driver.null_local`` of a profile is invalid, or None when it is valid."""
    if not isinstance(section, dict):
        return f"expected an object, got {type(section).__name__}"
    if section.get("rule") not in RULES:
        return f"rule must be one of {', '.join(RULES)}, got {section.get('rule')!r}"
    for key in ("limit", "multiple"):
        v = section.get(key, 1)
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 2**20:
            return f"{key} must be an integer from 1 to 2^20, got {v!r}"
    if not isinstance(section.get("source"), str) or not section["source"]:
        return "source must name where the rule comes from"
    return None
