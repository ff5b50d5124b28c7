"""Enumerate the OpenCL devices visible to this process, in one stable order.

Every command that takes ``--device N`` means index N of :func:`list_devices`, so the
order (platforms as the ICD loader returns them, devices within each platform) is part
of the interface. The same list is printed by ``clproj devices``.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clproj.cl_names import CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU
from clproj.errors import ClprojError
from clproj.paths import nearest_existing

NO_DEVICE_FIX = (
    "install an OpenCL implementation, e.g. `apt-get install pocl-opencl-icd` (or run `make setup`), "
    "and check that /etc/OpenCL/vendors or OCL_ICD_VENDORS lists it"
)


@dataclass(frozen=True)
class DeviceInfo:
    """What OpenCL says about one device: enough to identify it and size work for it."""

    index: int
    platform: str
    name: str
    vendor: str
    type: str  # "CPU", "GPU", "ACCELERATOR", "OTHER"
    compute_units: int
    clock_mhz: int
    global_mem_bytes: int
    local_mem_bytes: int
    max_work_group_size: int
    driver_version: str
    opencl_version: str
    pci_bus_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def type_name(cl_type: int) -> str:
    """``"GPU"``, ``"CPU"``, ``"ACCELERATOR"`` or ``"OTHER"`` for a ``CL_DEVICE_TYPE``
    bitfield (the first of those bits set, in that order)."""
    for flag, name in (
        (CL_DEVICE_TYPE_GPU, "GPU"),
        (CL_DEVICE_TYPE_CPU, "CPU"),
        (CL_DEVICE_TYPE_ACCELERATOR, "ACCELERATOR"),
    ):
        if int(cl_type) & flag:
            return name
    return "OTHER"


# cl_nv_device_attribute_query names newer than the cl_ext.h clproj/cl_names.py is made from.
CL_DEVICE_PCI_BUS_ID_NV = 0x4008
CL_DEVICE_PCI_SLOT_ID_NV = 0x4009


CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
L1_DATA_PROVENANCE = "derived: the host's cache topology (Linux sysfs, cpu0 level-1 data cache)"


def host_l1_data_bytes(cache_dir: Path = CPU_CACHE_DIR) -> int | None:
    """Bytes of one core's level-1 data cache on this host, from Linux sysfs; None if unknown.

    Why: a CPU device's looping work-items reuse each other's lines from the core's L1
    (runtime.projection.model.l1_keeps_items); OpenCL reports only the last-level cache
    (CL_DEVICE_GLOBAL_MEM_CACHE_SIZE), and the L1 size is a fact of the core, not something
    a microbenchmark needs to guess. PoCL's CPU devices run on the host's cores.
    """
    units = {"": 1, "K": 1 << 10, "M": 1 << 20}
    try:
        for index in sorted(cache_dir.glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            if level == "1" and kind == "Data":
                m = re.fullmatch(r"(\d+)([KM]?)", (index / "size").read_text().strip())
                return int(m.group(1)) * units[m.group(2)] if m else None
    except OSError:
        return None
    return None


def add_host_l1(memory: dict[str, Any], provenance: dict[str, str]) -> None:
    """Give a CPU profile this host's L1 data cache size (:func:`host_l1_data_bytes`) and its
    provenance; a profile of another core's (a template's) loses it when the host's is
    unknown. One place for it: measured and generic CPU profiles both call it."""
    l1 = host_l1_data_bytes()
    if l1:
        memory["l1_data_bytes"] = l1
        provenance["memory.l1_data_bytes"] = L1_DATA_PROVENANCE
    else:
        memory.pop("l1_data_bytes", None)
        provenance.pop("memory.l1_data_bytes", None)


def pci_bus_id(dev: Any) -> str | None:
    """The PCI address of an NVIDIA device (cl_nv_device_attribute_query), if exposed."""
    try:
        bus = dev.get_info(CL_DEVICE_PCI_BUS_ID_NV)
        slot = dev.get_info(CL_DEVICE_PCI_SLOT_ID_NV)
    except Exception:
        return None
    return f"{int(bus):02x}:{int(slot) >> 3:02x}.{int(slot) & 7}"


def opencl_devices() -> list[Any]:
    """All pyopencl device objects, in the order of :func:`list_devices`."""
    try:
        import pyopencl as cl

        platforms = cl.get_platforms()
    except Exception as exc:  # pyopencl raises LogicError/RuntimeError when no ICD is found
        raise ClprojError(f"no OpenCL platform found ({exc})", NO_DEVICE_FIX) from exc
    devices = []
    for platform in platforms:
        try:
            devices.extend(platform.get_devices())
        except Exception:
            continue  # a platform with no devices of any type
    if not devices:
        pocl = any("Portable Computing Language" in p.name for p in platforms)
        cache = _pocl_cache_dir()
        if pocl and cache and not _writable_here(cache):
            raise ClprojError(
                f"PoCL exposes no device: its kernel cache {cache} cannot be written (a "
                "read-only HOME, or a file in the way?)",
                "set POCL_CACHE_DIR (or HOME) to a writable folder",
            )
        raise ClprojError("OpenCL platforms exist but expose no device", NO_DEVICE_FIX)
    return devices


def _pocl_cache_dir() -> str:
    """Where PoCL keeps its compiled kernels: POCL_CACHE_DIR, else XDG_CACHE_HOME/pocl,
    else ~/.cache/pocl. PoCL offers no device when it cannot write there."""
    explicit = os.environ.get("POCL_CACHE_DIR") or ""
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pocl")


def _writable_here(path: str) -> bool:
    """Whether ``path``, or the nearest name above it that exists, is a folder that can be
    written (a file in the way, or a read-only file system, is not)."""
    path = nearest_existing(path)
    return os.path.isdir(path) and os.access(path, os.W_OK)


def device_identities() -> list[Any]:
    """The devices of :func:`opencl_devices`, same order, as objects with the identity
    and sizes a profile lookup reads (``devices.icd``: read through the ICD loader
    without importing pyopencl), or pyopencl's own devices where the loader cannot be
    read that way. :func:`as_opencl` turns one into pyopencl's to run code on it."""
    from clproj.devices.icd import icd_devices

    return icd_devices() or opencl_devices()


