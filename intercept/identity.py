"""The one definition of each identity clproj keys launches by (docs/formats.md §1, "Identities").

Why this module exists: "the same program", "the same launch", "the same family" were
each defined in several places (launch records, route mode, the reuse cache, the cluster
client, the node's slots, the evaluation) and the copies drifted apart (the C shim once
hashed a program's source without its build options, so two ``-D`` variants of one
source shared their first-launch record). Each concept is defined here once; the C shim
(``native/shim/identity.c``) implements the same byte streams, and
``tests/intercept/test_identity.py`` compiles it and checks that it agrees.

The concepts, from the finest to the coarsest:

* **program hash** (:func:`program_hash`): what the program *is*: source, build options
  and, for a program made from IL or a binary, those bytes.
* **launch signature** (:func:`launch_signature`): "the first launch of each distinct
  kernel": program hash, kernel, NDRange shape, values of the by-value arguments.
  Records, projections and route mode's placement decisions are keyed by it.
* **placement family** (:func:`placement_family`): the signature without the scalars'
  values; a new signature starts from its family's placement decision (route mode).
* **reuse family** (:func:`reuse_family`): launches whose per-work-item profile may be
  shared (miniemu.reuse): program hash, kernel, work_dim, local size, *not* the global
  size. The word "family" means one of these two, never anything else.
* **placement key** (:func:`placement_key`): what the cluster client asks the broker to
  place when the caller gives no key: program hash prefix, kernel, global size.
* **launch shape** (:func:`launch_shape`): what a node's fast-launch slot fixes of a
  launch (wire-format arguments, scalar values excluded); **shape key**
  (:func:`shape_key`): kernel + three-entry NDRange, how the evaluation groups launches.

Pure functions of plain values (no OpenCL, no numpy): every process may import this.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1

ShapeKey = tuple[str, tuple[int, int, int], "tuple[int, int, int] | None"]


class LaunchFields(Protocol):
    """What the identities read of a launch record (intercept.record.LaunchRecord)."""

    kernel: str
    work_dim: int
    local_size: list[int] | None

    @property
    def program_hash(self) -> str: ...


# ---------------------------------------------------------------- program hash


def program_stream(source: str | None, options: str | None, binary: bytes | None = None) -> bytes:
    """The bytes a program is identified by: ``source NUL options``, then ``NUL binary``
    for a program created from IL or a binary (its source is then empty).

    Options are part of it: two builds of one source with different ``-D`` options are
    different programs. The NUL separators keep ``"ab"+"c"`` and ``"a"+"bc"`` apart.
    """
    out = (source or "").encode() + b"\0" + (options or "").encode()
    return out if binary is None else out + b"\0" + bytes(binary)


@functools.lru_cache(maxsize=64)
def program_hash(source: str | None, options: str | None, binary: bytes | None = None) -> str:
    """sha256 (hex) of :func:`program_stream`: the ``program.hash`` of a launch record.

    Memoized: project and route mode ask it at every launch."""
    return hashlib.sha256(program_stream(source, options, binary)).hexdigest()


# ---------------------------------------------------------------- launch signature


def ndrange_text(
    work_dim: int, global_size: Sequence[int], local_size: Sequence[int] | None
) -> str:
    """The NDRange part of a signature, as text: ``(2, [64, 64], [8, 8])`` or
    ``(1, [64], None)`` (a NULL local size). Python's ``repr`` of the tuple, which the
    first records used; the shim prints the same text."""
    glob = [int(g) for g in global_size]
    local = None if local_size is None else [int(x) for x in local_size]
    return repr((int(work_dim), glob, local))


def signature_stream(
    program: bytes,
    kernel: str,
    work_dim: int,
    global_size: Sequence[int],
    local_size: Sequence[int] | None,
    scalars: Sequence[bytes],
) -> bytes:
    """The bytes a launch is identified by: ``program NUL kernel NUL ndrange`` then each
    by-value argument (in argument order) as its length (4 bytes, little endian) and its
    bytes. Buffer contents are not part of it: the first launch of a kernel with given
    scalars stands for the others (a signature must be cheap to take at every launch)."""
    out = bytearray(program)
    out += b"\0" + kernel.encode() + b"\0"
    out += ndrange_text(work_dim, global_size, local_size).encode()
    for s in scalars:
        out += len(s).to_bytes(4, "little") + s
    return bytes(out)


def launch_signature(
    prog_hash: str,
    kernel: str,
    work_dim: int,
    global_size: Sequence[int],
    local_size: Sequence[int] | None,
    scalars: Sequence[bytes],
) -> str:
    """sha256 (hex) of :func:`signature_stream` with the program hash (hex) as the
    program: the ``signature`` of a launch record, the key of "the first launch of each
    distinct kernel" and of route mode's placement decisions."""
    stream = signature_stream(
        prog_hash.encode(), kernel, work_dim, global_size, local_size, scalars
    )
    return hashlib.sha256(stream).hexdigest()


# ---------------------------------------------------------------- the shim's keys


