"""Memory latency and departure delay by dependent pointer chases (for the MWP-CWP model).

Hong & Kim's MWP-CWP model needs three device numbers that throughput benchmarks do not
give: the round-trip latency of one global-memory access (``Mem_L``), the latency of an
access that hits the cache, and the *departure delay* (the minimum time between two memory
requests leaving one compute unit). All three come from one kernel, a dependent pointer
chase over a random cyclic permutation of nodes (each node ``max(128 B, warp_width*4 B)``
long, so consecutive hops never share a cache line and a warp's load of a node is one
coalesced request):

* ``global``: one work-item, buffer much larger than the caches -> seconds per hop is the
  DRAM latency (TLB misses included: what a random access costs on that device).
* ``cache``: one work-item, buffer of at most a quarter of the reported global-memory cache
  (and at most 1 MiB, so on NVIDIA it exceeds L1 and measures L2) -> cache latency.
* ``departure`` (GPUs): ``k`` warps in one work-group (one compute unit; OpenCL cannot pin groups
  to compute units, but a group never spans two), each lane of a warp loading the same
  node's word ``lane`` (coalesced), each warp running ``ILP`` independent chains. With
  ``n = k*ILP`` requests in flight, time per hop stays at the latency until
  ``n * departure_delay`` exceeds it, then grows with slope ``departure_delay``. CPUs
  (PoCL runs a group's work-items in turn, so warps never overlap): ``n`` independent
  chains in one work-item, i.e. the core's memory-level parallelism.

Chains continue across launches (the kernel reads its start node from ``state`` and writes
the end node back), so repeated launches never revisit nodes and never warm the cache; the
number of hops is capped so that no two chains overlap. The host checks every chain's end
node against the permutation (:class:`GarbageResult` otherwise): a chase whose loads were
optimised away or reordered cannot produce the right end node.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from clproj.devices.microbench.common import Bench, GarbageResult

ILP = 4  # independent chains per warp in the departure sweep
NODE_MIN_BYTES = 128


def chase_source(ilp: int) -> str:
    """Chase kernel with ``ilp`` independent chains per work-item (unrolled by hand)."""
    decl = "\n".join(f"    uint p{j} = state[(gw * {ilp} + {j}) * W + lane];" for j in range(ilp))
    hop = " ".join(f"p{j} = nxt[p{j} + lane];" for j in range(ilp))
    store = "\n".join(f"    state[(gw * {ilp} + {j}) * W + lane] = p{j};" for j in range(ilp))
    return f"""
