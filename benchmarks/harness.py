"""Ground-truth timing: run every app on every OpenCL device and record device times.

This is what projections are scored against, so it measures the same thing the model
predicts: kernel execution time from OpenCL profiling events, after warm-up runs, as the
median of N repeats (the spread is kept to show how trustworthy each number is). Launches
of an app are grouped per distinct (kernel, global size, local size): FloydWarshall's 192
passes are one group of 192 launches.

Only pyopencl, numpy and rich are needed here (the GPU machine has nothing else).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from clproj.atomic import write_atomic
from clproj.devices import discovery
from clproj.errors import ClprojError

FORMAT = "clproj.bench-results"
VERSION = 1
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DEFAULT_OUTPUT = os.path.join(RESULTS_DIR, "bench-{key}-{size}.json")

_CPU_FAMILIES = ("epyc", "xeon", "ryzen", "threadripper", "core", "graviton", "neoverse", "apple")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def device_key(dev: Any) -> str:
    """A short, stable slug naming a device, e.g. ``pocl-pthread-epyc2``, ``nvidia-h100``.

    PoCL names read ``<driver>-<llvm cpu>-<cpu brand>``; the key keeps the driver (pthread
    vs basic are different devices) and the CPU family with its compute-unit count, which
    is what distinguishes two hosts' results. GPUs keep vendor and model (``H100``, ``A100``).
    """
    name = dev.name.strip()
    platform_name = dev.platform.name.strip()
    cus = int(dev.max_compute_units)
    if "Portable Computing Language" in platform_name or platform_name.lower().startswith("pocl"):
        driver = name.split("-", 1)[0].lower()
        low = name.lower()
        family = next((f for f in _CPU_FAMILIES if f in low), None)
        if family is None:
            family = _slug(name.split("-")[-1]).split("-")[0] or "cpu"
        return f"pocl-{driver}-{family}{cus}"
    vendor = dev.vendor.strip().split()[0].lower() if dev.vendor.strip() else "unknown"
    vendor = {"advanced": "amd", "intel(r)": "intel", "nvidia": "nvidia"}.get(vendor, _slug(vendor))
    tokens = [t for t in re.split(r"[\s_()]+", name) if t]
    model = next(
        (
            t
            for t in tokens
            if re.search(r"\d", t) and re.search(r"[A-Za-z]", t) and t.lower() != vendor
        ),
        None,
    )
    if model is None:
        model = _slug(name)[:24] or "device"
    return f"{vendor}-{_slug(model)}"


def _nvml_clocks(dev: Any) -> dict[str, int] | None:
    """Current SM/memory clocks from NVML, if this is an NVIDIA device and NVML is importable."""
    if "NVIDIA" not in dev.vendor.upper():
        return None
    try:
        import pynvml  # nvidia-ml-py, optional

        from clproj.devices.discovery import pci_bus_id

        bus = pci_bus_id(dev)
        pynvml.nvmlInit()
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                pci = pynvml.nvmlDeviceGetPciInfo(h).busId
                pci = pci.decode() if isinstance(pci, bytes) else pci
                if bus is None or pci.lower().endswith(bus.lower()):
                    return {
                        "sm_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                        "mem_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                        "max_sm_mhz": int(
                            pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
                        ),
                    }
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
    return None


def device_identity(dev: Any, key: str | None = None) -> dict[str, Any]:
    ident = {
        "key": key or device_key(dev),
        "name": dev.name.strip(),
        "vendor": dev.vendor.strip(),
        "type": discovery.type_name(dev.type),
        "platform": dev.platform.name.strip(),
        "platform_version": dev.platform.version.strip(),
        "driver": dev.driver_version.strip(),
        "opencl_version": dev.version.strip(),
        "compute_units": int(dev.max_compute_units),
        "clock_mhz": int(dev.max_clock_frequency),
        "max_work_group_size": int(dev.max_work_group_size),
        "global_mem_bytes": int(dev.global_mem_size),
        "local_mem_bytes": int(dev.local_mem_size),
        "clocks": _nvml_clocks(dev),
    }
    if ident["platform"] == "Portable Computing Language":
        ident["pocl_devices"] = os.environ.get("POCL_DEVICES")
    return ident


def host_identity() -> dict[str, Any]:
    import pyopencl

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "pyopencl": ".".join(str(v) for v in pyopencl.VERSION),
        "numpy": np.__version__,
        "loadavg_1m": _loadavg(),
    }


def _loadavg() -> float | None:
    """1-minute load average when measuring: a busy shared host explains a wide spread."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def group_launches(plan: Any, repeat_times_ns: list[list[int]]) -> list[dict[str, Any]]:
    """Per distinct (kernel, global, local): launch count and per-launch statistics.

    For each launch the median, min and max over the timed repeats are taken; a group's
    ``median_ns``/``min_ns``/``max_ns`` are the means of those over its launches, and
    ``total_ns`` is the sum of the per-launch medians (so ``total_ns == n_launches *
    median_ns`` up to rounding). ``spread`` is ``(max_ns - min_ns) / median_ns``.
    """
    t = np.array(repeat_times_ns, dtype=np.float64)  # [repeat, launch]
    med, lo, hi = np.median(t, axis=0), t.min(axis=0), t.max(axis=0)
    groups: dict[tuple, list[int]] = {}
    for i, launch in enumerate(plan.launches):
        key = (
            launch.kernel,
            tuple(int(g) for g in launch.global_size),
            None if launch.local_size is None else tuple(int(x) for x in launch.local_size),
        )
        groups.setdefault(key, []).append(i)
    out = []
    for (kernel, gsz, lsz), idx in groups.items():
        m = float(med[idx].mean())
        out.append(
            {
                "kernel": kernel,
                "global": list(gsz),
                "local": None if lsz is None else list(lsz),
                "n_launches": len(idx),
                "median_ns": round(m),
                "min_ns": round(float(lo[idx].mean())),
                "max_ns": round(float(hi[idx].mean())),
                "total_ns": round(float(med[idx].sum())),
                "spread": round(float((hi[idx].mean() - lo[idx].mean()) / m), 4) if m > 0 else 0.0,
            }
        )
    return out


