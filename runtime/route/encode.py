"""Value encodings of clGet*Info answers: the bytes the C caller receives.

Why its own module: every info table (platform, device, objects, kernels) returns values
in the same few C layouts (cl_uint, cl_int, cl_ulong, size_t, pointers, C strings).
"""

from __future__ import annotations

import struct

PTR = struct.calcsize("P")  # bytes of a pointer / size_t on this machine


def u32(v: int) -> bytes:
    return struct.pack("=I", int(v) & 0xFFFFFFFF)


def i32(v: int) -> bytes:
    return struct.pack("=i", v)


def u64(v: int) -> bytes:
    return struct.pack("=Q", int(v) & 0xFFFFFFFFFFFFFFFF)


def size_t(*v: int) -> bytes:
    return struct.pack("@" + "N" * len(v), *(int(x) for x in v))


def ptrs(*v: int) -> bytes:
    return struct.pack("@" + "P" * len(v), *v)


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"
