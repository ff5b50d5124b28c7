"""Power microbenchmarks: one kind of work each, with operation counts known exactly,
launched over and over while the device's energy counter is read (the IPP idea done
with OpenCL kernels; the fit is :mod:`devices.power_fit`).

Why each kernel's counts are computed here and not emulated: the GPU machine runs
without the native parts (docs/CONTRIBUTING.md), and a kernel written so that every
work-item does ``n`` trips of a fixed body has counts that are arithmetic. The trip
count is a kernel argument, so the loop's control (add, compare, branch) is issued on
every device and is counted as integer work. ``tests/devices/test_power_microbench.py``
checks the counts against the Oclgrind plugin's on the same kernels.

Every benchmark runs twice: on the whole device and on a quarter of its compute units
(``part``), so launch time and counts vary apart and the busy floor can be told from
the energy per operation. One more, ``pw_fp32_sparse``, keeps every compute unit busy
with a single work-item: every unit on, a trickle of operations, so the power of a busy
unit can be told from the energy of the work it does (each entry records the units it
keeps busy, ``active_units``). Streaming reads are L2-resident (a buffer of half the cache,
read over and over) or DRAM-bound (a buffer many times the cache).

Two groups of reads test what bytes alone cannot price (docs/energy.md "Awaiting a GPU
run"). The DRAM stream is read three times over the same buffer with float4, float2 and
float loads: the same bytes and trips, 1, 2 and 4 load instructions a trip, so an energy
per load instruction (``global_load``) can be told from the energy per byte. The
L2-resident stream is read at a half, a quarter and an eighth of the cache, so the fit's
residuals show whether an L2 byte costs the same at every occupancy.

Each kernel writes a result the host checks (finite, and not the fill value), so a
compiler cannot drop the work and a wrong run reports no reading.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from clproj.devices.microbench.common import GarbageResult

CHAINS = 8
# Integer work per trip and per work-item as the Oclgrind plugin counts it (LLVM IR:
# the trip's increment, compare and branch, index arithmetic, the work-item's id and
# addresses); tests/devices/test_power_microbench.py holds the counts to the plugin's.
LOOP_INT = 3
TARGET_LAUNCH_S = 0.02  # one launch long enough to hide launch gaps, short enough to poll


def _compute_src(name: str, ctype: str, body: str, ext: str = "") -> str:
    """``CHAINS`` independent chains of ``body`` (a statement on ``X``, with ``T`` a
    scratch value of the chain) a trip. Float chains start inside (0, 1), where the
    logistic map keeps them: chaotic, so their bits toggle as real data's do (a chain
    that settles on a fixed point toggles nothing and draws far less power per
    operation than any kernel working on data)."""
    if ctype == "uint":
        decl = "".join(f"uint x{c} = (uint)(gid + {c + 1});\n" for c in range(CHAINS))
    else:
        decl = "".join(
            f"{ctype} x{c} = ({ctype})(gid % 997 + {c + 1}) * ({ctype})0.0009;\n"
            for c in range(CHAINS)
        )
    decl += "".join(f"{ctype} t{c};\n" for c in range(CHAINS))
    step = "".join(body.replace("X", f"x{c}").replace("T", f"t{c}") + ";\n" for c in range(CHAINS))
    total = " + ".join(f"x{c}" for c in range(CHAINS))
    return (
        ext
        + f"__kernel void {name}(__global {ctype}* out, {ctype} a, {ctype} b, int n) {{\n"
        + "int gid = get_global_id(0);\n"
        + decl
        + "for (int i = 0; i < n; i++) {\n"
        + step
        + "}\n"
        + f"out[gid] = {total};\n}}\n"
    )


@dataclass(frozen=True)
class Compute:
    """A compute microbenchmark: ``CHAINS`` independent chains of ``body`` per trip."""

    name: str
    ctype: str
    body: str  # OpenCL statement(s) on X (the chain) and T (its scratch); a, b in scope
    per_chain: dict[str, int]  # features per chain per trip
    a: float
    b: float
    ext: str = ""
    per_item: tuple[tuple[str, int], ...] = ()  # features per work-item outside the loop

    def source(self) -> str:
        return _compute_src(self.name, self.ctype, self.body, self.ext)

    def counts(self, work_items: int, n: int) -> dict[str, float]:
        """Counts per launch: the body, the loop, the chains' start and final sum
        (CHAINS - 1 adds of the chain type) and the one store per work-item."""
        c: dict[str, float] = {
            f: float(v * CHAINS * n * work_items) for f, v in self.per_chain.items()
        }
        c["int"] = c.get("int", 0.0) + (LOOP_INT * n + 13) * work_items
        kind = "fp64" if self.ctype == "double" else "fp32" if self.ctype == "float" else "int"
        c[kind] = c.get(kind, 0.0) + (CHAINS - 1) * work_items
        if self.ctype != "uint":  # each chain starts from (gid % 997 + c) x 0.0009
            c["conversion"] = c.get("conversion", 0.0) + CHAINS * work_items
            c[kind] += CHAINS * work_items
            c["int"] += work_items  # gid % 997, once
        for f, v in self.per_item:
            c[f] = c.get(f, 0.0) + float(v) * work_items
        size = 8 if self.ctype == "double" else 4
        c["l2_byte"] = c.get("l2_byte", 0.0) + size * work_items
        c["dram_byte"] = c.get("dram_byte", 0.0) + size * work_items
        return c


FP64 = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
# The logistic map x <- a x (1 - x), a = 3.99: a multiply, a negation and a fused
# multiply-add as the plugin counts them (LLVM's fneg is a floating-point operation).
LOGISTIC = "T = X * a; X = fma(T, -X, T)"
COMPUTE = (
    Compute("pw_fp32", "float", LOGISTIC, {"fp32": 3}, 3.99, 0.0),
    Compute("pw_fp64", "double", LOGISTIC, {"fp64": 3}, 3.99, 0.0, FP64),
    Compute("pw_int", "uint", "X = X * a + b", {"int": 2}, 1664525, 1013904223),
    Compute("pw_special", "float", "X = sqrt(X); " + LOGISTIC, {"special": 1, "fp32": 3}, 3.99, 0),
    # x -> 24 bits of x, stepped as an LCG, back to a float in [0, 1)
    Compute(
        "pw_conversion",
        "float",
        "X = (float)(((uint)(X * 16777216.0f) * 1664525u + 1013904223u) >> 8) * b",
        {"conversion": 2, "int": 3, "fp32": 2},
        0.0,
        5.9604645e-8,
    ),
)

LOCAL_SRC = """
__kernel void pw_local(__global float* out, int n) {
    __local float lm[256];
    int l = get_local_id(0);
    lm[l & 255] = (float)l;
    barrier(CLK_LOCAL_MEM_FENCE);
    float x0 = 0.0f, x1 = 0.0f, x2 = 0.0f, x3 = 0.0f;
    for (int i = 0; i < n; i++) {
        x0 += lm[(l + i) & 255];
        x1 += lm[(l + i + 64) & 255];
        x2 += lm[(l + i + 128) & 255];
        x3 += lm[(l + i + 192) & 255];
    }
    out[get_global_id(0)] = x0 + x1 + x2 + x3;
}
"""

ATOMIC_SRC = """
__kernel void pw_atomic(__global uint* c, int n) {
    int g = get_global_id(0);
    for (int i = 0; i < n; i++) atomic_add(&c[(g + i) & 4095], 1u);
}
"""

READ_SRC = """
__kernel void pw_read(__global const float4* in, __global float4* out, int len, int reps) {
    int gid = get_global_id(0), gs = get_global_size(0);
    float4 acc = (float4)(0.0f);
    for (int r = 0; r < reps; r++)
        for (int i = gid; i < len; i += gs) acc += in[i];
    out[gid] = acc;
}
"""

# The DRAM stream at narrower loads: each trip reads the same 16 bytes a work-item as
# pw_read's one float4 load, as two float2 or four float loads ``gs`` elements apart (each
# load coalesced across a warp), into the same four float lanes. The trip count is the
# float4 kernel's, so loop control is equal; only the load instructions (and the index
# arithmetic of each) differ. ``len`` (in elements of the load's type) must be a multiple
# of the trip's stride, 16 bytes x the global size: :func:`_streams` sizes the buffer so.
READ_WIDTH_SRC = """
__kernel void pw_read_w2(__global const float2* in, __global float4* out, int len, int reps) {
    int gid = get_global_id(0), gs = get_global_size(0);
    float4 acc = (float4)(0.0f);
    for (int r = 0; r < reps; r++)
        for (int i = gid; i < len; i += 2 * gs) {
            acc.lo += in[i];
            acc.hi += in[i + gs];
        }
    out[gid] = acc;
}
__kernel void pw_read_w1(__global const float* in, __global float4* out, int len, int reps) {
    int gid = get_global_id(0), gs = get_global_size(0);
    float4 acc = (float4)(0.0f);
    for (int r = 0; r < reps; r++)
        for (int i = gid; i < len; i += 4 * gs) {
            acc.x += in[i];
            acc.y += in[i + gs];
            acc.z += in[i + 2 * gs];
            acc.w += in[i + 3 * gs];
        }
    out[gid] = acc;
}
"""
# Bytes per load instruction -> (integer work per trip, per work-item) beyond pw_read's:
# the extra loads' index adds, and the stride's computation (as the plugin counts them).
WIDTH_INT = {16: (0, 0), 8: (3, 1), 4: (9, 3)}
# The L2-resident stream's working sets, as fractions of the cache: the first is the
# original ``pw_read_l2`` (its name kept, so runs stay comparable).
L2_FRACTIONS = (("l2", 2), ("l2_quarter", 4), ("l2_eighth", 8))
# The DRAM stream's load widths in bytes: the first is the original ``pw_read_dram``.
DRAM_WIDTHS = (("dram", 16), ("dram_float2", 8), ("dram_float", 4))

WRITE_SRC = """
__kernel void pw_write(__global float4* out, int len) {
    int gid = get_global_id(0), gs = get_global_size(0);
    for (int i = gid; i < len; i += gs) out[i] = (float4)((float)i);
}
"""


def local_counts(gsize: int, n: int) -> dict[str, float]:
    """pw_local per launch: four 4-byte local reads, four adds and their index
    arithmetic a trip; one local write, one conversion and one global store a work-item."""
    return {
        "local_byte": 16.0 * n * gsize + 4 * gsize,
        "fp32": (4.0 * n + 3) * gsize,
        "int": (19.0 * n + 6) * gsize,
        "conversion": float(gsize),
        "l2_byte": 4.0 * gsize,
        "dram_byte": 4.0 * gsize,
    }


def atomic_counts(gsize: int, n: int) -> dict[str, float]:
    """pw_atomic per launch: one atomic add and its address arithmetic a trip."""
    return {"atomic": float(n) * gsize, "int": (7.0 * n + 3) * gsize}


def read_counts(
    gsize: int, length: int, reps: int, resident: bool, width: int = 16
) -> dict[str, float]:
    """pw_read per launch over ``length`` float4 elements (16 bytes) ``reps`` times: every
    byte through L2; from DRAM once (``resident``: the buffer stays in L2 between passes
    and launches, so only its first pass ever came from DRAM: counted once per launch, an
    upper bound) or on every pass. ``width``: bytes a load instruction reads (16: pw_read;
    8, 4: pw_read_w2, pw_read_w1 over the same bytes), so 16 / width loads a trip."""
    elems = float(length) * reps
    by = elems * 16
    per_trip, per_item = WIDTH_INT[width]
    return {
        "l2_byte": by + 16.0 * gsize,
        "dram_byte": (16.0 * length if resident else by) + 16.0 * gsize,
        "dram_read_byte": 16.0 * length if resident else by,
        "fp32": 4.0 * elems,
        "int": (5.0 + per_trip) * elems + (5.0 * reps + 6 + per_item) * gsize,
        "global_load": elems * (16 // width),
    }


def dram_read_bytes(name: str, counts: dict[str, float], entry: dict[str, Any]) -> float:
    """DRAM bytes read per launch of a microbenchmark whose results predate the
    ``dram_read_byte`` count: the read streams' DRAM bytes less their one float4 store per
    work-item (:func:`read_counts`); every other kernel only writes to global memory."""
    if not name.startswith("pw_read_"):
        return 0.0
    gsize = float((entry.get("global_size") or [0])[0])
    return max(0.0, counts.get("dram_byte", 0.0) - 16.0 * gsize)


def write_counts(gsize: int, length: int) -> dict[str, float]:
    """pw_write per launch: ``length`` float4 stores, one int-to-float conversion each."""
    return {
        "l2_byte": 16.0 * length,
        "dram_byte": 16.0 * length,
        "conversion": float(length),
        "int": 5.0 * length + 4.0 * gsize,
    }


@dataclass
class Prepared:
    """One runnable microbenchmark: ``launch()`` enqueues one launch and returns its
    event, ``check()`` raises GarbageResult on a wrong result, ``counts`` per launch."""

    name: str
    launch: Callable[[], Any]
    check: Callable[[], None]
    counts: dict[str, float]
    global_size: int
    local_size: int
    # compute units the launch keeps busy (its groups, at most the device's units): the
    # power fit's busy-unit term (devices/power_fit.py UNIT_FEATURE)
    active_units: int = 0


def _widths(dev: Any, part: bool) -> tuple[int, int]:
    """(global, local) size: 2048 work-items per compute unit on a GPU, 64 on a CPU;
    for ``part``, one group on each of a quarter of the compute units (a GPU's block
    scheduler spreads groups over its units first, so fewer groups than units leave
    the rest idle; on a GPU the groups are of the largest size, so each busy unit
    still has enough warps to run at its full rate)."""
    cus = int(dev.max_compute_units)
    is_cpu = bool(dev.type & 2)  # CL_DEVICE_TYPE_CPU
    wg = min(256, int(dev.max_work_group_size))
    if part:
        wg_part = wg if is_cpu else min(1024, int(dev.max_work_group_size))
        return max(1, cus // 4) * wg_part, wg_part
    per_cu = 64 if is_cpu else 2048
    groups = max(1, cus * per_cu // wg)
    return groups * wg, wg


def _fill_random(queue: Any, buf: Any, size: int) -> None:
    """Fill ``buf`` with uniform random floats in [0, 1): data whose bits toggle as real
    data's do on the memory bus (a constant fill toggles almost nothing)."""
    import pyopencl as cl

    block = np.random.default_rng(0).random((min(size, 16 << 20) // 4,), dtype=np.float32)
    for off in range(0, size - size % 4, block.nbytes):
        n = min(block.nbytes, size - off) // 4
        cl.enqueue_copy(queue, buf, block[:n], dst_offset=off)
    queue.finish()


def cache_bytes(dev: Any) -> int:
    """The last-level cache the L2-resident read must fit in: the device's report, else
    its sheet's L2 where NVIDIA reports a per-SM cache (devices.microbench.runner)."""
    from clproj.devices.specs import spec_for

    cache = int(getattr(dev, "global_mem_cache_size", 0) or 0)
    sheet = spec_for(dev.name)
    if sheet is not None and sheet.l2_bytes > cache:
        cache = sheet.l2_bytes
    return max(cache, 1 << 20)


def prepare(ctx: Any, queue: Any, dev: Any, quick: bool = False) -> list[Prepared]:
    """Every microbenchmark the device supports, at full occupancy and on a quarter of
    its compute units, each calibrated to about ``TARGET_LAUNCH_S`` a launch."""
    import pyopencl as cl

    out: list[Prepared] = []
    has_fp64 = "cl_khr_fp64" in dev.extensions
    target = 0.002 if quick else TARGET_LAUNCH_S

    def calibrate(run: Callable[[int], Any], start: int) -> int:
        run(start).wait()  # the first launch pays the JIT: not timed
        n = start
        while True:
            t0 = time.perf_counter()
            run(n).wait()
            if time.perf_counter() - t0 >= target or n >= 1 << 24:
                return n
            n *= 2

    for part in (False, True):
        gsize, wg = _widths(dev, part)
        tag = "part" if part else "full"
        for c in COMPUTE:
            if c.ctype == "double" and not has_fp64:
                continue
            prg = cl.Program(ctx, c.source()).build()
            k = getattr(prg, c.name)
            dt = {"float": np.float32, "double": np.float64, "uint": np.uint32}[c.ctype]
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, gsize * np.dtype(dt).itemsize)

            def run(
                n: int,
                k: Any = k,
                buf: Any = buf,
                dt: Any = dt,
                c: Compute = c,
                gsize: int = gsize,
                wg: int = wg,
            ) -> Any:
                return k(queue, (gsize,), (wg,), buf, dt(c.a), dt(c.b), np.int32(n))

            n = calibrate(run, 16)
            out.append(
                Prepared(
                    f"{c.name}_{tag}",
                    lambda run=run, n=n: run(n),
                    _finite(queue, buf, dt, gsize, f"{c.name}_{tag}"),
                    c.counts(gsize, n),
                    gsize,
                    wg,
                )
            )
        prg = cl.Program(ctx, LOCAL_SRC).build()
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, gsize * 4)

        def run_l(
            n: int, k: Any = prg.pw_local, buf: Any = buf, gsize: int = gsize, wg: int = wg
        ) -> Any:
            return k(queue, (gsize,), (wg,), buf, np.int32(n))

        n = calibrate(run_l, 16)
        out.append(
            Prepared(
                f"pw_local_{tag}",
                lambda run=run_l, n=n: run(n),
                _finite(queue, buf, np.float32, gsize, f"pw_local_{tag}"),
                local_counts(gsize, n),
                gsize,
                wg,
            )
        )
        prg = cl.Program(ctx, ATOMIC_SRC).build()
        cnt = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096 * 4)

        def run_a(
            n: int, k: Any = prg.pw_atomic, cnt: Any = cnt, gsize: int = gsize, wg: int = wg
        ) -> Any:
            return k(queue, (gsize,), (wg,), cnt, np.int32(n))

        n = calibrate(run_a, 1)
        out.append(
            Prepared(
                f"pw_atomic_{tag}",
                lambda run=run_a, n=n: run(n),
                lambda: None,
                atomic_counts(gsize, n),
                gsize,
                wg,
            )
        )
        out.extend(_streams(ctx, queue, dev, gsize, wg, tag, calibrate, quick))
    out.append(_sparse(ctx, queue, dev, calibrate))
    cus = int(dev.max_compute_units)
    return [replace(p, active_units=min(cus, max(1, p.global_size // p.local_size))) for p in out]


def _sparse(ctx: Any, queue: Any, dev: Any, calibrate: Callable[..., int]) -> Prepared:
    """``pw_fp32_sparse``: one work-item on each compute unit (groups of one), every unit
    busy at a trickle of the fp32 work ``pw_fp32_full`` does on it.

    Why: ``_full`` and ``_part`` do the same work per busy unit, so the power a busy unit
    draws whatever it runs (its clocks, schedulers, register files: Hong and Kim's
    per-active-core power) moves with their operation counts and no fit can tell the two
    apart. Here the units are all busy and the operations a hundredth or less of the
    full rate: the windows then separate the two (power_fit.separates_units)."""
    import pyopencl as cl

    c = COMPUTE[0]
    gsize = int(dev.max_compute_units)
    k = cl.Program(ctx, c.source()).build().pw_fp32
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, gsize * 4)

    def run(n: int) -> Any:
        return k(queue, (gsize,), (1,), buf, np.float32(c.a), np.float32(c.b), np.int32(n))

    n = calibrate(run, 16)
    return Prepared(
        "pw_fp32_sparse",
        lambda: run(n),
        _finite(queue, buf, np.float32, gsize, "pw_fp32_sparse"),
        c.counts(gsize, n),
        gsize,
        1,
    )


def _streams(
    ctx: Any,
    queue: Any,
    dev: Any,
    gsize: int,
    wg: int,
    tag: str,
    calibrate: Callable[[Callable[[int], Any], int], int],
    quick: bool,
) -> list[Prepared]:
    """L2-resident reads at each of :data:`L2_FRACTIONS` of the cache, DRAM reads at each
    of :data:`DRAM_WIDTHS` over one buffer, and DRAM writes (grid-stride loops).

    The DRAM buffer is a whole number of trips (16 bytes x the global size): every
    width's kernel then reads exactly the same bytes in the same trips, and the narrow
    loads' offsets stay inside it."""
    import pyopencl as cl

    cache = cache_bytes(dev)
    if quick:  # mechanics only (tests): sizes that run in milliseconds on a CPU
        big, cache = 16 << 20, 2 << 20
    else:
        big = max(min(int(dev.max_mem_alloc_size) // 2, 1 << 30), 4 * cache)
    big = max(1, big // (16 * gsize)) * 16 * gsize
    prg = cl.Program(ctx, READ_SRC + READ_WIDTH_SRC + WRITE_SRC).build()
    kernels = {
        16: cl.Kernel(prg, "pw_read"),
        8: cl.Kernel(prg, "pw_read_w2"),
        4: cl.Kernel(prg, "pw_read_w1"),
    }
    write = cl.Kernel(prg, "pw_write")
    out_buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, gsize * 16)
    runs = [(kind, (cache // div) // 16 * 16, 16) for kind, div in L2_FRACTIONS]
    runs += [(kind, big, width) for kind, width in DRAM_WIDTHS]
    res = []
    filled: dict[int, Any] = {}
    for kind, size, width in runs:
        if size not in filled:  # the DRAM widths share one buffer, filled once
            filled[size] = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
            _fill_random(queue, filled[size], size)
        length = size // 16

        def run_r(
            reps: int,
            src: Any = filled[size],
            k: Any = kernels[width],
            n: int = size // width,
        ) -> Any:
            return k(queue, (gsize,), (wg,), src, out_buf, np.int32(n), np.int32(reps))

        resident = kind.startswith("l2")
        reps = calibrate(run_r, 1) if resident else 1
        name = f"pw_read_{kind}_{tag}"
        res.append(
            Prepared(
                name,
                lambda run=run_r, reps=reps: run(reps),
                _finite(queue, out_buf, np.float32, gsize * 4, name),
                read_counts(gsize, length, reps, resident, width),
                gsize,
                wg,
            )
        )
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, big)
    length = big // 16
    res.append(
        Prepared(
            f"pw_write_dram_{tag}",
            lambda: write(queue, (gsize,), (wg,), dst, np.int32(length)),
            lambda: None,
            write_counts(gsize, length),
            gsize,
            wg,
        )
    )
    return res


def _finite(queue: Any, buf: Any, dt: Any, n: int, name: str) -> Callable[[], None]:
    """A check that the kernel wrote finite values that are not all zero."""

    def check() -> None:
        import pyopencl as cl

        host = np.empty(n, dtype=dt)
        cl.enqueue_copy(queue, host, buf).wait()
        if np.issubdtype(host.dtype, np.floating) and not np.isfinite(host).all():
            raise GarbageResult(name, "non-finite output")
        if not host.any():
            raise GarbageResult(name, "output all zero: the work was not done")

    return check


def run_suite(
    dev: Any,
    measure: Callable[[str, Callable[[], Any], Callable[[], None]], Any],
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
    save: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """``clproj.energy-results`` kernel entries of every microbenchmark on ``dev``:
    ``measure(name, launch, finish)`` returns a :class:`devices.energy.Window`. Each
    entry carries ``microbenchmark``, ``counts`` (per launch) and the launch shape.
    ``save(entries)`` after each, so a run cut short by its time limit keeps its readings."""
    import pyopencl as cl

    from clproj.devices.energy import kernel_entry

    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    entries = []
    for p in prepare(ctx, queue, dev, quick):
        if progress is not None:
            progress(p.name)
        try:
            p.launch().wait()
            p.check()
            w = measure(p.name, p.launch, queue.finish)
        except Exception as exc:  # one class failing (no fp64, a driver bug) keeps the rest
            entries.append(
                {"microbenchmark": p.name, "error": f"{type(exc).__name__}: {exc}"[:500]}
            )
            continue
        entries.append(
            kernel_entry(
                w,
                microbenchmark=p.name,
                counts=p.counts,
                global_size=[p.global_size],
                local_size=[p.local_size],
                active_units=p.active_units,
            )
        )
        if save is not None:
            save(entries)
    return entries