def fnv1a64(data: bytes, h: int = FNV_OFFSET) -> int:
    """64-bit FNV-1a of ``data`` continuing from ``h`` (the shim's hash: no allocation,
    a few ns per launch, on the app's thread under its lock)."""
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & _MASK64
    return h


def shim_program_key(source: str | None, options: str | None, binary: bytes | None = None) -> int:
    """The C shim's program key (``clproj_program_key``): FNV-1a-64 of :func:`program_stream`."""
    return fnv1a64(program_stream(source, options, binary))


def shim_launch_key(
    program_key: int,
    kernel: str,
    work_dim: int,
    global_size: Sequence[int],
    local_size: Sequence[int] | None,
    scalars: Sequence[bytes],
) -> int:
    """The C shim's signature key (``clproj_launch_key_*``), with which it picks the launches
    to record: FNV-1a-64 of :func:`signature_stream`, chained from the program key (so of
    the program's own stream rather than of its hex hash), low bit set (never 0)."""
    rest = signature_stream(b"", kernel, work_dim, global_size, local_size, scalars)
    return fnv1a64(rest, program_key) | 1


# ---------------------------------------------------------------- families and keys


def placement_family(
    prog_hash: str,
    kernel: str,
    work_dim: int,
    global_size: Sequence[int],
    local_size: Sequence[int] | None,
    scalar_count: int,
) -> str:
    """A launch's signature with every scalar value left out (each counts as empty): the
    launches of one kernel and NDRange whatever their scalars (a factorisation's step
    index). Route mode names it with each launch, so that a signature never seen before
    starts from its family's placement decision instead of waiting for the broker."""
    empty = [b""] * scalar_count
    return launch_signature(prog_hash, kernel, work_dim, global_size, local_size, empty)


def reuse_family(record: LaunchFields) -> tuple[str, str, int, tuple[int, ...] | None]:
    """Launches that may share per-work-item profiles (miniemu.reuse): program hash,
    kernel, work_dim and local size, not the global size nor the scalars (the reuse
    cache scales profiles across those). A NULL local size is one family."""
    local = tuple(record.local_size) if record.local_size else None
    return (record.program_hash, record.kernel, record.work_dim, local)


def placement_key(prog_hash: str, kernel: str, global_size: Sequence[int]) -> str:
    """The cluster client's default placement key (docs/cluster.md): the broker decides
    per program (its hash's first 16 hex digits), kernel and global size, e.g.
    ``3fa9...:matmul:1024x1024``. Route mode passes the launch signature instead."""
    return f"{prog_hash[:16]}:{kernel}:{'x'.join(str(int(g)) for g in global_size)}"


def launch_shape(
    prog: int,
    kernel: str,
    args: Sequence[Sequence[Any]],
    gsize: Sequence[int],
    lsize: Sequence[int] | None,
    goff: Sequence[int] | None,
) -> tuple[Any, ...]:
    """What a node's fast-launch slot fixes of a launch (wire-format arguments): program
    handle, kernel, buffer / local / null arguments, the sizes of the scalars (their
    values come with each fast frame), NDRange. The client asks for a slot per shape and
    the node grants one per shape: both use this, so they agree on "the same launch"."""
    return (
        prog,
        kernel,
        tuple(("s", len(a[1])) if a[0] == "s" else tuple(a) for a in args),
        tuple(gsize),
        tuple(lsize or ()),
        tuple(goff or ()),
    )


def pad_ndrange(values: Sequence[int] | None) -> tuple[int, int, int] | None:
    """Three-entry NDRange padded with 1s; None for a NULL or all-zero local size, so
    ``[2048, 2048]`` and ``2048,2048,1`` (a truth file's way) compare equal."""
    if values is None:
        return None
    dims = [int(v) for v in values]
    if not dims or all(v == 0 for v in dims):
        return None
    if len(dims) > 3:
        raise ValueError(f"an NDRange has at most 3 dimensions, got {dims}")
    return (*dims, *([1] * (3 - len(dims))))  # type: ignore[return-value]


def shape_key(
    kernel: str, global_size: Sequence[int], local_size: Sequence[int] | None
) -> ShapeKey:
    """How the evaluation groups launches and truth rows: kernel and padded NDRange
    (:func:`pad_ndrange`), whatever the program or scalars."""
    glob = pad_ndrange(global_size)
    if glob is None:
        raise ValueError(f"{kernel}: empty global size")
    return (kernel, glob, pad_ndrange(local_size))


def run_tag(run_dir: str) -> str:
    """``r`` and six hex digits naming one ``clproj run`` (by its run folder, unique while
    it runs); "" outside one. A record id carries it (``<kernel>-<tag>-<seq>``), so that a
    run reports the launches it recorded, not the other records of a ``--record`` folder
    it shares with earlier or concurrent runs."""
    return "r" + hashlib.sha256(run_dir.encode()).hexdigest()[:6] if run_dir else ""


def of_run(record_id: str, tag: str) -> bool:
    """Whether a record id was made in the run ``tag`` names (every id, for no tag)."""
    return not tag or record_id.split("-")[1:2] == [tag]
