"""Realistic kernels beyond the paper's eight, for a more varied held-out evaluation."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from clproj.benchmarks.apps.base import App, Launch, Plan, load_source


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class Stencil2D(App):
    name = "stencil2d"
    description = "Jacobi sweeps of a 5-point stencil, ping-ponging two grids"
    paper = False
    stresses = "neighbour reuse through caches; bandwidth bound; repeated launches"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (2048, 10), "small": (64, 4)}
    rtol = 1e-5
    atol = 1e-6

    def _plan(self, size: tuple, rng: np.random.Generator) -> Plan:
        n, iters = size
        assert n % 16 == 0
        a = rng.random((n, n), dtype=np.float32)
        bufs = {"a": a, "b": np.zeros_like(a)}
        launches = []
        for i in range(iters):
            src, dst = ("a", "b") if i % 2 == 0 else ("b", "a")
            launches.append(
                Launch(
                    "jacobi5",
                    [("buf", src), ("buf", dst), ("scalar", np.uint32(n))],
                    (n, n),
                    (16, 16),
                )
            )
        final = "b" if iters % 2 else "a"
        return Plan(load_source("stencil2d.cl"), "", bufs, launches, [final], meta={"iters": iters})

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        g = plan.buffers["a"].astype(np.float64)
        for _ in range(plan.meta["iters"]):
            h = g.copy()
            h[1:-1, 1:-1] = 0.2 * (
                g[1:-1, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1]
            )
            g = h
        return {plan.outputs[0]: g.astype(np.float32)}


class SpmvCsr(App):
    name = "spmv_csr"
    description = "sparse matrix-vector product (CSR, one row per work-item), 1-32 nonzeros per row"
    paper = False
    stresses = "irregular gathers, uneven per-work-item loop lengths (divergence)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 17, "small": 1024}
    rtol = 1e-4
    atol = 1e-5

    def _plan(self, nrows: int, rng: np.random.Generator) -> Plan:
        lengths = rng.integers(1, 33, nrows)
        row_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
        nnz = int(row_ptr[-1])
        cols = rng.integers(0, nrows, nnz, dtype=np.uint32)
        vals = rng.uniform(-1, 1, nnz).astype(np.float32)
        x = rng.uniform(-1, 1, nrows).astype(np.float32)
        bufs = {
            "row_ptr": row_ptr,
            "cols": cols,
            "vals": vals,
            "x": x,
            "y": np.zeros(nrows, dtype=np.float32),
        }
        launch = Launch(
            "spmv_csr",
            [
                ("buf", "row_ptr"),
                ("buf", "cols"),
                ("buf", "vals"),
                ("buf", "x"),
                ("buf", "y"),
                ("scalar", np.uint32(nrows)),
            ],
            (_round_up(nrows, 256),),
            (256,),
        )
        return Plan(load_source("spmv_csr.cl"), "", bufs, [launch], ["y"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        b = plan.buffers
        prod = b["vals"].astype(np.float64) * b["x"].astype(np.float64)[b["cols"]]
        y = np.add.reduceat(prod, b["row_ptr"][:-1].astype(np.int64))
        return {"y": y.astype(np.float32)}


class Histogram256(App):
    name = "histogram256"
    description = "256-bin byte histogram: local atomics per group, then global atomics"
    paper = False
    stresses = "local-memory atomics with skewed (contended) bins"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 24, "small": 1 << 14}
    per_item = 64

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        data = np.clip(rng.normal(128, 24, n), 0, 255).astype(np.uint8)
        items = _round_up(-(-n // self.per_item), 256)
        launch = Launch(
            "histogram256",
            [
                ("buf", "data"),
                ("buf", "hist"),
                ("scalar", np.uint32(n)),
                ("scalar", np.uint32(self.per_item)),
            ],
            (items,),
            (256,),
        )
        bufs = {"data": data, "hist": np.zeros(256, dtype=np.uint32)}
        return Plan(load_source("histogram.cl"), "", bufs, [launch], ["hist"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        return {"hist": np.bincount(plan.buffers["data"], minlength=256).astype(np.uint32)}


class BlackScholes(App):
    name = "blackscholes"
    description = "Black-Scholes European call and put prices"
    paper = False
    stresses = "special functions (exp, log, sqrt) and streaming memory"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 20, "small": 4096}
    rtol = 1e-4
    atol = 2e-3
    RATE, VOL = 0.02, 0.30

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        bufs = {
            "spot": rng.uniform(5, 30, n).astype(np.float32),
            "strike": rng.uniform(1, 100, n).astype(np.float32),
            "years": rng.uniform(0.25, 10, n).astype(np.float32),
            "call": np.zeros(n, dtype=np.float32),
            "put": np.zeros(n, dtype=np.float32),
        }
        launch = Launch(
            "black_scholes",
            [
                ("buf", "spot"),
                ("buf", "strike"),
                ("buf", "years"),
                ("buf", "call"),
                ("buf", "put"),
                ("scalar", np.float32(self.RATE)),
                ("scalar", np.float32(self.VOL)),
            ],
            (_round_up(n, 256),),
            (256,),
        )
        assert n % 256 == 0
        return Plan(load_source("blackscholes.cl"), "", bufs, [launch], ["call", "put"])

    @staticmethod
    def _cnd(d: np.ndarray) -> np.ndarray:
        k = 1.0 / (1.0 + 0.2316419 * np.abs(d))
        poly = k * (
            0.319381530
            + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429)))
        )
        c = 1.0 - 0.398942280 * np.exp(-0.5 * d * d) * poly
        return np.where(d < 0, 1.0 - c, c)

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        s, k, t = (plan.buffers[x].astype(np.float64) for x in ("spot", "strike", "years"))
        r, v = np.float64(np.float32(self.RATE)), np.float64(np.float32(self.VOL))
        sq = np.sqrt(t)
        d1 = (np.log(s / k) + (r + 0.5 * v * v) * t) / (v * sq)
        d2 = d1 - v * sq
        disc = np.exp(-r * t)
        call = s * self._cnd(d1) - k * disc * self._cnd(d2)
        put = k * disc * self._cnd(-d2) - s * self._cnd(-d1)
        return {"call": call.astype(np.float32), "put": put.astype(np.float32)}


class Convolution2D(App):
    name = "convolution2d"
    description = "2-D 7x7 convolution, filter in constant memory, zero outside the image"
    paper = False
    stresses = "constant-memory broadcast, cache reuse of neighbouring pixels, boundary branches"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (2048, 2048), "small": (64, 48)}
    rtol = 1e-4
    atol = 1e-4
    R = 3

    def _plan(self, size: tuple, rng: np.random.Generator) -> Plan:
        w, h = size
        assert w % 16 == 0 and h % 16 == 0
        img = rng.random((h, w), dtype=np.float32)
        filt = rng.random((2 * self.R + 1,) * 2, dtype=np.float32)
        filt /= filt.sum()
        launch = Launch(
            "convolve2d",
            [
                ("buf", "img"),
                ("buf", "filt"),
                ("buf", "out"),
                ("scalar", np.uint32(w)),
                ("scalar", np.uint32(h)),
            ],
            (w, h),
            (16, 16),
        )
        bufs = {"img": img, "filt": filt, "out": np.zeros_like(img)}
        return Plan(load_source("convolution2d.cl"), f"-DR={self.R}", bufs, [launch], ["out"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        img = plan.buffers["img"].astype(np.float64)
        filt = plan.buffers["filt"].astype(np.float64)
        r = self.R
        h, w = img.shape
        pad = np.zeros((h + 2 * r, w + 2 * r))
        pad[r : r + h, r : r + w] = img
        out = np.zeros_like(img)
        for dy in range(2 * r + 1):
            for dx in range(2 * r + 1):
                out += filt[dy, dx] * pad[dy : dy + h, dx : dx + w]
        return {"out": out.astype(np.float32)}


class TransposeNaive(App):
    name = "transpose_naive"
    description = "matrix transpose without local memory"
    paper = False
    stresses = "uncoalesced (column-strided) global writes"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1024, "small": 64}

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        a = rng.random((n, n), dtype=np.float32)
        launch = Launch(
            "transpose_naive",
            [("buf", "out"), ("buf", "in"), ("scalar", np.uint32(n)), ("scalar", np.uint32(n))],
            (n, n),
            (16, 16),
        )
        return Plan(
            load_source("transpose_naive.cl"),
            "",
            {"in": a, "out": np.zeros_like(a)},
            [launch],
            ["out"],
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        return {"out": np.ascontiguousarray(plan.buffers["in"].T)}


class VecAdd(App):
    name = "vecadd"
    description = "c = a + b over float vectors"
    paper = False
    stresses = "streaming global-memory bandwidth"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 22, "small": 1 << 12}

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n % 256 == 0
        a = rng.random(n, dtype=np.float32)
        b = rng.random(n, dtype=np.float32)
        launch = Launch("vecadd", [("buf", "a"), ("buf", "b"), ("buf", "c")], (n,), (256,))
        return Plan(
            load_source("vecadd.cl"), "", {"a": a, "b": b, "c": np.zeros_like(a)}, [launch], ["c"]
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        return {"c": plan.buffers["a"] + plan.buffers["b"]}


REALISTIC_APPS: list[App] = [
    Stencil2D(),
    SpmvCsr(),
    Histogram256(),
    BlackScholes(),
    Convolution2D(),
    TransposeNaive(),
    VecAdd(),
]
