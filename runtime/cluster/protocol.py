"""Wire protocol of the clproj cluster (broker, nodes, clients), version 1.

Why this shape: every message is a multipart ZeroMQ message whose first frame is a small
msgpack *header* (a map with ``v`` = protocol version and ``t`` = message type) and whose
remaining frames are raw bulk data (buffer contents). Bulk data therefore never passes
through msgpack: it is sent and received as zero-copy frames and handed to OpenCL as a
``memoryview``. Headers are decoded with hard limits (``msgpack.unpackb`` max_*_len) and
then checked against a per-type schema, so a malformed, oversized or hostile message is
rejected with a :class:`ProtocolError` before any of its fields is used. No pickle is
used anywhere. The schema table below is the documentation of the messages (see also
docs/cluster.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import msgpack

from clproj.untrusted import short

PROTOCOL_VERSION = 1

MAX_HEADER_BYTES = 4 * 2**20  # program sources travel in a data frame, not in the header
# the largest program source a node accepts (a data frame of prog_build / prog_compile);
# the client refuses a larger one itself, as clCreateProgramWithSource's
# CL_OUT_OF_HOST_MEMORY, so the app never waits on a command nobody will serve
MAX_PROGRAM_BYTES = 256 * 2**20
MAX_DATA_FRAMES = 8
MAX_DATA_BYTES = 4 * 2**30  # one bulk frame (one buffer read/write)
MAX_MESSAGE_BYTES = MAX_DATA_BYTES + MAX_HEADER_BYTES  # zmq MAXMSGSIZE on every socket
MAX_ARGS = 256
MAX_LIST = 4096
MAX_STR = 2**20
MAX_ID = 256  # device ids, node ids, kernel keys


class ProtocolError(ValueError):
    """A message that must be rejected (and logged), never acted upon."""


# Field types: a python type (or tuple), optional when the name ends with "?".
_INT = int
_NUM = (int, float)
_STR = str
_BYTES = bytes
_LIST = list
_MAP = dict
_ANY = object

# type -> {field: type}. Fields not listed are rejected, so a typo cannot pass silently.
SCHEMAS: dict[str, dict[str, Any]] = {
    # node -> broker
    # direct: the node's own command socket (clients send commands there, one round
    # trip instead of two); direct_key: its CURVE server key (Z85), "" without CURVE
    "register": {
        "node": _STR,
        "host": _STR,
        "devices": _LIST,
        "pid": _INT,
        "direct?": _STR,
        "direct_key?": _STR,
        "local?": _STR,  # Unix socket path for clients on the node's host
    },
    # measured: kernel key -> {device index: seconds} (launches that came directly);
    # lt: device index -> mean launch seconds (the broker's queue estimate)
    "heartbeat": {
        "node": _STR,
        "load": _MAP,
        "inflight": _INT,
        "measured?": _MAP,
        "lt?": _MAP,
    },
    # the answer to the broker's probe, from the loop that serves commands
    "probe_ok": {"id": _INT, "node": _STR},
    "reply": {"id": _INT, "ok": bool, "err?": _STR, "res?": _MAP},
    # node -> client (direct socket): these commands succeeded; ts = kernel seconds or nil
    "done": {"ids": _LIST, "ts": _LIST},
    # broker -> node
    "reregister": {},
    # a round trip through the node's serving loop: devices are offered to clients only
    # after the first answer, and a node that stops answering is dropped (broker.py)
    "probe": {"id": _INT},
    # client -> broker
    "hello": {"client": _STR},
    "place": {
        "id": _INT,
        "key": _STR,
        "move": _MAP,  # device id -> bytes to move there
        "remaining": _NUM,
        "current?": _STR,
        # what to minimise (time, energy, edp) and its constraints (placement.Objective)
        "objective?": _STR,
        "deadline_s?": _NUM,
        "max_slowdown?": _NUM,
    },
    # energies: device id -> projected joules per launch, or nil (unknown)
    "projection": {"key": _STR, "times": _MAP, "source?": _STR, "energies?": _MAP},
    "status": {"id": _INT},
    # after: same-host link only, the client's last fast frame this command must follow
    "cmd": {"id": _INT, "dev": _STR, "op": _STR, "a": _MAP, "after?": _INT},
    "bye": {},
    # broker -> client
    "welcome": {"devices": _LIST, "epoch": _INT},
    "placed": {"id": _INT, "dev": _STR, "reason": _STR, "epoch": _INT, "times": _MAP},
    "status_reply": {"id": _INT, "status": _MAP},
    "node_lost": {"node": _STR, "devices": _LIST, "epoch": _INT},
    "error": {"id": _INT, "err": _STR},
}

# A node's direct command endpoint, and a CURVE public key in Z85 (40 characters).
DIRECT_ENDPOINT = re.compile(r"(ipc|tcp)://[!-~]{1,240}")
LOCAL_PATH = re.compile(r"/[!-~]{1,200}")
Z85_KEY = re.compile(r"[0-9a-zA-Z.:+=^!/*?&<>()\[\]{}@%$#-]{40}")

# A kernel name is an OpenCL C identifier: it reaches clCreateKernel as a NUL-terminated
# string, so "k\0x" would run kernel k under another name.
KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Same-host data path: files the client or node created under /dev/shm (no other path).
SHM_PATH = re.compile(r"/dev/shm/clproj-[A-Za-z0-9_-]{1,64}")

# Command ops (client -> node, through the broker) and their argument schemas.
OPS: dict[str, dict[str, Any]] = {
    # "shm": same-host data path: the bytes are in this /dev/shm file, not in a frame
    "buf_create": {"h": _INT, "size": _INT, "flags": _INT, "init?": bool, "shm?": _STR},
    "buf_write": {"h": _INT, "off": _INT, "n": _INT, "shm?": _STR},  # data in frame 1
    # data returned in frame 1, or written into the client's /dev/shm file "shm"
    "buf_read": {"h": _INT, "off": _INT, "n": _INT, "shm?": _STR},
    "buf_copy": {"src": _INT, "dst": _INT, "soff": _INT, "doff": _INT, "n": _INT},
    "buf_fill": {"h": _INT, "pattern": _BYTES, "off": _INT, "n": _INT},
    # reply res: the real program's introspection (runtime.cluster.introspect), also on failure;
    # the source (UTF-8) in data frame 1 (or, up to MAX_STR, in "src" without a frame)
    "prog_build": {"h": _INT, "src?": _STR, "opts": _STR},
    # compiled, not linked (clCompileProgram); hdrs: [[include name, source], ...]; hf: the
    # data frame is msgpack [source, hdrs] instead (headers of any size)
    "prog_compile": {"h": _INT, "src?": _STR, "opts": _STR, "hdrs?": _LIST, "hf?": bool},
    # parts: handles of this client's compiled programs on that device (clLinkProgram)
    "prog_link": {"h": _INT, "parts": _LIST, "opts": _STR},
    "launch": {
        "prog": _INT,
        "kernel": _STR,
        "args": _LIST,
        "gsize": _LIST,
        "lsize?": _LIST,
        "goff?": _LIST,
        "key?": _STR,  # placement key, lets the broker learn measured times
        "slot?": bool,  # asks for a fast-launch slot for this exact launch (runtime.cluster.node.nodelink)
    },
    "finish": {},
    "release": {"h": _INT},
    "release_all": {},
}

# bytes of one by-value kernel argument (double16 = 128; structs may be larger, up to the
# device's CL_DEVICE_MAX_PARAMETER_SIZE); the fast-launch frame takes at most 256
_SCALAR_LIMIT = 4096


_SOURCE_OPS = ("prog_build", "prog_compile")

_SPECS: dict[int, tuple[frozenset[str], dict[str, Any]]] = {}


def _spec(schema: dict[str, Any]) -> tuple[frozenset[str], dict[str, Any]]:
    """(required fields, field -> type) of a schema, computed once: validation runs on
    every message, so the per-message cost matters (a launch is validated on the node)."""
    sp = _SPECS.get(id(schema))
    if sp is None:
        sp = _SPECS[id(schema)] = (
            frozenset(k for k in schema if not k.endswith("?")),
            {k.rstrip("?"): t for k, t in schema.items()},
        )
    return sp


def _check_fields(what: str, obj: dict[str, Any], schema: dict[str, Any]) -> None:  # noqa: C901
    required, known = _spec(schema)
    for k, v in obj.items():
        t = known.get(k) if type(k) is str else None
        if t is None:
            raise ProtocolError(f"{what}: unknown field {k!r}")
        tv = type(v)
        if tv is t or t is _ANY:  # the common case: exactly the declared type
            if tv is str and len(v) > MAX_STR:
                raise ProtocolError(f"{what}: field {k!r} too long")
            if (tv is list or tv is dict) and len(v) > MAX_LIST:
                raise ProtocolError(f"{what}: field {k!r} has too many entries")
            continue
        if t is _INT and (isinstance(v, bool) or not isinstance(v, int)):
            raise ProtocolError(f"{what}: field {k!r} must be an integer")
        if t is _NUM and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ProtocolError(f"{what}: field {k!r} must be a number")
        if not isinstance(v, t):
            raise ProtocolError(f"{what}: field {k!r} has type {type(v).__name__}")
        if isinstance(v, str) and len(v) > MAX_STR:
            raise ProtocolError(f"{what}: field {k!r} too long")
        if isinstance(v, (list, dict)) and len(v) > MAX_LIST:
            raise ProtocolError(f"{what}: field {k!r} has too many entries")
    if not required.issubset(obj):
        missing = sorted(required.difference(obj))
        raise ProtocolError(f"{what}: missing field {missing[0]!r}")


def _is_seconds(v: Any) -> bool:
    """A time a peer may report: a finite number >= 0. NaN compares false with everything
    and infinity or a negative time would win or lose every placement, so a message
    carrying one is rejected whole, like any other malformed message."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