__kernel void chase(__global const uint* restrict nxt, __global uint* restrict state,
                    uint hops) {{
    uint lid = get_local_id(0);
    uint lane = lid % W, gw = get_group_id(0) * (get_local_size(0) / W) + lid / W;
{decl}
    for (uint h = 0; h < hops; ++h) {{ {hop} }}
{store}
}}
"""


class Chase:
    """One random cyclic permutation of ``n_nodes`` nodes in a device buffer."""

    def __init__(self, bench: Bench, nbytes: int, lanes: int, seed: int = 11) -> None:
        self.b = bench
        self.lanes = lanes
        self.node_words = max(NODE_MIN_BYTES, lanes * 4) // 4
        self.n = max(8, nbytes // (self.node_words * 4))
        rng = np.random.default_rng(seed)
        self.perm = rng.permutation(self.n).astype(np.int64)  # cycle order of nodes
        self.pos = np.empty(self.n, np.int64)
        self.pos[self.perm] = np.arange(self.n)
        host = np.zeros((self.n, self.node_words), np.uint32)
        succ = np.roll(self.perm, -1)  # successor of perm[i] is perm[i+1]
        host[self.perm, :lanes] = (succ * self.node_words).astype(np.uint32)[:, None]
        self.nbytes = host.nbytes
        self.buf = bench.buffer(host.nbytes, host)

    def starts(self, chains: int) -> np.ndarray:
        """Start nodes spread evenly over the cycle so chains never meet."""
        return self.perm[(np.arange(chains) * (self.n // chains)) % self.n]

    def run(
        self,
        warps: int,
        ilp: int,
        target_s: float,
        reps: int,
        single: bool = False,
        wrap: bool = False,
    ) -> float:
        """Best seconds per hop (one hop = every chain advancing once).

        ``single``: one work-item (lane 0 only) instead of ``warps`` whole warps.
        ``wrap``: chains may go round the cycle (a cache-resident buffer is meant to be hit).
        """
        b, W = self.b, self.lanes
        chains = warps * ilp
        start = self.starts(chains)
        state_host = np.repeat((start * self.node_words).astype(np.uint32), W)
        state = b.buffer(state_host.nbytes, state_host)
        kern = b.kernel(chase_source(ilp), "chase", f"-DW={W}")
        local = 1 if single else warps * W
        # Never let a chain walk into the next one's segment (that would hit the cache).
        budget = (1 << 30) if wrap else self.n // chains - 1  # hops per chain in total
        launches = reps + 2
        done = 0

        def go(hops: int) -> Any:
            nonlocal done
            done += hops
            return kern(b.queue, (local,), (local,), self.buf, state, np.uint32(hops))

        probe = max(1, min(64, budget // (4 * launches)))
        go(probe).wait()  # warm-up + JIT
        t1 = b.time_launches(lambda: go(probe), 1)
        left = budget - done
        hops = int(min(max(1, target_s / max(t1 / probe, 1e-10)), left // reps, 1 << 22))
        hops = max(1, hops)
        best = math.inf
        for _ in range(reps):
            best = min(best, b.time_launches(lambda: go(hops), 1) / hops)
        got = b.read(state, np.empty_like(state_host)).reshape(chains, W)
        want = (self.perm[(self.pos[start] + done) % self.n] * self.node_words).astype(np.uint32)
        want2 = np.repeat(want[:, None], W, axis=1)
        if single:
            got, want2 = got[:, :1], want2[:, :1]
        if not np.array_equal(got, want2):
            raise GarbageResult(
                "latency", f"pointer chase ended on wrong nodes after {done} hops ({chains} chains)"
            )
        return best


def _departure(points: list[tuple[int, float]], base: float) -> tuple[float, str]:
    """Slope of time per hop vs requests in flight, past the knee where it exceeds latency."""
    sat = [(n, t) for n, t in points if t > 1.5 * base]
    if len(sat) >= 2:
        x = np.array([n for n, _ in sat], float)
        y = np.array([t for _, t in sat])
        slope = float(np.polyfit(x, y, 1)[0])
        if slope > 0:
            return slope, "slope past the knee"
    if sat:
        n, t = sat[-1]
        return t / n, "time per hop / requests in flight at the one saturated point"
    n_max = max(n for n, _ in points)
    return base / n_max, f"upper bound: no knee up to {n_max} requests in flight (latency / n)"


def measure(bench: Bench, warp: int) -> dict[str, Any]:
    """Global and cache latency and the departure delay of ``bench``'s device."""
    b, mode = bench, bench.mode
    big = mode.gpu_bytes if not b.is_cpu else 2 * mode.cpu_bytes
    cache_dev = int(getattr(b.device, "global_mem_cache_size", 0) or 0)
    small = max(16 << 10, min(cache_dev // 4 if cache_dev else 1 << 20, 1 << 20))
    reps = max(2, mode.reps)
    g = Chase(b, big, warp)
    glob = g.run(1, 1, mode.target_s, reps, single=True)
    c = Chase(b, small, warp, seed=12)
    cache = c.run(1, 1, mode.target_s, reps, single=True, wrap=True)
    max_warps = max(1, b.max_wg // warp)
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32) if k <= max_warps} | {max_warps})
    if mode.name == "tiny":
        ks = ks[:3]
    points: list[tuple[int, float]] = []
    if b.is_cpu:
        # PoCL runs a group's work-items one after another (or as SIMD lanes of one
        # thread), so warps do not overlap: the parallelism of a core is its memory-level
        # parallelism, i.e. independent chains in one work-item.
        for k in ks if mode.name == "tiny" else (1, 2, 4, 8, 16, 32):
            points.append((k, g.run(1, k, mode.target_s, reps, single=True)))
    else:
        for k in ks:
            points.append((k * ILP, g.run(k, ILP, mode.target_s, reps)))
    dep, how = _departure(points, min(glob, points[0][1]))
    return {
        "global_latency_s": glob,
        "cache_latency_s": cache,
        "departure_delay_s": dep,
        "departure_method": how,
        "points": [[float(n), float(t)] for n, t in points],
        "points_axis": "requests in flight in one work-group (GPU: warps x ILP, CPU: chains "
        "in one work-item) vs seconds per hop",
        "global_buffer_bytes": g.nbytes,
        "cache_buffer_bytes": c.nbytes,
        "node_bytes": g.node_words * 4,
        "ilp": ILP,
        "warp_width": warp,
    }
