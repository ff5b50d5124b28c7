"""The Oclgrind plugin's statistics, defined once for C++ and Python.

The plugin (native/oclgrind_plugin/) counts, per work-group, instructions by class, special
functions by family and a set of scalar counters, and writes them as JSON; Python reads
that JSON (miniemu), the device profiles price the same instruction classes (devices), and
docs/formats.md section 2 names them. This table is the one list: ``python -m
clproj.stats_table --c-header`` writes native/oclgrind_plugin/stats_fields.h, whose
X-macros declare the C++ enums, names and scalar members and drive ``Stats::add`` and
``Stats::json``; tests/miniemu/test_stats_table.py checks that the header is this table's
and that a real emulation writes exactly these fields.

Counters kept as arrays (per warp width, segment size, bank count) are written by hand in
``Stats::json``; :data:`ARRAY_FIELDS` names where they appear.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

# Instruction classes, in the plugin's enum order (the JSON's "instructions" keys).
INSTRUCTION_CLASSES = (
    "fp32_add",
    "fp32_mul",
    "fp32_fma",
    "fp32_div",
    "fp64_add",
    "fp64_mul",
    "fp64_fma",
    "fp64_div",
    "int_add",
    "int_mul",
    "int_div",
    "special",
    "conversion",
    "compare_select",
    "branch",
    "barrier",
    "atomic",
    "memory_global",
    "memory_local",
    "memory_private",
    "other",
)

# Special-function families (the JSON's "special_functions" keys): their costs differ by
# an order of magnitude, and the device profiles measure each.
SPECIAL_FAMILIES = ("sqrt", "rsqrt", "exp", "log", "sin", "other")


@dataclass(frozen=True)
class Scalar:
    """One scalar counter: its C++ member, the JSON object it sits in ("" = the top
    level), its key there, and what it counts."""

    member: str
    section: str
    key: str
    doc: str


SCALARS: tuple[Scalar, ...] = (
    Scalar("work_items", "", "work_items", "work-items emulated"),
    Scalar("barriers", "", "barriers", "barrier instructions executed (per work-item)"),
    Scalar("gload_bytes", "global", "load_bytes", "bytes loaded from global/constant memory"),
    Scalar("gstore_bytes", "global", "store_bytes", "bytes stored to global memory"),
    Scalar("gload_acc", "global", "load_accesses", "global load instructions executed"),
    Scalar("gstore_acc", "global", "store_accesses", "global store instructions executed"),
    Scalar(
        "gunique_bytes",
        "global",
        "unique_sector_bytes",
        "distinct 32-byte sectors the group touched, x 32: what it brings into a compute "
        "unit's cache once; re-reads beyond it can hit there",
    ),
    Scalar("gunique_load_bytes", "global", "unique_load_sector_bytes", "the same, sectors read"),
    Scalar(
        "gunique_store_bytes",
        "global",
        "unique_store_sector_bytes",
        "the same, sectors written (written back once)",
    ),
    Scalar("atom_global", "global", "atomic_accesses", "atomic operations on global memory"),
    Scalar("lload_bytes", "local", "load_bytes", "bytes loaded from local memory"),
    Scalar("lstore_bytes", "local", "store_bytes", "bytes stored to local memory"),
    Scalar("lacc", "local", "accesses", "local-memory instructions executed"),
    Scalar("br_total", "branches", "total", "conditional branches executed (per work-item)"),
    Scalar("atom_global", "atomics", "global", "atomic operations on global memory"),
    Scalar("atom_local", "atomics", "local", "atomic operations on local memory"),
    Scalar(
        "atom_global_hot",
        "atomics",
        "global_same_address_max",
        "the most atomic operations one 64-byte line received in the group (same-address "
        "atomics serialise)",
    ),
    Scalar(
        "atom_local_hot",
        "atomics",
        "local_same_address_max",
        "the most atomic operations one 4-byte local word received in the group",
    ),
    Scalar(
        "dep_chain",
        "dependence",
        "chain",
        "sum over work-items of each one's longest chain of dependent global round trips",
    ),
    Scalar("dep_raw", "dependence", "raw_chain", "steps on it that read back a stored word"),
    Scalar("dep_ptr", "dependence", "pointer_chain", "steps whose address came from a load"),
    Scalar("dep_raw_loads", "dependence", "raw_loads", "loads that read back a stored word"),
    Scalar("dep_ptr_loads", "dependence", "pointer_loads", "loads whose address was loaded"),
    Scalar("dep_fp", "dependence", "fp_chain", "floating-point operations on the longest path"),
    Scalar("dep_fma", "dependence", "fma_chain", "of those, fused multiply-adds"),
    Scalar(
        "dep_fp_reload",
        "dependence",
        "fp_reload_chain",
        "links of the floating-point chain through a word reloaded after another store",
    ),
)

# JSON objects in the order Stats::json writes them, after the top-level scalars.
SECTIONS = ("global", "local", "branches", "atomics", "dependence")

# Arrays, written by hand in Stats::json: (section, key, shape).
ARRAY_FIELDS = (
    ("", "instructions", "one count per instruction class"),
    ("", "special_functions", "one count per special-function family"),
    ("global", "transactions", "load/store x warp width x segment size"),
    ("global", "item_transactions", "load/store x segment size"),
    ("local", "bank", "per bank count: requests, wavefronts"),
    ("branches", "warp_level", "per warp width"),
    ("branches", "divergent", "per warp width"),
    ("dependence", "cold_chain", "the 32-byte entry of cold_chain_by_segment"),
    ("dependence", "cold_chain_by_segment", "per segment size"),
)

# Per-launch values of the plugin's kernel object that a kernel profile's statistics carry
# beside the counters (never scaled with the launch): (section, key, meaning).
KERNEL_FIELDS = (
    ("", "private_bytes_per_work_item", "estimated private state per work-item"),
    ("local", "bytes_per_group", "local memory one work-group allocates"),
)

C_PATH = "native/oclgrind_plugin/stats_fields.h"


def keys(section: str) -> list[str]:
    """Every key of ``section`` ("" = the top level) in a kernel profile's statistics:
    the plugin's scalars and arrays, and the per-launch values beside them."""
    out = [s.key for s in SCALARS if s.section == section]
    out += [k for sec, k, _ in (*ARRAY_FIELDS, *KERNEL_FIELDS) if sec == section]
    if section == "":
        out += list(SECTIONS)
    return out


