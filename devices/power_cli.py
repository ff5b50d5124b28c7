"""``clproj profile-device --power`` and ``--power-fit``: measure the power
microbenchmarks where a power reader exists, and fit the profile's ``power`` section.

Why two steps: the measurement needs the device and its counter (NVML on NVIDIA GPUs,
powercap RAPL on CPUs) and keeps every raw reading in a ``clproj.energy-results`` file
that is committed; the fit is arithmetic on that file and can be redone anywhere
(docs/devices.md "Power fit"). Where no reader exists the measurement stops in one line:
power is never estimated here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from clproj.background_thread import background_thread
from clproj.devices.energy import CounterReading, Window
from clproj.devices.energy_nvml import WINDOW_S
from clproj.errors import ClprojError


def rapl_measure(
    zone: Any, kernel: str, launch: Callable[[], Any], finish: Callable[[], None], window_s: float
) -> Window:
    """A :class:`Window` of ``kernel`` with the package counter (J) polled every 2 ms;
    idle power is the package's mean over 1 s before the window, read, not assumed."""
    from clproj.devices import rapl
    from clproj.devices.energy_nvml import POLL_S, batch_size

    def read_j() -> float:
        return rapl.read_uj(zone) / 1e6

    t0, e0 = time.monotonic(), rapl.read_uj(zone)
    time.sleep(1.0)
    idle = rapl.delta_uj(e0, rapl.read_uj(zone), zone.max_energy_range_uj) / 1e6
    idle_w = [idle / (time.monotonic() - t0)]
    batch = batch_size(launch, finish, 0.05)
    readings: list[CounterReading] = []
    stop = threading.Event()
    wrap = zone.max_energy_range_uj / 1e6
    base = [0.0, read_j()]

    def poll() -> None:
        while not stop.is_set():
            v = read_j()
            if v < base[1]:  # one wrap of the range since the last poll
                base[0] += wrap
            base[1] = v
            readings.append(CounterReading(time.monotonic(), base[0] + v))
            time.sleep(POLL_S)

    th = background_thread(poll, "clproj-rapl-poll")
    th.start()
    time.sleep(0.05)
    launches = 0
    start = time.monotonic()
    while time.monotonic() - start < window_s:
        for _ in range(batch):
            launch()
        launches += batch
        finish()
    end = time.monotonic()
    time.sleep(0.05)
    stop.set()
    th.join()
    return Window(kernel, launches, start, end, readings, idle_w, counter="rapl-package")


def reader_for(dev: Any, window_s: float) -> tuple[dict[str, Any], Callable[..., Window]]:
    """(device facts, measure(name, launch, finish)) for ``dev``'s power reader, or
    ClprojError in one line where it has none."""
    if dev.type & 2:  # CPU: the package counter
        from clproj.devices import rapl

        zones, why = rapl.package_zones()
        if not zones:
            raise ClprojError(
                f"no power reader for {dev.name.strip()}: {why}",
                "run on a host whose powercap RAPL files are readable (root on bare metal)",
            )
        z = zones[0]
        facts = {"name": dev.name.strip(), "reader": f"rapl {z.path.name} ({z.name})"}
        return facts, lambda name, launch, finish: rapl_measure(z, name, launch, finish, window_s)
    if "NVIDIA" not in dev.vendor.upper():
        raise ClprojError(
            f"no power reader for {dev.name.strip()}: only NVML (NVIDIA) and RAPL (CPUs)",
            "profile power on an NVIDIA GPU or a CPU with readable RAPL",
        )
    from clproj.devices.energy_nvml import counter_kind, device_facts, measure, open_nvml

    nv, handle = open_nvml(0)
    facts = device_facts(nv, handle) | {"reader": counter_kind(nv, handle)}
    return facts, lambda name, launch, finish: measure(nv, handle, name, launch, finish, window_s)


def measure_power(dev: Any, output: str, quick: bool, window_s: float = WINDOW_S) -> dict[str, Any]:
    """Run the power microbenchmarks on ``dev`` and write every reading to ``output``."""
    from clproj.atomic import write_atomic
    from clproj.console import stderr
    from clproj.devices.energy import results
    from clproj.devices.microbench.power import run_suite

    facts, measure = reader_for(dev, window_s)
    facts["opencl_name"] = dev.name.strip()
    host = {
        "hostname": socket.gethostname(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }

    def save(kernels: list[dict[str, Any]]) -> dict[str, Any]:
        doc = results(facts, kernels, host) | {"suite": "power-microbenchmarks"}
        write_atomic(output, (json.dumps(doc, indent=1) + "\n").encode())
        return doc

    kernels = run_suite(
        dev, measure, quick, progress=lambda n: stderr.print(f"power microbenchmark {n}"), save=save
    )
    return save(kernels)


def fit_into_profile(results_path: str, profile: str, output: str) -> dict[str, Any]:
    """The profile ``profile`` with its ``power`` section fitted from ``results_path``,
    validated as any profile is (the file came off another machine) and saved."""
    from clproj.devices.energy import read_results
    from clproj.devices.power_fit import power_section
    from clproj.devices.profile import DeviceProfile, load_profile

    doc = read_results(results_path)
    base = load_profile(profile)
    data = json.loads(json.dumps(base.data))
    data["power"] = power_section(doc, os.path.basename(results_path))
    prof = DeviceProfile(data)
    prof.save(output)
    return data["power"]
