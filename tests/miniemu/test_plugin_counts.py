"""The plugin's statistics against counts worked out by hand, for every warp / segment / bank key.

Each kernel is tiny and emulated in ``full`` mode, so ``total`` is the exact sum over all
work-groups. Buffers start at Oclgrind addresses aligned far beyond 128 B (the buffer index
sits in the high address bits), like a real device's allocations.
"""

from __future__ import annotations

import numpy as np
import pytest

from clproj import miniemu
from clproj.intercept.record import LocalArg, from_arrays

WARPS = (8, 16, 32, 64)
SEGMENTS = (32, 64, 128)
BANKS = (16, 32)


def emulate(src: str, kernel: str, args: list, gsz, lsz, mode: str = "full", options: str = ""):
    return miniemu.emulate(
        from_arrays(src, kernel, args, gsz, lsz, options=options), mode=mode, timeout_s=60
    )


def tx(profile, direction: str) -> dict[tuple[int, int], int]:
    t = profile.total["global"]["transactions"][direction]
    return {(w, s): t[str(w)][str(s)] for w in WARPS for s in SEGMENTS}


COPY = """
__kernel void copy(__global const float *a, __global float *b) {
  int i = get_global_id(0);
  b[i] = a[i];
}
__kernel void strided(__global const float *a, __global float *b, int stride) {
  int i = get_global_id(0);
  b[i] = a[i * stride];
}
__kernel void broadcast(__global const float *a, __global float *b) {
  int i = get_global_id(0);
  b[i] = a[0];
}
__kernel void transpose(__global const float *a, __global float *b, int n) {
  int x = get_global_id(0), y = get_global_id(1);
  b[x * n + y] = a[y * n + x];
}
"""

N = 256  # work-items in the 1-D kernels, local size 64


