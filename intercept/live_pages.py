"""The emulator's side of a live view: a buffer of the app, read page by page where the
emulated work-items touch it (``native/live_pages/live_pages.c``, loaded with ctypes).

Why: a launch over a gigabyte buffer could be emulated only once the app had copied the
buffer into its snapshot file (0.27-0.32 s per GiB on the 2-core VM), while its sampled
work-items read kilobytes. During that copy the buffer holds still (the app's thread is
in the shim, the launch waits for it), so the pages the emulation touches are read from
the app itself, and from the finished copy afterwards (intercept.live_view publishes
where they are). An emulator whose region cannot be given a page ends (its exit status
says so) and the launch is emulated from its record; a region opened without an exit
status gives zeros instead and says so (:attr:`LiveRegion.failed`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from typing import Any

from clproj.errors import ClprojError
from clproj.intercept.live_view import new_state_file

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libclproj_live_pages.so")
# A page the emulator waits for longer than this is zeros and the region failed: the copy
# of a gigabyte takes under a second, and the wait only matters when the app died.
WAIT_S = 30.0

NO_SUCH_PROCESS = 0x7FFFFFFF  # above any pid_max: CLPROJ_FAULT=live-pages reads from it
# what an emulator that could not have a page of a live buffer exits with
EXIT_STATUS = 3

_lib: Any = None


def _library() -> Any:
    global _lib
    if _lib is None:
        if not os.path.exists(LIBRARY):
            raise ClprojError(f"{LIBRARY} is missing", "build clproj's native parts: `make setup`")
        lib = ctypes.CDLL(LIBRARY)
        lib.clproj_lp_open.restype = ctypes.c_void_p
        lib.clproj_lp_open.argtypes = [
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_double,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        lib.clproj_lp_address.restype = ctypes.c_void_p
        lib.clproj_lp_address.argtypes = [ctypes.c_void_p]
        lib.clproj_lp_failed.argtypes = [ctypes.c_void_p]
        lib.clproj_lp_reads.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.clproj_lp_close.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


class LiveRegion:
    """``size`` bytes at ``address`` in process ``pid``, its copy in ``copy``, the app's
    state in ``state``; :attr:`view` is a writable buffer over the region (the kernel's
    stores land in it, never in the app). ``exit_status`` (nonzero): a page that cannot
    be had ends this process with it, instead of zeros and :attr:`failed` (the emulator:
    Oclgrind may end the process itself once its statistics are out). ``faults``: obey
    ``CLPROJ_FAULT=live-pages`` (not in :func:`unavailable`'s probe)."""

    def __init__(
        self,
        pid: int,
        address: int,
        size: int,
        copy: str,
        state: str,
        wait_s: float = WAIT_S,
        exit_status: int = 0,
        faults: bool = True,
    ) -> None:
        from clproj import settings

        lib = _library()
        err = ctypes.create_string_buffer(256)
        fake = None
        if faults and settings.get("CLPROJ_FAULT") == "live-pages":
            # as if the app had ended mid-copy (a test of the fall-back to the record)
            fd, fake = tempfile.mkstemp(prefix="clproj-live-fault-")
            os.close(fd)
            new_state_file(fake)
            pid, state = NO_SUCH_PROCESS, fake
        try:
            handle = lib.clproj_lp_open(
                pid,
                address,
                size,
                os.fsencode(copy),
                os.fsencode(state),
                wait_s,
                exit_status,
                err,
                len(err),
            )
        finally:
            if fake is not None:
                os.unlink(fake)  # mapped by then, if it was opened at all
        if not handle:
            raise ClprojError(
                f"the app's buffer cannot be viewed live ({err.value.decode(errors='replace')})",
                "the launch is emulated from its record once written",
            )
        self._handle = handle
        self.size = size
        self.view = (ctypes.c_char * size).from_address(lib.clproj_lp_address(handle))

    @property
    def failed(self) -> bool:
        """Whether a page could not be had and was given zeros."""
        return bool(self._handle) and bool(_library().clproj_lp_failed(self._handle))

    def reads(self) -> tuple[int, int]:
        """(chunks read from the app, chunks read from the copy)."""
        lib = _library()
        return lib.clproj_lp_reads(self._handle, 0), lib.clproj_lp_reads(self._handle, 1)

    def close(self) -> None:
        """Unmap the region and stop its thread (the view must no longer be used)."""
        if self._handle:
            self.view = None
            _library().clproj_lp_close(self._handle)
            self._handle = None


YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def region_of(where: Any, size: int) -> LiveRegion:
    """The emulator's region over a live record's buffer ``where`` (an
    :class:`intercept.live_view.LiveBuffer`) of ``size`` bytes: a page that cannot be had
    ends the emulator with :data:`EXIT_STATUS`."""
    return LiveRegion(
        where.pid, where.address, size, where.copy, where.state, exit_status=EXIT_STATUS
    )


def unavailable(folder: str) -> str | None:
    """Why live views cannot work on this machine (None when they can): userfaultfd
    refused (a container's seccomp policy, ``vm.unprivileged_userfaultfd``), or Yama's
    ptrace scope 1 or more, under which the emulator, not a descendant of the app, may
    not read it (process_vm_readv). ``clproj run`` asks once, with ``folder`` for a
    scratch file, and turns live records off where they would only delay the record."""
    try:
        with open(YAMA_SCOPE) as fh:
            if fh.read().strip() not in ("", "0"):
                return f"{YAMA_SCOPE} is not 0: the emulator may not read the app"
    except OSError:
        pass  # no Yama: the usual same-user rules
    state = os.path.join(folder, "live-probe.state")
    data = (ctypes.c_char * 4096)(*b"clproj")
    try:
        new_state_file(state)
        region = LiveRegion(
            os.getpid(), ctypes.addressof(data), len(data), state, state, 1.0, faults=False
        )
        try:
            if bytes(region.view[:6]) != b"clproj":
                return "a live region read the wrong bytes"
        finally:
            region.close()
    except (ClprojError, OSError) as exc:
        return str(exc.cause if isinstance(exc, ClprojError) else exc)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(state)
    return None
