"""Launches sized from the device's answers (intercept/size_queries.py, native/shim/queries.c):
the shim notes which answers an app read, the record keeps them, and a projection of a launch
whose shape follows from them says that it is projected as launched here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clproj.errors import ClprojError
from clproj.intercept import size_queries as sq
from clproj.intercept.record import from_arrays, load, save

CUS = "CL_DEVICE_MAX_COMPUTE_UNITS"
MAX_WG = "CL_DEVICE_MAX_WORK_GROUP_SIZE"


def test_the_shim_and_python_name_the_same_parameters_in_the_same_order():
    from clproj.intercept import _shim

    shim = [_shim.lib.clproj_size_query_param(i) for i in range(len(sq.SIZE_QUERIES) + 1)]
    assert shim == [*sq.param_values(), 0]


@pytest.mark.parametrize(
    ("asked", "glob", "local", "why"),
    [
        # BabelStream's dot on a 2-unit CPU: one group per unit
        ({CUS: 2}, [32], [16], "1 work-group per compute unit (it has 2)"),
        # the same on a 132-unit GPU: 4 groups of the largest size per unit
        ({CUS: 132, MAX_WG: 1024}, [4 * 132 * 1024], [1024], "4 work-groups per compute unit"),
        ({MAX_WG: 256}, [1 << 20], [256], "work-groups of 256, a work-group size it read"),
        ({CUS: 16, MAX_WG: 64}, [2 * 16 * 64], None, "2048 work-items = 2 x 16 compute units x 64"),
        # sized by the data: a million work-items, whatever the answers read
        ({CUS: 2}, [1 << 20], [64], None),
        ({CUS: 2, MAX_WG: 4096}, [1 << 20], None, None),
        ({CUS: 2}, [2 * 3], [3], "1 work-group per compute unit"),
        ({CUS: 2}, [2 * 33 * 8], [8], None),  # 33 groups per unit: more than an app picks
        ({CUS: 2}, [2 * 32 * 8], [8], "32 work-groups per compute unit"),  # pyopencl's splay
        ({}, [32], [16], None),  # nothing read: nothing said
        ({CUS: 0}, [32], [16], None),
    ],
)
def test_a_launch_follows_from_the_answers_only_when_read_and_matching(asked, glob, local, why):
    got = sq.sized_by_device(asked, glob, local)
    assert (got is None) == (why is None), got
    if why is not None:
        assert why in got
        assert "projected as launched here" in sq.note(asked, glob, local)


def test_asked_travels_in_the_record_and_bad_values_are_one_line(tmp_path):
    import numpy as np

    rec = from_arrays("__kernel void k(__global float *a) { a[0] = 1; }", "k",
                      [np.zeros(4, np.float32)], [32], [16])  # fmt: skip
    rec.asked = {CUS: 2, MAX_WG: 4096}
    path = save(rec, str(tmp_path))
    assert load(path).asked == {CUS: 2, MAX_WG: 4096}
    bad = ({"CL_DEVICE_NAME": 1}, {CUS: -1}, {CUS: 1 << 64}, {CUS: True}, [CUS], "x")
    for value in bad:
        with pytest.raises(ClprojError) as exc:
            sq.check(value, lambda why: ClprojError(f"field 'asked': {why}"))
        assert "\n" not in exc.value.cause
    assert sq.check(None, ValueError) == {}


SIZED_APP = """
import pyopencl as cl
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
dev = ctx.devices[0]
cus, wg = dev.max_compute_units, 8
k = cl.Kernel(cl.Program(ctx, "__kernel void k(__global float *a) { a[get_global_id(0)] += 1.0f; }").build(), "k")
bufs = []
for n in (2 * cus * wg, 1 << 14):  # sized by the device, then by the data
    bufs.append(cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n))
    k.set_arg(0, bufs[-1])
    cl.enqueue_nd_range_kernel(q, k, (n,), (wg,))
q.finish()
"""


def test_project_mode_says_which_launch_was_sized_from_the_device(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(SIZED_APP)
    env = dict(os.environ, POCL_DEVICES="pthread")
    res = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--devices",
         "pocl-pthread-amd-epyc", "--json", "--", sys.executable, str(app)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    docs = {d["global_size"][0]: d for d in json.loads(res.stdout)["projections"]}
    assert len(docs) == 2 and 1 << 14 in docs
    sized = docs[min(docs)]
    assert "2 work-groups per compute unit" in sized["note"] and CUS in sized["asked"]
    assert "note" not in docs[1 << 14] and "asked" not in docs[1 << 14]
    # the tables say it too, once, naming the shape
    res = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--devices",
         "pocl-pthread-amd-epyc", "--", sys.executable, str(app)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if "this machine's device's answers" in ln]
    assert len(lines) == 1 and lines[0].startswith(f"clproj: k[{min(docs)}]")
