"""The OpenCL devices of this process, read through the ICD loader with ctypes.

Why beside :mod:`devices.discovery`: ``clproj run`` resolves the profiles of the local
devices before it starts the app, and that needs only each device's identity and a few
sizes. Importing pyopencl (and numpy with it) for them was 0.21 s of the 0.26 s
``clproj run --mode project`` spent before the app (measured on the 2-core VM, a cached
profile). Here the system's ICD loader answers the same calls. It reads the same vendor
files as the loader pyopencl links; with one platform (and no loader variable set) the
devices are the same, in the driver's order, so index N is pyopencl's device N;
otherwise pyopencl is asked (``tests/devices/test_icd.py`` compares the two on every
device, and :func:`devices.discovery.as_opencl` checks the name before a device is
measured). Anything that runs code on a device uses pyopencl.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from clproj.cl_names import (
    CL_DEVICE_GLOBAL_MEM_SIZE,
    CL_DEVICE_MAX_CLOCK_FREQUENCY,
    CL_DEVICE_MAX_COMPUTE_UNITS,
    CL_DEVICE_MAX_WORK_GROUP_SIZE,
    CL_DEVICE_NAME,
    CL_DEVICE_TYPE,
    CL_DEVICE_TYPE_ALL,
    CL_DEVICE_VENDOR,
    CL_DEVICE_VERSION,
    CL_DRIVER_VERSION,
    CL_PLATFORM_NAME,
    CL_SUCCESS,
)

# The system's ICD loader (ocl-icd on Debian, pulled in by any ICD). Not pyopencl's own
# copy: loaded through ctypes, that one crashed in its first clGetPlatformIDs (a NULL
# vendor folder in its set-up, seen here).
SYSTEM_LOADER = "libOpenCL.so.1"
# Where the two loaders could list other devices or another order, pyopencl is asked:
# a system loader need not read these variables (NVIDIA's did not, docs/devices.md), and
# the order of platforms is each loader's own.
LOADER_VARIABLES = ("OCL_ICD_VENDORS", "OCL_ICD_FILENAMES")


@dataclass(frozen=True)
class IcdPlatform:
    name: str


@dataclass(frozen=True)
class IcdDevice:
    """What a profile lookup reads of a device, named as pyopencl names it."""

    platform: IcdPlatform
    name: str
    vendor: str
    driver_version: str
    version: str
    type: int
    max_compute_units: int
    max_clock_frequency: int
    max_work_group_size: int
    global_mem_size: int


class _Loader:
    """The five entry points used, with their C signatures."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        u32, vp, sz = ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t
        self.platform_ids = lib.clGetPlatformIDs
        self.platform_ids.argtypes = [u32, ctypes.POINTER(vp), ctypes.POINTER(u32)]
        self.platform_info = lib.clGetPlatformInfo
        self.platform_info.argtypes = [vp, u32, sz, vp, ctypes.POINTER(sz)]
        self.device_ids = lib.clGetDeviceIDs
        self.device_ids.argtypes = [
            vp,
            ctypes.c_uint64,
            u32,
            ctypes.POINTER(vp),
            ctypes.POINTER(u32),
        ]
        self.device_info = lib.clGetDeviceInfo
        self.device_info.argtypes = [vp, u32, sz, vp, ctypes.POINTER(sz)]
        for f in (self.platform_ids, self.platform_info, self.device_ids, self.device_info):
            f.restype = ctypes.c_int32

    def ids(self, platform: int | None = None) -> list[int]:
        count = ctypes.c_uint32(0)
        if platform is None:
            rc = self.platform_ids(0, None, ctypes.byref(count))
        else:
            rc = self.device_ids(platform, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(count))
        if rc != CL_SUCCESS or count.value == 0:
            return []
        out = (ctypes.c_void_p * count.value)()
        if platform is None:
            rc = self.platform_ids(count.value, out, None)
        else:
            rc = self.device_ids(platform, CL_DEVICE_TYPE_ALL, count.value, out, None)
        return [int(p) for p in out if p] if rc == CL_SUCCESS else []

    def _info(self, query: object, handle: int, param: int) -> bytes:
        size = ctypes.c_size_t(0)
        if query(handle, param, 0, None, ctypes.byref(size)) != CL_SUCCESS:  # type: ignore[operator]
            raise OSError(f"OpenCL info query {param:#x} failed")
        buf = ctypes.create_string_buffer(size.value)
        if query(handle, param, size.value, buf, None) != CL_SUCCESS:  # type: ignore[operator]
            raise OSError(f"OpenCL info query {param:#x} failed")
        return buf.raw[: size.value]

    def text(self, handle: int, param: int, platform: bool = False) -> str:
        raw = self._info(self.platform_info if platform else self.device_info, handle, param)
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def number(self, handle: int, param: int) -> int:
        return int.from_bytes(self._info(self.device_info, handle, param), "little")


def icd_devices(path: str | None = None) -> list[IcdDevice] | None:
    """The devices of the one OpenCL platform, in its order (pyopencl's), or None where
    pyopencl must be asked instead: the loader cannot be read here, a variable of
    ``LOADER_VARIABLES`` is set, or there is more than one platform."""
    if any(os.environ.get(v) for v in LOADER_VARIABLES):
        return None
    try:
        loader = _Loader(path or SYSTEM_LOADER)
        platforms = loader.ids()
        if len(platforms) != 1:
            return None
        platform = IcdPlatform(loader.text(platforms[0], CL_PLATFORM_NAME, platform=True))
        out = [
            IcdDevice(
                platform=platform,
                name=loader.text(d, CL_DEVICE_NAME),
                vendor=loader.text(d, CL_DEVICE_VENDOR),
                driver_version=loader.text(d, CL_DRIVER_VERSION),
                version=loader.text(d, CL_DEVICE_VERSION),
                type=loader.number(d, CL_DEVICE_TYPE),
                max_compute_units=loader.number(d, CL_DEVICE_MAX_COMPUTE_UNITS),
                max_clock_frequency=loader.number(d, CL_DEVICE_MAX_CLOCK_FREQUENCY),
                max_work_group_size=loader.number(d, CL_DEVICE_MAX_WORK_GROUP_SIZE),
                global_mem_size=loader.number(d, CL_DEVICE_GLOBAL_MEM_SIZE),
            )
            for d in loader.ids(platforms[0])
        ]
    except (OSError, AttributeError):
        return None
    return out or None
