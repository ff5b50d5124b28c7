"""A buffer no command wrote is recorded without being read (no blob: zeros); every way of
writing a buffer makes the shim read it (native/shim/writes.c)."""

from __future__ import annotations

import subprocess
import sys

import blake3
import numpy as np
import pytest

from clproj.intercept import record as R
from clproj.intercept.blobs import BlobStore
from clproj.intercept.environment import shim_environment

# Each case launches kernel k_<case> once on a buffer the case prepared; the shim records
# every launch (which=all). Sizes: one below the staging path, one through it.
APP = r"""
import ctypes, sys
import numpy as np
import pyopencl as cl

n = int(sys.argv[1]) // 4
cases = sys.argv[2].split(",")
ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
mf = cl.mem_flags
src = "__kernel void two(__global float *x) { x[get_global_id(0)] = 2.0f; }\n"
src += "".join(
    f"__kernel void k_{c}(__global float *x) {{ if (x[0] == 12345.0f) x[1] = 0.0f; }}\n"
    for c in cases
)
prg = cl.Program(ctx, src).build()
ones = np.ones(n, np.float32)


def launch(case, buf, size=n):
    cl.Kernel(prg, "k_" + case)(q, (1,), None, buf)
    q.finish()


def fresh():
    return cl.Buffer(ctx, mf.READ_WRITE, 4 * n)


for case in cases:
    if case == "fresh":
        launch(case, fresh())
    elif case == "hostbuf":
        launch(case, cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=ones))
    elif case == "usehost":
        keep = np.ones(n, np.float32)
        launch(case, cl.Buffer(ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=keep))
    elif case == "write":
        b = fresh(); cl.enqueue_copy(q, b, ones); launch(case, b)
    elif case == "fill":
        b = fresh(); cl.enqueue_fill_buffer(q, b, np.float32(1), 0, 4 * n); launch(case, b)
    elif case == "copy":
        b = fresh()
        cl.enqueue_copy(q, b, cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=ones))
        launch(case, b)
    elif case == "map":
        b = fresh()
        a, _ = cl.enqueue_map_buffer(q, b, cl.map_flags.WRITE, 0, (n,), np.float32)
        a[:] = 1
        del a
        q.finish()
        launch(case, b)
    elif case == "kernel":
        b = fresh()
        cl.Kernel(prg, "two")(q, (n,), None, b)
        cl.enqueue_copy(q, ones, b)  # a read writes nothing
        ones[:] = 1
        launch(case, b)
    elif case == "subbuffer":
        parent = fresh()
        sub = parent.get_sub_region(0, 4 * n // 2)
        cl.enqueue_copy(q, sub, np.ones(n // 2, np.float32))
        launch(case, parent)
    elif case == "extension":
        # an entry point the shim cannot follow (a command buffer may write any buffer)
        loader = ctypes.CDLL("libOpenCL.so.1")
        get = loader.clGetExtensionFunctionAddressForPlatform
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
        assert get(ctx.devices[0].platform.int_ptr, b"clCommandNDRangeKernelKHR")
        launch(case, fresh())
print("ok")
"""

CASES: dict[str, tuple[bool, float | None]] = {  # case -> (unwritten, first float recorded)
    "fresh": (True, 0.0),
    "hostbuf": (False, 1.0),
    "usehost": (False, 1.0),
    "write": (False, 1.0),
    "fill": (False, 1.0),
    "copy": (False, 1.0),
    "map": (False, 1.0),
    "kernel": (False, 2.0),
    "subbuffer": (False, 1.0),
    # read although never written: its content is whatever the device holds (PoCL hands
    # out freed memory again); last, as it turns the knowledge off for the rest of the app
    "extension": (False, None),
}


@pytest.mark.parametrize("reads", ["fewest", "all"])
@pytest.mark.parametrize("size", [4096, 2 << 20], ids=["small", "large"])
def test_only_never_written_buffers_skip_the_read(tmp_path, size, reads):
    """``fewest`` (the default): never-written buffers are not read, large ones on PoCL's
    CPU device are mapped, not read into the staging buffer; ``all`` reads every one."""
    script = tmp_path / "app.py"
    script.write_text(APP)
    rec_dir = str(tmp_path / "r")
    env = shim_environment(record=rec_dir, which="all")
    env["POCL_DEVICES"] = "pthread"
    env["CLPROJ_SNAPSHOT_READS"] = reads
    p = subprocess.run(
        [sys.executable, str(script), str(size), ",".join(CASES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    records = {}
    for path in R.list_records(rec_dir):
        r = R.load(path)
        records.setdefault(r.kernel, r)
    store = BlobStore(rec_dir)
    for case, (unwritten, first) in CASES.items():
        record = records["k_" + case]
        arg = record.args[0]
        if reads == "all" and unwritten:  # read: whatever the device holds
            unwritten, first = False, None
        assert arg.unwritten is unwritten, case
        data = record.buffer_bytes(0)  # no blob: zeros
        if unwritten:
            assert arg.blob is None and not any(data), case
            continue
        if arg.blob is not None:
            assert blake3.blake3(store.get(arg.blob, arg.size)).hexdigest() == arg.blob
        if first is not None:
            assert np.frombuffer(data, np.float32)[0] == first, case
    # the kernel that first wrote its buffer found it never written
    assert records["two"].args[0].unwritten is (reads == "fewest")


def test_unwritten_survives_the_record_round_trip(tmp_path):
    rec = R.from_arrays(
        "__kernel void k(__global float *x) {}", "k", [np.zeros(4, np.float32)], [4]
    )
    rec.args[0].unwritten = True
    path = R.save(rec, str(tmp_path))
    assert R.load(path).args[0].unwritten
    rec.args[0].unwritten = False
    assert "unwritten" not in R.load(R.save(rec, str(tmp_path / "b"))).args[0].to_map()
