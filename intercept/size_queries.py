"""Which answers of the device can size a launch, and what a projection says of a launch
made after the app read them (docs/intercept.md "Launches sized from the device").

Why: an app may compute its NDRange from what the device answers (BabelStream's dot
kernel: 4 work-groups per compute unit of the largest work-group size on a GPU, another
formula on a CPU; pyopencl's reductions). Recorded here, such a launch has the size this
machine's device made it; projected onto another device it is not the launch the app would
make there, and nothing in the launch itself tells. The shim notes which of these answers
the app has read and what they were (native/shim/queries.c, a bit per parameter in the
order of :data:`SIZE_QUERIES`; ``tests/intercept`` checks that the two lists agree), the
record keeps them (``LaunchRecord.asked``), and a projection of a launch whose shape
follows from them carries :func:`note`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from clproj import cl_names
from clproj.untrusted import is_int

# The parameters whose answers can size a launch, in the order of the shim's bits.
SIZE_QUERIES = (
    "CL_DEVICE_MAX_COMPUTE_UNITS",
    "CL_DEVICE_MAX_WORK_GROUP_SIZE",
    "CL_DEVICE_MAX_WORK_ITEM_SIZES",
    "CL_DEVICE_LOCAL_MEM_SIZE",
    "CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT",
    "CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE",
    "CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT",
    "CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE",
    "CL_KERNEL_WORK_GROUP_SIZE",
    "CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE",
)


def param_values() -> list[int]:
    """The OpenCL values of :data:`SIZE_QUERIES` (what the shim's table must hold)."""
    return [int(getattr(cl_names, name)) for name in SIZE_QUERIES]


# How many work-groups per compute unit an app sizing by the device launches at most (its
# ``k`` in k x compute units): BabelStream's dot 4 on a GPU, 1 on a CPU; pyopencl's array
# operations up to 32 (``array._splay``: 4 x 8 per unit, of at most 128 work-items). A
# launch of more groups than this per unit is sized by its data.
MAX_GROUPS_PER_UNIT = 32
# Answers a work-group size may be taken from as it is.
GROUP_SIZE_ANSWERS = (
    "CL_DEVICE_MAX_WORK_GROUP_SIZE",
    "CL_DEVICE_MAX_WORK_ITEM_SIZES",
    "CL_KERNEL_WORK_GROUP_SIZE",
)


def read(bits: int, answer: Callable[[int], int]) -> dict[str, int]:
    """The answers the shim's mask says the app read: name -> ``answer(bit)``."""
    return {name: int(answer(i)) for i, name in enumerate(SIZE_QUERIES) if bits >> i & 1}


def sized_by_device(
    asked: Mapping[str, int], global_size: Sequence[int], local_size: Sequence[int] | None
) -> str | None:
    """Why the launch's shape looks taken from the device's answers, or None.

    A shape follows from them when the app read the compute units and the launch has a
    whole number of work-groups per unit, at most :data:`MAX_GROUPS_PER_UNIT` (or, with a
    NULL local size, that many work-items or groups of a work-group size it read), or when
    its work-group size is a work-group size the app read. Only a launch of both kinds of
    evidence, the read and the match, is said to be one: an app that reads the compute
    units to print them and launches a million work-items is not.
    """
    items = math.prod(global_size)
    cus = asked.get("CL_DEVICE_MAX_COMPUTE_UNITS", 0)
    sizes = {asked[n] for n in GROUP_SIZE_ANSWERS if asked.get(n, 0) > 1}
    why = []
    if local_size is not None:
        group = math.prod(local_size)
        groups = items // group if group else 0
        if cus and groups and groups % cus == 0 and groups // cus <= MAX_GROUPS_PER_UNIT:
            per = groups // cus
            why.append(f"{per} work-group{'s' if per > 1 else ''} per compute unit (it has {cus})")
        if group in sizes:
            why.append(f"work-groups of {group}, a work-group size it read")
    elif cus:
        for size in sorted({1} | sizes):
            per_unit, rest = divmod(items, cus * size)
            if not rest and 0 < per_unit <= MAX_GROUPS_PER_UNIT:
                why.append(f"{items} work-items = {per_unit} x {cus} compute units x {size}")
                break
    return "; ".join(why) or None


def note(
    asked: Mapping[str, int], global_size: Sequence[int], local_size: Sequence[int] | None
) -> str | None:
    """What a projection says of a launch whose shape follows from the device's answers
    (:func:`sized_by_device`); None for any other launch."""
    why = sized_by_device(asked, global_size, local_size)
    if why is None:
        return None
    return (
        f"shaped by this machine's device's answers ({why}): if the app sized it from "
        "them, it launches another NDRange on another device; projected as launched here"
    )


def record_note(record: Any) -> str | None:
    """:func:`note` of a launch record (``intercept.record.LaunchRecord``)."""
    return note(record.asked, record.global_size, record.local_size)


def check(value: object, bad: Callable[[str], Exception]) -> dict[str, int]:
    """``asked`` of an untrusted record: known parameter names -> answers (0 .. 2^64-1)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or any(k not in SIZE_QUERIES for k in value):
        raise bad(f"must map parameter names among {', '.join(SIZE_QUERIES)} to answers")
    if not all(is_int(v) and 0 <= v < 1 << 64 for v in value.values()):
        raise bad("answers must be whole numbers from 0 to 2^64 - 1")
    return {str(k): int(v) for k, v in value.items()}
