"""NVIDIA details through NVML (pynvml), when a driver is present.

NVML knows what OpenCL does not: current/max SM and memory clocks, memory bus width,
power limit and PCIe link. Absence of the driver is normal (CPU-only machines): every
function here then returns ``None`` or an empty list instead of failing.
"""

from __future__ import annotations

from typing import Any


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def gpus() -> list[dict[str, Any]]:
    """One dict per NVIDIA GPU NVML sees; empty when there is no driver."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = _safe(nv.nvmlDeviceGetName, h)
            pci = _safe(nv.nvmlDeviceGetPciInfo, h)
            power = _safe(nv.nvmlDeviceGetPowerManagementLimit, h)
            out.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "pci_bus_id": (
                        pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
                    )
                    if pci
                    else None,
                    "driver_version": _str(_safe(nv.nvmlSystemGetDriverVersion)),
                    "sm_clock_mhz": _safe(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    "max_sm_clock_mhz": _safe(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                    "mem_clock_mhz": _safe(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                    "max_mem_clock_mhz": _safe(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
                    "memory_bus_width_bits": _safe(nv.nvmlDeviceGetMemoryBusWidth, h),
                    "power_limit_w": power / 1000.0 if power else None,
                    "pcie_gen": _safe(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_width": _safe(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "memory_total_bytes": getattr(
                        _safe(nv.nvmlDeviceGetMemoryInfo, h), "total", None
                    ),
                }
            )
    finally:
        _safe(nv.nvmlShutdown)
    return out


def _str(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def match(device_name: str, pci_bus_id: str | None) -> dict[str, Any] | None:
    """NVML record of the OpenCL device with this name / PCI address, if any."""
    candidates = gpus()
    if pci_bus_id:
        for g in candidates:
            if g["pci_bus_id"] and g["pci_bus_id"].lower().endswith(pci_bus_id.lower()):
                return g
    named = [
        g
        for g in candidates
        if (g["name"] and g["name"] in device_name) or device_name in (g["name"] or "")
    ]
    return named[0] if len(named) == 1 else None
