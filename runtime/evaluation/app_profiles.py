"""Kernel profiles of the benchmark apps, computed by mini-emulation and cached on disk.

Kernel profiles are device-independent, so one emulation per launch group serves every
device; the evaluation reads them from ``benchmarks/results/kernel-profiles/`` (committed,
so CI evaluates without re-emulating everything) and ``clproj evaluate --emulate``
recomputes them. A cache file records the app's source hash: a changed kernel invalidates
its profiles.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from clproj.benchmarks.harness import RESULTS_DIR
from clproj.errors import ClprojError
from clproj.intercept import identity

PROFILES_DIR = os.path.join(RESULTS_DIR, "kernel-profiles")
CACHE_FORMAT = "clproj.app-kernel-profiles"
CACHE_VERSION = 1


def cache_path(app: str, size: str, mode: str, directory: str = PROFILES_DIR) -> str:
    return os.path.join(directory, f"{app}-{size}-{mode}.json")


def source_hash(plan: Any) -> str:
    """The program's identity (intercept.identity.program_hash), short: a cached profile is
    stale once the app's kernel source or build options change."""
    return identity.program_hash(plan.source, plan.options)[:16]


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
    # A bounded emulation cut short by the wall-clock backstop depends on the load of the
    # machine that made it: such a file is recomputed, never served as the launch's profile.
    if any(
        ((v.get("profile") or {}).get("emulation") or {}).get("budget") == "wall"
        for g in doc.get("groups", [])
        for v in g.get("variants", [])
    ):
        return None
    return doc


# Apps with more launch shapes than this are profiled through miniemu's reuse cache
# (one emulation per launch family, explicit scaling, sampled drift checks).
REUSE_ABOVE_GROUPS = 32


def emulate_app(
    app_name: str,
    size: str = "paper",
    mode: str = "single",
    timeout_s: float = 60.0,
    queue: Any = None,
    directory: str = PROFILES_DIR,
) -> dict[str, Any]:
    """Emulate every launch group of an app and write the cache file; returns its document.

    A launch whose ``mode`` emulation exceeds ``timeout_s`` falls back to the bounded
    mode (the profile's ``emulation`` says which produced it).
    """
    from clproj import miniemu
    from clproj.benchmarks.apps import get_app
    from clproj.miniemu.reuse import ReuseCache
    from clproj.runtime.evaluation.app_records import group_key, launch_groups
    from clproj.runtime.projection.model import record_footprint

    app = get_app(app_name)
    plan = app.plan(size)
    if queue is None:
        queue = _local_queue()
    shapes = {group_key(lc.kernel, lc.global_size, lc.local_size) for lc in plan.launches}
    reuse = ReuseCache(mode=mode, timeout_s=timeout_s) if len(shapes) > REUSE_ABOVE_GROUPS else None

    def profile_of(record: Any) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            if reuse:
                emulated = reuse.profile(record)
            else:
                try:
                    emulated = miniemu.emulate(record, mode=mode, timeout_s=timeout_s)
                except ClprojError:
                    if mode == "bounded":
                        raise
                    # Heavy work-groups (per-work-item loops of millions of iterations)
                    # exceed any unbounded budget: the bounded mode extrapolates them.
                    emulated = miniemu.emulate(record, mode="bounded", timeout_s=120.0)
            profile, error = emulated.to_dict(), None
        except ClprojError as exc:
            profile, error = None, exc.cause
        return {
            "profile": profile,
            "error": error,
            "footprint_bytes": record_footprint(record),
            "seconds": time.perf_counter() - start,
        }

    groups = launch_groups(plan, queue, transform=profile_of)
    entries = []
    for g in groups:
        done = g.records  # what profile_of returned, one per sampled variant
        error = next((d["error"] for d in done if d["error"]), None)
        entries.append(
            {
                "key": g.key,
                "kernel": g.kernel,
                "global": list(g.global_size),
                "local": list(g.local_size) if g.local_size else None,
                "n_launches": g.n_launches,
                "footprint_bytes": done[0]["footprint_bytes"],
                "emulation_s": sum(d["seconds"] for d in done),
                "variants": []
                if error
                else [
                    {"weight": w, "profile": d["profile"]}
                    for d, w in zip(done, g.weights, strict=True)
                ],
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
        "reuse": reuse.counts if reuse else None,
        "groups": entries,
    }
    os.makedirs(directory, exist_ok=True)
    with open(cache_path(app_name, size, mode, directory), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    return doc


def _local_queue() -> Any:
    """A queue on the fastest local CPU device, used only to prepare buffer states."""
    import pyopencl as cl

    from clproj.devices.discovery import opencl_devices

    devs = opencl_devices()
    dev = max(devs, key=lambda d: d.max_compute_units)
    return cl.CommandQueue(cl.Context([dev]))
