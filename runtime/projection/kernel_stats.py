"""How the models read a kernel profile: the keys the Oclgrind plugin counts under, the
instruction classes that cost no issue slot, and whether work-items loop.

One place for these reading rules, because the bound model, the paper's model and MWP-CWP
must agree on them: a model that read warp widths or loop-ness differently would be
compared on a different kernel, not a different idea.
"""

from __future__ import annotations

import math
from typing import Any

WARP_KEYS = (8, 16, 32, 64)
SEGMENT_KEYS = (32, 64, 128)
BANK_KEYS = (16, 32)

# Classes executed by the memory pipeline: their cost is the memory terms, not compute.
MEMORY_CLASSES = {"memory_global", "memory_local", "memory_private"}
# IR bookkeeping that compiles to no ALU operation (phi, bitcast, vector element moves,
# unconditional jumps, work-item id builtins: registers or constants on every device).
# Barriers are priced only where their rate was measured (``throughput.barrier``: on
# PoCL CPUs each one restarts the work-item loop); elsewhere they cost no issue slot.
FREE_CLASSES = {"other"}


def nearest_key(value: int, keys: tuple[int, ...]) -> str:
    """The contract's key closest to ``value`` (in log scale)."""
    return str(min(keys, key=lambda k: abs(math.log2(k) - math.log2(max(1, value)))))


# A kernel whose work-items execute at least this many conditional branches each is
# taken to loop per work-item (a bounds check or two stays below it).
LOOP_BRANCHES_PER_WORK_ITEM = 4.0


def kernel_loops(total: dict[str, Any]) -> bool:
    """Whether the work-items of a launch run loops (from the emulated branch counts)."""
    items = total.get("work_items") or 0
    return (
        bool(items)
        and total.get("branches", {}).get("total", 0) / items >= LOOP_BRANCHES_PER_WORK_ITEM
    )


# The loop control a device compiler removes when it unrolls a loop: one induction-variable
# increment, one exit compare and one back-branch per trip.
LOOP_CONTROL_CLASSES = ("int_add", "compare_select", "branch")


def issued_instructions(total: dict[str, Any], device: Any) -> dict[str, float]:
    """Instruction counts per class as the device issues them.

    The plugin counts LLVM IR, where a loop whose trip count is a compile-time constant
    (``loops.constant_trip_headers``: header executions of such loops, counted by the
    plugin from ScalarEvolution's exact constant counts) still pays its control every trip.
    GPU compilers unroll such loops (NVIDIA's and AMD's OpenCL/CUDA/HIP compilers, fully
    with ``#pragma unroll`` as tuned kernels write it, and by default within their size
    limits), so on a GPU those trips issue no increment, compare or branch: mixbench's
    ``tmps = tmps * tmps + seed`` over 256 constant trips issues one FMA a trip, not four
    instructions (V100: 4.8x too slow when the control was priced). CPUs keep the counts:
    PoCL's measured loop rates (``loop_slowdown``) already hold what its compiler does.
    """
    counts = {cls: float(v or 0) for cls, v in total.get("instructions", {}).items()}
    headers = float((total.get("loops") or {}).get("constant_trip_headers", 0) or 0)
    if headers and getattr(device, "kind", "") == "GPU":
        for cls in LOOP_CONTROL_CLASSES:
            if cls in counts:
                counts[cls] = max(0.0, counts[cls] - headers)
    return counts
