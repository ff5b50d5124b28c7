"""Kernel profiles of the benchmark apps, computed by mini-emulation and cached on disk.

Kernel profiles are device-independent, so one emulation per launch group serves every
device; the evaluation reads them from ``benchmarks/results/kernel-profiles/`` (committed,
so CI evaluates without re-emulating everything) and ``clproj evaluate --emulate``
recomputes them. A cache file records the app's source hash: a changed kernel invalidates
its profiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from clproj.errors import ClprojError

PROFILES_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "benchmarks",
    "results",
    "kernel-profiles",
)
CACHE_FORMAT = "clproj.app-kernel-profiles"
CACHE_VERSION = 1


def cache_path(app: str, size: str, mode: str, directory: str = PROFILES_DIR) -> str:
    return os.path.join(directory, f"{app}-{size}-{mode}.json")


def source_hash(plan: Any) -> str:
    return hashlib.sha256((plan.source + "\0" + plan.options).encode()).hexdigest()[:16]


def load_cached(
    app: str, size: str, mode: str, directory: str = PROFILES_DIR
) -> dict[str, Any] | None:
    path = cache_path(app, size, mode, directory)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("format") != CACHE_FORMAT or doc.get("version") != CACHE_VERSION:
        return None
    return doc


def emulate_app(
    app_name: str,
    size: str = "paper",
    mode: str = "single",
    timeout_s: float = 300.0,
    queue: Any = None,
    directory: str = PROFILES_DIR,
) -> dict[str, Any]:
    """Emulate every launch group of an app and write the cache file; returns its document."""
    import miniemu
    from benchmarks.apps import get_app
    from runtime.app_records import launch_groups

    app = get_app(app_name)
    plan = app.plan(size)
    if queue is None:
        queue = _local_queue()
    groups = launch_groups(plan, queue)
    entries = []
    for g in groups:
        start = time.perf_counter()
        variants, error = [], None
        for record, weight in zip(g.records, g.weights, strict=True):
            try:
                profile = miniemu.emulate(record, mode=mode, timeout_s=timeout_s).to_dict()
            except ClprojError as exc:
                error = exc.cause
                break
            variants.append({"weight": weight, "profile": profile})
        entries.append(
            {
                "key": g.key,
                "kernel": g.kernel,
                "global": list(g.global_size),
                "local": list(g.local_size) if g.local_size else None,
                "n_launches": g.n_launches,
                "footprint_bytes": footprint_bytes(g.record),
                "emulation_s": time.perf_counter() - start,
                "variants": variants if error is None else [],
                "error": error,
            }
        )
    doc = {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "app": app_name,
        "size": size,
        "mode": mode,
        "source_hash": source_hash(plan),
        "groups": entries,
    }
    os.makedirs(directory, exist_ok=True)
    with open(cache_path(app_name, size, mode, directory), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    return doc


def footprint_bytes(record: Any) -> int:
    from runtime.projection import record_footprint

    return record_footprint(record)


def _local_queue() -> Any:
    """A queue on the fastest local CPU device, used only to prepare buffer states."""
    import pyopencl as cl

    from devices.discovery import opencl_devices

    devs = opencl_devices()
    dev = max(devs, key=lambda d: d.max_compute_units)
    return cl.CommandQueue(cl.Context([dev]))
