"""Heavy work-items and a launch-heavy factorisation (miniemu bounded emulation, issue #11).

The ``heavy_*`` apps give every work-item a loop of ``iters`` iterations (10^6 at the
default size), the case where emulating even one work-group is too slow; their
references are closed forms (affine-map powers, cyclic window sums, fixed points), so
verifying the default size costs milliseconds. ``lu_factor`` launches two kernels per
pivot with a shrinking NDRange: thousands of launches of about a thousand shapes.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from clproj.benchmarks.apps.base import App, Launch, Plan, load_source

M32 = (1 << 32) - 1


def _affine_power(a: int, c: int, n: int) -> list[list[int]]:
    """(x, s, 1) -> state after n LCG steps with s += x, as a 3x3 matrix mod 2^32."""

    def mul(p, q):
        return [
            [sum(p[i][k] * q[k][j] for k in range(3)) & M32 for j in range(3)] for i in range(3)
        ]

    result = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    base = [[a, 0, c], [a, 1, c], [0, 0, 1]]
    while n:
        if n & 1:
            result = mul(base, result)
        base = mul(base, base)
        n >>= 1
    return result


def _cyclic_sums(values: np.ndarray, stride: int, starts: np.ndarray, n: int) -> np.ndarray:
    """sum_{k<n} values[(start + k*stride) mod M] for each start (M a power of two, odd stride)."""
    m = values.shape[-1]
    perm = (np.arange(m, dtype=np.int64) * stride) % m  # k -> index
    b = values[..., perm].astype(np.int64)
    sinv = pow(stride, -1, m)
    k0 = (starts.astype(np.int64) * sinv) % m  # start = perm[k0]
    csum = np.concatenate(
        [np.zeros((*b.shape[:-1], 1), np.int64), np.cumsum(np.concatenate([b, b], -1), -1)], -1
    )
    full, rest = divmod(n, m)
    window = np.take_along_axis(csum, k0 + rest, -1) - np.take_along_axis(csum, k0, -1)
    total = b.sum(-1, keepdims=True) * full + window
    return (total & M32).astype(np.uint32)


class HeavyApp(App):
    """Base: size = (work-items, iterations per work-item)."""

    paper = False
    kernel = ""
    local = 256

    def _iters(self, size) -> tuple[int, int]:
        n, iters = size
        assert n % self.local == 0, f"{self.name}: work-items must be a multiple of {self.local}"
        return int(n), int(iters)


class HeavyLcg(HeavyApp):
    name = "heavy_lcg"
    description = "per-work-item LCG loop (integer multiply-add), 10^6 iterations"
    stresses = "long per-work-item integer loops (bounded emulation)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (4096, 1_000_000), "small": (512, 1000)}

    def _plan(self, size, rng: np.random.Generator) -> Plan:
        n, iters = self._iters(size)
        seed = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        launch = Launch(
            "heavy_lcg",
            [("buf", "seed"), ("buf", "out"), ("scalar", np.int32(iters))],
            (n,),
            (self.local,),
        )
        return Plan(
            load_source("heavy.cl"),
            "",
            {"seed": seed, "out": np.zeros(2 * n, np.uint32)},
            [launch],
            ["out"],
            meta={"iters": iters},
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        m = _affine_power(1664525, 1013904223, plan.meta["iters"])
        x0 = plan.buffers["seed"].astype(np.uint64)
        x = (m[0][0] * x0 + m[0][2]) & M32
        s = (m[1][0] * x0 + m[1][2]) & M32
        out = np.empty(2 * x0.size, np.uint32)
        out[0::2], out[1::2] = x, s
        return {"out": out}


class HeavyGather(HeavyApp):
    name = "heavy_gather"
    description = "per-work-item strided gather loop over a 1 MiB table, 10^6 iterations"
    stresses = "long per-work-item global-memory loops (bounded emulation)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (1024, 1_000_000), "small": (256, 1000)}
    table = 1 << 18
    stride = 4099

    def _plan(self, size, rng: np.random.Generator) -> Plan:
        n, iters = self._iters(size)
        table = rng.integers(0, 1 << 32, self.table, dtype=np.uint64).astype(np.uint32)
        args = [
            ("buf", "table"),
            ("buf", "out"),
            ("scalar", np.int32(iters)),
            ("scalar", np.uint32(self.stride)),
            ("scalar", np.uint32(self.table - 1)),
        ]
        return Plan(
            load_source("heavy.cl"),
            "",
            {"table": table, "out": np.zeros(n, np.uint32)},
            [Launch("heavy_gather", args, (n,), (self.local,))],
            ["out"],
            meta={"iters": iters},
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        n = plan.buffers["out"].size
        return {
            "out": _cyclic_sums(
                plan.buffers["table"], self.stride, np.arange(n), plan.meta["iters"]
            )
        }


class HeavyFma(HeavyApp):
    name = "heavy_fma"
    description = "per-work-item fp32 FMA chain, 10^6 iterations"
    stresses = "long per-work-item fp32 FMA loops (bounded emulation)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (4096, 1_000_000), "small": (512, 1000)}
    rtol = 1e-5

    def _plan(self, size, rng: np.random.Generator) -> Plan:
        n, iters = self._iters(size)
        b = (1.0 + rng.random(n)).astype(np.float32)
        launch = Launch(
            "heavy_fma",
            [("buf", "b"), ("buf", "out"), ("scalar", np.int32(iters))],
            (n,),
            (self.local,),
        )
        return Plan(
            load_source("heavy.cl"), "", {"b": b, "out": np.zeros(n, np.float32)}, [launch], ["out"]
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        return {"out": (8.0 * plan.buffers["b"].astype(np.float64) / 3.0).astype(np.float32)}


class HeavySpecial(HeavyApp):
    name = "heavy_special"
    description = "per-work-item cos/sqrt fixed-point iteration, 10^6 iterations"
    stresses = "long per-work-item special-function loops (bounded emulation)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (256, 1_000_000), "small": (256, 1000)}
    rtol = 1e-4

    def _plan(self, size, rng: np.random.Generator) -> Plan:
        n, iters = self._iters(size)
        a = (0.5 + 0.5 * rng.random(n)).astype(np.float32)
        launch = Launch(
            "heavy_special",
            [("buf", "a"), ("buf", "out"), ("scalar", np.int32(iters))],
            (n,),
            (self.local,),
        )
        return Plan(
            load_source("heavy.cl"),
            "",
            {"a": a, "out": np.zeros(2 * n, np.float32)},
            [launch],
            ["out"],
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        a = plan.buffers["a"].astype(np.float64)
        x = np.full_like(a, 0.5)
        for _ in range(400):  # contraction factor <= sin(1) < 0.85
            x = np.cos(a * x)
        y = (1.0 + np.sqrt(1.0 + 4.0 * x)) / 2.0
        out = np.empty(2 * a.size, np.float32)
        out[0::2], out[1::2] = x, y
        return {"out": out}


class HeavyLmem(HeavyApp):
    name = "heavy_lmem"
    description = "per-work-item strided walk of a __local tile after a barrier, 10^6 iterations"
    stresses = "long per-work-item local-memory loops behind a barrier (bounded emulation)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (2048, 1_000_000), "small": (512, 1000)}
    stride = 33

    def _plan(self, size, rng: np.random.Generator) -> Plan:
        n, iters = self._iters(size)
        src = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        args = [
            ("buf", "in"),
            ("buf", "out"),
            ("local", 4 * self.local),
            ("scalar", np.int32(iters)),
            ("scalar", np.uint32(self.stride)),
        ]
        return Plan(
            load_source("heavy.cl"),
            "",
            {"in": src, "out": np.zeros(n, np.uint32)},
            [Launch("heavy_lmem", args, (n,), (self.local,))],
            ["out"],
            meta={"iters": iters},
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        tiles = plan.buffers["in"].reshape(-1, self.local)
        lids = np.broadcast_to(np.arange(self.local), tiles.shape)
        return {"out": _cyclic_sums(tiles, self.stride, lids, plan.meta["iters"]).reshape(-1)}


class LuFactor(App):
    name = "lu_factor"
    paper = False
    description = "LU factorisation without pivoting: 2 launches per pivot, shrinking NDRange"
    stresses = "thousands of launches of ~n distinct shapes (launch reuse, projection on a budget)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1024, "small": 128}
    atol_rel = 2e-4
    local = 64

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        a = rng.random((n, n), dtype=np.float32) + np.float32(n) * np.eye(n, dtype=np.float32)
        launches = []
        for k in range(n - 1):
            m = n - k - 1
            gx = -(-m // self.local) * self.local
            args = [("buf", "a"), ("scalar", np.int32(n)), ("scalar", np.int32(k))]
            launches.append(Launch("lu_column", args, (gx,), (self.local,)))
            launches.append(Launch("lu_update", args, (gx, m), (self.local, 1)))
        return Plan(
            load_source("heavy.cl"), "", {"a": a.reshape(-1)}, launches, ["a"], meta={"n": n}
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        n = plan.meta["n"]
        a = plan.buffers["a"].reshape(n, n).astype(np.float32).copy()
        for k in range(n - 1):
            a[k + 1 :, k] /= a[k, k]
            a[k + 1 :, k + 1 :] -= np.outer(a[k + 1 :, k], a[k, k + 1 :])
        return {"a": a.reshape(-1)}


HEAVY_APPS: list[App] = [
    HeavyLcg(),
    HeavyGather(),
    HeavyFma(),
    HeavySpecial(),
    HeavyLmem(),
    LuFactor(),
]