def _macro(name: str, lines: list[str]) -> str:
    body = " \\\n".join(f"  {line}" for line in lines)
    return f"#define {name}(X) \\\n{body}\n"


def c_header() -> str:
    """native/oclgrind_plugin/stats_fields.h: the table as X-macros."""
    members = list(dict.fromkeys(s.member for s in SCALARS))
    docs = {s.member: s.doc for s in reversed(SCALARS)}
    parts = [
        "// Generated by `python -m clproj.stats_table --c-header` from clproj/stats_table.py;",
        "// do not edit. The plugin's statistics, one list for C++ and Python.",
        "#pragma once",
        "",
        '// X(ENUM, "name"): instruction classes, in enum order',
        _macro(
            "CLPROJ_INST_CLASSES",
            [f'X({c.upper()}, "{c}")' for c in INSTRUCTION_CLASSES],
        ),
        '// X(ENUM, "name"): special-function families, in enum order',
        _macro(
            "CLPROJ_SPECIAL_FAMILIES",
            [f'X(SF_{f.upper()}, "{f}")' for f in SPECIAL_FAMILIES],
        ),
        "// X(member): every scalar counter of Stats",
    ]
    parts += [f"//   {m}: {docs[m]}" for m in members]
    parts.append(_macro("CLPROJ_STATS_SCALARS", [f"X({m})" for m in members]))
    for section in ("", *SECTIONS):
        name = "CLPROJ_STATS_" + (section.upper() or "TOP")
        rows = [f'X({s.member}, "{s.key}")' for s in SCALARS if s.section == section]
        parts.append(f'// X(member, "key"): the scalars of {section or "the top level"}')
        parts.append(_macro(name, rows))
    return "\n".join(parts)


if __name__ == "__main__":
    if "--c-header" not in sys.argv[1:]:
        sys.exit("usage: python -m clproj.stats_table --c-header > " + C_PATH)
    sys.stdout.write(c_header())
