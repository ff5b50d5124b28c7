"""How a child process gets the shim: the environment that preloads it, and the per-kernel
summary it writes at exit.

This is the shim's contract with whatever starts an app under it (``clproj run``, the
tests, the benchmarks): the settings the C shim reads, the folders the app's interpreter
imports clproj from (``CLPROJ_PYTHON_PATH``, clproj.pyenv), and the TSV it leaves.
"""

from __future__ import annotations

import os

from clproj import pyenv, settings

MODES = ("observe", "project", "route")


def shim_environment(
    mode: str = "observe",
    record: str | None = None,
    which: str = "first",
    kernels: list[str] | None = None,
    verify: bool = False,
    summary_file: str | None = None,
    broker: str | None = None,
    time_all: bool = False,
) -> dict[str, str]:
    """Environment that preloads the shim into a child process (also used by tests).

    ``time_all`` times every launch; by default observe mode times a sample of them
    (``CLPROJ_TIMING_FIRST`` / ``CLPROJ_TIMING_EVERY`` in the environment tune it)."""
    from clproj.native import shim_library

    env = dict(os.environ)
    # The shim and the Oclgrind plugin read settings from the environment only (C, C++):
    # the config file's values travel there, below what the environment says.
    for name, text in settings.from_config_file().items():
        env.setdefault(name, text)
    lib = shim_library()
    env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    # The app's interpreter (or the one the shim embeds in a C app) finds clproj through
    # this, appended to its path by the shim; the app's PYTHONPATH stays the app's.
    env["CLPROJ_PYTHON_PATH"] = os.pathsep.join(pyenv.app_import_paths())
    env["CLPROJ_PYTHON"] = pyenv.helper_python()  # what clproj's helpers in the app run on
    env["CLPROJ_MODE"] = mode
    for key in (
        "CLPROJ_RECORD_DIR",
        "CLPROJ_RECORD_KERNELS",
        "CLPROJ_VERIFY",
        "CLPROJ_SUMMARY_FILE",
        "CLPROJ_BROKER",
    ):
        env.pop(key, None)
    if record:
        env["CLPROJ_RECORD_DIR"] = os.path.abspath(record)
    env["CLPROJ_RECORD_WHICH"] = which
    if kernels:
        env["CLPROJ_RECORD_KERNELS"] = ",".join(kernels)
    if verify:
        env["CLPROJ_VERIFY"] = "1"
    if summary_file:
        env["CLPROJ_SUMMARY_FILE"] = summary_file
    if broker:
        env["CLPROJ_BROKER"] = broker
    if time_all:
        env["CLPROJ_TIMING"] = "all"
    if mode in ("project", "route"):  # route mode migrates kernels by these projections
        env["CLPROJ_HOOKS"] = ",".join([*settings.get("CLPROJ_HOOKS"), PROJECT_HOOK])
    return env


# The projection package plugs in here (intercept.hooks): called with each new record.
PROJECT_HOOK = "clproj.runtime.projection.app_hook:on_record"


def read_summary(path: str) -> list[dict]:
    """Per-kernel rows of the summary TSV the shim (or route mode) writes at exit.

    The C shim writes six columns: kernel, device, launches, timed launches, estimated
    total ns of all launches and measured ns of the timed ones. Observe mode times a sample
    of the launches (docs/intercept.md, "Sampled timing"), so ``total_ns`` and ``mean_ns``
    are estimates whenever ``timed < launches`` (``sampled`` is then true); launch counts
    are always exact. Route mode writes five columns (its total is over the timed launches).
    """
    rows: dict[tuple[str, str], dict] = {}
    if not os.path.exists(path):
        return []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            route = len(parts) == 5  # route mode: its total is over the timed launches
            if route:
                parts.append(parts[4])
            if len(parts) != 6:
                continue
            name, device, launches, timed, total, measured = parts
            row = rows.setdefault(
                (name, device),
                {
                    "kernel": name,
                    "device": device,
                    "launches": 0,
                    "timed": 0,
                    "total_ns": 0,
                    "measured_ns": 0,
                    "_route": route,
                },
            )
            row["launches"] += int(launches)
            row["timed"] += int(timed)
            row["total_ns"] += int(total)
            row["measured_ns"] += int(measured)
    out = sorted(rows.values(), key=lambda r: -r["total_ns"])
    for r in out:
        r["sampled"] = r["timed"] < r["launches"]
        if not r["timed"]:
            r["mean_ns"] = None
        elif r.pop("_route"):
            r["mean_ns"] = r["measured_ns"] / r["timed"]
        else:  # the stratified estimate over all launches (the C summary's mean)
            r["mean_ns"] = r["total_ns"] / r["launches"]
        r.pop("_route", None)
    return out
