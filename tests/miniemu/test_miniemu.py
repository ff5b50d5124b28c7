"""miniemu end to end: modes and their scaling, NULL/partial groups, data dependence flags,
time budget, failures, thread safety, no leakage between launches, the profile format, CLI."""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from clproj import miniemu
from clproj.errors import ClprojError
from clproj.intercept.record import LocalArg, from_arrays, save
from clproj.miniemu.oclgrind import OclgrindBackend
from clproj.miniemu.plugin_output import parse_plugin_output, parsed
from clproj.miniemu.profile import KernelProfile
from tests.conftest import emulators_of, running

KERNELS = """
__kernel void saxpy(__global const float *x, __global float *y, float a, int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void reduce(__global const float *a, __global float *out, __local float *l) {
  int lid = get_local_id(0);
  l[lid] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (lid < s) l[lid] += l[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = l[0];
}
__kernel void matmul(__global const float *a, __global const float *b, __global float *c, int n) {
  int row = get_global_id(1), col = get_global_id(0);
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
  c[row * n + col] = acc;
}
__kernel void floyd_step(__global float *d, __global int *path, int n, int k) {
  int i = get_global_id(1), j = get_global_id(0);
  float via = d[i * n + k] + d[k * n + j];
  if (via < d[i * n + j]) {
    d[i * n + j] = via;
    path[i * n + j] = k;
  }
}
__kernel void spin(__global volatile int *flag) {
  while (flag[0] == 0) { }
}
"""

COUNTED = [
    ("instructions",),
    ("global", "load_bytes"),
    ("global", "store_bytes"),
    ("global", "transactions", "load", "32", "128"),
    ("global", "transactions", "store", "16", "32"),
    ("local", "bank", "32", "wavefronts"),
    ("branches", "total"),
    ("barriers",),
]


def value(stats: dict, path: tuple) -> float:
    v = stats
    for k in path:
        v = v[k]
    return float(sum(v.values())) if isinstance(v, dict) else float(v)


def records():
    n = 64
    rng = np.random.default_rng(0)
    x = rng.random(4096, dtype=np.float32)
    return {
        "saxpy": from_arrays(
            KERNELS, "saxpy", [x, x.copy(), np.float32(2), np.int32(4096)], [4096], [128]
        ),
        "reduce": from_arrays(
            KERNELS, "reduce", [x, np.zeros(32, np.float32), LocalArg(512)], [4096], [128]
        ),
        "matmul": from_arrays(
            KERNELS,
            "matmul",
            [x[: n * n], x[: n * n].copy(), np.zeros(n * n, np.float32), np.int32(n)],
            [n, n],
            [16, 16],
        ),
    }


@pytest.fixture(scope="module")
def full_profiles():
    return {name: miniemu.emulate(rec, mode="full") for name, rec in records().items()}


@pytest.mark.parametrize("mode", ["single", "quick"])
def test_partial_modes_scale_to_full_within_5_percent(full_profiles, mode):
    for name, rec in records().items():
        part = miniemu.emulate(rec, mode=mode)
        full = full_profiles[name]
        assert part.emulation["groups_emulated"] == (1 if mode == "single" else 2)
        assert full.emulation["groups_emulated"] == full.launch["num_groups"]
        assert part.total["work_items"] == full.total["work_items"] == full.launch["work_items"]
        for path in COUNTED:
            f, p = value(full.total, path), value(part.total, path)
            assert abs(p - f) <= 0.05 * max(f, 1), (name, mode, path, p, f)
        # per_group is the average group: per_group * num_groups == total (up to rounding)
        ng = full.launch["num_groups"]
        assert (
            abs(
                value(part.per_group, ("instructions",)) * ng - value(part.total, ("instructions",))
            )
            <= ng
        )


def test_full_mode_is_exact_sum_of_groups(full_profiles):
    p = full_profiles["saxpy"]
    assert p.total["global"]["load_bytes"] == 4096 * 8  # x[i] and y[i]
    assert p.total["global"]["store_bytes"] == 4096 * 4
    assert len(p.groups) == 32
    summed = sum(g["stats"]["global"]["load_bytes"] for g in p.groups)
    assert summed == p.total["global"]["load_bytes"]


