"""Hong & Kim's MWP-CWP analytical model (ISCA 2009), adapted to OpenCL kernel profiles.

The model views a compute unit (CU) as running ``N`` resident warps that alternate
computation and memory periods. MWP (memory-warp parallelism) is how many warps' memory
requests overlap: limited by ``Mem_L / Departure_delay`` (requests leave a CU one every
departure delay), by the share of DRAM bandwidth one CU gets, and by ``N``. CWP
(compute-warp parallelism) is how many warps compute while one waits for memory,
``(Mem + Comp) / Comp``. Three cases follow (per warp, times ``#Rep`` waves):

1. ``MWP == N == CWP`` (too few warps to hide anything):
   ``Mem + Comp + Comp/#Mem_insts * (MWP - 1)``
2. ``CWP >= MWP`` or ``Comp > Mem`` (memory bound):
   ``Mem * N / MWP + Comp/#Mem_insts * (MWP - 1)``
3. otherwise (compute bound): ``Mem_L + Comp * N``

plus the synchronisation cost ``Departure_delay * (MWP - 1) * #Synch_insts *
#Active_blocks_per_SM * #Rep``. Every quantity here is in seconds, not cycles (our device
profiles give throughputs and latencies in seconds). ``docs/models.md`` lists each
adaptation; the short version:

* per-warp counts = the profile's totals / work-items (dynamic counts of one lane), with
  divergence as the sum of paths: a warp whose branch diverges issues both sides, so the
  count is inflated by the fraction of warp-level branches that diverged;
* ``Comp`` = issue time of one warp's instructions on one CU at the measured per-class
  throughput (``warp * CUs / throughput``), memory instructions issuing like ``int_add``;
* ``#Mem_insts`` = global accesses per work-item; transactions per warp instruction
  (coalescing) from the profile's transaction counts at the device's warp width and
  largest segment; an uncoalesced instruction costs ``Mem_L + (tx - 1) * departure``;
* ``Mem_L`` blends the measured cache and DRAM latencies by the cache-hit fraction that
  the bound model also uses (footprint vs cache size); Hong & Kim's GPU had no cache;
* ``N`` and ``#Rep`` come from :mod:`runtime.projection.occupancy` (the same limits as the bound
  model), the bandwidth limit from the measured peak of the ``global_read`` curve;
* ``Mem_L``, cache latency and departure delay come from the device profile's
  ``detail.latency`` (``devices/microbench/latency.py``), else the documented defaults.
"""

from __future__ import annotations

import math
from typing import Any

from clproj.runtime.projection.kernel_stats import (
    MEMORY_CLASSES,
    SEGMENT_KEYS,
    WARP_KEYS,
    nearest_key,
)
from clproj.runtime.projection.launch_shape import for_device
from clproj.runtime.projection.model import compute_time, device_launch_time, dram_bytes
from clproj.runtime.projection.models.base import ModelPrediction
from clproj.runtime.projection.occupancy import profile_occupancy

# Defaults for profiles measured before detail.latency existed (docs/models.md).
DEFAULT_LATENCY_S = {"GPU": 600e-9, "CPU": 100e-9}
DEFAULT_CACHE_LATENCY_S = {"GPU": 200e-9, "CPU": 10e-9}


def latency_params(device: Any) -> dict[str, Any]:
    """Mem_L, cache latency and departure delay of a device, and where they came from."""
    lat = device.data.get("detail", {}).get("latency")
    if lat and lat.get("global_latency_s") and lat.get("departure_delay_s"):
        return {
            "mem_latency_s": float(lat["global_latency_s"]),
            "cache_latency_s": float(lat.get("cache_latency_s") or lat["global_latency_s"]),
            "departure_delay_s": float(lat["departure_delay_s"]),
            "source": "measured",
        }
    kind = "GPU" if device.kind == "GPU" else "CPU"
    seg = float(max(device.segment_bytes or [64]))
    per_cu_bw = device.peak("global_read") / max(1, device.compute_units)
    return {
        "mem_latency_s": DEFAULT_LATENCY_S[kind],
        "cache_latency_s": DEFAULT_CACHE_LATENCY_S[kind],
        # one CU's share of the measured peak bandwidth, one segment per request
        "departure_delay_s": seg / per_cu_bw,
        "source": "default",
    }


def mwp_cwp_time(
    n_warps: float,
    rep: float,
    mem_l: float,
    departure: float,
    mem_insts: float,
    mem_s: float,
    comp_s: float,
    mwp_peak_bw: float,
    synch_insts: float = 0.0,
    blocks_per_cu: float = 1.0,
) -> tuple[float, dict[str, Any]]:
    """The three cases of Hong & Kim (Eq. 23-26 and the synchronisation cost), in seconds.

    ``mem_s``/``comp_s``: memory and computation time of one warp; ``mem_l``: latency of
    one (possibly uncoalesced) memory instruction; ``departure``: its departure delay.
    """
    n = max(1.0, n_warps)
    if mem_insts <= 0 or mem_s <= 0:
        t = comp_s * n * rep
        return t, {"case": "compute-only", "mwp": 0.0, "cwp": n, "n": n, "rep": rep}
    mwp_no_bw = mem_l / max(departure, 1e-30)
    mwp = max(1.0, min(mwp_no_bw, mwp_peak_bw, n))
    cwp_full = (mem_s + comp_s) / comp_s if comp_s > 0 else math.inf
    cwp = min(cwp_full, n)
    if mwp >= n and cwp >= n:
        case = "1-few-warps"
        t = (mem_s + comp_s + comp_s / mem_insts * (mwp - 1)) * rep
    elif cwp >= mwp or comp_s > mem_s:
        case = "2-memory-bound"
        t = (mem_s * n / mwp + comp_s / mem_insts * (mwp - 1)) * rep
    else:
        case = "3-compute-bound"
        t = (mem_l + comp_s * n) * rep
    synch = departure * (mwp - 1) * synch_insts * blocks_per_cu * rep
    return t + synch, {
        "case": case,
        "mwp": mwp,
        "mwp_without_bw": mwp_no_bw,
        "mwp_peak_bw": mwp_peak_bw,
        "cwp": cwp,
        "cwp_full": cwp_full,
        "n": n,
        "rep": rep,
        "synch_s": synch,
    }


