"""Validation of a launch record read from disk (docs/formats.md §1, "Validation").

Why a module of its own: records are copied between machines, so nothing in one is
trusted; every field is checked (typed, bounded, consistent) before any is used, and the
error names the field that is wrong. The result is plain checked values, from which
:func:`intercept.record.load` builds the record.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgpack

from clproj.intercept import size_queries
from clproj.intercept.blobs import MAX_SIZE_T, is_blob_key
from clproj.untrusted import BadField, is_int, short

ARG_KINDS = ("scalar", "buffer", "local", "null", "unsupported")
BINARY_KINDS = (None, "il", "binary")

# Bounds of a record read from disk.
MAX_RECORD_BYTES = 64 << 20  # the msgpack file: program source, scalars, metadata
MAX_ARGS = 1024
MAX_SCALAR_BYTES = 1 << 16  # one by-value argument (a double16 is 128 bytes)
MAX_NAME = 1024  # kernel names, ids
_ID = re.compile(r"[A-Za-z0-9_.-]*")
# A kernel name is an OpenCL C identifier. Why checked: it crosses to C as a
# NUL-terminated string (clCreateKernel), so "vecadd\0x" would run vecadd under another
# name, and it names files and table rows.
_KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _int_field(name: str, v: Any, lo: int, hi: int = MAX_SIZE_T) -> int:
    if not is_int(v):
        raise BadField(name, f"must be an integer, got {type(v).__name__} {short(v)}")
    if not lo <= v <= hi:
        raise BadField(name, f"{v} is out of range {lo}..{hi}")
    return v


def _opt_str(name: str, v: Any, limit: int = MAX_RECORD_BYTES) -> str | None:
    if v is not None and (not isinstance(v, str) or len(v) > limit):
        raise BadField(name, f"must be a string or null, got {type(v).__name__}")
    return v


def _sizes(name: str, v: Any, work_dim: int, lo: int) -> list[int]:
    if not isinstance(v, list):
        raise BadField(name, f"must be a list of {work_dim} integers, got {type(v).__name__}")
    if len(v) != work_dim:
        raise BadField(name, f"has {len(v)} entries, work_dim is {work_dim}")
    return [_int_field(f"{name}[{d}]", x, lo) for d, x in enumerate(v)]


def check_arg(i: int, m: Any) -> dict[str, Any]:  # noqa: C901
    """One ``args[]`` entry: every field its kind uses, typed and in range (the keyword
    arguments of :class:`intercept.record.ArgRecord`)."""
    at = f"args[{i}]"
    if not isinstance(m, dict):
        raise BadField(at, f"must be a map, got {type(m).__name__}")
    kind = m.get("kind")
    if kind not in ARG_KINDS:
        raise BadField(f"{at}.kind", f"unknown kind {short(kind)}; one of {ARG_KINDS}")
    a: dict[str, Any] = {
        "index": _int_field(f"{at}.index", m.get("index"), 0, MAX_ARGS - 1),
        "kind": kind,
    }
    if kind == "scalar":
        data = m.get("bytes")
        if not isinstance(data, bytes) or not 1 <= len(data) <= MAX_SCALAR_BYTES:
            raise BadField(f"{at}.bytes", f"must be 1..{MAX_SCALAR_BYTES} raw bytes")
        a["data"] = data
    elif kind == "buffer":
        a["size"] = _int_field(f"{at}.size", m.get("size"), 1)
        flags = m.get("flags")
        a["flags"] = None if flags is None else _int_field(f"{at}.flags", flags, 0)
        blob = m.get("blob")
        if blob is not None and not is_blob_key(blob):
            raise BadField(
                f"{at}.blob", f"{short(blob)} is not a content hash (64 lowercase hex digits)"
            )
        a["blob"] = blob
        origin, parent = m.get("origin"), m.get("parent")
        if (origin is None) != (parent is None):
            raise BadField(f"{at}.origin", "origin and parent go together (sub-buffers)")
        if origin is not None:
            a["origin"] = _int_field(f"{at}.origin", origin, 0)
            a["parent"] = _int_field(f"{at}.parent", parent, 1)
            end = a["origin"] + a["size"]
            if end > a["parent"]:
                raise BadField(
                    f"{at}.origin", f"origin + size ({end}) exceeds parent {a['parent']}"
                )
        for flag in ("unwritten", "dropped"):
            value = m.get(flag, False)
            if not isinstance(value, bool):
                raise BadField(f"{at}.{flag}", f"must be true or false, got {short(value)}")
            a[flag] = value
        if a["dropped"] and blob is not None:
            raise BadField(f"{at}.dropped", "a dropped snapshot names no blob")
    elif kind == "local" or (kind == "null" and m.get("size") is not None):
        a["size"] = _int_field(f"{at}.size", m.get("size"), 1)
    elif kind == "unsupported":
        a["what"] = _opt_str(f"{at}.what", m.get("what"), MAX_NAME)
    return a


def unpack(raw: bytes) -> Any:
    """The msgpack value a record file holds; ValueError saying, in a user's words, why the
    bytes are none (msgpack's own "Unpack failed: incomplete input" names no cause)."""
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except msgpack.ExtraData:
        raise ValueError("more data follows the record's end (two files joined?)") from None
    except Exception as exc:
        if "incomplete" in str(exc):
            raise ValueError("the file ends inside the record (truncated)") from None
        raise ValueError("not a record's encoding (msgpack)") from None


def check_map(m: dict[str, Any]) -> dict[str, Any]:  # noqa: C901
    """Every field of a record map (docs/formats.md section 1, "Validation"), checked:
    the keyword arguments of :class:`intercept.record.LaunchRecord`, ``args`` as those
    of :class:`intercept.record.ArgRecord`. Raises :class:`BadField`."""
    out: dict[str, Any] = {}
    prog = m.get("program")
    if not isinstance(prog, dict):
        raise BadField("program", f"must be a map, got {type(prog).__name__}")
    if "source" not in prog:
        raise BadField("program.source", "missing")
    out["source"] = _opt_str("program.source", prog["source"])
    out["options"] = _opt_str("program.options", prog.get("options")) or ""
    out["binary_kind"] = prog.get("binary_kind")
    if out["binary_kind"] not in BINARY_KINDS:
        raise BadField("program.binary_kind", f"{short(out['binary_kind'])} is not null/il/binary")
    kernel = m.get("kernel")
    if not isinstance(kernel, str) or not 1 <= len(kernel) <= MAX_NAME:
        raise BadField("kernel", f"must be a kernel name (1..{MAX_NAME} characters)")
    if not _KERNEL_NAME.fullmatch(kernel):
        raise BadField("kernel", f"{kernel[:40]!r} is not an OpenCL C identifier")
    out["kernel"] = kernel
    raw_args = m.get("args")
    if not isinstance(raw_args, list):
        raise BadField("args", "missing" if raw_args is None else "must be a list")
    if len(raw_args) > MAX_ARGS:
        raise BadField("args", f"{len(raw_args)} arguments, more than {MAX_ARGS}")
    args = [check_arg(i, a) for i, a in enumerate(raw_args)]
    seen: set[int] = set()
    for i, a in enumerate(args):
        if a["index"] in seen or a["index"] >= len(args):
            raise BadField(
                f"args[{i}].index",
                f"{a['index']} repeats or leaves a gap: indices must be 0..{len(args) - 1}, once each",
            )
        seen.add(a["index"])
    out["args"] = args
    work_dim = _int_field("work_dim", m.get("work_dim"), 1, 3)
    out["work_dim"] = work_dim
    out["global_size"] = _sizes("global_size", m.get("global_size"), work_dim, 1)
    lsz, goff = m.get("local_size"), m.get("global_offset")
    out["local_size"] = None if lsz is None else _sizes("local_size", lsz, work_dim, 1)
    out["global_offset"] = None if goff is None else _sizes("global_offset", goff, work_dim, 0)
    outputs = m.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, dict):
            raise BadField("outputs", "must be a map or null")
        buffers = {a["index"] for a in args if a["kind"] == "buffer"}
        out["outputs"] = {}
        for k, sha in outputs.items():
            index = int(k) if isinstance(k, str) and k.isdecimal() and len(k) < 5 else k
            if not is_int(index) or index not in buffers:
                raise BadField(f"outputs[{short(k)}]", "is not the index of a buffer argument")
            if not is_blob_key(sha):
                raise BadField(
                    f"outputs[{k}]",
                    f"{short(sha)} is not a content hash (64 lowercase hex digits)",
                )
            out["outputs"][index] = sha
    else:
        out["outputs"] = None
    device = m.get("device")
    if device is None:
        device = {}
    if not isinstance(device, dict):
        raise BadField("device", "must be a map")
    for k, v in device.items():
        if not isinstance(k, str) or not (v is None or isinstance(v, (str, int, float))):
            raise BadField(f"device.{short(k)}", "must map names to strings or numbers")
    out["device"] = dict(device)
    mt = m.get("measured_time_ns")
    out["measured_time_ns"] = None if mt is None else _int_field("measured_time_ns", mt, 0)
    emulatable = m.get("emulatable", True)
    if not isinstance(emulatable, bool):
        raise BadField("emulatable", "must be true or false")
    out["emulatable"] = emulatable
    out["not_emulatable_reason"] = _opt_str(
        "not_emulatable_reason", m.get("not_emulatable_reason"), MAX_NAME
    )
    out["asked"] = size_queries.check(m.get("asked"), lambda why: BadField("asked", why))
    rid = m.get("id", "")
    if not isinstance(rid, str) or len(rid) > MAX_NAME or not _ID.fullmatch(rid):
        raise BadField("id", f"{short(rid)} is not a record id (letters, digits, _ . -)")
    out["id"] = rid
    created = m.get("created", 0.0)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise BadField("created", "must be a number (UNIX time)")
    if not math.isfinite(created):
        raise BadField("created", f"{created} is not a finite time")
    out["created"] = float(created)
    return out
