"""Kernels that isolate one effect the projection model must capture.

Most come in pairs that differ only in the effect (stride 1 vs 33, bank stride 1 vs 32,
divergent vs uniform branch), so an evaluation can check that the model ranks the pair the
way the hardware does, not only that it gets the average right.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from clproj.benchmarks.apps.base import App, Launch, Plan, load_source


class StridedCopy(App):
    paper = False
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 22, "small": 1 << 14}
    stride = 1

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n & (n - 1) == 0 and n >= 256, "copy: size must be a power of two >= 256"
        src = rng.random(n, dtype=np.float32)
        launch = Launch(
            "strided_copy",
            [
                ("buf", "in"),
                ("buf", "out"),
                ("scalar", np.uint32(self.stride)),
                ("scalar", np.uint32(n)),
            ],
            (n,),
            (256,),
        )
        return Plan(
            load_source("strided_copy.cl"),
            "",
            {"in": src, "out": np.zeros_like(src)},
            [launch],
            ["out"],
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        src = plan.buffers["in"]
        n = src.size
        idx = (np.arange(n, dtype=np.uint64) * self.stride) & np.uint64(n - 1)
        return {"out": src[idx]}


class CopyCoalesced(StridedCopy):
    name = "copy_coalesced"
    description = "device-to-device float copy, consecutive work-items read consecutive words"
    stresses = "coalesced global memory bandwidth"
    stride = 1


class CopyStrided(StridedCopy):
    name = "copy_strided"
    description = "float copy gathering with an odd stride of 33 words"
    stresses = "strided/uncoalesced global reads (one segment per work-item)"
    stride = 33


class LocalBanks(App):
    paper = False
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 18, "small": 1 << 11}
    bank_stride = 1
    iters = 256
    rtol = 1e-4
    LWORDS = 4096

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        assert n % 256 == 0, "local banks: work-items must be a multiple of 256"
        src = rng.random(self.LWORDS, dtype=np.float32)
        launch = Launch(
            "local_bank_stride",
            [
                ("buf", "in"),
                ("buf", "out"),
                ("scalar", np.uint32(self.bank_stride)),
                ("scalar", np.uint32(self.iters)),
            ],
            (n,),
            (256,),
        )
        bufs = {"in": src, "out": np.zeros(n, dtype=np.float32)}
        return Plan(load_source("local_banks.cl"), "", bufs, [launch], ["out"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        src = plan.buffers["in"].astype(np.float64)
        n = plan.buffers["out"].size
        lid = np.arange(256, dtype=np.int64)
        start = (lid * self.bank_stride) % self.LWORDS
        ext = np.concatenate([src, src])
        csum = np.concatenate([[0.0], np.cumsum(ext)])
        per_lid = csum[start + self.iters] - csum[start]
        return {"out": np.tile(per_lid, n // 256).astype(np.float32)}


class LocalNoConflict(LocalBanks):
    name = "local_noconflict"
    description = "local-memory reads, consecutive work-items read consecutive words"
    stresses = "local memory throughput without bank conflicts"
    bank_stride = 1


class LocalConflict(LocalBanks):
    name = "local_conflict"
    description = "local-memory reads with a 32-word stride between work-items"
    stresses = "local-memory bank conflicts (32-way on 32 banks)"
    bank_stride = 32


class Branches(App):
    paper = False
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 20, "small": 1 << 12}
    shift = 0
    iters = 256
    rtol = 1e-4
    atol = 1e-3

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        src = rng.uniform(-1, 1, n).astype(np.float32)
        launch = Launch(
            "branchy",
            [
                ("buf", "in"),
                ("buf", "out"),
                ("scalar", np.uint32(self.shift)),
                ("scalar", np.uint32(self.iters)),
            ],
            (n,),
            (256,),
        )
        return Plan(
            load_source("branches.cl"),
            "",
            {"in": src, "out": np.zeros_like(src)},
            [launch],
            ["out"],
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        x = plan.buffers["in"].astype(np.float64)
        n = x.size
        odd = ((np.arange(n) >> self.shift) & 1).astype(bool)
        a = x.copy()
        b = x.copy()
        for _ in range(self.iters):
            a = a * 0.999 + 0.5
            b = b * 0.998 - 0.25
        return {"out": np.where(odd, a, b).astype(np.float32)}


class BranchDivergent(Branches):
    name = "branch_divergent"
    description = "two arithmetic loops chosen by the parity of the work-item id"
    stresses = "branch divergence (both paths serialised in every warp)"
    shift = 0


class BranchUniform(Branches):
    name = "branch_uniform"
    description = "the same two loops chosen per block of 64 work-items"
    stresses = "branches that are uniform within a warp (no divergence)"
    shift = 6


class SpecialFunctions(App):
    name = "special_functions"
    description = "loop of sin, cos, exp, log and sqrt per work-item"
    paper = False
    stresses = "special-function (transcendental) throughput"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 18, "small": 1 << 11}
    iters = 64
    rtol = 1e-4
    atol_rel = 1e-5

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        src = rng.uniform(0, 4, n).astype(np.float32)
        launch = Launch(
            "special_functions",
            [("buf", "in"), ("buf", "out"), ("scalar", np.uint32(self.iters))],
            (n,),
            (256,),
        )
        return Plan(
            load_source("special.cl"), "", {"in": src, "out": np.zeros_like(src)}, [launch], ["out"]
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        x = plan.buffers["in"].astype(np.float64)
        acc = np.zeros_like(x)
        for k in range(self.iters):
            t = x + 0.01 * k
            acc += np.sin(t) * np.exp(-t) + np.cos(t) * 0.5 + np.sqrt(t) - np.log1p(t)
        return {"out": acc.astype(np.float32)}


class Fp64Fma(App):
    name = "fp64_fma"
    description = "two independent double-precision multiply-add chains per work-item"
    paper = False
    stresses = "fp64 arithmetic throughput"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 18, "small": 1 << 11}
    requires = ("cl_khr_fp64",)
    iters = 512
    rtol = 1e-12

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        src = rng.random(n)
        launch = Launch(
            "fp64_fma",
            [("buf", "in"), ("buf", "out"), ("scalar", np.uint32(self.iters))],
            (n,),
            (256,),
        )
        return Plan(
            load_source("fp64.cl"), "", {"in": src, "out": np.zeros_like(src)}, [launch], ["out"]
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        x = plan.buffers["in"].copy()
        y = 1.0 - x
        for _ in range(self.iters):
            x = x * 0.999 + 0.001
            y = y * 0.998 + 0.002
        return {"out": x + y}


class AtomicContention(App):
    name = "atomic_contention"
    description = "every work-item atomically adds into one of 8 global counters"
    paper = False
    stresses = "global atomics on a few contended addresses"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": 1 << 20, "small": 1 << 12}
    nbins = 8

    def _plan(self, n: int, rng: np.random.Generator) -> Plan:
        src = rng.integers(0, 100, n, dtype=np.int32)
        launch = Launch(
            "atomic_contention",
            [("buf", "in"), ("buf", "counters"), ("scalar", np.uint32(self.nbins))],
            (n,),
            (256,),
        )
        bufs = {"in": src, "counters": np.zeros(self.nbins, dtype=np.int32)}
        return Plan(load_source("atomics.cl"), "", bufs, [launch], ["counters"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        src = plan.buffers["in"]
        sums = src.reshape(-1, self.nbins).astype(np.int64).sum(axis=0)
        return {"counters": sums.astype(np.int32)}


class PointerChase(App):
    name = "pointer_chase"
    description = "each work-item follows a chain of dependent loads through a random permutation"
    paper = False
    stresses = "memory latency: a sequential dependent loop per work-item, few work-items"
    sizes: ClassVar[dict[str, int | tuple]] = {
        "default": (1 << 22, 4096, 1024),
        "small": (1 << 14, 256, 64),
    }

    def _plan(self, size: tuple, rng: np.random.Generator) -> Plan:
        n, items, steps = size
        assert items % 64 == 0 and items <= n
        order = rng.permutation(n).astype(np.uint32)
        nxt = np.empty(n, dtype=np.uint32)
        nxt[order] = np.roll(order, -1)  # one cycle through all n elements
        launch = Launch(
            "pointer_chase",
            [("buf", "next"), ("buf", "out"), ("scalar", np.uint32(steps))],
            (items,),
            (64,),
        )
        bufs = {"next": nxt, "out": np.zeros(items, dtype=np.uint32)}
        return Plan(
            load_source("pointer_chase.cl"), "", bufs, [launch], ["out"], meta={"steps": steps}
        )

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        nxt = plan.buffers["next"]
        p = np.arange(plan.buffers["out"].size, dtype=np.uint32)
        for _ in range(plan.meta["steps"]):
            p = nxt[p]
        return {"out": p}


class TinyLaunch(App):
    name = "tiny_launch"
    description = "a 64-work-item increment launched many times in a row"
    paper = False
    stresses = "launch overhead (almost no work per launch)"
    sizes: ClassVar[dict[str, int | tuple]] = {"default": (64, 100), "small": (64, 10)}

    def _plan(self, size: tuple, rng: np.random.Generator) -> Plan:
        n, reps = size
        data = rng.integers(0, 1000, n, dtype=np.int32)
        launches = [Launch("tiny_increment", [("buf", "data")], (n,), (n,)) for _ in range(reps)]
        return Plan(load_source("tiny.cl"), "", {"data": data}, launches, ["data"])

    def reference(self, plan: Plan) -> dict[str, np.ndarray]:
        return {"data": plan.buffers["data"] + np.int32(len(plan.launches))}


STRESS_APPS: list[App] = [
    CopyCoalesced(),
    CopyStrided(),
    LocalNoConflict(),
    LocalConflict(),
    BranchDivergent(),
    BranchUniform(),
    SpecialFunctions(),
    Fp64Fma(),
    AtomicContention(),
    PointerChase(),
    TinyLaunch(),
]