def _check_dims(name: str, v: Any, allow_zero: bool) -> None:
    if not isinstance(v, list) or not 1 <= len(v) <= 3:
        raise ProtocolError(f"launch: {name} must have 1..3 dimensions")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x > 2**40:
            raise ProtocolError(f"launch: {name} entries must be integers in range")
        if x == 0 and not allow_zero:
            raise ProtocolError(f"launch: {name} entries must be positive")


def validate_args(a: list[Any]) -> None:  # noqa: C901
    """Kernel arguments: ``["b", handle]``, ``["s", bytes]``, ``["l", size]``, ``["n"]``
    or ``["r", handle, offset, size]`` (a sub-buffer: that region of the buffer)."""
    if len(a) > MAX_ARGS:
        raise ProtocolError("launch: too many arguments")
    for arg in a:
        if not isinstance(arg, list) or not arg or arg[0] not in ("b", "s", "l", "n", "r"):
            raise ProtocolError("launch: malformed argument")
        kind = arg[0]
        if kind == "n":
            if len(arg) != 1:
                raise ProtocolError("launch: malformed null argument")
            continue
        if kind == "r":
            if (
                len(arg) != 4
                or not all(type(x) is int and 0 <= x <= MAX_DATA_BYTES for x in arg[1:])
                or arg[3] == 0
            ):
                raise ProtocolError("launch: malformed sub-buffer argument")
            continue
        if len(arg) != 2:
            raise ProtocolError("launch: malformed argument")
        v = arg[1]
        if kind == "s":
            if not isinstance(v, bytes) or not 0 < len(v) <= _SCALAR_LIMIT:
                raise ProtocolError(f"launch: scalar argument must be 1..{_SCALAR_LIMIT} bytes")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 2**40:
            raise ProtocolError("launch: handle/local size out of range")


