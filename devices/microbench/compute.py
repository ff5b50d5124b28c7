"""Instruction throughput per class, with enough independent work (ILP) to reach peak.

Each work-item runs ``CHAINS`` independent dependency chains of one operation (16 for
cheap classes, 8 for expensive ones), unrolled four times per loop trip, so latency is
hidden by ILP within a work-item as well as by other warps. Operands ``a``/``b`` are kernel
arguments: the compiler cannot fold the chain, and without -cl-fast-relaxed-math it may
not reassociate floating-point recurrences either.

Check: every chain is a recurrence whose result the host recomputes with numpy for a
sample of work-items (first, last and spread ones) — exactly for integers, to a tolerance
for floating point (fma vs. separate rounding, libm ulps). The class of a benchmark that
fails is not reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

UNROLL = 4
_X = re.compile(r"\bx\b")
_J = re.compile(r"\bj\b")
SAMPLES = 48
CPU_STEPS = 128
CPU_GROUPS_PER_CORE = 32
# Classes whose straight-line code is long (libm calls, division sequences): fewer steps.
EXPENSIVE = {"fp32_div", "int_div", "conversion"} | {
    f"special_{f}" for f in ("sqrt", "rsqrt", "exp", "log", "sin")
}


@dataclass(frozen=True)
class Op:
    """One instruction-class benchmark: ``x = BODY`` per step, per chain."""

    name: str  # benchmark name (e.g. special_sin)
    cls: str  # instruction class it measures (formats.md names)
    ctype: str  # float, double, uint
    body: str  # OpenCL expression in x, a, b
    init: str  # OpenCL expression in g (gid & 1023) and j (chain index)
    ref: Callable[[Any, Any, Any], Any]  # numpy step
    ref_init: Callable[[Any, Any], Any]
    a: float
    b: float
    chains: int = 8
    ops: int = 1  # class operations per step
    rtol: float = 0.0  # 0: exact


def _f(v: Any) -> Any:
    return np.asarray(v, dtype=np.float64)


def _u(v: Any) -> Any:
    return np.asarray(v, dtype=np.uint64) & 0xFFFFFFFF


OPS: tuple[Op, ...] = (
    Op(
        "fp32_add",
        "fp32_add",
        "float",
        "x + a",
        "(float)(g + j)",
        lambda x, a, b: x + a,
        lambda g, j: _f(g + j),
        1.0,
        0.0,
        rtol=1e-6,
    ),
    Op(
        "fp32_mul",
        "fp32_mul",
        "float",
        "x * a",
        "1.0f + g * 1e-3f + j * 1e-4f",
        lambda x, a, b: x * a,
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-4),
        0.9999,
        0.0,
        rtol=1e-3,
    ),
    Op(
        "fp32_fma",
        "fp32_fma",
        "float",
        "fma(x, a, b)",
        "1.0f + g * 1e-3f + j * 1e-4f",
        lambda x, a, b: x * a + b,
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-4),
        0.999,
        1e-3,
        rtol=1e-3,
    ),
    Op(
        "fp32_div",
        "fp32_div",
        "float",
        "a / x + b",
        "1.0f + g * 1e-3f + j * 1e-4f",
        lambda x, a, b: a / x + b,
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-4),
        1.0,
        1.0,
        chains=8,
        rtol=1e-3,
    ),
    Op(
        "fp64_fma",
        "fp64_fma",
        "double",
        "fma(x, a, b)",
        "1.0 + g * 1e-3 + j * 1e-4",
        lambda x, a, b: x * a + b,
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-4),
        0.999,
        1e-3,
        rtol=1e-9,
    ),
    Op(
        "int_add",
        "int_add",
        "uint",
        "(x ^ a) + b",
        "g * 2654435761u + j * 40503u",
        lambda x, a, b: _u((x ^ a) + b),
        lambda g, j: _u(g * 2654435761 + j * 40503),
        0x9E3779B9,
        0x7F4A7C15,
        ops=2,
    ),
    # x * x + b, not x * a: integer products reassociate, so a chain of "* a" folds into
    # one multiply by a^n. One mad per step (one IMAD on NVIDIA), counted as one int_mul.
    Op(
        "int_mul",
        "int_mul",
        "uint",
        "x * x + b",
        "(g * 2654435761u + j * 40503u) | 1u",
        lambda x, a, b: _u(x * x + b),
        lambda g, j: _u(g * 2654435761 + j * 40503) | 1,
        0,
        0x2C1B3C6D,
    ),
    Op(
        "int_div",
        "int_div",
        "uint",
        "x / a + b",
        "0xFFFFFFFFu - g * 7919u - j * 104729u",
        lambda x, a, b: _u(x // a + b),
        lambda g, j: _u(0xFFFFFFFF - g * 7919 - j * 104729),
        3,
        0x40000000,
    ),
    Op(
        "conversion",
        "conversion",
        "uint",
        "convert_uint(convert_float(x) * fa) ^ b",
        "(g * 977u + j * 131u) & 0xFFFFFu",
        lambda x, a, b: _u(
            np.trunc(np.float32(x.astype(np.float32)) * np.float32(0.5)).astype(np.uint64) ^ b
        ),
        lambda g, j: _u((g * 977 + j * 131) & 0xFFFFF),
        0.5,
        0x5A5A5,
        ops=2,
    ),
    Op(
        "special_sqrt",
        "special",
        "float",
        "sqrt(x) + a",
        "1.0f + g * 1e-3f + j * 1e-2f",
        lambda x, a, b: np.sqrt(x) + a,
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-2),
        1.0,
        0.0,
        chains=8,
        rtol=1e-4,
    ),
    Op(
        "special_rsqrt",
        "special",
        "float",
        "rsqrt(x) + a",
        "1.0f + g * 1e-3f + j * 1e-2f",
        lambda x, a, b: 1.0 / np.sqrt(x) + a,
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-2),
        1.0,
        0.0,
        rtol=1e-4,
    ),
    Op(
        "special_exp",
        "special",
        "float",
        "exp(x * a)",
        "g * 1e-3f + j * 1e-2f",
        lambda x, a, b: np.exp(x * a),
        lambda g, j: _f(g * 1e-3 + j * 1e-2),
        -1.0,
        0.0,
        chains=8,
        rtol=1e-4,
    ),
    Op(
        "special_log",
        "special",
        "float",
        "log(x + a)",
        "1.0f + g * 1e-3f + j * 1e-2f",
        lambda x, a, b: np.log(x + a),
        lambda g, j: _f(1.0 + g * 1e-3 + j * 1e-2),
        2.0,
        0.0,
        chains=8,
        rtol=1e-4,
    ),
    Op(
        "special_sin",
        "special",
        "float",
        "sin(x) + a",
        "g * 1e-3f + j * 1e-2f",
        lambda x, a, b: np.sin(x) + a,
        lambda g, j: _f(g * 1e-3 + j * 1e-2),
        1.0,
        0.0,
        chains=8,
        rtol=1e-4,
    ),
)

TEMPLATE = """
{pragma}
__kernel void k(__global {t}* restrict out, {t} a, {t} b, float fa, uint iters) {{
    uint gid = get_global_id(0);
    uint g = gid & 1023u;
{decl}
    {loop}
    {t} s = {sum};
    out[gid] = s;
}}
"""


def source(op: Op, straight_steps: int = 0) -> str:
    """Kernel source; ``straight_steps`` > 0 gives loop-free code of that many steps (CPUs).

    PoCL vectorises a kernel across work-items only when the work-item loop can become the
    innermost loop: a loop inside the kernel keeps it scalar (measured 10x below peak), so
    CPUs get straight-line code. GPUs get a loop over an unrolled body of ``UNROLL`` steps.
    """
    decl = "\n".join(
        f"    {op.ctype} x{j} = ({op.ctype})({_J.sub(str(j), op.init)});" for j in range(op.chains)
    )
    step = "\n".join(f"        x{j} = {_X.sub(f'x{j}', op.body)};" for j in range(op.chains))
    if straight_steps:
        body = "\n".join([step] * straight_steps)
        loop = "{\n" + body + "\n    }"
    else:
        body = "\n".join([step] * UNROLL)
        loop = "for (uint it = 0; it < iters; ++it) {\n" + body + "\n    }"
    total = " + ".join(f"x{j}" for j in range(op.chains))
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" if op.ctype == "double" else ""
    return TEMPLATE.format(pragma=pragma, t=op.ctype, decl=decl, loop=loop, sum=total)


def supported(bench: Bench, op: Op) -> bool:
    return op.ctype != "double" or "cl_khr_fp64" in bench.device.extensions


def _reference(op: Op, gids: Any, steps: int) -> Any:
    g = (gids & 1023).astype(np.float64 if op.ctype != "uint" else np.uint64)[:, None]
    j = np.arange(op.chains)[None, :]
    if op.ctype == "uint":
        x = op.ref_init(g.astype(np.uint64), j.astype(np.uint64))
        x = np.broadcast_to(x, (len(gids), op.chains)).copy()
        a, b = np.uint64(int(op.a)), np.uint64(int(op.b))
        for _ in range(steps):
            x = op.ref(x, a, b)
        return x.sum(axis=1) & 0xFFFFFFFF
    x = np.broadcast_to(op.ref_init(g, j), (len(gids), op.chains)).copy()
    for _ in range(steps):
        x = op.ref(x, op.a, op.b)
    return x.sum(axis=1)


class Compute:
    def __init__(self, bench: Bench) -> None:
        self.b = bench

    def grid(self) -> tuple[int, int]:
        """(global size, work-group size): full occupancy on GPUs, many groups per core on CPUs."""
        b = self.b
        wg = min(256, b.max_wg)
        if b.is_cpu:
            return wg * CPU_GROUPS_PER_CORE * b.cus, wg
        return wg * 8 * b.cus, wg  # 2048 work-items per CU on current NVIDIA/AMD parts

    def run(self, op: Op, loop: bool = False) -> float:
        """Device-wide class operations per second.

        ``loop=True`` on a CPU measures the same chains inside a kernel loop (the GPU form):
        PoCL keeps such kernels scalar, and the ratio to the straight-line rate is the
        profile's ``detail.loop_factor``, which the projection applies to kernels whose
        work-items loop.
        """
        b = self.b
        gsize, wg = self.grid()
        if b.is_cpu and loop:
            iters = max(1, CPU_STEPS // UNROLL // (4 if op.name in EXPENSIVE else 1))
            if b.mode.name == "tiny":
                iters = max(1, iters // 8)
            steps = iters * UNROLL
            src = source(op)
        elif b.is_cpu:
            iters = 1
            steps = CPU_STEPS // (4 if op.name in EXPENSIVE else 1)
            if b.mode.name == "tiny":
                steps = max(4, steps // 8)
            src = source(op, straight_steps=steps)
        else:
            iters = max(1, b.mode.compute_steps // UNROLL)
            steps = iters * UNROLL
            src = source(op)
        np_t = {"float": np.float32, "double": np.float64, "uint": np.uint32}[op.ctype]
        kern = b.kernel(src, "k")
        out = b.buffer(gsize * np.dtype(np_t).itemsize)
        a = np_t(int(op.a)) if op.ctype == "uint" else np_t(op.a)
        bb = np_t(int(op.b)) if op.ctype == "uint" else np_t(op.b)

        def go() -> Any:
            return kern(b.queue, (gsize,), (wg,), out, a, bb, np.float32(op.a), np.uint32(iters))

        rate = b.rate(go, gsize * steps * op.chains * op.ops)
        got = b.read(out, np.empty(gsize, np_t))
        gids = np.unique(np.linspace(0, gsize - 1, SAMPLES).astype(np.int64))
        want = _reference(op, gids, steps)
        have = got[gids].astype(np.float64 if op.ctype != "uint" else np.uint64)
        if op.rtol == 0.0:
            ok = np.array_equal(have, want)
        else:
            ok = bool(np.all(np.isfinite(have))) and bool(
                np.allclose(have, want, rtol=op.rtol, atol=op.rtol)
            )
        if not ok:
            i = (
                int(np.argmax(have != want))
                if op.rtol == 0.0
                else int(np.argmax(np.abs(have - want)))
            )
            raise GarbageResult(
                op.name, f"work-item {gids[i]}: got {have[i]!r}, expected {want[i]!r}"
            )
        return rate
