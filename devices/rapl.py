"""CPU package energy through Linux powercap (Intel RAPL, AMD's RAPL-compatible driver).

Why a reader of its own: a CPU's energy is the only one the kernel exposes as plain
files (``/sys/class/powercap/intel-rapl:N/energy_uj``, microjoules, wrapping at
``max_energy_range_uj``). Where the tree is absent or unreadable (virtual machines,
``energy_uj`` readable by root only since Linux 5.10) the reading is ``None`` with one
line saying why: a CPU's energy is never estimated here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class Zone:
    """One package-level RAPL zone: its folder, name and wrap-around range (uJ)."""

    path: Path
    name: str
    max_energy_range_uj: int


def _read_int(path: Path) -> int:
    return int(path.read_text(encoding="ascii").strip())


def package_zones(root: Path = POWERCAP) -> tuple[list[Zone], str | None]:
    """The package zones (``intel-rapl:N``, not their ``:N:M`` sub-zones) and, when there
    are none that can be read, the one-line reason."""
    if not root.is_dir():
        return [], f"no {root} (no powercap driver: a VM or a kernel without RAPL)"
    zones: list[Zone] = []
    unreadable: list[str] = []
    for d in sorted(root.glob("intel-rapl:*")):
        if d.name.count(":") != 1:
            continue
        try:
            name = (d / "name").read_text(encoding="ascii").strip()
            rng = _read_int(d / "max_energy_range_uj")
            _read_int(d / "energy_uj")
        except (OSError, ValueError) as exc:
            unreadable.append(f"{d.name}: {exc.strerror if isinstance(exc, OSError) else exc}")
            continue
        zones.append(Zone(d, name, rng))
    if zones:
        return zones, None
    if unreadable:
        return [], "RAPL zones unreadable (" + "; ".join(unreadable) + "): run as root"
    return [], f"no intel-rapl package zone under {root}"


def read_uj(zone: Zone) -> int:
    """The zone's counter now (uJ)."""
    return _read_int(zone.path / "energy_uj")


def delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two readings of a counter that wraps to 0 past ``max_range_uj``
    (at most one wrap: a package at 500 W wraps a 2^32 uJ range in about 8.6 s, a 262 kJ
    range in minutes, so readings must be taken more often than that)."""
    if after >= before:
        return after - before
    return max_range_uj - before + after + 1


@dataclass
class PackageEnergy:
    """Energy of every package zone over one interval, or ``None`` with ``reason``."""

    joules: dict[str, float] | None
    seconds: float
    reason: str | None = None


class RaplWindow:
    """Reads every package zone at ``start()`` and ``stop()``; None where there is no RAPL."""

    def __init__(self, root: Path = POWERCAP) -> None:
        self.zones, self.reason = package_zones(root)
        self._t0 = 0.0
        self._start: dict[str, int] = {}

    def start(self) -> None:
        self._t0 = _now()
        self._start = {str(z.path): read_uj(z) for z in self.zones}

    def stop(self) -> PackageEnergy:
        secs = _now() - self._t0
        if not self.zones:
            return PackageEnergy(None, secs, self.reason)
        out = {
            f"{z.path.name} ({z.name})": delta_uj(
                self._start[str(z.path)], read_uj(z), z.max_energy_range_uj
            )
            / 1e6
            for z in self.zones
        }
        return PackageEnergy(out, secs)


def _now() -> float:
    return time.monotonic()
