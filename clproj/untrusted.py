"""Untrusted input: files users copy between machines (records, blobs, profiles) and what
peers send, read and checked the same way by every validator.

Why a helper: a path taken from the command line (or a blob name from a record) may name
``/dev/zero`` (an endless read), a FIFO (an endless wait on ``open``) or a multi-GiB file.
Every reader of an untrusted file therefore opens it without blocking, insists on a
regular file and reads at most a stated number of bytes; each failure is one
:class:`ClprojError` naming the file, never a traceback, a hang or a MemoryError.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import stat

from clproj.errors import ClprojError

_CHUNK = 1 << 20


def _kind(mode: int) -> str:
    """A readable name for a file type that is not a regular file."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _open_regular(path: str, what: str, fix: str | None) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` and its status, refused unless a regular file.

    ``O_NONBLOCK`` makes opening a FIFO return at once (it is then refused here)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ClprojError(f"{what} {path}: no such file", fix) from None
    except OSError as exc:
        raise ClprojError(f"cannot read {what} {path}: {exc.strerror or exc}", fix) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ClprojError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file", fix)
    return fd, st


def read_regular_file(path: str, what: str, max_bytes: int, fix: str | None = None) -> bytes:
    """The content of ``path``, a regular file of at most ``max_bytes`` bytes.

    ``O_NONBLOCK`` makes opening a FIFO return at once (it is then refused as not a
    regular file); the size is checked before reading and the read is bounded anyway, in
    case the file grows meanwhile.
    """
    fd, st = _open_regular(path, what, fix)
    try:
        if st.st_size > max_bytes:
            raise ClprojError(
                f"{what} {path} has {st.st_size} bytes, more than the {max_bytes} accepted", fix
            )
        buf = bytearray()
        while len(buf) <= max_bytes:
            try:
                chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - len(buf)))
            except OSError as exc:
                raise ClprojError(
                    f"cannot read {what} {path}: {exc.strerror or exc}", fix
                ) from None
            if not chunk:
                break
            buf += chunk
        if len(buf) > max_bytes:
            raise ClprojError(f"{what} {path} grew beyond {max_bytes} bytes while read", fix)
        return bytes(buf)
    finally:
        os.close(fd)


def read_json_file(path: str, what: str, max_bytes: int, fix: str | None = None) -> object:
    """The JSON document in ``path``, read as :func:`read_regular_file` reads (a regular
    file of at most ``max_bytes``); text that is not UTF-8 (a byte-order mark is allowed),
    not JSON, or nested past the parser's recursion limit is one :class:`ClprojError`
    naming the file.

    Why one reader: every JSON file a user passes (profiles, kernel profiles, results) can
    be ``/dev/zero``, a FIFO, a gigabyte or ``[[[[...`` a hundred thousand deep; each such
    file must be the same one line, whichever command was given it.
    """
    raw = read_regular_file(path, what, max_bytes, fix)
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ClprojError(f"{what} {path} is not UTF-8 text ({exc.reason})", fix) from None
    except json.JSONDecodeError as exc:
        raise ClprojError(
            f"{what} {path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            fix,
        ) from None
    except RecursionError:
        raise ClprojError(f"{what} {path} nests JSON too deeply", fix) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ClprojError(
            f"{what} {path} is not usable JSON: {short(str(exc), 120)}", fix
        ) from None


def read_toml_file(path: str, what: str, max_bytes: int, fix: str | None = None) -> dict:
    """The TOML document in ``path``, read as :func:`read_regular_file` reads; text that
    is not UTF-8, not TOML, or nested past the parser's recursion limit is one
    :class:`ClprojError` naming the file. Why: as :func:`read_json_file`, for the TOML
    files users write (device sheets, the config file)."""
    import tomllib

    raw = read_regular_file(path, what, max_bytes, fix)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib does not say so itself
        raise ClprojError(f"{what} {path} is not UTF-8 text (byte {exc.start})", fix) from None
    except tomllib.TOMLDecodeError as exc:
        raise ClprojError(f"{what} {path} is not TOML: {exc}", fix) from None
    except RecursionError:
        raise ClprojError(f"{what} {path} nests tables too deeply", fix) from None


def map_regular_file(path: str, what: str, size: int, fix: str | None = None) -> mmap.mmap:
    """``path``, a regular file of exactly ``size`` bytes, mapped copy-on-write.

    Why a mapping: a reader that touches a few pages of a large file (the emulator runs a
    few work-items of a launch over 1 GB buffers) pays for those pages only. Writes go to
    private pages and never reach the file. Checked as :func:`read_regular_file` checks,
    except the content: nothing here reads it.
    """
    fd, st = _open_regular(path, what, fix)
    try:
        if st.st_size != size:
            raise ClprojError(f"{what} {path} has {st.st_size} bytes, expected {size}", fix)
        if size == 0:
            return mmap.mmap(-1, 1)
        return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def is_int(v: object) -> bool:
    """An integer that is not a bool (``True`` is an ``int`` to Python, not to a format)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_finite_number(v: object) -> bool:
    """An int or float that arithmetic can use: no bool, NaN, infinity or huge int."""
    if is_int(v):
        return abs(v) <= 2**64  # type: ignore[arg-type]
    return isinstance(v, float) and math.isfinite(v)


# ---- helpers every validator shares (record, kernel profile, device profile, protocol) ----


class BadField(Exception):
    """A field of an untrusted document that fails validation: ``field`` is its dotted
    name. Each validator turns it into its own one-line error (what the document is, and
    how to fix it)."""

    def __init__(self, field_name: str, what: str) -> None:
        super().__init__(what)
        self.field = field_name
        self.what = what


def short(v: object, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut at ``limit`` characters (an
    untrusted value may be megabytes long)."""
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_at(doc: object, path: str) -> object:
    """The value at dotted ``path`` in nested maps; :class:`BadField` naming the first
    step that is missing or not a map."""
    cur = doc
    walked: list[str] = []
    for part in path.split("."):
        if not isinstance(cur, dict):
            raise BadField(".".join(walked), f"expected an object, got {type(cur).__name__}")
        walked.append(part)
        if part not in cur:
            raise BadField(".".join(walked), "missing")
        cur = cur[part]
    return cur