def _jsonable_size(size: Any) -> Any:
    return list(size) if isinstance(size, tuple) else size


def bench_device(
    dev: Any,
    apps: Iterable[Any],
    size: str,
    repeat: int,
    warmup: int,
    references: dict[tuple[str, str], Any] | None = None,
    on_app: Callable[[str], None] | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """Measure every app on one device; a failing app is recorded, never fatal.

    ``key`` names the device in the results (default :func:`device_key`; see
    :func:`results_target`)."""
    import pyopencl as cl

    from clproj.benchmarks.apps.execute import execute

    references = {} if references is None else references
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    result: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "device": device_identity(dev, key),
        "host": host_identity(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "size": size,
        "repeat": repeat,
        "warmup": warmup,
        "timer": "opencl-profiling-events",
        "apps": {},
    }
    for app in apps:
        if on_app:
            on_app(app.name)
        entry: dict[str, Any] = {
            "paper": app.paper,
            "stresses": app.stresses,
            "verified": False,
            "error": None,
            "skipped": None,
            "kernels": [],
            "total_ns": None,
        }
        result["apps"][app.name] = entry
        reason = app.unsupported_reason(dev)
        if reason:
            entry["skipped"] = reason
            continue
        t0 = time.perf_counter()
        try:
            plan = app.plan(size)
            entry["size"] = _jsonable_size(plan.size)
            res = execute(plan, queue, repeat=repeat, warmup=warmup)
        except Exception as exc:  # build or launch failure: record it, go on
            entry["error"] = f"{type(exc).__name__}: {str(exc).strip()[:2000]}"
            continue
        entry["wall_s"] = round(time.perf_counter() - t0, 3)
        try:
            key = (app.name, size)
            if key not in references:
                references[key] = app.reference(plan)
            app.check(plan, res.outputs, references[key])
            entry["verified"] = True
        except AssertionError as exc:
            entry["error"] = f"verification failed: {exc}"
        entry["kernels"] = group_launches(plan, res.repeat_times_ns)
        entry["total_ns"] = int(sum(g["total_ns"] for g in entry["kernels"]))
    result["host"]["loadavg_1m_end"] = _loadavg()
    return result


def output_path(template: str, key: str, size: str) -> str:
    return template.replace("{key}", key).replace("{size}", size)


def _held_device(path: str) -> str | None:
    """The device name of the results already at ``path``; None when there are none."""
    if not os.path.exists(path):
        return None
    try:
        return str(load_results(path)["device"]["name"])
    except ClprojError:
        return None  # not a results file we could read: what holds it is unknown


def results_target(dev: Any, template: str, size: str) -> tuple[str, str]:
    """(key, path) under which ``dev``'s results are written; the key is also named in
    the file.

    :func:`device_key` names a CPU by family and core count, so two hosts of one family
    share it: this project's 2-core EPYC VMs come as PoCL ``pthread-skylake-avx512`` and
    ``pthread-haswell`` builds, and the second's ``clproj bench`` would overwrite the
    first's committed ground truth. When the file the key names holds another device's
    results, the key gains a digest of this device's name instead (:func:`distinct_key`).
    A file of another device that stays the target (an explicit ``-o`` without ``{key}``)
    is refused, before any app runs.
    """
    name = dev.name.strip()
    key = device_key(dev)
    path = output_path(template, key, size)
    held = _held_device(path)
    if held not in (None, name) and "{key}" in template:
        key = distinct_key(key, name)
        path = output_path(template, key, size)
        held = _held_device(path)
    if held not in (None, name):
        raise ClprojError(
            f"{path} holds bench results of {held!r}, not of {name!r}",
            "write to another file (-o PATH, or put {key} in it), or move that file away first",
        )
    return key, path


def distinct_key(key: str, name: str) -> str:
    """``key`` made distinct for the device called ``name`` (a digest of the name): what
    two devices sharing a :func:`device_key` are told apart by."""
    return f"{key}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"


def write_results(result: dict[str, Any], path: str) -> None:
    validate_results(result)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, (json.dumps(result, indent=1) + "\n").encode())


