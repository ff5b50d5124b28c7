"""NVIDIA energy windows through NVML: the thin layer that collects raw readings.

Why apart from :mod:`devices.nvml`: that module answers "what is this GPU" and returns
``None`` without a driver; a measurement asked for on a machine without one must fail
loudly, in one line, instead of writing empty results. All arithmetic on the readings is
in :func:`devices.energy.window_figures`; here the counter is only polled.

Nothing here changes clocks or power limits; it reads them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from clproj.background_thread import background_thread
from clproj.devices.energy import MIN_WINDOW_S, CounterReading, Window
from clproj.errors import ClprojError

NO_NVML_FIX = "run on a machine with an NVIDIA driver (Volta or later) and pynvml installed"
# Poll the energy counter every 2 ms (far below its 20-100 ms step), clocks and
# temperature every 100 ms; idle power from 5 samples 0.2 s apart after 1.5 s quiet
# (nvmlDeviceGetPowerUsage is a 1 s average on H100-class parts).
POLL_S = 0.002
SAMPLE_S = 0.1
IDLE_QUIET_S = 1.5
IDLE_SAMPLES = 5


def open_nvml(index: int = 0) -> tuple[Any, Any]:
    """(pynvml, handle of GPU ``index``), or ClprojError saying in one line why not."""
    try:
        import pynvml
    except ImportError:
        raise ClprojError("NVML energy: pynvml is not installed", NO_NVML_FIX) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise ClprojError(
            f"NVML energy: no NVIDIA driver here ({type(exc).__name__}: {exc})", NO_NVML_FIX
        ) from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if not 0 <= index < count:
            raise ClprojError(
                f"NVML energy: no GPU {index} (NVML sees {count})", "pass --gpu 0..count-1"
            )
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        raise ClprojError(
            f"NVML energy: GPU {index} has no total-energy counter ({exc})",
            "the counter exists on Volta and later data-centre GPUs",
        ) from None
    return pynvml, handle


def device_facts(nv: Any, handle: Any) -> dict[str, Any]:
    """Name, driver, power limit and clocks of the GPU, as read (not set)."""

    def get(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            v = fn(handle, *args)
        except nv.NVMLError:
            return None
        return v.decode() if isinstance(v, bytes) else v

    try:
        driver = nv.nvmlSystemGetDriverVersion()
    except nv.NVMLError:
        driver = None
    limit = get(nv.nvmlDeviceGetPowerManagementLimit)
    return {
        "name": get(nv.nvmlDeviceGetName),
        "driver": driver.decode() if isinstance(driver, bytes) else driver,
        "power_limit_w": limit / 1000.0 if limit else None,
        "max_sm_clock_mhz": get(nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM),
        "sm_clock_mhz_idle": get(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": get(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
    }


def idle_power(nv: Any, handle: Any) -> list[float]:
    """Power samples (W) with the GPU quiet: wait out the 1 s averaging, then sample."""
    time.sleep(IDLE_QUIET_S)
    out = []
    for _ in range(IDLE_SAMPLES):
        out.append(nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        time.sleep(0.2)
    return out


def batch_size(launch: Callable[[], Any], finish: Callable[[], None], target_s: float) -> int:
    """Launches per batch so one batch runs about ``target_s``: doubled from 1, each try
    drained (this is also the warm-up that brings the clocks up before the window)."""
    n = 1
    while True:
        t0 = time.monotonic()
        for _ in range(n):
            launch()
        finish()
        if time.monotonic() - t0 >= target_s or n >= 1 << 20:
            return n
        n *= 2


def measure(
    nv: Any,
    handle: Any,
    kernel: str,
    launch: Callable[[], Any],
    finish: Callable[[], None],
    window_s: float = MIN_WINDOW_S + 0.5,
) -> Window:
    """Launch ``kernel`` for at least ``window_s`` with the queue never empty, polling
    the energy counter on a thread throughout.

    ``launch`` enqueues one launch and returns its event (anything with ``wait()``),
    ``finish`` drains the queue. Batches of about 50 ms are enqueued one ahead of the
    one waited for, so the device does not idle between batches (an idle gap inside the
    window would lower the average power it reports)."""
    readings: list[CounterReading] = []
    clocks: list[float] = []
    temps: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        next_sample = 0.0
        while not stop.is_set():
            t = time.monotonic()
            readings.append(
                CounterReading(t, nv.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0)
            )
            if t >= next_sample:
                clocks.append(float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)))
                temps.append(float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)))
                next_sample = t + SAMPLE_S
            time.sleep(POLL_S)

    idle = idle_power(nv, handle)
    batch = batch_size(launch, finish, 0.05)
    poller = background_thread(poll, "clproj-energy-poll")
    poller.start()
    time.sleep(0.15)  # a counter step before the window starts
    launches = 0
    waiting: Any = None
    start = time.monotonic()
    while True:
        last = None
        for _ in range(batch):
            last = launch()
        launches += batch
        if waiting is not None:
            waiting.wait()
        waiting = last
        if time.monotonic() - start >= window_s:
            break
    finish()
    end = time.monotonic()
    time.sleep(0.15)
    stop.set()
    poller.join()
    return Window(kernel, launches, start, end, readings, idle, clocks, temps)
