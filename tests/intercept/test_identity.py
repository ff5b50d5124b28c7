"""clproj.intercept.identity: one definition of each identity, and the C shim agrees with it.

The shim picks the launches it records by its own keys (native/shim/identity.c); they
must distinguish exactly the launches Python's program hash and launch signature do (the
C program hash once left the build options out: two -D variants shared one record).
The C file is compiled alone with gcc and called through ctypes.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clproj.intercept import identity as I
from clproj.intercept import record as R

SHIM = Path(__file__).resolve().parents[2] / "native" / "shim"
SRC = "__kernel void k(float a, int n, __global float *x) { x[get_global_id(0)] *= a * n; }"

# (source, options, binary): from source, with options, from IL/binary bytes, empty
PROGRAMS = [
    (SRC, ""),
    (SRC, "-DVALUE=1"),
    (SRC, "-DVALUE=2"),
    ("ab", "c"),
    ("a", "bc"),
    (None, ""),
]
# (work_dim, global, local, scalars)
LAUNCHES = [
    (1, [64], None, []),
    (1, [64], [16], [np.float32(2.0).tobytes(), np.int32(3).tobytes()]),
    (1, [64], [16], [np.float32(2.0).tobytes(), np.int32(4).tobytes()]),
    (2, [1024, 512], [16, 8], [b"\x01"]),
    (3, [2**40, 2, 3], None, [b"", b"xyz", bytes(128)]),
    (2, [64, 64], None, [b"ab", b"c"]),
    (2, [64, 64], None, [b"a", b"bc"]),
]


@pytest.fixture(scope="module")
def shim_identity(tmp_path_factory):
    """native/shim/identity.c built alone (the flags of native/build_shim.py that apply)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    so = tmp_path_factory.mktemp("identity") / "libidentity.so"
    subprocess.run(
        [
            "gcc",
            *("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"),
            str(SHIM / "identity.c"),
            "-o",
            str(so),
        ],
        check=True,
    )
    lib = ctypes.CDLL(str(so))
    u64, size_p = ctypes.c_uint64, ctypes.POINTER(ctypes.c_size_t)
    lib.clproj_program_key.restype = u64
    lib.clproj_program_key.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.clproj_launch_key_head.restype = u64
    lib.clproj_launch_key_head.argtypes = [u64, ctypes.c_char_p, ctypes.c_uint, size_p, size_p]
    lib.clproj_launch_key_scalar.restype = u64
    lib.clproj_launch_key_scalar.argtypes = [u64, ctypes.c_char_p, ctypes.c_size_t]
    lib.clproj_launch_key_end.restype = u64
    lib.clproj_launch_key_end.argtypes = [u64]
    return lib


def _c_program_key(lib, source, options, binary=None) -> int:
    src = None if source is None else source.encode()
    return lib.clproj_program_key(src, options.encode(), binary, len(binary or b""))


def _c_launch_key(lib, prog_key, kernel, dim, gsz, lsz, scalars) -> int:
    sizes = ctypes.c_size_t * dim
    g = sizes(*gsz)
    lo = None if lsz is None else sizes(*lsz)
    h = lib.clproj_launch_key_head(prog_key, kernel.encode(), dim, g, lo)
    for s in scalars:
        h = lib.clproj_launch_key_scalar(h, s, len(s))
    return lib.clproj_launch_key_end(h)


def test_c_program_key_is_pythons(shim_identity):
    keys = set()
    for source, options in PROGRAMS:
        c = _c_program_key(shim_identity, source, options)
        assert c == I.shim_program_key(source, options), (source, options)
        keys.add(c)
    for binary in (b"\x03\x02\x23\x07SPIR-V", b"\x00binary\x00", b""):
        c = _c_program_key(shim_identity, None, "-O2", binary)
        assert c == I.shim_program_key(None, "-O2", binary)
        keys.add(c)
    # options, separators and binaries all count (None and "" sources are one program)
    assert len(keys) == len(PROGRAMS) + 3