def test_partial_last_group_is_weighted_by_work_items():
    # 1000 work-items in groups of 64: 15 full groups and one of 40 (OpenCL 2.0 non-uniform)
    x = np.ones(1024, np.float32)
    rec = from_arrays(
        KERNELS,
        "saxpy",
        [x, x.copy(), np.float32(2), np.int32(1000)],
        [1000],
        [64],
        options="-cl-std=CL2.0",
    )
    quick = miniemu.emulate(rec, mode="quick")
    full = miniemu.emulate(rec, mode="full")
    assert quick.emulation["work_items_emulated"] == 64 + 40
    assert quick.launch["num_groups"] == 16
    for p in (quick, full):
        assert p.total["work_items"] == 1000
        assert p.total["global"]["load_bytes"] == 8000
        assert p.total["global"]["store_bytes"] == 4000
    assert any("partial" in f for f in quick.emulation["flags"])
    # single mode sees one full group and scales it per work-item, not per group
    single = miniemu.emulate(rec, mode="single")
    assert single.total["global"]["store_bytes"] == 4000


def test_null_local_size_records_the_emulators_choice():
    x = np.ones(256, np.float32)
    rec = from_arrays(KERNELS, "saxpy", [x, x.copy(), np.float32(2), np.int32(256)], [256], None)
    p = miniemu.emulate(rec, mode="quick")
    la = p.launch
    assert la["local_size_was_null"] is True
    assert la["local_size"] and all(v >= 1 for v in la["local_size"])
    assert la["num_groups"] * la["group_size"] == 256
    assert p.total["global"]["store_bytes"] == 1024
    assert any("NULL" in f for f in p.emulation["flags"])


def test_data_dependent_kernel_disagrees_and_is_flagged():
    # Floyd-Warshall step k=0: only rows 0..15 (the first row of groups) find a shorter path.
    n = 64
    d = np.full((n, n), 1e6, np.float32)
    d[:16, 0] = 1.0  # d[i][k] small for the first 16 rows
    d[0, :] = 1.0  # d[k][j] small for every j
    d[0, 0] = 0.0
    rec = from_arrays(
        KERNELS,
        "floyd_step",
        [d.ravel(), np.zeros(n * n, np.int32), np.int32(n), np.int32(0)],
        [n, n],
        [16, 16],
    )
    full = miniemu.emulate(rec, mode="full")
    quick = miniemu.emulate(rec, mode="quick")
    single = miniemu.emulate(rec, mode="single")
    f = full.total["global"]["store_bytes"]
    # via = d[i][0] + d[0][j]: rows 1..15, columns 1..63 improve (2 < 1e6); row 0 and
    # column 0 tie; each improvement stores a float and an int
    assert f == 15 * (n - 1) * 8
    assert abs(quick.total["global"]["store_bytes"] - f) > 0.05 * f
    assert abs(single.total["global"]["store_bytes"] - f) > 0.05 * f
    assert any(fl.startswith("data-dependent") for fl in quick.emulation["flags"])
    assert quick.emulation["confidence"] == "low"
    assert full.emulation["confidence"] == "high"
    # data-parallel kernels are not flagged
    saxpy = miniemu.emulate(records()["saxpy"], mode="quick")
    assert not any(fl.startswith("data-dependent") for fl in saxpy.emulation["flags"])


def test_time_budget_kills_the_emulator():
    rec = from_arrays(KERNELS, "spin", [np.zeros(1, np.int32)], [1], [1])
    start = time.monotonic()
    with pytest.raises(ClprojError, match="time budget of 2 s"):
        miniemu.emulate(rec, mode="single", timeout_s=2)
    assert time.monotonic() - start < 10