def validate_command(op: str, a: dict[str, Any], nframes: int) -> None:  # noqa: C901
    """Check one command's arguments, including value ranges (sizes, offsets, dims)."""
    schema = OPS.get(op)
    if schema is None:
        raise ProtocolError(f"cmd: unknown op {op!r}")
    _check_fields(f"cmd {op}", a, schema)
    if op == "launch":  # the hot command: only its own checks (same as the general path)
        if not 0 <= a["prog"] <= MAX_DATA_BYTES:
            raise ProtocolError("cmd launch: prog out of range")
        if nframes:
            raise ProtocolError("cmd launch: takes no data frame")
        _validate_launch(a)
        return
    for k in ("h", "size", "off", "n", "src", "dst", "soff", "doff", "prog", "flags"):
        v = a.get(k)
        if isinstance(v, int) and not 0 <= v <= MAX_DATA_BYTES:
            raise ProtocolError(f"cmd {op}: {k} out of range")
    if op == "buf_create" and a["size"] == 0:
        raise ProtocolError("cmd buf_create: size must be positive")
    shm = a.get("shm")
    if isinstance(shm, str) and not SHM_PATH.fullmatch(shm):
        raise ProtocolError(f"cmd {op}: shm must name a file /dev/shm/clproj-*")
    if op == "buf_write" and nframes != (0 if isinstance(shm, str) else 1):
        raise ProtocolError("cmd buf_write: needs exactly one data frame (or shm)")
    if op == "buf_create" and isinstance(shm, str) and nframes:
        raise ProtocolError("cmd buf_create: data frame and shm both given")
    if op in _SOURCE_OPS:
        if nframes != (0 if isinstance(a.get("src"), str) else 1):
            raise ProtocolError(f"cmd {op}: needs its source in src or in one data frame")
        if a.get("hf") and (nframes != 1 or "hdrs" in a):
            raise ProtocolError(f"cmd {op}: hf takes the source and headers in one frame")
    elif op != "buf_write" and op != "buf_create" and nframes:
        raise ProtocolError(f"cmd {op}: takes no data frame")
    if op == "buf_create" and nframes > 1:
        raise ProtocolError("cmd buf_create: at most one data frame")
    if op == "buf_fill" and not 0 < len(a["pattern"]) <= 128:
        raise ProtocolError("cmd buf_fill: pattern must be 1..128 bytes")
    if op == "prog_compile":
        for hd in a.get("hdrs") or []:
            if (
                not isinstance(hd, list)
                or len(hd) != 2
                or not all(isinstance(x, str) and len(x) <= MAX_STR for x in hd)
            ):
                raise ProtocolError("cmd prog_compile: hdrs must be [name, source] pairs")
    if op == "prog_link" and not all(
        type(h) is int and 0 <= h <= MAX_DATA_BYTES for h in a["parts"]
    ):
        raise ProtocolError("cmd prog_link: parts must be program handles")


