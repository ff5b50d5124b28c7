"""Global memory: coalesced read / write / copy throughput vs occupancy, and strided reads.

Each work-item walks the buffer with a grid stride (so consecutive work-items touch
consecutive words: coalesced on GPUs, contiguous vectors on CPUs) with four independent
accesses per loop trip to keep requests in flight. Words are ``uint``, ``uint2`` or
``uint4`` (4/8/16 bytes): integer sums wrap mod 2^32, so the host can check them exactly.

Checks: read writes one partial sum per work-item, the host compares their total with the
buffer's; write stores ``i ^ seed`` and copy a copy of random data, both compared in full
after a run that started from a zeroed destination.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

WORD_TYPES = {4: ("uint", 1), 8: ("uint2", 2), 16: ("uint4", 4)}

_HSUM = {1: "s", 2: "(s.x + s.y)", 4: "(s.x + s.y + s.z + s.w)"}

READ_SRC = """
__kernel void gread(__global const T* restrict src, __global uint* restrict out, uint n) {
    uint gid = get_global_id(0), gs = get_global_size(0);
    T a = (T)(0), b = (T)(0), c = (T)(0), d = (T)(0);
    uint i = gid;
    for (; i + 3 * gs < n; i += 4 * gs) {
        a += src[i]; b += src[i + gs]; c += src[i + 2 * gs]; d += src[i + 3 * gs];
    }
    for (; i < n; i += gs) a += src[i];
    T s = a + b + c + d;
    out[gid] = HSUM;
}
"""

WRITE_SRC = """
__kernel void gwrite(__global T* restrict dst, uint n, uint seed) {
    uint gid = get_global_id(0), gs = get_global_size(0);
    uint i = gid;
    for (; i + 3 * gs < n; i += 4 * gs) {
        dst[i] = (T)(i ^ seed); dst[i + gs] = (T)((i + gs) ^ seed);
        dst[i + 2 * gs] = (T)((i + 2 * gs) ^ seed); dst[i + 3 * gs] = (T)((i + 3 * gs) ^ seed);
    }
    for (; i < n; i += gs) dst[i] = (T)(i ^ seed);
}
"""

COPY_SRC = """
__kernel void gcopy(__global const T* restrict src, __global T* restrict dst, uint n) {
    uint gid = get_global_id(0), gs = get_global_size(0);
    uint i = gid;
    for (; i + 3 * gs < n; i += 4 * gs) {
        T a = src[i], b = src[i + gs], c = src[i + 2 * gs], d = src[i + 3 * gs];
        dst[i] = a; dst[i + gs] = b; dst[i + 2 * gs] = c; dst[i + 3 * gs] = d;
    }
    for (; i < n; i += gs) dst[i] = src[i];
}
"""

STRIDE_SRC = """
__kernel void gstride(__global const uint* restrict src, __global uint* restrict out,
                      uint nreads, uint stride) {
    uint gid = get_global_id(0), gs = get_global_size(0);
    uint a = 0, b = 0, c = 0, d = 0;
    uint k = gid;
    for (; k + 3 * gs < nreads; k += 4 * gs) {
        a += src[k * stride]; b += src[(k + gs) * stride];
        c += src[(k + 2 * gs) * stride]; d += src[(k + 3 * gs) * stride];
    }
    for (; k < nreads; k += gs) a += src[k * stride];
    out[gid] = a + b + c + d;
}
"""


# CPUs: a work-group handles a contiguous block of BLOCK * wg words, work-item ``lid``
# reading words ``k * wg + lid`` of it. PoCL runs a group's work-items in one loop that it
# vectorises across work-items, so this streams memory; the GPU kernels' grid-stride loops
# would instead make each work-item walk far-apart words one after another (measured 50x
# slower on PoCL). Read and strided kernels write one 4-byte sum per BLOCK words read.
BLOCK = 32

READ_BLOCK_SRC = """
__kernel void gread(__global const T* restrict src, __global uint* restrict out, uint n) {
    uint lid = get_local_id(0), wg = get_local_size(0);
    __global const T* p = src + get_group_id(0) * (BLOCK * wg) + lid;
    T s = (T)(0);
    for (uint k = 0; k < BLOCK; ++k) s += p[k * wg];
    out[get_global_id(0)] = HSUM;
}
"""

WRITE_BLOCK_SRC = """
__kernel void gwrite(__global T* restrict dst, uint n, uint seed) {
    uint lid = get_local_id(0), wg = get_local_size(0);
    uint base = get_group_id(0) * (BLOCK * wg) + lid;
    for (uint k = 0; k < BLOCK; ++k) dst[base + k * wg] = (T)((base + k * wg) ^ seed);
}
"""

COPY_BLOCK_SRC = """
__kernel void gcopy(__global const T* restrict src, __global T* restrict dst, uint n) {
    uint lid = get_local_id(0), wg = get_local_size(0);
    uint base = get_group_id(0) * (BLOCK * wg) + lid;
    for (uint k = 0; k < BLOCK; ++k) dst[base + k * wg] = src[base + k * wg];
}
"""

STRIDE_BLOCK_SRC = """
__kernel void gstride(__global const uint* restrict src, __global uint* restrict out,
                      uint nreads, uint stride) {
    uint lid = get_local_id(0), wg = get_local_size(0);
    uint base = get_group_id(0) * (BLOCK * wg) + lid;
    uint s = 0;
    for (uint k = 0; k < BLOCK; ++k) s += src[(base + k * wg) * stride];
    out[get_global_id(0)] = s;
}
"""


# Cached reads: the same buffer (a quarter of the last-level cache) is read ``reps`` times,
# each pass rotated by a pseudo-random multiple of 64 words. The rotation keeps accesses
# coalesced/contiguous, stops a compiler from proving two passes identical, and makes each
# compute unit read different lines in every pass, so re-reads are served by the shared
# last-level cache rather than a per-CU L1 (a rotation by a small constant measured the H100's
# L1 at 24 TB/s instead). This is the rate the projection uses for global traffic beyond a
# kernel's unique footprint.
CACHED_SRC = """
__kernel void gread_cached(__global const uint4* restrict src, __global uint* restrict out,
                           uint n, uint reps) {
    uint gid = get_global_id(0), gs = get_global_size(0);
    uint4 a = (uint4)(0), b = (uint4)(0), c = (uint4)(0), d = (uint4)(0);
    for (uint r = 0; r < reps; ++r) {
        uint rot = (r * 2654435761u) & (n - 1) & ~63u;
        for (uint i = gid; i < n; i += 4 * gs) {  /* n is a multiple of 4 * gs */
            a += src[(i + rot) & (n - 1)];
            b += src[(i + gs + rot) & (n - 1)];
            c += src[(i + 2 * gs + rot) & (n - 1)];
            d += src[(i + 3 * gs + rot) & (n - 1)];
        }
    }
    uint4 s = a + b + c + d;
    out[gid] = s.x + s.y + s.z + s.w;
}
"""

CACHED_BLOCK_SRC = """
__kernel void gread_cached(__global const uint4* restrict src, __global uint* restrict out,
                           uint n, uint reps) {
    uint lid = get_local_id(0), wg = get_local_size(0);
    uint base = get_group_id(0) * (BLOCK * wg);
    uint4 s = (uint4)(0);
    for (uint r = 0; r < reps; ++r)
        for (uint k = 0; k < BLOCK; ++k)
            s += src[(base + k * wg + lid + ((r * 2654435761u) & (n - 1) & ~63u)) & (n - 1)];
    out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}
