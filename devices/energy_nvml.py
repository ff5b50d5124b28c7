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
from clproj.devices.energy import CounterReading, Window
from clproj.errors import ClprojError
from clproj.settings import setting

NO_NVML_FIX = "run on a machine with an NVIDIA driver (Volta or later) and pynvml installed"
# Poll the energy counter every 2 ms (far below its 20-100 ms step), clocks and
# temperature every 100 ms; idle power from 5 samples over 1 s after 1.5 s quiet
# (nvmlDeviceGetPowerUsage is a 1 s average on H100-class parts). The window, quiet and
# idle lengths are the settings table's defaults, which the energy-window preload library
# (C) reads too: one definition for apps measured either way.
POLL_S = 0.002
SAMPLE_S = 0.1
WINDOW_S = float(setting("CLPROJ_ENERGY_WINDOW_S").default)
IDLE_QUIET_S = float(setting("CLPROJ_ENERGY_QUIET_S").default)
IDLE_S = float(setting("CLPROJ_ENERGY_IDLE_S").default)
IDLE_SAMPLES = 5


COUNTER = "nvml-total-energy"
# Where the total-energy counter is not offered (some virtualised drivers), the driver's
# power reading (a 1 s average) is integrated instead: a reading, marked as such in every
# window (``Window.counter``), never an estimate.
POWER_INTEGRAL = "nvml-power-usage-integrated"


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
        counter_kind(pynvml, handle)
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        raise ClprojError(
            f"NVML energy: GPU {index} has neither a total-energy counter nor a power "
            f"reading ({exc})",
            "the counter exists on Volta and later data-centre GPUs",
        ) from None
    return pynvml, handle


def counter_kind(nv: Any, handle: Any) -> str:
    """:data:`COUNTER` where the total-energy counter answers, else :data:`POWER_INTEGRAL`
    where the power reading does (NVMLError where neither does)."""
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(handle)
        return COUNTER
    except nv.NVMLError:
        nv.nvmlDeviceGetPowerUsage(handle)
        return POWER_INTEGRAL


class Poller:
    """Polls the energy reading every :data:`POLL_S` on a thread, and power, SM clock and
    temperature every :data:`SAMPLE_S`, each with its host monotonic time.

    Why one class: the microbenchmarks (a window per call) and whole apps under the
    energy-window preload (windows cut from one long poll afterwards) read the same
    things the same way."""

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.handle = nv, handle
        self.counter = counter_kind(nv, handle)
        self.readings: list[CounterReading] = []
        self.power: list[tuple[float, float]] = []
        self.clocks: list[tuple[float, float]] = []
        self.temps: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = background_thread(self._poll, "clproj-energy-poll")

    def _energy_j(self, t: float) -> float:
        if self.counter == COUNTER:
            return float(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1000.0
        watts = self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        if not self.readings:
            return 0.0
        last = self.readings[-1]
        return last.energy_j + watts * (t - last.t_s)

    def _poll(self) -> None:
        nv, h = self.nv, self.handle
        next_sample = 0.0
        while not self._stop.is_set():
            t = time.monotonic()
            self.readings.append(CounterReading(t, self._energy_j(t)))
            if t >= next_sample:
                self.power.append((t, nv.nvmlDeviceGetPowerUsage(h) / 1000.0))
                self.clocks.append((t, float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))))
                self.temps.append(
                    (t, float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
                )
                next_sample = t + SAMPLE_S
            time.sleep(POLL_S)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def window(
        self, kernel: str, launches: int, start: float, end: float, idle: list[float]
    ) -> Window:
        """The :class:`Window` of launches between ``start`` and ``end``: the readings
        from 0.2 s before to 0.2 s after, clocks and temperatures inside."""

        def inside(samples: list[tuple[float, float]]) -> list[float]:
            return [v for t, v in samples if start <= t <= end]

        readings = [r for r in self.readings if start - 0.2 <= r.t_s <= end + 0.2]
        return Window(
            kernel,
            launches,
            start,
            end,
            readings,
            idle,
            inside(self.clocks),
            inside(self.temps),
            counter=self.counter,
        )

    def power_between(self, start: float, end: float) -> list[float]:
        """Power samples (W) taken between ``start`` and ``end``."""
        return [w for t, w in self.power if start <= t <= end]


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


def idle_power(
    nv: Any, handle: Any, quiet_s: float = IDLE_QUIET_S, samples: int = IDLE_SAMPLES
) -> list[float]:
    """Power samples (W) with the GPU quiet: wait out the 1 s averaging, then sample."""
    time.sleep(quiet_s)
    out = []
    for _ in range(samples):
        out.append(nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        time.sleep(IDLE_S / IDLE_SAMPLES)
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
    window_s: float = WINDOW_S,
    quiet_s: float = IDLE_QUIET_S,
) -> Window:
    """Launch ``kernel`` for at least ``window_s`` with the queue never empty, polling
    the energy counter on a thread throughout; idle power is sampled first, after
    ``quiet_s`` with the device quiet.

    ``launch`` enqueues one launch and returns its event (anything with ``wait()``),
    ``finish`` drains the queue. Batches of about 50 ms are enqueued one ahead of the
    one waited for, so the device does not idle between batches (an idle gap inside the
    window would lower the average power it reports)."""
    idle = idle_power(nv, handle, quiet_s)
    batch = batch_size(launch, finish, 0.05)
    poller = Poller(nv, handle).start()
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
    poller.stop()
    return poller.window(kernel, launches, start, end, idle)