def _validate_launch(a: dict[str, Any]) -> None:
    validate_args(a["args"])
    _check_dims("gsize", a["gsize"], allow_zero=False)
    for k in ("lsize", "goff"):
        if a.get(k) is not None:
            _check_dims(k, a[k], allow_zero=(k == "goff"))
            if len(a[k]) != len(a["gsize"]):
                raise ProtocolError(f"launch: {k} and gsize differ in dimensions")
    if len(a["kernel"]) > MAX_ID:
        raise ProtocolError("launch: kernel name too long")
    if not KERNEL_NAME.fullmatch(a["kernel"]):
        raise ProtocolError(
            f"launch: kernel name {a['kernel'][:40]!r} is not an OpenCL C identifier"
        )


def validate(header: dict[str, Any], nframes: int) -> dict[str, Any]:  # noqa: C901
    """Check a decoded header against the schema of its type; returns it unchanged."""
    t = header.get("t")
    if header.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"unsupported protocol version {header.get('v')!r}")
    schema = SCHEMAS.get(t) if isinstance(t, str) else None
    if schema is None:
        raise ProtocolError(f"unknown message type {t!r}")
    body = {k: v for k, v in header.items() if k not in ("v", "t")}
    _check_fields(t, body, schema)
    if nframes > MAX_DATA_FRAMES:
        raise ProtocolError(f"{t}: too many data frames")
    if t == "cmd":
        if len(header["dev"]) > MAX_ID:
            raise ProtocolError("cmd: device id too long")
        validate_command(header["op"], header["a"], nframes)
    elif t != "reply" and nframes:
        raise ProtocolError(f"{t}: takes no data frames")
    if t == "done":
        ids, ts = header["ids"], header["ts"]
        if len(ids) != len(ts) or not all(type(i) is int for i in ids):
            raise ProtocolError("done: ids must be integers, one time each")
        if not all(x is None or type(x) is float for x in ts):
            raise ProtocolError("done: times must be seconds or nil")
    if t == "projection":
        for k, v in header["times"].items():
            if not isinstance(k, str) or not (v is None or _is_seconds(v)):
                raise ProtocolError(
                    f"projection: times[{str(k)[:MAX_ID]!r}] is {short(v)}; times must map "
                    "device id -> finite seconds >= 0, or nil"
                )
    if t == "projection":
        for k, v in (header.get("energies") or {}).items():
            if not isinstance(k, str) or not (v is None or _is_seconds(v)):
                raise ProtocolError(
                    f"projection: energies[{str(k)[:MAX_ID]!r}] is {short(v)}; energies must "
                    "map device id -> finite joules >= 0, or nil"
                )
    if t == "place":
        if header.get("objective", "time") not in ("time", "energy", "edp"):
            raise ProtocolError("place: objective must be time, energy or edp")
        for name in ("deadline_s", "max_slowdown"):
            if name in header and not _is_seconds(header[name]):
                raise ProtocolError(f"place: {name} is {short(header[name])}, not a number >= 0")
        for k, v in header["move"].items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ProtocolError("place: move must map device id -> bytes")
        if not _is_seconds(header["remaining"]):
            raise ProtocolError(
                f"place: remaining is {short(header['remaining'])}, not a finite number >= 0"
            )
    if t == "register":
        if not 1 <= len(header["devices"]) <= 64:
            raise ProtocolError("register: 1..64 devices")
        for d in header["devices"]:
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                raise ProtocolError("register: each device needs a name")
            if not isinstance(d.get("profile"), dict):
                raise ProtocolError("register: each device needs a profile map")
        if header.get("direct") and not DIRECT_ENDPOINT.fullmatch(header["direct"]):
            raise ProtocolError("register: direct must be an ipc:// or tcp:// endpoint")
        if header.get("local") and not LOCAL_PATH.fullmatch(header["local"]):
            raise ProtocolError("register: local must be an absolute socket path")
        if header.get("direct_key") and not Z85_KEY.fullmatch(header["direct_key"]):
            raise ProtocolError("register: direct_key must be a Z85 CURVE key")
    if t == "heartbeat":
        for k, v in (header.get("measured") or {}).items():
            if not isinstance(k, str) or not 0 < len(k) <= MAX_ID or not isinstance(v, dict):
                raise ProtocolError("heartbeat: measured must map key -> {device: seconds}")
            for i, s in v.items():
                if not isinstance(i, str) or not _is_seconds(s):
                    raise ProtocolError(
                        f"heartbeat: measured[{k[:MAX_ID]!r}][{str(i)[:16]!r}] is {short(s)}, "
                        "not finite seconds >= 0"
                    )
        for i, s in (header.get("lt") or {}).items():
            if not isinstance(i, str) or not _is_seconds(s):
                raise ProtocolError(
                    f"heartbeat: lt[{str(i)[:16]!r}] is {short(s)}; lt must map device index "
                    "-> finite seconds >= 0"
                )
    for k in ("node", "key", "client"):
        v = header.get(k)
        if isinstance(v, str) and not 0 < len(v) <= MAX_ID:
            raise ProtocolError(f"{t}: {k} must be 1..{MAX_ID} characters")
    return header


