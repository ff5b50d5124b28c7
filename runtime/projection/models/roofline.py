"""A plain roofline from the spec sheet: the baseline every richer model must beat.

``t = max(flops / peak_flops, bytes / peak_bandwidth)``, nothing else: floating-point
operations (an FMA counts two) of the whole NDRange at the sheet's peak rate, and the
useful global bytes (loads + stores, no coalescing, no caches) at the sheet's peak memory
bandwidth. No occupancy, no latency, no launch overhead.

Peaks come from the spec sheet where ``devices/specs.py`` has one for the device (GPUs:
``per_cu`` results per clock x compute units x clock, sheet bandwidth); devices without a
sheet there (the CPUs) use their profile's peak numbers (``throughput.fp32_fma`` /
``fp64_fma``, ``memory.peak_bandwidth_gbs``), which for PoCL CPUs are the best measured
rates (docs/models.md).
"""

from __future__ import annotations

from typing import Any

from clproj.runtime.projection.models.base import ModelPrediction

FP32_CLASSES = {"fp32_add": 1, "fp32_mul": 1, "fp32_fma": 2, "fp32_div": 1}
FP64_CLASSES = {"fp64_add": 1, "fp64_mul": 1, "fp64_fma": 2, "fp64_div": 1}


def peaks(device: Any) -> tuple[float, float, float, str]:
    """(fp32 flop/s, fp64 flop/s, bytes/s, source) of ``device``: sheet, else profile."""
    from clproj.devices.specs import spec_for

    spec = spec_for(device.name) if device.kind == "GPU" else None
    if spec is not None:
        clock = spec.clock_mhz * 1e6
        fp32 = 2.0 * spec.per_cu.get("fp32_fma", 0) * spec.cus * clock
        fp64 = 2.0 * spec.per_cu.get("fp64_fma", 0) * spec.cus * clock
        if fp32 > 0 and spec.bandwidth_gbs > 0:
            return fp32, fp64 or fp32, spec.bandwidth_gbs * 1e9, "spec"
    throughput = device.data.get("throughput", {})
    fp32 = 2.0 * float(throughput.get("fp32_fma") or device.throughput("fp32_fma"))
    fp64 = 2.0 * float(throughput.get("fp64_fma") or fp32 / 2.0)
    bw = float(device.data.get("memory", {}).get("peak_bandwidth_gbs") or 0.0) * 1e9
    if bw <= 0:
        bw = device.peak("global_read")
    return fp32, fp64, bw, "profile"


class RooflineModel:
    """Spec-sheet roofline (see the module docstring)."""

    name = "roofline"

    def predict(
        self, profile: dict[str, Any], device: Any, footprint_bytes: float | None = None
    ) -> ModelPrediction:
        total = profile["total"]
        inst = total.get("instructions", {})
        fp32_ops = sum(float(inst.get(c, 0) or 0) * w for c, w in FP32_CLASSES.items())
        fp64_ops = sum(float(inst.get(c, 0) or 0) * w for c, w in FP64_CLASSES.items())
        g = total.get("global", {})
        moved = float(g.get("load_bytes", 0) or 0) + float(g.get("store_bytes", 0) or 0)
        fp32, fp64, bw, source = peaks(device)
        t_flops = fp32_ops / fp32 + fp64_ops / fp64
        t_bytes = moved / bw
        bound = "C" if t_flops >= t_bytes else "G"
        return ModelPrediction(
            time_s=max(t_flops, t_bytes, 1e-12),
            bound=bound,
            breakdown={
                "t_flops": t_flops,
                "t_bytes": t_bytes,
                "peak_flops": fp32,
                "peak_bytes_per_s": bw,
                "peaks_from": source,
            },
        )
