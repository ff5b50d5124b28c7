"""Measured energy of our benchmark apps' kernels on an NVIDIA GPU (``clproj.energy-results``).

Why: the power rule of the projection (``runtime/projection/power.py``) is a spec-sheet
rule until a device has measured energy per operation; this is the measurement it waits
for. Each distinct launch shape (kernel, global, local) of each app is launched over and
over for a window of at least 2 s while NVML's total-energy counter is polled
(``devices/energy_nvml.py``); the host's package energy is read through powercap where
it can be (``devices/rapl.py``). Every raw reading goes into the results file; the
figures are made from them by ``devices.energy.window_figures``.

``python -m clproj.benchmarks.energy_run --help``; run on the lent GPU machine by
``scripts/gpu/energy.sh``. Nothing here sets clocks or power limits.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import sys
import time
from typing import Any

from clproj.devices.energy import MIN_WINDOW_S
from clproj.devices.energy_app import SHAPES_PER_KERNEL
from clproj.devices.energy_nvml import IDLE_QUIET_S, WINDOW_S
from clproj.errors import ClprojError


def window_seconds(text: str) -> float:
    """argparse type: a window of at least 2 s (the counter steps every 20-100 ms)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not MIN_WINDOW_S <= v <= 60:
        raise argparse.ArgumentTypeError(f"window must be {MIN_WINDOW_S:g} to 60 s, got {v:g}")
    return v


def app_names(text: str) -> list[str]:
    """argparse type: a comma list of known app names."""
    from clproj.benchmarks.apps import APPS

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in APPS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown app {', '.join(unknown) or '(none)'}; known: {', '.join(APPS)}"
        )
    return names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m clproj.benchmarks.energy_run",
        description="Energy per launch of each kernel of some benchmark apps on an NVIDIA "
        "GPU (NVML total-energy counter), every raw reading kept.",
    )
    p.add_argument(
        "--apps", type=app_names, default=None, help="comma list (default: all our apps)"
    )
    p.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="BUILD_DIR",
        help="also measure unmodified C apps: each folder of BUILD_DIR holding an executable "
        "`app` (the layout of ../shared/validation/polybench/build.sh), run in its folder "
        "under the energy-window preload; repeatable",
    )
    p.add_argument(
        "--shapes",
        type=int,
        default=SHAPES_PER_KERNEL,
        help="launch shapes measured per kernel (the first ones the app issues)",
    )
    p.add_argument("--size", default="paper", help="app size label (small, paper/default)")
    p.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU")
    p.add_argument(
        "--device",
        default=None,
        help="OpenCL device (clproj devices order); default: first NVIDIA GPU",
    )
    p.add_argument("--window", type=window_seconds, default=WINDOW_S, help="seconds per kernel")
    p.add_argument(
        "--quiet",
        type=float,
        default=IDLE_QUIET_S,
        help="seconds the GPU is left quiet before each window's idle samples (its power "
        "reading is a 1 s average)",
    )
    p.add_argument(
        "--budget", type=float, default=360.0, help="stop starting kernels after this many s"
    )
    p.add_argument("-o", "--output", required=True, help="results JSON path")
    return p


def suite_apps(build_dirs: list[str]) -> list[str]:
    """The app folders of built C suites: each sub-folder holding an executable ``app``."""
    out = []
    for d in build_dirs:
        if not os.path.isdir(d):
            raise ClprojError(
                f"--suite {d}: no such folder", "build the suite first (its build.sh OUTDIR)"
            )
        for name in sorted(os.listdir(d)):
            exe = os.path.join(d, name, "app")
            if os.access(exe, os.X_OK):
                out.append(os.path.join(d, name))
    return out


def nvidia_opencl_device(spec: str | None) -> Any:
    """The OpenCL device to run on: the one named, else the first NVIDIA GPU."""
    from clproj.devices.discovery import opencl_devices, select_device

    if spec is not None:
        return select_device(spec)
    for dev in opencl_devices():
        if "nvidia" in dev.platform.name.lower():
            return dev
    raise ClprojError(
        "no NVIDIA OpenCL device", "source scripts/gpu/setup-env.sh (registers the driver)"
    )


def shapes(plan: Any, per_kernel: int = SHAPES_PER_KERNEL) -> list[Any]:
    """The first launch of each distinct (kernel, global size, local size) of a plan, at
    most ``per_kernel`` shapes of each kernel (a shrinking NDRange such as LU's has one
    shape per launch; the preload library for C apps keeps the same rule)."""
    seen: dict[tuple[Any, ...], Any] = {}
    per: dict[str, int] = {}
    for launch in plan.launches:
        key = (launch.kernel, tuple(launch.global_size), launch.local_size)
        if key in seen or per.get(launch.kernel, 0) >= per_kernel:
            continue
        seen[key] = launch
        per[launch.kernel] = per.get(launch.kernel, 0) + 1
    return list(seen.values())