def program_source(a: dict[str, Any], data: Sequence[Any]) -> tuple[str, list[list[str]]]:
    """The source and the include headers (``[[name, source], ...]``) of a checked
    prog_build / prog_compile: from its fields or its data frame (at most
    :data:`MAX_PROGRAM_BYTES`: UTF-8 source, or with ``hf`` msgpack ``[source, hdrs]``)."""
    if isinstance(a.get("src"), str):
        return str(a["src"]), list(a.get("hdrs") or [])
    frame = data[0]
    raw = frame.bytes if hasattr(frame, "bytes") else bytes(frame)
    if len(raw) > MAX_PROGRAM_BYTES:
        raise ProtocolError(
            f"program source of {len(raw)} bytes exceeds the node's {MAX_PROGRAM_BYTES}"
        )
    if not a.get("hf"):
        try:
            return raw.decode(), list(a.get("hdrs") or [])
        except UnicodeDecodeError:
            raise ProtocolError("program source is not UTF-8") from None
    try:
        obj = msgpack.unpackb(
            raw,
            raw=False,
            max_str_len=MAX_PROGRAM_BYTES,
            max_bin_len=0,
            max_ext_len=0,
            max_array_len=MAX_LIST,
            max_map_len=0,
        )
    except Exception as exc:  # msgpack raises several types for garbage
        raise ProtocolError(f"undecodable program frame ({type(exc).__name__})") from None
    ok = (
        isinstance(obj, list)
        and len(obj) == 2
        and isinstance(obj[0], str)
        and isinstance(obj[1], list)
        and all(
            isinstance(hd, list) and len(hd) == 2 and all(isinstance(x, str) for x in hd)
            for hd in obj[1]
        )
    )
    if not ok:
        raise ProtocolError("program frame must be [source, [[name, source], ...]]")
    return obj[0], obj[1]