"""


def _source(src: str, word: int) -> str:
    t, lanes = WORD_TYPES[word]
    return f"#define T {t}\n#define HSUM {_HSUM[lanes]}\n#define BLOCK {BLOCK}\n" + src


class GlobalMemory:
    """Buffers shared by all global-memory benchmarks of one device."""

    def __init__(self, bench: Bench) -> None:
        self.b = bench
        cap = bench.mode.cpu_bytes if bench.is_cpu else bench.mode.gpu_bytes
        limit = int(bench.device.max_mem_alloc_size) // 2
        limit = min(limit, int(bench.device.global_mem_size) // 8)
        nbytes = 1 << int(np.log2(max(1 << 20, min(cap, limit))))
        self.nbytes = nbytes
        rng = np.random.default_rng(1234)
        self.host = rng.integers(0, 2**32, nbytes // 4, dtype=np.uint32)
        self.host_sum = int(self.host.sum(dtype=np.uint64)) & 0xFFFFFFFF
        self.src = bench.buffer(nbytes, self.host)
        self.dst = bench.buffer(nbytes)
        self.out: Any = None
        self.out_items = 0

    def _out(self, items: int) -> Any:
        if items > self.out_items:
            self.out = self.b.buffer(items * 4)
            self.out_items = items
        return self.out

    def _grid(self, src: str, words: int, wg: int, groups: int) -> tuple[str, int]:
        """(kernel source, global size): grid-stride on GPUs, blocked on CPUs."""
        if not self.b.is_cpu:
            return src, wg * groups * self.b.cus
        blocked = {
            READ_SRC: READ_BLOCK_SRC,
            WRITE_SRC: WRITE_BLOCK_SRC,
            COPY_SRC: COPY_BLOCK_SRC,
            STRIDE_SRC: STRIDE_BLOCK_SRC,
        }[src]
        return blocked, max(wg, (words // BLOCK) // wg * wg)

    def cached_read(self, wg: int, groups: int, cache_bytes: int) -> tuple[float, int]:
        """Bytes/s of reads served from the last-level cache, and the buffer size used.

        The buffer is a quarter of the cache (at least 256 KiB, at most 16 MiB, a power of
        two) and is read repeatedly.
        """
        b = self.b
        size = 1 << int(np.log2(max(256 << 10, min(16 << 20, max(cache_bytes, 1 << 20) // 4))))
        size = min(size, self.nbytes)
        n = size // 16  # uint4 words
        if b.is_cpu:
            gsize = max(wg, (n // BLOCK) // wg * wg)
            src = CACHED_BLOCK_SRC
            per_pass = gsize * BLOCK  # words each pass reads (blocks wrap around the buffer)
        else:
            # The kernel needs n divisible by 4 * gsize: a power of two as close as possible
            # to the best read configuration's grid.
            gsize = min(1 << int(np.log2(wg * groups * b.cus)), n // 4)
            wg = min(wg, gsize)
            src = CACHED_SRC
            per_pass = n
        # Enough passes that the launch lasts far longer than its start-up (~1 ms on a GPU).
        total = (64 << 20) if b.is_cpu else (2 << 30)
        reps = max(1, int(total // (per_pass * 16)))
        kern = b.kernel(_source(src, 16), "gread_cached")
        out = self._out(gsize)

        def go() -> Any:
            return kern(b.queue, (gsize,), (wg,), self.src, out, np.uint32(n), np.uint32(reps))

        rate = b.rate(go, per_pass * 16 * reps)
        partial = b.read(out, np.empty(gsize, np.uint32))
        got = int(partial.sum(dtype=np.uint64)) & 0xFFFFFFFF
        words = self.host[: n * 4]
        if b.is_cpu:
            idx = (
                np.arange(gsize)[:, None] // wg * (BLOCK * wg)
                + np.arange(BLOCK)[None, :] * wg
                + (np.arange(gsize) % wg)[:, None]
            )
            expect = 0
            for r in range(reps):
                rot = (r * 2654435761) & 0xFFFFFFFF & (n - 1) & ~63
                expect += int(words.reshape(n, 4)[(idx + rot) & (n - 1)].sum(dtype=np.uint64))
        else:
            expect = reps * int(words.sum(dtype=np.uint64))
        if got != expect & 0xFFFFFFFF:
            raise GarbageResult(
                f"global_read_cached wg={wg}", f"checksum {got:#x} != {expect & 0xFFFFFFFF:#x}"
            )
        return rate, size

    def _zero_dst(self) -> None:
        self.b.cl.enqueue_fill_buffer(self.b.queue, self.dst, np.uint32(0), 0, self.nbytes).wait()

    def read(self, word: int, wg: int, groups: int) -> float:
        b = self.b
        n = self.nbytes // word
        src, gsize = self._grid(READ_SRC, n, wg, groups)
        kern = b.kernel(_source(src, word), "gread")
        out = self._out(gsize)
        b.cl.enqueue_fill_buffer(b.queue, out, np.uint32(0), 0, gsize * 4).wait()

        def go() -> Any:
            return kern(b.queue, (gsize,), (wg,), self.src, out, np.uint32(n))

        rate = b.rate(go, self.nbytes)
        partial = b.read(out, np.empty(gsize, np.uint32))
        got = int(partial.sum(dtype=np.uint64)) & 0xFFFFFFFF
        if got != self.host_sum:
            raise GarbageResult(
                f"global_read/{word}B wg={wg} groups={groups}",
                f"checksum {got:#x} != {self.host_sum:#x}",
            )
        return rate

    def write(self, word: int, wg: int, groups: int, seed: int) -> float:
        b = self.b
        n = self.nbytes // word
        src, gsize = self._grid(WRITE_SRC, n, wg, groups)
        kern = b.kernel(_source(src, word), "gwrite")
        self._zero_dst()

        def go() -> Any:
            return kern(b.queue, (gsize,), (wg,), self.dst, np.uint32(n), np.uint32(seed))

        rate = b.rate(go, self.nbytes)
        got = b.read(self.dst, np.empty(self.nbytes // 4, np.uint32)).reshape(n, word // 4)
        want = (np.arange(n, dtype=np.uint32) ^ np.uint32(seed))[:, None]
        if not np.array_equal(got, np.broadcast_to(want, got.shape)):
            bad = int(np.count_nonzero(got != want))
            raise GarbageResult(
                f"global_write/{word}B wg={wg} groups={groups}", f"{bad} of {got.size} words wrong"
            )
        return rate

    def copy(self, word: int, wg: int, groups: int) -> float:
        """Bytes/s counting both the bytes read and the bytes written."""
        b = self.b
        n = self.nbytes // word
        src, gsize = self._grid(COPY_SRC, n, wg, groups)
        kern = b.kernel(_source(src, word), "gcopy")
        self._zero_dst()

        def go() -> Any:
            return kern(b.queue, (gsize,), (wg,), self.src, self.dst, np.uint32(n))

        rate = b.rate(go, 2 * self.nbytes)
        got = b.read(self.dst, np.empty(self.nbytes // 4, np.uint32))
        if not np.array_equal(got, self.host):
            bad = int(np.count_nonzero(got != self.host))
            raise GarbageResult(
                f"global_copy/{word}B wg={wg} groups={groups}", f"{bad} of {got.size} words wrong"
            )
        return rate

    def stride_grid(self, stride: int, wg: int, groups: int) -> tuple[str, int, int, int]:
        """(kernel source, global size, work-group size, reads) of :meth:`strided`, every
        read inside the buffer. Why: on a CPU a group reads a block of BLOCK x wg strided
        words, and with PoCL's 4096-item groups at stride 8 that block was twice the 2 MiB
        buffer: the kernel read past its end, and the checksum failed when what lay there
        was not zeros (seen once under load). The group is made smaller instead."""
        nreads = (self.nbytes // 4) // stride
        if self.b.is_cpu:
            wg = min(wg, max(1, nreads // BLOCK))
        src, gsize = self._grid(STRIDE_SRC, nreads, wg, groups)
        if self.b.is_cpu:
            nreads = gsize * BLOCK
        return src, gsize, wg, nreads

    def strided(self, stride: int, wg: int, groups: int) -> float:
        """Useful bytes/s (4 bytes per read) of reads ``stride`` words apart over the buffer."""
        b = self.b
        src, gsize, wg, nreads = self.stride_grid(stride, wg, groups)
        kern = b.kernel(_source(src, 4), "gstride")
        out = self._out(gsize)

        def go() -> Any:
            return kern(
                b.queue, (gsize,), (wg,), self.src, out, np.uint32(nreads), np.uint32(stride)
            )

        rate = b.rate(go, nreads * 4)
        partial = b.read(out, np.empty(gsize, np.uint32))
        got = int(partial[:gsize].sum(dtype=np.uint64)) & 0xFFFFFFFF
        want = int(self.host[: nreads * stride : stride].sum(dtype=np.uint64)) & 0xFFFFFFFF
        if got != want:
            raise GarbageResult(f"strided_read/{stride}", f"checksum {got:#x} != {want:#x}")
        return rate