def load_results(path: str) -> dict[str, Any]:
    """Read and validate a results file (rejects other formats and newer versions)."""
    from clproj.untrusted import read_json_file

    obj = read_json_file(path, "bench results", 256 << 20, "pass a file written by `clproj bench`")
    if not isinstance(obj, dict):
        raise ClprojError(
            f"bench results {path}: not a JSON object", "pass a file written by `clproj bench`"
        )
    validate_results(obj)
    return obj


def validate_results(obj: dict[str, Any]) -> None:  # noqa: C901
    """Raise ``ClprojError`` naming the first field that breaks the format."""

    def bad(field: str, why: str) -> ClprojError:
        return ClprojError(
            f"bench results: field {field!r} {why}",
            "re-run `clproj bench` with this clproj version",
        )

    if obj.get("format") != FORMAT:
        raise bad("format", f"is {obj.get('format')!r}, expected {FORMAT!r}")
    if not isinstance(obj.get("version"), int) or obj["version"] > VERSION:
        raise bad("version", f"is {obj.get('version')!r}, this reader understands <= {VERSION}")
    for field in ("device", "host", "date", "size", "repeat", "warmup", "apps"):
        if field not in obj:
            raise bad(field, "is missing")
    for field in (
        "key",
        "name",
        "vendor",
        "type",
        "platform",
        "driver",
        "compute_units",
        "clock_mhz",
    ):
        if field not in obj["device"]:
            raise bad(f"device.{field}", "is missing")
    for name, app in obj["apps"].items():
        for field in ("verified", "kernels", "total_ns", "error", "skipped"):
            if field not in app:
                raise bad(f"apps.{name}.{field}", "is missing")
        for i, k in enumerate(app["kernels"]):
            for field in (
                "kernel",
                "global",
                "local",
                "n_launches",
                "median_ns",
                "min_ns",
                "max_ns",
                "total_ns",
                "spread",
            ):
                if field not in k:
                    raise bad(f"apps.{name}.kernels[{i}].{field}", "is missing")
            if not k["min_ns"] <= k["median_ns"] <= k["max_ns"]:
                raise bad(f"apps.{name}.kernels[{i}]", "has min_ns <= median_ns <= max_ns violated")
