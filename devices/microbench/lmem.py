"""Local memory: throughput vs occupancy, conflict-free and with n-way bank conflicts.

Each work-group fills a ``__local`` table (value = index mod LW), then every work-item
reads it with eight independent streams. Work-item ``lid`` starts at ``lid * stride``:
stride 1 is conflict-free, stride n (a power of two <= banks) puts n distinct words in one
bank for every warp-level access (an n-way conflict). All lanes advance by the same odd
step per iteration, which keeps the bank pattern and, over a multiple of LW iterations,
visits every table entry exactly once per stream. So each work-item's sum is known in
closed form: ``8 * iters / LW * LW * (LW - 1) / 2`` (mod 2^32), checked for every
work-item by the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

LW = 1024  # table words (power of two)
STREAMS = 8
STREAM_GAP = 128  # words between the streams' starting points
STEP = 33  # odd: a full cycle over LW entries

LOCAL_SRC = f"""
#define LW {LW}
#define PAD {(STREAMS - 1) * STREAM_GAP}
__kernel void lmem(__global uint* restrict out, uint iters, uint stride, uint step) {{
    __local uint buf[LW + PAD];
    uint lid = get_local_id(0), wg = get_local_size(0);
    for (uint i = lid; i < LW + PAD; i += wg) buf[i] = i & (LW - 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    uint o = (lid * stride) & (LW - 1);
    uint s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (uint it = 0; it < iters; ++it) {{
        __local const uint* p = buf + o;
        s0 += p[0]; s1 += p[{STREAM_GAP}]; s2 += p[{2 * STREAM_GAP}]; s3 += p[{3 * STREAM_GAP}];
        s4 += p[{4 * STREAM_GAP}]; s5 += p[{5 * STREAM_GAP}]; s6 += p[{6 * STREAM_GAP}];
        s7 += p[{7 * STREAM_GAP}];
        o = (o + step) & (LW - 1);
    }}
    out[get_global_id(0)] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}}
"""

LOCAL_BYTES_PER_GROUP = (LW + (STREAMS - 1) * STREAM_GAP) * 4


def expected_sum(iters: int) -> int:
    return (STREAMS * (iters // LW) * (LW * (LW - 1) // 2)) & 0xFFFFFFFF


class LocalMemory:
    def __init__(self, bench: Bench) -> None:
        self.b = bench
        self.out: Any = None
        self.out_items = 0

    def iters(self) -> int:
        return LW if self.b.mode.name != "full" else 2 * LW

    def run(self, wg: int, groups_per_cu: int, stride: int = 1) -> float:
        """Device-wide bytes/s of local-memory loads (4 bytes each)."""
        b = self.b
        gsize = wg * groups_per_cu * b.cus
        if gsize > self.out_items:
            self.out = b.buffer(gsize * 4)
            self.out_items = gsize
        iters = self.iters()
        kern = b.kernel(LOCAL_SRC, "lmem")

        def go() -> Any:
            return kern(
                b.queue,
                (gsize,),
                (wg,),
                self.out,
                np.uint32(iters),
                np.uint32(stride),
                np.uint32(STEP),
            )

        rate = b.rate(go, gsize * iters * STREAMS * 4)
        got = b.read(self.out, np.empty(gsize, np.uint32))
        want = expected_sum(iters)
        bad = int(np.count_nonzero(got != want))
        if bad:
            raise GarbageResult(
                f"local wg={wg} groups/CU={groups_per_cu} stride={stride}",
                f"{bad} of {gsize} work-item sums != {want:#x}",
            )
        return rate
