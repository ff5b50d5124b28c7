"""The eight applications of Panwar et al.'s evaluation, at the paper's input sizes (Table II).

Written from the algorithms, not from the AMD APP SDK; the SDK's structure (one launch per
Floyd-Warshall node, one per Walsh butterfly width, multi-stage reduction, tiled NBody) is
kept because that is what the paper projected.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from clproj.benchmarks.apps import aes_ref
from clproj.benchmarks.apps.base import App, Launch, Plan, load_source


class FloydWarshall(App):
    name = "floydwarshall"
    description = "all-pairs shortest paths, one launch per intermediate node"
    paper = True
    stresses = "many small launches; global memory with row/column broadcast"
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": 192, "small": 32}

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n % 16 == 0, "FloydWarshall: nodes must be a multiple of 16"
        dist = rng.integers(1, 100, size=(n, n), dtype=np.int32)
        np.fill_diagonal(dist, 0)
        path = np.tile(np.arange(n, dtype=np.int32), (n, 1))
        launches = [
            Launch(
                "floyd_warshall_pass",
                [
                    ("buf", "dist"),
                    ("buf", "path"),
                    ("scalar", np.uint32(n)),
                    ("scalar", np.uint32(k)),
                ],
                (n, n),
                (16, 16),
            )
            for k in range(n)
        ]
        return Plan(
            load_source("floydwarshall.cl"),
            "",
            {"dist": dist, "path": path},
            launches,
            ["dist", "path"],
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        d = plan.buffers["dist"].copy()
        p = plan.buffers["path"].copy()
        for k in range(d.shape[0]):
            via = d[:, k, None] + d[None, k, :]
            better = via < d
            d = np.where(better, via, d)
            p = np.where(better, np.int32(k), p)
        return {"dist": d, "path": p}


class FastWalsh(App):
    name = "fastwalsh"
    description = "fast Walsh-Hadamard transform, one launch per butterfly width"
    paper = True
    stresses = "strided global memory whose stride doubles per launch"
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": 1048576, "small": 4096}

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n & (n - 1) == 0 and n >= 512, "FastWalsh: size must be a power of two >= 512"
        # Small integers keep every partial sum exact in float32 (|sum| <= 8 n < 2^24).
        data = rng.integers(-8, 9, size=n).astype(np.float32)
        launches = []
        step = 1
        while step < n:
            launches.append(
                Launch(
                    "fast_walsh_pass",
                    [("buf", "data"), ("scalar", np.uint32(step))],
                    (n // 2,),
                    (256,),
                )
            )
            step *= 2
        return Plan(load_source("fastwalsh.cl"), "", {"data": data}, launches, ["data"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        x = plan.buffers["data"].astype(np.float64)
        n = x.size
        h = 1
        while h < n:
            y = x.reshape(-1, 2, h)
            x = np.concatenate([y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]], axis=1).reshape(n)
            h *= 2
        return {"data": x.astype(np.float32)}


class _MatMul(App):
    paper = True
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": 1024, "small": 64}
    rtol = 1e-4
    atol_rel = 1e-5

    kernel = ""
    source = ""

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n % 16 == 0, "MatrixMultiply: n must be a multiple of 16"
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        c = np.zeros((n, n), dtype=np.float32)
        launch = Launch(
            self.kernel,
            [("buf", "a"), ("buf", "b"), ("buf", "c"), ("scalar", np.uint32(n))],
            (n, n),
            (16, 16),
        )
        return Plan(
            load_source(self.source), "-DTILE=16", {"a": a, "b": b, "c": c}, [launch], ["c"]
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        a = plan.buffers["a"].astype(np.float64)
        b = plan.buffers["b"].astype(np.float64)
        return {"c": (a @ b).astype(np.float32)}


class MatMulGmem(_MatMul):
    name = "matmul_gmem"
    description = "dense matrix multiply reading A and B from global memory"
    stresses = "global memory reuse through caches; fp32 FMA"
    kernel = "matmul_gmem"
    source = "matmul_gmem.cl"


class MatMulLmem(_MatMul):
    name = "matmul_lmem"
    description = "dense matrix multiply with 16x16 local-memory tiles"
    stresses = "local memory and barriers; fp32 FMA"
    kernel = "matmul_lmem"
    source = "matmul_lmem.cl"


class Reduction(App):
    name = "reduction"
    description = "sum of 32-bit integers by multi-stage tree reduction in local memory"
    paper = True
    stresses = "coalesced global reads, local-memory tree with barriers, shrinking launches"
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": 1048576, "small": 8192}

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        data = rng.integers(0, 1000, size=n, dtype=np.uint32)
        buffers: dict[str, np.ndarray] = {"input": data}
        launches = []
        src, count, stage = "input", n, 0
        while count > 1:
            half = (count + 1) // 2
            lsz = min(256, 1 << (half - 1).bit_length())
            groups = -(-count // (2 * lsz))
            dst = "result" if groups == 1 else f"stage{stage}"
            buffers[dst] = np.zeros(groups, dtype=np.uint32)
            launches.append(
                Launch(
                    "reduce_sum",
                    [("buf", src), ("buf", dst), ("local", 4 * lsz), ("scalar", np.uint32(count))],
                    (groups * lsz,),
                    (lsz,),
                )
            )
            src, count, stage = dst, groups, stage + 1
        return Plan(load_source("reduction.cl"), "", buffers, launches, ["result"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        total = int(plan.buffers["input"].astype(np.uint64).sum()) & 0xFFFFFFFF
        return {"result": np.array([total], dtype=np.uint32)}


class NBody(App):
    name = "nbody"
    description = "one all-pairs N-body step, positions tiled through local memory"
    paper = True
    stresses = "compute bound: fp32 FMA and rsqrt, local-memory broadcast"
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": 32768, "small": 1024}
    rtol = 1e-3
    atol_rel = 1e-4

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n % 256 == 0, "NBody: particles must be a multiple of 256"
        pos = np.empty((n, 4), dtype=np.float32)
        pos[:, :3] = rng.uniform(-1, 1, size=(n, 3))
        pos[:, 3] = rng.uniform(0.5, 1.5, size=n) / n
        vel = np.zeros((n, 4), dtype=np.float32)
        vel[:, :3] = rng.uniform(-0.1, 0.1, size=(n, 3))
        zeros = np.zeros((n, 4), dtype=np.float32)
        launch = Launch(
            "nbody_step",
            [
                ("buf", "pos"),
                ("buf", "vel"),
                ("buf", "new_pos"),
                ("buf", "new_vel"),
                ("local", 16 * 256),
                ("scalar", np.uint32(n)),
                ("scalar", np.float32(0.005)),
                ("scalar", np.float32(0.01)),
            ],
            (n,),
            (256,),
        )
        bufs = {"pos": pos, "vel": vel, "new_pos": zeros, "new_vel": zeros.copy()}
        return Plan(
            load_source("nbody.cl"),
            "",
            bufs,
            [launch],
            ["new_pos", "new_vel"],
            meta={"dt": 0.005, "eps2": 0.01},
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        pos = plan.buffers["pos"]
        vel = plan.buffers["vel"]
        dt, eps2 = plan.meta["dt"], plan.meta["eps2"]
        n = pos.shape[0]
        x, y, z, m = (pos[:, i].astype(np.float64) for i in range(4))
        acc = np.empty((n, 3))
        chunk = 256
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            dx = x[None, :] - x[s:e, None]
            dy = y[None, :] - y[s:e, None]
            dz = z[None, :] - z[s:e, None]
            d2 = dx * dx + dy * dy + dz * dz + eps2
            w = m[None, :] / (d2 * np.sqrt(d2))
            acc[s:e, 0] = (w * dx).sum(axis=1)
            acc[s:e, 1] = (w * dy).sum(axis=1)
            acc[s:e, 2] = (w * dz).sum(axis=1)
        nv = vel[:, :3].astype(np.float64) + acc * dt
        new_vel = vel.copy()
        new_vel[:, :3] = nv
        new_pos = pos.copy()
        new_pos[:, :3] = pos[:, :3].astype(np.float64) + nv * dt
        return {"new_pos": new_pos, "new_vel": new_vel}


class AESEncrypt(App):
    name = "aes"
    description = "AES-128 ECB encryption of a 1536x512-byte image, one block per work-item"
    paper = True
    stresses = "integer/bitwise ops, data-dependent local-memory (S-box) gathers"
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": (1536, 512), "small": (128, 64)}
    KEY = bytes(range(16))

    def _plan(self, size: tuple, rng: np.random.Generator) -> Plan:
        w, h = size
        nbytes = w * h
        assert nbytes % 16 == 0, "AES: image bytes must be a multiple of 16"
        nblocks = nbytes // 16
        image = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
        gsz = -(-nblocks // 256) * 256
        launch = Launch(
            "aes_encrypt",
            [
                ("buf", "plain"),
                ("buf", "cipher"),
                ("buf", "round_keys"),
                ("local", 256),
                ("scalar", np.uint32(nblocks)),
            ],
            (gsz,),
            (256,),
        )
        bufs = {
            "plain": image,
            "cipher": np.zeros(nbytes, dtype=np.uint8),
            "round_keys": aes_ref.expand_key(self.KEY),
        }
        return Plan(load_source("aes.cl"), "", bufs, [launch], ["cipher"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        blocks = plan.buffers["plain"].reshape(-1, 16)
        return {"cipher": aes_ref.encrypt(blocks, plan.buffers["round_keys"]).reshape(-1)}


class TransposeLmem(App):
    name = "transpose_lmem"
    description = "matrix transpose through 16x16 local-memory tiles"
    paper = True
    stresses = "coalesced global read and write, local-memory bank conflicts (unpadded tile)"
    sizes: ClassVar[dict[str, int | tuple]] = {"paper": 1024, "small": 64}

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n % 16 == 0, "Transpose: n must be a multiple of 16"
        a = rng.random((n, n), dtype=np.float32)
        launch = Launch(
            "transpose_lmem",
            [
                ("buf", "out"),
                ("buf", "in"),
                ("local", 4 * 256),
                ("scalar", np.uint32(n)),
                ("scalar", np.uint32(n)),
            ],
            (n, n),
            (16, 16),
        )
        bufs = {"in": a, "out": np.zeros_like(a)}
        return Plan(load_source("transpose_lmem.cl"), "-DTILE=16", bufs, [launch], ["out"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        return {"out": np.ascontiguousarray(plan.buffers["in"].T)}


PAPER_APPS: list[App] = [
    FloydWarshall(),
    FastWalsh(),
    MatMulGmem(),
    MatMulLmem(),
    Reduction(),
    NBody(),
    AESEncrypt(),
    TransposeLmem(),
]
