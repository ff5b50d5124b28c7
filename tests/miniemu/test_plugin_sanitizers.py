"""The Oclgrind plugin under AddressSanitizer and UndefinedBehaviorSanitizer.

Why: the plugin runs inside every emulation, on kernels users bring; a memory error in it
does not crash reliably, it miscounts (a stale operand table once made the dependence
pass read freed memory: the counts still came out, sometimes wrong). Here the plugin is
rebuilt with ``-fsanitize=address,undefined`` from the same sources and flags
(``native/build_plugin.py``), and the emulation worker runs a set of kernels that
exercises every pass (coalescing, local banks and barriers, divergence, atomics, loops,
dependence chains through memory and pointers, vector accesses) on two Oclgrind threads,
so that per-thread state is merged under the lock too. Each run must end cleanly, with no
sanitizer report, and count exactly what the ordinary build counts.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from clproj.intercept.record import LocalArg, from_arrays, save
from clproj.miniemu.oclgrind import OclgrindBackend
from tests.conftest import build_key, kept_build, sanitizer_reports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "native"))
import build_plugin  # noqa: E402  (native/ is a folder of build scripts, not a package)

SANITIZERS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined")

SRC = """
__kernel void copy(__global const float *a, __global float *b, int s) {
  int i = get_global_id(0);
  b[i] = a[(i * s) % get_global_size(0)];
}
__kernel void reduce(__global const float *a, __global float *out, __local float *t) {
  int l = get_local_id(0);
  t[l] = a[get_global_id(0)];
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l < s) t[l * 2 % get_local_size(0)] += t[l + s];
  }
  if (l == 0) out[get_group_id(0)] = t[0];
}
__kernel void hist(__global const int *a, __global int *h, __local int *lh) {
  int l = get_local_id(0);
  lh[l % 8] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  atomic_inc(&lh[a[get_global_id(0)] % 8]);
  if (l & 1) atomic_add(&h[a[get_global_id(0)] % 16], 1);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l < 8) atomic_add(&h[l], lh[l]);
}
__kernel void gesummv(__global const float *A, __global float *y, __global const float *x,
                      int n) {
  int i = get_global_id(0);
  for (int j = 0; j < n; j++) {
    y[i] += A[i * n + j] * x[j];
    y[n + i] += A[j * n + i] / (x[j] + 1.0f);
  }
}
__kernel void chase(__global const int *next, __global int *out, int hops) {
  int p = get_global_id(0);
  for (int h = 0; h < hops; h++) p = next[p];
  out[get_global_id(0)] = p;
}
__kernel void vec(__global const float *a, __global float *b) {
  int i = get_global_id(0);
  float4 v = vload4(i, a);
  if (i % 3 == 0) v = v * 2.0f; else v = sqrt(v);
  vstore4(v, i, b);
}
"""
N = 64


def launches() -> list:
    rng = np.random.default_rng(3)
    f = np.ones(N * N, np.float32)
    nxt = np.roll(np.arange(N, dtype=np.int32), -1)
    return [
        ("copy", [f[:N], np.zeros(N, np.float32), np.int32(3)], [N], [16]),
        ("reduce", [f[:N], np.zeros(4, np.float32), LocalArg(16 * 4)], [N], [16]),
        (
            "hist",
            [rng.integers(0, 100, N).astype(np.int32), np.zeros(16, np.int32), LocalArg(32)],
            [N],
            [16],
        ),
        ("gesummv", [f, np.zeros(2 * N, np.float32), f[:N], np.int32(N)], [N], [16]),
        ("chase", [nxt, np.zeros(N, np.int32), np.int32(N)], [N], [16]),
        ("vec", [f[: 4 * N], np.zeros(4 * N, np.float32)], [N], [16]),
    ]


def sanitized_command(out: str) -> list[str]:
    """``build_plugin.command`` with the sanitizers and debug flags instead of ``-O2``."""
    cmd = [c for c in build_plugin.command(out) if c != "-O2"]
    cmd[1:1] = ["-g", "-O1", "-fno-omit-frame-pointer", *SANITIZERS]
    return cmd


def build_sanitized(out: str, workdir: str) -> None:
    """The sanitized build of ``sanitized_command(out)``, one translation unit per core at
    a time (compiling them is most of the minute this costs), then one link."""
    cmd = sanitized_command(out)
    flags = [c for c in cmd[1:] if c not in build_plugin.SOURCES and c != "-shared"]
    flags = flags[: flags.index("-o")]
    objects = [os.path.join(workdir, f"{i}.o") for i in range(len(build_plugin.SOURCES))]

    def compile_one(src_obj: tuple[str, str]) -> None:
        src, obj = src_obj
        subprocess.run([cmd[0], *flags, "-c", src, "-o", obj], check=True, capture_output=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(compile_one, zip(build_plugin.SOURCES, objects, strict=True)))
    link = [cmd[0], *flags, "-shared", *objects, "-o", out, "-loclgrind"]
    subprocess.run(link, check=True, capture_output=True)


@pytest.fixture(scope="module")
def sanitized_plugin(sanitizer_env) -> str:
    """The plugin built with the sanitizers: kept from an earlier run when the same
    sources, flags and toolchain built it (tests/conftest.py ``kept_build``), else now."""
    cmd = sanitized_command(build_plugin.PLUGIN_FILENAME)
    cmd = cmd[: cmd.index("-o")] + cmd[cmd.index("-o") + 2 :]  # the key without the output
    native = os.path.join(ROOT, "native")
    own = glob.glob(os.path.join(native, "oclgrind_plugin", "*"))
    key = build_key(cmd, [*own, os.path.join(native, "clproj_settings.h")])

    def build(folder: str) -> str:
        out = os.path.join(folder, build_plugin.PLUGIN_FILENAME)
        build_sanitized(out, folder)
        return out

    return kept_build("asan-plugin", key, build_plugin.PLUGIN_FILENAME, build)


def run_worker(
    record_path: str, plugin: str, out_dir: str, sanitizer: dict[str, str] | None
) -> tuple[int, str, list]:
    out_path = os.path.join(out_dir, "stats.jsonl")
    env = OclgrindBackend().environment("full", out_path, os.path.join(out_dir, "log"), threads=2)
    env["OCLGRIND_PLUGINS"] = plugin
    if sanitizer:  # the sanitizer runtime must be the first library of the process
        env.update(sanitizer, LD_PRELOAD=sanitizer["LD_PRELOAD"] + ":" + env["LD_PRELOAD"])
    proc = subprocess.run(
        [sys.executable, "-m", "clproj.miniemu.worker", record_path],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    lines = []
    if os.path.exists(out_path):
        with open(out_path) as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
    return proc.returncode, proc.stderr, lines


@pytest.mark.parametrize("which", range(len(launches())), ids=[k[0] for k in launches()])
def test_plugin_is_clean_under_sanitizers(which, sanitized_plugin, sanitizer_env, tmp_path) -> None:
    from clproj.native import oclgrind_plugin

    kernel, args, gsz, lsz = launches()[which]
    path = save(from_arrays(SRC, kernel, args, gsz, lsz), str(tmp_path / "rec"))
    rc, err, lines = run_worker(path, sanitized_plugin, str(tmp_path), sanitizer_env)
    reports = sanitizer_reports(err)
    assert rc == 0 and not reports, err[-4000:]
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    rc_plain, err_plain, plain = run_worker(path, oclgrind_plugin(), str(plain_dir), None)
    assert rc_plain == 0, err_plain[-2000:]
    kernels = [d for d in lines if d.get("type") == "kernel"]
    assert kernels, "no kernel statistics written"

    def totals(ls: list) -> list:
        # Groups finish in any order on two threads: compare their statistics sorted.
        return sorted(
            json.dumps(d["stats"], sort_keys=True) for d in ls if d.get("type") == "group"
        )

    assert totals(lines) == totals(plain) and totals(lines)
