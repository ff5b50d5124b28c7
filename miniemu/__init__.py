"""Mini-emulation: run part of a kernel launch in Oclgrind and collect device-independent statistics.

``emulate(record, mode)`` is the API the projection and the broker use; ``clproj emulate``
is the command. The emulator always runs in a subprocess with a time budget (see
:mod:`miniemu.oclgrind`), so a slow or crashing emulation never takes its caller down.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from clproj.miniemu.backend import MODES, get_backend
from clproj.miniemu.profile import KernelProfile, build_profile
from clproj.paths import scratch_dir

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord

__all__ = ["MODES", "Budget", "KernelProfile", "emulate"]

from clproj.miniemu.bounded import Budget


def emulate(
    record: LaunchRecord | str,
    mode: str = "single",
    timeout_s: float = 60.0,
    *,
    backend: str = "oclgrind",
    threads: int | None = None,
    budget: Budget | str | float | None = None,
) -> KernelProfile:
    """Mini-emulate ``record`` (a LaunchRecord or a .clrec path) and return its kernel profile.

    ``mode``: ``single`` (one work-group), ``quick`` (first and last), ``full`` (all),
    ``bounded`` (within ``budget``: sampled work-items, loop extrapolation; see
    :mod:`miniemu.bounded`). ``budget`` (a :class:`Budget`, seconds, or
    ``"wall=3,instructions=2e6"``) applies to ``bounded``; ``timeout_s`` caps it too.
    Raises ``ClprojError`` on timeout, emulator failure or a non-emulatable record.
    """
    from clproj.errors import ClprojError
    from clproj.intercept.buffer_maps import check_mappable
    from clproj.intercept.record import load, save

    if mode not in MODES:
        raise ClprojError(f"unknown emulation mode {mode!r}", f"use one of {', '.join(MODES)}")
    if isinstance(record, str):
        record = load(record)
    if not record.emulatable or record.source is None:
        raise ClprojError(
            f"launch {record.id or record.kernel} cannot be emulated: "
            f"{record.not_emulatable_reason or 'no OpenCL C source'}",
            "only launches of programs built from source, without images/pipes/SVM, are emulated",
        )
    # a buffer the host cannot map fails here, before a worker starts (intercept.buffer_maps)
    check_mappable(record)
    engine = get_backend(backend)
    if mode == "bounded":
        from clproj.miniemu.bounded import emulate_bounded

        b = Budget.parse(budget)
        b.wall_s = min(b.wall_s, timeout_s)
        return emulate_bounded(record, b, engine)
    with scratch_dir("clproj-rec-") as tmp:
        path = record.path if record.path and os.path.exists(record.path) else None
        if path is None:
            # An in-memory record: the worker subprocess needs it on disk.
            # Save a copy, so that the caller's record keeps its own path/store.
            import copy

            path = save(copy.copy(record), tmp, link_blobs=True)
        kwargs = {"threads": threads} if threads is not None else {}
        raw = engine.run(path, mode, timeout_s, **kwargs)
    return build_profile(raw, record.kernel, record.signature, record.local_size is None)