def as_opencl(dev: Any, index: int) -> Any:
    """The pyopencl device for ``dev``, device ``index`` of :func:`device_identities`."""
    from clproj.devices.icd import IcdDevice

    if not isinstance(dev, IcdDevice):
        return dev
    found = opencl_devices()
    if not 0 <= index < len(found) or found[index].name.strip() != dev.name.strip():
        raise ClprojError(
            f"OpenCL device {index} ({dev.name.strip()}) is not pyopencl's device {index}",
            "check that OCL_ICD_VENDORS and OCL_ICD_FILENAMES did not change while clproj ran",
        )
    return found[index]


def slug(text: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in text)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")


def default_key(device: Any) -> str:
    """The profile key of ``device`` (pyopencl's or a ``devices.icd`` identity), e.g.
    ``pocl-pthread-amd-epyc`` or ``nvidia-h100-80gb-hbm3-nvidia-cuda``."""
    name = device.name.strip()
    plat = device.platform.name.strip()
    if "Portable Computing Language" in plat:
        driver, _, rest = name.partition("-")
        cpu = rest.split("-")[-1] if "-" in rest else rest
        return f"pocl-{slug(driver)}-{slug(cpu)}"
    return f"{slug(name)}-{slug(plat.split()[0])}"


def describe(index: int, dev: Any) -> DeviceInfo:
    return DeviceInfo(
        index=index,
        platform=dev.platform.name.strip(),
        name=dev.name.strip(),
        vendor=dev.vendor.strip(),
        type=type_name(dev.type),
        compute_units=int(dev.max_compute_units),
        clock_mhz=int(dev.max_clock_frequency),
        global_mem_bytes=int(dev.global_mem_size),
        local_mem_bytes=int(dev.local_mem_size),
        max_work_group_size=int(dev.max_work_group_size),
        driver_version=dev.driver_version.strip(),
        opencl_version=dev.version.strip(),
        pci_bus_id=pci_bus_id(dev) if "NVIDIA" in dev.vendor.upper() else None,
    )


def list_devices() -> list[DeviceInfo]:
    return [describe(i, d) for i, d in enumerate(opencl_devices())]


def select_device(spec: str | int | None) -> Any:
    """The pyopencl device named by ``spec``: an index, or a substring of its name.

    ``None`` picks device 0. An unknown spec raises with the list of valid choices.
    """
    devices = opencl_devices()
    if spec is None:
        return devices[0]
    text = str(spec)
    if text.isdigit():
        i = int(text)
        if 0 <= i < len(devices):
            return devices[i]
    else:
        matches = [d for d in devices if text.lower() in d.name.lower()]
        if len(matches) == 1:
            return matches[0]
    choices = ", ".join(f"{i}: {d.name.strip()}" for i, d in enumerate(devices))
    raise ClprojError(f"no single OpenCL device matches {text!r}", f"use one of: {choices}")