def test_c_launch_key_is_pythons(shim_identity):
    for source, options in PROGRAMS[:3]:
        pk = _c_program_key(shim_identity, source, options)
        ph = I.program_hash(source, options)
        c_keys, sigs = set(), set()
        for dim, g, lo, scalars in LAUNCHES:
            c = _c_launch_key(shim_identity, pk, "k", dim, g, lo, scalars)
            assert c == I.shim_launch_key(pk, "k", dim, g, lo, scalars), (dim, g, lo, scalars)
            assert c & 1
            c_keys.add(c)
            sigs.add(I.launch_signature(ph, "k", dim, g, lo, scalars))
        # the shim tells apart exactly the launches the record signatures tell apart
        assert len(c_keys) == len(sigs) == len(LAUNCHES)
    pk = _c_program_key(shim_identity, SRC, "")
    assert _c_launch_key(shim_identity, pk, "k", 1, [64], None, []) != _c_launch_key(
        shim_identity, pk, "k2", 1, [64], None, []
    )


def test_record_fields_are_the_identities(tmp_path):
    """A saved record's program.hash and signature are identity.* of its own fields."""
    import msgpack

    rec = R.from_arrays(
        SRC,
        "k",
        [np.float32(2.0), np.int32(3), np.zeros(64, np.float32)],
        64,
        16,
        options="-DVALUE=1",
    )
    m = msgpack.unpackb(Path(R.save(rec, str(tmp_path))).read_bytes(), raw=False)
    prog = m["program"]
    ph = I.program_hash(prog["source"], prog["options"])
    assert prog["hash"] == ph == R.load(rec.path).program_hash
    scalars = [a["bytes"] for a in m["args"] if a["kind"] == "scalar"]
    sig = I.launch_signature(
        ph, m["kernel"], m["work_dim"], m["global_size"], m["local_size"], scalars
    )
    assert m["signature"] == sig
    # and the stream is the documented one
    stream = I.program_stream(SRC, "-DVALUE=1")
    assert stream == SRC.encode() + b"\0-DVALUE=1"


def test_signature_values_are_stable():
    """The hex values of records written before the identities moved here."""
    ph = I.program_hash("src", "-DX")
    assert ph == "bfabc2494cb970b78cc2d52d98ea6a8a557893bfac1cb73a5795a210f0e7963c"
    sig = I.launch_signature(ph, "k", 2, [64, 64], [8, 8], [b"\x01\x00\x00\x00", b"ab"])
    assert sig == "06e1549bec8ede664808053fab957b559d63340dfe879979afd04abef3abee07"
    assert I.program_hash("src", "-DX", b"bin") != ph
    assert I.ndrange_text(1, [64], None) == "(1, [64], None)"


def test_families_keys_and_shapes():
    ph = I.program_hash(SRC, "")
    a = I.launch_signature(ph, "k", 1, [64], None, [b"\x01", b"\x02"])
    b = I.launch_signature(ph, "k", 1, [64], None, [b"\x03", b"\x04"])
    fam = I.placement_family(ph, "k", 1, [64], None, 2)
    assert a != b and fam not in (a, b)
    assert fam == I.launch_signature(ph, "k", 1, [64], None, [b"", b""])
    assert fam != I.placement_family(ph, "k", 1, [128], None, 2)

    r1 = R.from_arrays(SRC, "k", [np.float32(1), np.int32(1), np.zeros(64, np.float32)], 64, 16)
    r2 = R.from_arrays(SRC, "k", [np.float32(2), np.int32(9), np.zeros(256, np.float32)], 256, 16)
    r3 = R.from_arrays(SRC, "k", [np.float32(2), np.int32(9), np.zeros(256, np.float32)], 256, 32)
    assert I.reuse_family(r1) == I.reuse_family(r2) != I.reuse_family(r3)
    assert r1.signature != r2.signature

    assert I.placement_key(ph, "k", [1024, 512]) == f"{ph[:16]}:k:1024x512"
    args = [("s", b"\x01\x00"), ("b", 7), ("l", 64)]
    shape = I.launch_shape(3, "k", args, [64], None, None)
    assert shape == (3, "k", (("s", 2), ("b", 7), ("l", 64)), (64,), (), ())
    assert shape == I.launch_shape(3, "k", [("s", b"\x09\x09"), *args[1:]], [64], None, None)
    assert I.shape_key("k", [64, 64], [16, 4]) == ("k", (64, 64, 1), (16, 4, 1))
    assert I.shape_key("k", [64], None) == ("k", (64, 1, 1), None)
    assert I.pad_ndrange([0, 0]) is None
    with pytest.raises(ValueError):
        I.shape_key("k", [], None)
