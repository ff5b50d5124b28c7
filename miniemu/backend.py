"""The emulator back-end interface: what any emulator must give miniemu.

A back-end runs one launch record (in a subprocess, under a time budget) and returns the
raw statistics of the work-groups it emulated, in the plugin-stats structure documented in
``docs/miniemu.md``. Everything else (scaling to the NDRange, flags, the kernel-profile
format) is back-end independent and lives in :mod:`miniemu.profile`. Adding Multi2Sim or
GPGPU-Sim means writing one class with ``name``, ``unavailable()`` and ``run()`` and adding
it to :data:`BACKENDS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# Modes that emulate whole work-groups (the commands that pick one offer these), and all.
GROUP_MODES = ("single", "quick", "full")
MODES = (*GROUP_MODES, "bounded")


@dataclass
class GroupStats:
    """Statistics of one emulated work-group."""

    group_id: list[int]
    group_index: int
    work_items: int
    stats: dict[str, Any]  # the statistics structure of docs/formats.md section 2
    loop_iterations: dict[str, int] = field(default_factory=dict)  # loop id -> header executions


@dataclass
class RawEmulation:
    """What a back-end returns: per-group statistics plus the launch as the emulator ran it."""

    emulator: str  # e.g. "oclgrind 21.10"
    mode: str
    work_dim: int
    global_size: list[int]
    local_size: list[int]  # resolved (the emulator's choice when the app passed NULL)
    num_groups: list[int]  # per dimension
    groups: list[GroupStats]  # emulated groups, ordered by group index
    local_bytes_per_group: int
    private_bytes_per_work_item: int
    wall_s: float
    private_detail: dict[str, Any] = field(default_factory=dict)
    log: str = ""  # emulator diagnostics (stderr), kept for flags
    # Bounded emulation (docs/miniemu.md): why the plugin stopped early ("" = it did not,
    # "sampled-work-items", "instruction-budget", "time-budget"), the kernel's loops with
    # their ScalarEvolution trip counts, and whether it calls a barrier.
    stop_reason: str = ""
    loops: list[dict[str, Any]] = field(default_factory=list)
    has_barrier: bool = True
    # Instructions the plugin counted in this run (what its instruction budget bounds).
    instructions_executed: int = 0


class EmulatorBackend(Protocol):
    """An emulator that can run a launch record and report per-group statistics."""

    name: str

    def unavailable(self) -> str | None:
        """``None`` when usable here, else why not (shown to the user)."""

    def run(self, record_path: str, mode: str, timeout_s: float) -> RawEmulation:
        """Emulate the record; raise ``ClprojError`` on timeout or emulator failure."""


def get_backend(name: str = "oclgrind") -> EmulatorBackend:
    from clproj.miniemu.oclgrind import OclgrindBackend

    backends: dict[str, type] = {"oclgrind": OclgrindBackend}
    if name not in backends:
        from clproj.errors import ClprojError

        raise ClprojError(f"unknown emulator back-end {name!r}", f"use one of {sorted(backends)}")
    return backends[name]()
