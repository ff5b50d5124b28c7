"""clproj.stats_table: the plugin's statistics are one list, for C++ and Python.

The C++ plugin declares its counters, adds them and writes them from the X-macros of
native/oclgrind_plugin/stats_fields.h; this checks that header is the table's, and that a
real emulation writes exactly the fields the table names, no more and no fewer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clproj import miniemu, stats_table
from clproj.devices import profile
from clproj.intercept.record import LocalArg, from_arrays

REPO = Path(__file__).resolve().parents[2]
SRC = """__kernel void mix(__global const float *a, __global float *b, __local float *t) {
    int i = get_global_id(0), l = get_local_id(0);
    t[l] = sqrt(a[i]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l & 1) atomic_inc((volatile __global int *)b);
    b[i + 1] = t[(l + 1) % get_local_size(0)];
}"""


def test_the_header_is_the_tables() -> None:
    assert (REPO / stats_table.C_PATH).read_text() == stats_table.c_header()


def test_python_prices_the_classes_the_plugin_counts() -> None:
    assert profile.INSTRUCTION_CLASSES is stats_table.INSTRUCTION_CLASSES


def test_an_emulation_writes_exactly_the_tables_fields() -> None:
    n = 64
    rec = from_arrays(
        SRC, "mix", [np.ones(n, np.float32), np.zeros(n + 1, np.float32), LocalArg(4 * 16)], n, 16
    )
    total = miniemu.emulate(rec, mode="full").total
    assert set(total) == set(stats_table.keys(""))
    for section in stats_table.SECTIONS:
        assert set(total[section]) == set(stats_table.keys(section)), section
    assert list(total["instructions"]) == list(stats_table.INSTRUCTION_CLASSES)
    assert list(total["special_functions"]) == list(stats_table.SPECIAL_FAMILIES)
    # the counters the kernel exercises are counted (an X-macro that lost one reads 0)
    assert total["work_items"] == n and total["barriers"] == n
    assert total["global"]["atomic_accesses"] == total["atomics"]["global"] == n // 2
    assert total["local"]["store_bytes"] == 4 * n and total["special_functions"]["sqrt"] == n