def coalesced(n_items: int, w: int, s: int) -> int:
    """A warp of w consecutive floats covers 4w bytes from an aligned start."""
    return (n_items // w) * max(1, 4 * w // s)


def test_coalesced_copy():
    p = emulate(COPY, "copy", [np.ones(N, np.float32), np.zeros(N, np.float32)], [N], [64])
    g = p.total["global"]
    assert (g["load_bytes"], g["store_bytes"]) == (4 * N, 4 * N)
    assert (g["load_accesses"], g["store_accesses"]) == (N, N)
    for (w, s), count in tx(p, "load").items():
        assert count == coalesced(N, w, s), (w, s)
    assert tx(p, "store") == tx(p, "load")
    assert p.total["instructions"]["memory_global"] == 2 * N
    assert p.total["branches"]["total"] == 0


@pytest.mark.parametrize("stride", [2, 4, 32])
def test_strided_copy(stride: int):
    a = np.ones(N * stride, np.float32)
    p = emulate(COPY, "strided", [a, np.zeros(N, np.float32), np.int32(stride)], [N], [64])
    assert p.total["global"]["load_bytes"] == 4 * N  # useful bytes do not depend on the stride
    for (w, s), count in tx(p, "load").items():
        # lanes are 4*stride bytes apart: a segment holds s/(4*stride) lanes, at least one
        per_warp = w if 4 * stride >= s else max(1, 4 * stride * w // s)
        assert count == (N // w) * per_warp, (stride, w, s)
    for (w, s), count in tx(p, "store").items():
        assert count == coalesced(N, w, s)


def test_broadcast():
    p = emulate(COPY, "broadcast", [np.ones(4, np.float32), np.zeros(N, np.float32)], [N], [64])
    for (w, s), count in tx(p, "load").items():
        assert count == N // w, (w, s)  # every warp reads one word: one segment


def test_transpose():
    n = 32  # 32x32 matrix, 16x16 groups: linear local id = lx + 16*ly
    a = np.arange(n * n, dtype=np.float32)
    p = emulate(COPY, "transpose", [a, np.zeros(n * n, np.float32), np.int32(n)], [n, n], [16, 16])
    items = n * n
    for (w, s), count in tx(p, "load").items():
        # a[y*n+x]: a warp covers min(w,16) consecutive floats in each of max(1, w/16) rows
        rows = max(1, w // 16)
        per_row = max(1, 4 * min(w, 16) // s)
        assert count == (items // w) * rows * per_row, (w, s)
    for (w, s), count in tx(p, "store").items():
        # b[x*n+y]: lanes with different x are 128 B apart (one segment each); lanes sharing
        # x (w=32: 2 ys, w=64: 4 ys, all within one aligned 16 B) share a segment
        assert count == (items // w) * min(w, 16), (w, s)
    out = p.total["global"]
    assert out["load_bytes"] == out["store_bytes"] == 4 * items


LOCAL = """
__kernel void reduce_seq(__global const float *a, __global float *out, __local float *l) {
  int lid = get_local_id(0);
  l[lid] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (lid < s) l[lid] += l[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = l[0];
}
__kernel void reduce_interleaved(__global const float *a, __global float *out, __local float *l) {
  int lid = get_local_id(0);
  int n = get_local_size(0);
  l[lid] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 1; s < n; s *= 2) {
    int index = 2 * s * lid;
    if (index < n) l[index] += l[index + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = l[0];
}
__kernel void local_stride(__global float *out, __local float *l, int stride) {
  int lid = get_local_id(0);
  l[lid * stride] = lid;
  barrier(CLK_LOCAL_MEM_FENCE);
  out[get_global_id(0)] = l[lid * stride] + l[0];
}
"""


def bank(profile, b: int) -> tuple[int, int]:
    v = profile.total["local"]["bank"][str(b)]
    return v["requests"], v["wavefronts"]


def test_reduction_without_conflicts():
    a = np.ones(128, np.float32)
    p = emulate(LOCAL, "reduce_seq", [a, np.zeros(2, np.float32), LocalArg(256)], [128], [64])
    # one group (64 lanes): initial store (64/b warps) + 6 steps x 3 accesses + final read
    # 32 banks: step s=32 has warp 0 active, smaller steps too -> 2 + 18 + 1
    # 16 banks: step s=32 has warps 0,1 active (6), other steps warp 0 (15) -> 4 + 21 + 1
    groups = 2
    assert bank(p, 32) == (21 * groups, 21 * groups)
    assert bank(p, 16) == (26 * groups, 26 * groups)
    assert p.total["barriers"] == 128 * 7
    assert p.total["local"]["bytes_per_group"] == 256
    assert p.total["local"]["accesses"] == groups * (64 + 3 * (32 + 16 + 8 + 4 + 2 + 1) + 1)


def test_reduction_with_conflicts():
    a = np.ones(128, np.float32)
    p = emulate(
        LOCAL, "reduce_interleaved", [a, np.zeros(2, np.float32), LocalArg(256)], [128], [64]
    )
    groups = 2
    # Worked out in docs/miniemu.md ("bank-conflict example"): per group
    # 32 banks: steps s=1..16 have degree 2 (5 steps x 3 accesses), s=32 degree 1;
    #           requests 2 + 18 + 1 = 21, wavefronts 2 + 30 + 3 + 1 = 36
    # 16 banks: s=1 two warps degree 2 (6 req, 12 wf); s=2,4,8 degree 4 (3 req, 12 wf each);
    #           s=16 degree 2 (3, 6); s=32 degree 1 (3, 3); + initial 4, final 1
    assert bank(p, 32) == (21 * groups, 36 * groups)
    assert bank(p, 16) == (26 * groups, 62 * groups)


@pytest.mark.parametrize("stride", [1, 2, 16, 32])
def test_bank_conflict_degree(stride: int):
    items = 64
    p = emulate(
        LOCAL,
        "local_stride",
        [np.zeros(items, np.float32), LocalArg(4 * items * stride), np.int32(stride)],
        [items],
        [items],
    )
    for b in BANKS:
        warps = items // b
        degree = int(np.gcd(stride, b))  # b lanes, words lid*stride: gcd(stride, b) per bank
        # store l[lid*stride], load l[lid*stride] (degree), load l[0] (broadcast: 1)
        assert bank(p, b) == (3 * warps, warps * (2 * degree + 1)), (stride, b)


BRANCH = """
__kernel void divergent(__global float *b, int d) {
  int lid = get_local_id(0);
  if ((lid / d) % 2 == 0) b[get_global_id(0)] = 1.0f;
}
"""


@pytest.mark.parametrize("d", [4, 8, 32])
def test_divergent_branch(d: int):
    items = 128
    p = emulate(BRANCH, "divergent", [np.zeros(items, np.float32), np.int32(d)], [items], [64])
    br = p.total["branches"]
    assert br["total"] == items  # one conditional branch per work-item
    for w in WARPS:
        assert br["warp_level"][str(w)] == items // w
        # lanes alternate in runs of d: a warp wider than d sees both sides
        assert br["divergent"][str(w)] == (items // w if w > d else 0), (d, w)
    assert p.total["global"]["store_bytes"] == 4 * items // 2


HIST = """
__kernel void hist_global(__global const uint *data, __global uint *hist) {
  atomic_inc(&hist[data[get_global_id(0)] % 16]);
}
__kernel void hist_local(__global const uint *data, __global uint *hist, __local uint *lh) {
  int lid = get_local_id(0);
  if (lid < 16) lh[lid] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  atomic_inc(&lh[data[get_global_id(0)] % 16]);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < 16) atomic_add(&hist[lid], lh[lid]);
}
"""


def test_atomic_histogram():
    items = 256
    data = np.arange(items, dtype=np.uint32)
    p = emulate(HIST, "hist_global", [data, np.zeros(16, np.uint32)], [items], [64])
    # All 16 bins share one 64-byte line: every atomic of a group hits the hottest line.
    assert p.total["atomics"] == {
        "global": items,
        "local": 0,
        "global_same_address_max": items,
        "local_same_address_max": 0,
    }
    assert p.total["global"]["atomic_accesses"] == items
    assert p.total["instructions"]["atomic"] == items
    q = emulate(HIST, "hist_local", [data, np.zeros(16, np.uint32), LocalArg(64)], [items], [64])
    groups = items // 64
    # Local: data = arange, so each of the 16 bins gets 64 / 16 = 4 increments per group;
    # global: the 16 merges of a group all land on the one line of the 16 bins.
    assert q.total["atomics"] == {
        "global": 16 * groups,
        "local": items,
        "global_same_address_max": 16 * groups,
        "local_same_address_max": 4 * groups,
    }
    assert q.total["instructions"]["atomic"] == items + 16 * groups
    assert q.total["barriers"] == 2 * items


ARITH = """
__kernel void arith(__global float4 *v, __global double *d, __global int *k) {
  int i = get_global_id(0);
  float4 x = v[i];
  v[i] = x * x + sqrt(x);
  d[i] = d[i] / 3.0;
  k[i] = k[i] / (i + 1);
}
"""


def test_instruction_classes_count_vector_lanes():
    items = 64
    p = emulate(
        ARITH,
        "arith",
        [np.ones(4 * items, np.float32), np.ones(items, np.float64), np.ones(items, np.int32)],
        [items],
        [64],
    )
    ins = p.total["instructions"]
    # x*x + sqrt(x) on a float4: 4 lanes of either fma (contracted) or mul+add, 4 of sqrt
    assert ins["fp32_fma"] + ins["fp32_mul"] == 4 * items
    assert ins["special"] == 4 * items
    assert ins["fp64_div"] == items
    assert ins["int_div"] == items
    g = p.total["global"]
    assert g["load_bytes"] == items * (16 + 8 + 4)
    assert g["load_accesses"] == 3 * items  # a float4 load is one access


CASTS = """
__kernel void casts(__global const float *a, __global float *b, __global int *k, int n) {
  int i = get_global_id(0);
  long wide = (long)i * n;          /* sext: index widening */
  b[i] = a[wide % 64] + (float)k[i]; /* sitofp: a real conversion */
}
"""


def test_integer_width_changes_are_integer_ops_not_conversions():
    items = 64
    p = emulate(
        CASTS,
        "casts",
        [
            np.ones(64, np.float32),
            np.zeros(items, np.float32),
            np.ones(items, np.int32),
            np.int32(1),
        ],
        [items],
        [64],
    )
    # Only the int -> float conversion is priced as a conversion; sext/zext/trunc are
    # integer ALU work (docs/miniemu.md).
    assert p.total["instructions"]["conversion"] == items


DEPENDENCE = """
__kernel void rmw(__global float *A, __global float *y, __global const float *x, int n) {
  int j = get_global_id(0);                       /* atax kernel 2: y[j] over a column */
  for (int i = 0; i < n; i++) y[j] += A[i * n + j] * x[i];
}
__kernel void rowrmw(__global float *A, __global float *y, __global const float *x, int n) {
  int i = get_global_id(0);                       /* atax kernel 1: y[i] over a row */
  for (int j = 0; j < n; j++) y[i] += A[i * n + j] * x[j];
}
__kernel void regsum(__global float *A, __global float *y, __global const float *x, int n) {
  int j = get_global_id(0);
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += A[i * n + j];
  y[j] = s;
}
__kernel void chase(__global const int *next, __global int *out, int hops) {
  int p = get_global_id(0);
  for (int h = 0; h < hops; h++) p = next[p];
  out[get_global_id(0)] = p;
}
__kernel void ordered(__global float *t, __global const float *A, int n) {
  int j = get_global_id(0);
  t[j] = 0.0f;                                    /* 2mm: the sum stays in a register, */
  for (int k = 0; k < n; k++) t[j] += A[k * n + j]; /* the store orders the next loads */
}
__kernel void tworeload(__global float *A, __global float *y, __global const float *x, int n) {
  int i = get_global_id(0);                       /* gesummv: two sums, each store may */
  for (int j = 0; j < n; j++) {                   /* alias the other's word: reloaded */
    y[i] += A[i * n + j] * x[j];
    y[n + i] += A[i * n + j] * x[j];
  }
}
__kernel void restricted(__global float * restrict t, __global const float *A, int n) {
  int j = get_global_id(0);
  t[j] = 0.0f;
  for (int k = 0; k < n; k++) t[j] += A[k * n + j];
}
"""
DN = 64  # work-items and loop trip count of the dependence kernels


def dependence(kernel: str, args: list) -> tuple[dict, dict]:
    p = emulate(DEPENDENCE, kernel, args, [DN], [32])
    n = p.total["work_items"]
    dep = {
        k: ({int(s): c / n for s, c in v.items()} if isinstance(v, dict) else v / n)
        for k, v in p.total["dependence"].items()
    }
    item = p.total["global"]["item_transactions"]
    return dep, {d: {int(s): v / n for s, v in item[d].items()} for d in item}


def mats() -> list:
    return [np.ones(DN * DN, np.float32), np.zeros(DN, np.float32), np.ones(DN, np.float32)]


def test_read_after_write_chain_through_memory():
    dep, item = dependence("rmw", [*mats(), np.int32(DN)])
    # Every iteration reloads y[j], stored by the iteration before: DN rounds, the first
    # independent, DN-1 read-after-write steps; each streams a new row of A (cold).
    assert dep["chain"] == DN and dep["raw_chain"] == DN - 1 and dep["raw_loads"] == DN - 1
    assert dep["cold_chain"] == DN and dep["pointer_chain"] == 0
    # A new row every iteration is a new segment at every size.
    assert dep["cold_chain_by_segment"] == {32: DN, 64: DN, 128: DN}
    # Per work-item lines: A moves to a new row each iteration (DN), x walks 4-byte words
    # (a new 32-byte sector every 8), y stays in one sector.
    assert item["load"][32] == DN + DN // 8 + 1
    assert item["store"][32] == 1


def test_cold_rounds_count_new_sectors_only():
    dep, _ = dependence("rowrmw", [*mats(), np.int32(DN)])
    # The row of A and x advance 4 bytes per iteration: a new 32-byte sector every 8.
    assert dep["chain"] == DN and dep["cold_chain"] == DN // 8 + 1
    # At 64 and 128 bytes a walk enters a new segment every 16 and 32 iterations: the
    # other sectors came with the access that fetched the wider segment.
    by_size = dep["cold_chain_by_segment"]
    assert by_size == {32: DN // 8 + 1, 64: DN // 16 + 1, 128: DN // 32 + 1}


def test_register_accumulator_has_no_chain():
    dep, item = dependence("regsum", [*mats(), np.int32(DN)])
    assert dep["chain"] == 1 and dep["raw_loads"] == 0
    assert item["load"][32] == DN  # one column element per iteration, each in a new row


def test_pointer_chase_chain():
    nxt = np.roll(np.arange(DN, dtype=np.int32), -1)  # p -> p + 1 (mod DN)
    dep, _ = dependence("chase", [nxt, np.zeros(DN, np.int32), np.int32(DN)])
    assert dep["chain"] == DN and dep["pointer_chain"] == DN - 1
    assert dep["pointer_loads"] == DN - 1 and dep["raw_chain"] == 0


def test_floating_point_recurrence_chain():
    """One dependent operation per trip, through memory (y[j] reloaded: the multiply-add
    is one fused operation) or a register (a sum); a store only orders later loads (their
    values do not carry its chain); integer work (a pointer chase) has none."""
    rmw, _ = dependence("rmw", [*mats(), np.int32(DN)])
    assert rmw["fp_chain"] == rmw["fma_chain"] == DN  # fused multiply-adds
    reg, _ = dependence("regsum", [*mats(), np.int32(DN)])
    assert reg["fp_chain"] == DN and reg["fma_chain"] == 0  # plain adds
    args = [np.zeros(DN, np.float32), np.ones(DN * DN, np.float32), np.int32(DN)]
    ordered, _ = dependence("ordered", args)
    assert ordered["fp_chain"] == DN  # not 2 DN: the ordering adds no data dependence
    nxt = np.roll(np.arange(DN, dtype=np.int32), -1)
    chase, _ = dependence("chase", [nxt, np.zeros(DN, np.int32), np.int32(DN)])
    assert chase["fp_chain"] == 0


def test_reloads_after_another_store_are_counted_on_the_fp_chain():
    """A stored accumulator reloaded with no other store in between can stay in a
    register (a compiler forwards it: no reload link); one reloaded after a store to
    another word that may alias it cannot: one reload link per trip on the fp chain."""
    rmw, _ = dependence("rmw", [*mats(), np.int32(DN)])
    assert rmw["fp_reload_chain"] == 0
    y = np.zeros(2 * DN, np.float32)
    two, _ = dependence(
        "tworeload", [np.ones(DN * DN, np.float32), y, np.ones(DN, np.float32), np.int32(DN)]
    )
    assert two["fp_chain"] == DN and two["fp_reload_chain"] == DN - 1  # the first is fresh


def test_store_orders_later_loads_unless_restrict():
    args = [np.zeros(DN, np.float32), np.ones(DN * DN, np.float32), np.int32(DN)]
    ordered, _ = dependence("ordered", args)
    restricted, _ = dependence("restricted", args)
    # LLVM keeps the sum in a register (no reload), but each iteration's loads may alias
    # the store before them: DN ordered rounds. With `restrict` nothing orders them.
    assert ordered["raw_loads"] == 0 and ordered["chain"] == DN
    assert restricted["chain"] == 1


def test_unique_sectors_by_direction():
    p = emulate(COPY, "copy", [np.ones(N, np.float32), np.zeros(N, np.float32)], [N], [64])
    g = p.total["global"]
    assert g["unique_load_sector_bytes"] == g["unique_store_sector_bytes"] == 4 * N
    assert g["unique_sector_bytes"] == 8 * N