def test_an_emulator_dies_with_the_process_that_waits_for_it(tmp_path):
    """An app that exits (or is killed) during an in-app emulation leaves no emulator
    running on: the emulator runs in its own session (its time budget kills the whole
    group), so neither the app's signal nor its exit would reach it otherwise."""
    path = save(from_arrays(KERNELS, "spin", [np.zeros(1, np.int32)], [1], [1]), str(tmp_path))
    script = (
        "import sys, threading, time, miniemu\n"
        "from intercept.record import load\n"
        "rec = load(sys.argv[1])\n"
        "threading.Thread(target=miniemu.emulate, args=(rec,),"
        " kwargs={'mode': 'single', 'timeout_s': 300}, daemon=True).start()\n"
        "print('STARTED', flush=True)\n"
        "time.sleep(300)\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True, cwd=repo
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith("STARTED")
    deadline = time.monotonic() + 30
    while not (emulators := emulators_of(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emulators, "the emulation did not start"
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 10
    while any(running(p) for p in emulators) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(p) for p in emulators)


def test_starting_an_emulator_runs_no_fork_handler_of_the_app(monkeypatch):
    """Inside an app, a fork runs the app's ``pthread_atfork`` handlers (OpenBLAS's shut its
    threads down beside an app thread in a BLAS call: pyopencl's ``test_dot`` hung under
    project mode). The emulator is started without a ``preexec_fn``, so ``subprocess``
    uses vfork, which runs none; Python's own fork hooks stand in for the app's here."""
    forks = []
    os.register_at_fork(before=lambda: forks.append(1))
    monkeypatch.setenv("CLPROJ_EMULATION_NICE", "5")  # as inside an app
    miniemu.emulate(records()["saxpy"], mode="single")
    assert forks == []


def test_emulator_failure_is_a_clear_error():
    rec = from_arrays(
        "__kernel void k(__global int *a) { a[0] = undefined; }",
        "k",
        [np.zeros(1, np.int32)],
        [1],
        [1],
    )
    with pytest.raises(ClprojError, match="emulation failed"):
        miniemu.emulate(rec, mode="single")


def test_unknown_mode_and_non_emulatable_record():
    rec = records()["saxpy"]
    with pytest.raises(ClprojError, match="unknown emulation mode"):
        miniemu.emulate(rec, mode="half")
    rec.emulatable = False
    rec.not_emulatable_reason = "not emulatable: image argument 2"
    with pytest.raises(ClprojError, match="image argument 2"):
        miniemu.emulate(rec)


def test_worker_threads_give_the_same_counts():
    rec = records()["reduce"]
    one = miniemu.emulate(rec, mode="full", threads=1)
    two = miniemu.emulate(rec, mode="full", threads=2)
    assert one.total == two.total


def test_no_leakage_across_launches_in_one_process(tmp_path):
    """Two launches in one Oclgrind process: the second one's numbers stand alone."""
    script = tmp_path / "two.py"
    script.write_text(
        "import numpy as np, pyopencl as cl\n"
        "ctx = cl.create_some_context(interactive=False); q = cl.CommandQueue(ctx)\n"
        f"prg = cl.Program(ctx, {KERNELS!r}).build()\n"
        "x = np.ones(4096, np.float32); mf = cl.mem_flags\n"
        "a = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x)\n"
        "b = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x)\n"
        "prg.reduce(q, (4096,), (128,), a, b, cl.LocalMemory(512))\n"
        "prg.saxpy(q, (4096,), (128,), a, b, np.float32(2), np.int32(4096))\n"
        "q.finish()\n"
    )
    out = tmp_path / "stats.jsonl"
    env = OclgrindBackend().environment("full", str(out), str(tmp_path / "log"))
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    kernels = [x for x in lines if x["type"] == "kernel"]
    assert [k["kernel"] for k in kernels] == ["reduce", "saxpy"]
    second = parse_plugin_output(lines, "full", 0.0)
    assert len(second.groups) == 32
    alone = miniemu.emulate(records()["saxpy"], mode="full")
    saxpy_sum = kernels[1]["sum"]
    assert saxpy_sum["instructions"] == alone.total["instructions"]
    assert saxpy_sum["barriers"] == 0 and saxpy_sum["local"]["accesses"] == 0


def test_profile_dict_round_trip_and_validation(full_profiles):
    d = full_profiles["reduce"].to_dict()
    assert d["format"] == "clproj.kernel-profile" and d["version"] == 1
    again = KernelProfile.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d
    for key in ("work_items", "instructions", "global", "local", "branches", "barriers", "atomics"):
        assert key in d["per_group"] and key in d["total"]
    assert d["per_group"]["local"]["bytes_per_group"] == 512
    assert d["per_group"]["private_bytes_per_work_item"] > 0
    assert d["emulation"]["emulator"] == "oclgrind 21.10"
    with pytest.raises(ClprojError, match="version"):
        KernelProfile.from_dict({**d, "version": 99})
    with pytest.raises(ClprojError, match="format"):
        KernelProfile.from_dict({**d, "format": "x"})


def test_cli_emulate(tmp_path, capsys):
    from clproj.cli import main

    path = save(records()["reduce"], str(tmp_path))
    assert main(["emulate", path, "--mode", "quick", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["emulation"]["mode"] == "quick" and doc["kernel"] == "reduce"
    assert main(["emulate", path]) == 0
    text = capsys.readouterr().out
    assert "Dynamic instructions" in text and "barrier" in text
    assert main(["emulate", os.path.join(str(tmp_path), "missing.clrec")]) == 2


def _huge_buffers(tmp_path, size: int) -> str:
    """saxpy saved with every buffer argument ``size`` bytes of zeros (no blob): a hostile
    record (before: the worker's mmap failed, and its traceback was the error)."""
    rec = records()["saxpy"]
    rec.args = [
        dataclasses.replace(a, size=size, blob=None) if a.kind == "buffer" else a for a in rec.args
    ]
    return save(rec, str(tmp_path / "rec"))


def _refused_sizes() -> list[int]:
    """1 TiB where this host refuses to map it (its overcommit policy), and a size beyond
    every address space, which no host maps."""
    try:
        mmap.mmap(-1, 2**40).close()
        return [2**63]
    except OSError:
        return [2**40, 2**63]


@pytest.mark.parametrize("size", _refused_sizes())
def test_a_buffer_the_host_cannot_map_is_one_line(tmp_path, size):
    path = _huge_buffers(tmp_path, size)
    cause = rf"field 'args\[0\]\.size' {size} bytes .*cannot be mapped on this machine"
    with pytest.raises(ClprojError, match=cause) as before:  # refused before a worker starts
        miniemu.emulate(path, mode="single")
    with pytest.raises(ClprojError, match="emulation failed in Oclgrind: .*" + cause) as inside:
        OclgrindBackend().run(path, "single", 60.0)  # the worker's own refusal, one line too
    for exc in (before.value, inside.value):
        assert "\n" not in exc.cause and "Traceback" not in exc.cause and exc.fix
    env = {**os.environ, "COLUMNS": "500"}
    for cmd in (["emulate", path], ["project", path, "--devices", "measured"]):
        proc = subprocess.run(
            [sys.executable, "-m", "clproj.cli", *cmd],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(lines) == 2 and lines[1].lstrip().startswith("fix: "), proc.stderr
        assert re.search(cause, lines[0]), proc.stderr


def test_a_worker_exception_is_one_line():
    """An exception the worker does not turn into its own error (a bug; the fork server's
    runs print theirs) is its type and message, not the traceback's frames."""
    stderr = (
        "oclgrind: a line of its own\n"
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "/x/worker.py", line 71, in run_record\n'
        "    result = replay(\n"
        "             ^^^^^^^\n"
        "KeyError: 3\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/x/record.py", line 319, in buffer_view\n'
        "    return mmap.mmap(-1, max(1, size))\n"
        "OSError: [Errno 12] Cannot allocate memory\n"
    )
    with pytest.raises(ClprojError) as exc:
        parsed([], 1, stderr, "", "single", 0.1)
    assert exc.value.cause == (
        "Oclgrind emulation failed (exit status 1, no statistics written): "
        "OSError: [Errno 12] Cannot allocate memory"
    )
    with pytest.raises(ClprojError, match=r"\(signal 11.*\): oclgrind: a line \| last words\n"):
        parsed([], -11, "oclgrind: a line\nlast words\n", "", "single", 0.1)  # no traceback