def lenient_id(frames: Sequence[Any]) -> int:
    """The request id in a message that failed validation (0: none), so that a refused
    request is answered at once instead of leaving its sender waiting for a reply."""
    head = frames[0] if frames else b""
    try:  # no size limits: a header over MAX_HEADER_BYTES has a waiting sender too
        h = msgpack.unpackb(head.bytes if hasattr(head, "bytes") else head, raw=False)
    except Exception:
        return 0
    rid = h.get("id") if isinstance(h, dict) else None
    return rid if type(rid) is int and rid > 0 else 0


def pack(t: str, **fields: Any) -> bytes:
    """Encode a header (the caller passes data frames separately)."""
    fields["v"] = PROTOCOL_VERSION
    fields["t"] = t
    return msgpack.packb(fields, use_bin_type=True)


def unpack(raw: bytes | memoryview) -> dict[str, Any]:
    """Decode a header with hard size limits; anything but a map is rejected."""
    if len(raw) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(raw)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        obj = msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            max_str_len=MAX_STR,
            max_bin_len=MAX_HEADER_BYTES,
            max_array_len=MAX_LIST,
            max_map_len=MAX_LIST,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several types for garbage
        raise ProtocolError(f"undecodable header ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise ProtocolError("header is not a map")
    return obj


def decode(frames: Sequence[Any]) -> tuple[dict[str, Any], list[Any]]:
    """Header + data frames of one message (frames may be bytes or zmq.Frame)."""
    if not frames:
        raise ProtocolError("empty message")
    head = frames[0]
    raw = head.bytes if hasattr(head, "bytes") else head
    header = unpack(raw)
    data = list(frames[1:])
    validate(header, len(data))
    return header, data


def secure_socket_options(sock: Any) -> None:
    """Transport-level limits applied to every socket: oversize messages are dropped by
    libzmq before they are buffered, and lingering on close never blocks a shutdown."""
    import zmq

    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.LINGER, 0)
