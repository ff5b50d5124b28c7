"""A device profile for every OpenCL device of *this* machine, whatever machine it is.

Resolution order for one local device, first that applies:

1. ``committed``: a measured profile in ``devices/profiles/measured`` of the same device
   (platform and name; among several, the same driver, then the newest). Skipped under
   ``CLPROJ_FOREIGN_MACHINE`` so tests can run as on a machine nobody profiled.
2. ``cached``: a profile measured earlier on this machine, under
   ``$CLPROJ_CACHE/profiles/local-<device>-<hash>.json``. The hash covers platform, name
   and driver, so a driver upgrade measures again; the ``local-`` prefix keeps its key
   apart from every committed key. A cached profile measured while the machine was busy
   (``source.load_warning``) is a stand-in, not a result: it is measured again, with one
   line saying so, by the first run that finds the machine quiet (until then it is used,
   with its warning).
3. ``measured``: the quick microbenchmarks, now (``CLPROJ_COLD_PROFILE``), with a progress
   bar and a warning when the machine is busy (a profile measured under load is too
   slow); the result is cached. Only where measuring is allowed: never inside an app, whose
   profiles ``clproj run`` resolved before starting it.
4. ``generic``: where measuring is not allowed or fails. A spec-sheet profile when the
   device is a known GPU, else a committed measured profile of the same kind scaled by
   compute units x clock. Marked ``source.confidence = "low"``; every output that shows a
   projection onto it says so.

Why not measure at install time: a user's devices (and drivers) change, and measuring every
device costs a minute the user may not need; resolving lazily, once, and caching is what a
user of ``clproj run`` expects.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from clproj import paths, settings
from clproj.devices import discovery
from clproj.devices.profile import (
    PROFILES_DIR,
    DeviceProfile,
    load_profile,
    profile_for_device,
)
from clproj.errors import ClprojError

HOW = ("committed", "cached", "measured", "generic")

# The committed measured profiles a generic one is scaled from (per compute unit x clock).
CPU_TEMPLATE = PROFILES_DIR / "measured" / "pocl-pthread-amd-epyc.json"
GPU_TEMPLATE = PROFILES_DIR / "spec" / "h100-sxm-spec.json"


@dataclass
class LocalProfile:
    """Which profile one local device resolved to, and how."""

    index: int
    device: str
    platform: str
    profile: DeviceProfile
    how: str  # one of HOW
    path: str | None
    note: str = ""

    @property
    def low_confidence(self) -> bool:
        return self.profile.low_confidence

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "device": self.device,
            "platform": self.platform,
            "key": self.profile.key,
            "how": self.how,
            "path": self.path,
            "low_confidence": self.low_confidence,
            "note": self.note,
        }


def _ident(dev: Any) -> tuple[str, str, str]:
    return (
        str(dev.platform.name).strip(),
        str(dev.name).strip(),
        str(getattr(dev, "driver_version", "") or "").strip(),
    )


def _label(dev: Any, index: int) -> str:
    name = _ident(dev)[1]
    return f"device {index} ({name})" if index >= 0 else name


def cache_key(dev: Any) -> str:
    """``local-<the key profile-device would give>``: no committed key starts so."""
    return "local-" + discovery.default_key(dev)


def cache_path(dev: Any) -> str:
    """The cache file: the key plus a hash of platform, name and driver (a new driver
    measures again)."""
    platform, name, driver = _ident(dev)
    digest = hashlib.sha256(f"{platform}\0{name}\0{driver}".encode()).hexdigest()[:10]
    return os.path.join(paths.cache_dir("profiles"), f"{cache_key(dev)}-{digest}.json")


def _committed(dev: Any) -> DeviceProfile | None:
    if settings.get("CLPROJ_FOREIGN_MACHINE"):
        return None
    return profile_for_device(dev)


def _cached(dev: Any) -> tuple[DeviceProfile | None, str]:
    """The cached profile of ``dev``, or (None, why not) for a missing or unusable file."""
    try:
        path = cache_path(dev)
    except OSError:  # no cache folder can be made: nothing cached (_keep says so)
        return None, ""
    if not os.path.lexists(path):
        return None, ""
    try:
        prof = load_profile(path)
    except ClprojError as exc:
        paths.discard_cache_entry(path)  # the profile measured now takes its place
        return None, f"ignored a bad cached profile ({exc.cause})"
    if prof.name.strip() != _ident(dev)[1]:
        return None, f"ignored {path}: it describes {prof.name!r}"
    return prof, ""


def cached_profile(dev: Any) -> DeviceProfile | None:
    """The profile measured earlier on this machine for ``dev`` (an object with ``name``,
    ``platform.name`` and ``driver_version``, like a pyopencl device), or None."""
    return _cached(dev)[0]


def busy_note() -> str:
    """A warning when other work keeps the cores busy (empty when the machine is quiet):
    more than a quarter of the cores busy over half a second (clproj itself is idle then)."""
    from clproj.load import idle_cores

    cores = os.cpu_count() or 1
    busy = cores - idle_cores(0.5)
    if busy <= 0.25 * cores:
        return ""
    return (
        f"the machine is busy ({busy:.1f} of {cores} cores in use): a profile measured now "
        "will be too slow; when the machine is quiet, run `clproj devices --profiles "
        "--remeasure`"
    )


def measure(dev: Any, index: int, mode: str, key: str, progress: bool = True) -> DeviceProfile:
    """Measure ``dev`` with the microbenchmark suite (``mode``) and return its profile."""
    from clproj.console import stderr, track
    from clproj.devices.microbench.runner import profile_device

    note = busy_note()
    stderr.print(
        f"clproj: {_label(dev, index)} has no profile yet; measuring one "
        f"({mode} microbenchmarks, about half a minute on a CPU core)",
        highlight=False,
        soft_wrap=True,
    )
    if note:
        stderr.print(f"[yellow]clproj: warning:[/] {note}", highlight=False, soft_wrap=True)

    def bar(steps: list[Any]) -> Any:
        return track(steps, f"profiling {_label(dev, index)}") if progress else steps

    doc = profile_device(dev, mode, key=key, progress=bar)
    if note:
        doc["source"]["load_warning"] = note
    return DeviceProfile(doc)


def _template(kind: str) -> dict[str, Any]:
    path = GPU_TEMPLATE if kind == "GPU" else CPU_TEMPLATE
    return load_profile(str(path)).to_dict()


def generic_profile(dev: Any, reason: str) -> DeviceProfile:
    """A low-confidence profile of ``dev`` from what OpenCL reports plus a template.

    A known GPU gets its spec sheet (devices/specs.py); any other device a committed
    profile of its kind (the measured 2-core EPYC for CPUs, the H100 sheet for GPUs)
    scaled by compute units x clock for instruction rates and by compute units for
    memory bandwidth (CPU memory bandwidth grows with the cores that issue requests; the
    Xeon-16 and EPYC-2 committed profiles differ 10.6x in read bandwidth for 8x the
    cores). Nothing here is measured on the device: every output flags it.
    """
    from clproj.devices import specs

    platform, name, driver = _ident(dev)
    is_gpu = discovery.type_name(dev.type) == "GPU"
    kind = "GPU" if is_gpu else "CPU"
    sheet = specs.spec_for(name) if is_gpu else None
    if sheet is not None:
        doc = specs.build(sheet)
        origin = f"spec sheet {sheet.key}"
    else:
        doc = _template(kind)
        cus, mhz = int(dev.max_compute_units), int(dev.max_clock_frequency) or doc["clock_mhz"]
        cu_ratio = cus / doc["compute_units"]
        rate_ratio = cu_ratio * mhz / doc["clock_mhz"]
        doc["throughput"] = {k: v * rate_ratio for k, v in doc["throughput"].items()}
        doc["curves"] = {
            n: [[x, y * (cu_ratio if n != "local_conflict" else rate_ratio)] for x, y in pts]
            for n, pts in doc["curves"].items()
        }
        doc["memory"]["peak_bandwidth_gbs"] *= cu_ratio
        doc["memory"].pop("cache_read_bytes_per_s", None)
        doc["compute_units"], doc["clock_mhz"] = cus, mhz
        wg = int(dev.max_work_group_size)
        doc["occupancy"]["max_work_group_size"] = wg
        if kind == "CPU":
            doc["occupancy"]["max_work_items_per_cu"] = wg
        doc.pop("detail", None)  # the template's own fine measurements do not carry over
        rule = f"derived: generic {kind}, {doc['key']} scaled by compute units x clock"
        doc["provenance"] = {k: rule for k in doc["provenance"]}
        doc["provenance"].update({"identity": "derived: OpenCL device info"})
        if kind == "CPU":  # PoCL's CPU device runs on this host's cores, not the template's
            discovery.add_host_l1(doc["memory"], doc["provenance"])
        origin = f"{doc['key']} scaled to {cus} CUs at {mhz} MHz"
    doc["key"] = "generic-" + cache_key(dev).removeprefix("local-")
    doc["identity"] = {
        "name": name,
        "vendor": str(dev.vendor).strip(),
        "kind": kind,
        "arch": doc["identity"].get("arch"),
        "driver": driver,
        "platform": platform,
    }
    doc["source"] = {
        "kind": "spec",
        "confidence": "low",
        "host": None,
        "date": None,
        "tool": "devices/local.py generic profile",
        "notes": f"{origin}; {reason}",
    }
    doc["memory"]["global_bytes"] = int(dev.global_mem_size)
    doc["nvml"] = None
    return DeviceProfile(doc)


def _keep(prof: DeviceProfile, dev: Any) -> str | None:
    """Cache a profile just measured; its path, or None where the cache cannot be written
    (read-only, full, a folder in the way): one line, and the run uses the profile anyway."""
    try:
        path = cache_path(dev)
        prof.save(path)
    except OSError as exc:
        where = os.path.join(settings.get("CLPROJ_CACHE"), "profiles")
        print(
            f"clproj: cannot write the profile cache {where} ({exc.strerror or exc}); the "
            "profile measured now is used but not kept (set CLPROJ_CACHE to a writable folder)",
            file=sys.stderr,
        )
        return None
    prof.path = path
    return path


def resolve_device(
    dev: Any, index: int, measure_missing: bool, remeasure: bool = False
) -> LocalProfile:
    """The profile of one local device (see the module docstring for the order);
    ``remeasure`` drops a cached profile first (one measured while the machine was busy)."""
    platform, name, _ = _ident(dev)
    prof = _committed(dev)
    if prof is not None:
        return LocalProfile(index, name, platform, prof, "committed", prof.path)
    if remeasure:
        with contextlib.suppress(OSError):
            os.unlink(cache_path(dev))
    cached, why = _cached(dev)
    mode = settings.get("CLPROJ_COLD_PROFILE")
    loaded = cached.data["source"].get("load_warning", "") if cached is not None else ""
    if cached is not None and loaded and measure_missing and mode != "off" and not busy_note():
        why, cached = "its cached profile was measured on a busy machine, which is quiet now", None
    if cached is not None:
        return LocalProfile(index, name, platform, cached, "cached", cached.path, loaded)
    note = why
    if measure_missing and mode != "off":
        if why:  # a cached file that cannot be trusted: say so, then measure again
            print(f"clproj: {_label(dev, index)}: {why}; measuring it again", file=sys.stderr)
        try:
            prof = measure(discovery.as_opencl(dev, index), index, mode, cache_key(dev))
            kept = _keep(prof, dev)
            warn = prof.data["source"].get("load_warning", "")
            return LocalProfile(index, name, platform, prof, "measured", kept, warn)
        except ClprojError as exc:
            note = f"measuring failed: {exc.cause}"
        except Exception as exc:  # a broken driver must not cost the user the run
            note = f"measuring failed: {type(exc).__name__}: {exc}"
        print(f"clproj: {_label(dev, index)}: {note}", file=sys.stderr)
    elif not note:
        note = (
            "not measured (CLPROJ_COLD_PROFILE=off)"
            if mode == "off"
            else "not measured here; `clproj devices --profiles` measures it"
        )
    prof = generic_profile(dev, note)
    return LocalProfile(index, name, platform, prof, "generic", None, note)


def resolve_all(measure_missing: bool = True, remeasure: bool = False) -> list[LocalProfile]:
    """A profile for every local OpenCL device, in ``clproj devices`` order (looked up
    without importing pyopencl: devices.icd says why)."""
    return [
        resolve_device(d, i, measure_missing, remeasure)
        for i, d in enumerate(discovery.device_identities())
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m clproj.devices.local --committed-here``: exit 0 when a local device resolves to a
    committed profile (`make test` then runs the suite again as on a machine nobody
    profiled), 1 when none does (the suite already ran that way)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m clproj.devices.local")
    ap.add_argument("--committed-here", action="store_true", required=True)
    ap.parse_args(argv)
    return 0 if any(p.how == "committed" for p in resolve_all(measure_missing=False)) else 1


if __name__ == "__main__":
    sys.exit(main())
