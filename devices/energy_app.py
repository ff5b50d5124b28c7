"""Energy per launch of the kernels of an unmodified OpenCL app, measured on its own data.

Why: an app's kernels run once or a few times for milliseconds, and its buffers are its
own (their contents change a device's power). The energy-window preload library
(``native/energy_window/energy_window.c``, built as ``devices/libclproj_energy_window.so``)
repeats the first launch shapes of each kernel inside the app for a window long enough
for the counter, restoring the buffers the kernel writes, and logs each window's times;
this module runs the app under it while :class:`devices.energy_nvml.Poller` polls the
counter, then cuts the readings to each window. The app's results and exit status are
its own; its timings include the windows.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clproj.devices.energy import kernel_entry
from clproj.devices.energy_nvml import IDLE_QUIET_S, IDLE_S, WINDOW_S
from clproj.errors import ClprojError
from clproj.paths import temp_directory
from clproj.settings import setting
from clproj.untrusted import BadField, field_at, is_finite_number

LIBRARY = Path(__file__).with_name("libclproj_energy_window.so")
# How many distinct launch shapes of a kernel are measured (the library's default too).
SHAPES_PER_KERNEL = int(setting("CLPROJ_ENERGY_SHAPES").default)
WINDOW_FIELDS = ("kernel", "global_size", "local_size", "idle", "start", "end", "launches")
WINDOW_FIELDS += ("saved_buffers", "error")
WINDOW_TYPES: dict[str, Any] = {
    "kernel": str,
    "global_size": list,
    "idle": list,
    "start": (int, float),
    "end": (int, float),
    "launches": int,
}
BUILD_FIX = "run `make setup` (it builds the library) or python native/build_energy_window.py"


def library() -> Path:
    """The preload library's path, or ClprojError where it was not built."""
    if not LIBRARY.is_file():
        raise ClprojError(f"no energy-window library at {LIBRARY}", BUILD_FIX)
    return LIBRARY


def preload_environment(
    log: str, window_s: float, quiet_s: float, idle_s: float, shapes: int
) -> dict[str, str]:
    """The environment the library reads (rows of the settings table)."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(p for p in (str(library()), env.get("LD_PRELOAD", "")) if p)
    env["CLPROJ_ENERGY_LOG"] = log
    env["CLPROJ_ENERGY_WINDOW_S"] = f"{window_s:g}"
    env["CLPROJ_ENERGY_QUIET_S"] = f"{quiet_s:g}"
    env["CLPROJ_ENERGY_IDLE_S"] = f"{idle_s:g}"
    env["CLPROJ_ENERGY_SHAPES"] = str(shapes)
    return env


def read_log(text: str) -> list[dict[str, Any]]:
    """The windows of a library log, each checked field by field (a log line cut by a
    crash of the app is reported, not guessed at)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            row = {k: field_at(doc, k) for k in WINDOW_FIELDS}
            bad = [k for k, kind in WINDOW_TYPES.items() if not isinstance(row[k], kind)]
            if bad or len(row["idle"]) != 2 or not all(map(is_finite_number, row["idle"])):
                raise BadField(bad[0] if bad else "idle", "wrong type")
        except (ValueError, BadField) as exc:
            raise ClprojError(
                f"energy-window log line {n} is unreadable ({exc})",
                "the app stopped while a window was written: measure it again",
            ) from None
        out.append(row)
    return out


def measure_app(
    nv: Any,
    handle: Any,
    app: str,
    command: Sequence[str],
    cwd: str | None = None,
    *,
    window_s: float = WINDOW_S,
    quiet_s: float = IDLE_QUIET_S,
    idle_s: float = IDLE_S,
    shapes: int = SHAPES_PER_KERNEL,
    timeout_s: float = 600.0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(``clproj.energy-results`` kernel entries, the run's facts) of ``command`` run in
    ``cwd`` under the preload library, the counter polled for the whole run."""
    from clproj.devices.energy_nvml import Poller

    with temp_directory("clproj-energy-") as tmp:
        log = os.path.join(tmp, "windows.jsonl")
        env = preload_environment(log, window_s, quiet_s, idle_s, shapes)
        poller = Poller(nv, handle).start()
        try:
            proc = subprocess.run(
                list(command), cwd=cwd, env=env, capture_output=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            proc = None
        finally:
            poller.stop()
        text = Path(log).read_text(encoding="utf-8") if os.path.exists(log) else ""
    facts = {
        "app": app,
        "command": list(command),
        "returncode": None if proc is None else proc.returncode,
        "timed_out": proc is None,
        "stdout_tail": "" if proc is None else proc.stdout.decode(errors="replace")[-2000:],
        "stderr_tail": "" if proc is None else proc.stderr.decode(errors="replace")[-2000:],
        "counter": poller.counter,
    }
    entries = []
    for row in read_log(text):
        labels = {
            "app": app,
            "kernel": row["kernel"],
            "global_size": row["global_size"],
            "local_size": row["local_size"],
            "saved_buffers": row["saved_buffers"],
        }
        if row["error"] is not None:
            entries.append(labels | {"error": f"energy window: {row['error']}"})
            continue
        idle = poller.power_between(*row["idle"])
        w = poller.window(row["kernel"], row["launches"], row["start"], row["end"], idle)
        entries.append(kernel_entry(w, **labels))
    return entries, facts