def measure_app(
    nv: Any, handle: Any, dev: Any, name: str, args: argparse.Namespace, out: list[dict[str, Any]]
) -> None:
    """Append one entry per launch shape of app ``name`` to ``out`` as each is measured
    (its raw window, figures or refusal), so a later shape's failure keeps the earlier."""
    import numpy as np
    import pyopencl as cl

    from clproj.benchmarks.apps import get_app
    from clproj.benchmarks.apps.execute import bind_args
    from clproj.devices.energy import kernel_entry
    from clproj.devices.energy_nvml import measure

    plan = get_app(name).plan(args.size)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, plan.source).build(options=plan.options.split() if plan.options else [])
    bufs = {}
    for n, a in plan.buffers.items():
        a = np.ascontiguousarray(a)
        bufs[n] = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=max(1, a.nbytes))
        if a.nbytes:
            cl.enqueue_copy(queue, bufs[n], a)
    queue.finish()
    for launch in shapes(plan, args.shapes):
        k = cl.Kernel(prg, launch.kernel)
        bind_args(k, launch, bufs)
        gsize, lsize = launch.global_size, launch.local_size
        w = measure(
            nv,
            handle,
            launch.kernel,
            lambda k=k, g=gsize, loc=lsize: cl.enqueue_nd_range_kernel(queue, k, g, loc),
            queue.finish,
            args.window,
            args.quiet,
        )
        entry = kernel_entry(
            w,
            app=name,
            kernel=launch.kernel,
            global_size=list(gsize),
            local_size=None if lsize is None else list(lsize),
        )
        out.append(entry)
        f = entry["figures"]
        sys.stderr.write(
            f"{name}/{launch.kernel}: "
            + (
                f"{f['time_per_launch_s'] * 1e6:.1f} us, {f['average_power_w']:.0f} W, "
                f"{f['energy_per_launch_j'] * 1e3:.3f} mJ/launch\n"
                if f
                else f"refused: {entry['error']}\n"
            )
        )


def measure_suite_app(
    nv: Any, handle: Any, name: str, folder: str, args: argparse.Namespace, out: list[Any]
) -> dict[str, Any]:
    """Append the windows of the unmodified C app in ``folder`` (run as ``./app`` under
    the energy-window preload) to ``out``; returns the run's facts (exit status, stderr)."""
    from clproj.devices import energy_app

    entries, facts = energy_app.measure_app(
        nv,
        handle,
        name,
        ["./app"],
        folder,
        window_s=args.window,
        quiet_s=args.quiet,
        shapes=args.shapes,
        timeout_s=args.budget + 60.0,
    )
    suite = os.path.basename(os.path.dirname(os.path.abspath(folder)))
    out.extend(e | {"suite": suite} for e in entries)
    sys.stderr.write(
        f"{name}: rc {facts['returncode']}, {len(entries)} windows: "
        + ", ".join(
            f"{e['kernel']} {e['figures']['average_power_w']:.0f} W"
            if e.get("figures")
            else f"{e['kernel']} refused ({e.get('error')})"
            for e in entries
        )
        + "\n"
    )
    return facts


def run(args: argparse.Namespace, save: Any = None) -> dict[str, Any]:
    """The whole measurement: NVML opened first (a machine without a driver stops here,
    in one line), then every app, then the host's package energy over the run.
    ``save(doc)`` is called after every app with what is measured so far, so a run cut
    short by its time limit still leaves its readings."""
    from clproj.devices.energy import results
    from clproj.devices.energy_nvml import counter_kind, device_facts, open_nvml
    from clproj.devices.rapl import RaplWindow

    nv, handle = open_nvml(args.gpu)
    dev = nvidia_opencl_device(args.device)
    device = device_facts(nv, handle) | {
        "opencl_name": dev.name.strip(),
        "platform": dev.platform.name.strip(),
        "index": args.gpu,
        "reader": counter_kind(nv, handle),
    }
    cpu = RaplWindow()
    cpu.start()
    t0 = time.monotonic()
    kernels: list[dict[str, Any]] = []
    skipped: list[str] = []
    runs: list[dict[str, Any]] = []

    def document(host_energy: Any) -> dict[str, Any]:
        host = {
            "hostname": socket.gethostname(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpu_energy": None
            if host_energy is None
            else {
                "joules": host_energy.joules,
                "seconds": host_energy.seconds,
                "reason": host_energy.reason,
            },
        }
        extra = {"size": args.size, "skipped_for_budget": skipped, "suite_runs": runs}
        return results(device, kernels, host) | extra

    from clproj.benchmarks.apps import APPS

    # The unmodified C apps first: third-party code is what judges the projections.
    jobs = [(os.path.basename(f), f) for f in suite_apps(args.suite)]
    jobs += [(name, None) for name in args.apps or list(APPS)]
    for name, folder in jobs:
        if time.monotonic() - t0 > args.budget:
            skipped.append(name)
            continue
        if folder is None:
            try:
                measure_app(nv, handle, dev, name, args, kernels)
            except Exception as exc:  # a build or launch failure: recorded, the rest goes on
                kernels.append({"app": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        else:
            runs.append(measure_suite_app(nv, handle, name, folder, args, kernels))
        if save is not None:
            save(document(None))
    doc = document(cpu.stop())
    nv.nvmlShutdown()
    return doc


def main(argv: list[str] | None = None) -> int:
    from clproj.atomic import write_atomic

    args = parser().parse_args(argv)

    def save(doc: dict[str, Any]) -> None:
        write_atomic(args.output, (json.dumps(doc, indent=1) + "\n").encode())

    try:
        save(run(args, save))
    except ClprojError as exc:
        sys.stderr.write(f"error: {exc.cause}\n  fix: {exc.fix}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