class MwpCwpModel:
    """MWP-CWP on a kernel profile and a device profile (see the module docstring)."""

    name = "mwp-cwp"

    def predict(
        self, profile: dict[str, Any], device: Any, footprint_bytes: float | None = None
    ) -> ModelPrediction:
        profile = for_device(profile, device)  # a NULL local size: the driver's groups
        launch, total = profile["launch"], profile["total"]
        occ = profile_occupancy(profile, device)
        warp = max(1, int(device.warp_width))
        cus = max(1, int(device.compute_units))
        items = max(1, int(total.get("work_items") or launch.get("work_items") or 1))
        wkey = nearest_key(warp, WARP_KEYS)
        # Sum of paths: a diverged warp issues both sides of the branch.
        br = total.get("branches", {})
        warp_branches = float(br.get("warp_level", {}).get(wkey, 0) or 0)
        divergent = float(br.get("divergent", {}).get(wkey, 0) or 0)
        div_factor = 1.0 + (divergent / warp_branches if warp_branches else 0.0)
        # Computation of one warp: issue time on one CU at the measured class throughputs.
        _, by_class = compute_time(total, device, occ)  # device-wide seconds per class
        g = total.get("global", {})
        accesses = float(g.get("load_accesses", 0) + g.get("store_accesses", 0))
        accesses += float(total.get("atomics", {}).get("global", 0) or 0)
        mem_insts = accesses / items * div_factor  # warp-level memory instructions per warp
        comp_s = sum(by_class.values()) * cus * warp / items * div_factor
        comp_s += mem_insts * warp * cus / device.throughput("int_add")  # issue slots
        # Local memory: issued like instructions, serialised by bank conflicts (no latency
        # hiding is modelled for it; Hong & Kim's model has no shared-memory term).
        loc = total.get("local", {})
        local_accesses = float(loc.get("accesses", 0) or 0)
        if local_accesses:
            degree = 1.0
            if device.local_banks:
                bank = loc.get("bank", {}).get(nearest_key(device.local_banks, (16, 32)), {})
                if bank.get("requests"):
                    degree = bank["wavefronts"] / bank["requests"]
            comp_s += local_accesses / items * degree * warp * cus / device.throughput("int_add")
        # Coalescing: transactions per warp-level memory instruction.
        seg = int(nearest_key(max(device.segment_bytes or [64]), SEGMENT_KEYS))
        tx = g.get("transactions", {})
        n_tx = sum(float(tx.get(d, {}).get(wkey, {}).get(str(seg), 0) or 0) for d in tx)
        if not n_tx and accesses:
            n_tx = float(g.get("load_bytes", 0) + g.get("store_bytes", 0)) / seg
        warp_insts = accesses / warp
        tx_per_inst = max(1.0, n_tx / warp_insts) if warp_insts else 1.0
        lat = latency_params(device)
        moved = n_tx * seg
        cache = device.data.get("memory", {}).get("cache_bytes")
        hit = 0.0
        if moved and footprint_bytes and cache:
            hit = 1.0 - dram_bytes(moved, footprint_bytes, cache) / moved
        mem_l0 = hit * lat["cache_latency_s"] + (1.0 - hit) * lat["mem_latency_s"]
        departure = lat["departure_delay_s"] * tx_per_inst
        mem_l = mem_l0 + (tx_per_inst - 1.0) * lat["departure_delay_s"]
        mem_s = mem_insts * mem_l
        # Bandwidth limit: warps in flight that saturate one CU's share of DRAM bandwidth.
        bw = device.peak("global_read")
        bw_per_warp = tx_per_inst * seg / mem_l if mem_l > 0 else math.inf
        mwp_peak_bw = bw / (bw_per_warp * max(1, occ.active_cus))
        n_warps = occ.work_items_per_cu / warp
        blocks_per_cu = occ.work_items_per_cu / max(1, occ.group_size)
        synch = float(total.get("barriers", 0) or 0) / items
        t, detail = mwp_cwp_time(
            n_warps=math.ceil(n_warps),
            rep=float(occ.waves),
            mem_l=mem_l,
            departure=departure,
            mem_insts=mem_insts,
            mem_s=mem_s,
            comp_s=comp_s,
            mwp_peak_bw=mwp_peak_bw,
            synch_insts=synch,
            blocks_per_cu=blocks_per_cu,
        )
        t_launch = device_launch_time(device, int(launch.get("num_groups") or 1))
        detail.update(
            {
                "comp_s_per_warp": comp_s,
                "mem_s_per_warp": mem_s,
                "mem_insts_per_warp": mem_insts,
                "tx_per_inst": tx_per_inst,
                "mem_latency_s": mem_l,
                "cache_hit": hit,
                "divergence_factor": div_factor,
                "latency_source": lat["source"],
                "t_launch": t_launch,
            }
        )
        letter = {"1-few-warps": "1", "2-memory-bound": "M", "3-compute-bound": "C"}
        return ModelPrediction(
            time_s=t + t_launch, breakdown=detail, bound=letter.get(detail["case"], "C")
        )


__all__ = ["MEMORY_CLASSES", "MwpCwpModel", "latency_params", "mwp_cwp_time"]
