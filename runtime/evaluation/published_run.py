"""Building a published-results suite's app and recording its launches, cached in a work folder.

``clproj validate-published`` needs the launch records of BabelStream or mixbench at the
configuration each published result was measured with (BabelStream's array size, mixbench's
buffer, elements per work-item and fusion degree). The app is built from the suite's own
sources, unmodified, into ``WORK/build``, and run once per distinct configuration as
``clproj run --mode observe --record WORK/runs/<tag>/record --kernel K ... --json``: only
the kernels the truth judges are recorded (BabelStream's ``init`` is not), the first launch
of each signature. A run that finished writes ``WORK/runs/<tag>/run.json``; a later
validation finds it and records nothing again, so that projecting onto changed device
profiles or a changed model re-reads the same records instead of re-running the app (a
mixbench sweep runs for many minutes on a CPU).

This is the only part of the published-results validation that starts processes.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clproj.atomic import write_atomic
from clproj.errors import ClprojError
from clproj.intercept.record import VERSION as RECORD_VERSION
from clproj.runtime.evaluation.validate_suite import run_in_session

# Per suite kind: the sources that make the binary and the g++ line that builds it (the
# suites' READMEs: BabelStream's upstream CMake downloads headers, so it is built directly;
# mixbench-opencl's CMake only adds a version header and a half2 check, which the line
# reproduces with the OpenCL 1.2 headers that define cl_half2).
SOURCES = {
    "babelstream": ["src"],
    "mixbench": ["mixbench-opencl", "include"],
}
BINARY = {"babelstream": "babelstream-ocl", "mixbench": "mixbench-ocl"}
_CL12 = [
    "-DCL_TARGET_OPENCL_VERSION=120",
    "-DCL_HPP_TARGET_OPENCL_VERSION=120",
    "-DCL_HPP_MINIMUM_OPENCL_VERSION=120",
]


def build_command(kind: str, suite: str, out: str) -> list[str]:
    if kind == "babelstream":
        src = os.path.join(suite, "src")
        return [
            "g++",
            "-O2",
            "-std=c++20",
            "-DOCL",
            *_CL12,
            f"-I{src}",
            f"-I{src}/ocl",
            os.path.join(src, "main.cpp"),
            os.path.join(src, "ocl", "OCLStream.cpp"),
            "-lOpenCL",
            "-o",
            out,
        ]
    src = os.path.join(suite, "mixbench-opencl")
    return [
        "g++",
        "-O2",
        "-std=c++17",
        f"-I{os.path.join(suite, 'include')}",
        os.path.join(src, "main-ocl.cpp"),
        os.path.join(src, "mix_kernels_ocl.cpp"),
        "-lOpenCL",
        "-o",
        out,
    ]


def fingerprint(suite: str, kind: str) -> str:
    """A hash of the sources the binary is built from: a changed source rebuilds it."""
    h = hashlib.sha256(kind.encode())
    for root in SOURCES[kind]:
        for dirpath, dirnames, filenames in os.walk(os.path.join(suite, root)):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                h.update(
                    f"{os.path.relpath(path, suite)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
                )
    return h.hexdigest()[:16]


def default_work_dir(suite: str, kind: str) -> str:
    from clproj import paths

    tag = hashlib.sha256(os.path.realpath(suite).encode()).hexdigest()[:8]
    return os.path.join(paths.cache_dir("published"), f"{kind}-{tag}")


def ensure_built(kind: str, suite: str, work: str) -> str:
    """The app's binary in ``WORK/build``, built now unless its sources are unchanged."""
    build = os.path.join(work, "build")
    binary = os.path.join(build, BINARY[kind])
    stamp = os.path.join(build, ".clproj-build-stamp")
    want = fingerprint(suite, kind)
    try:
        with open(stamp, encoding="utf-8") as fh:
            if fh.read().strip() == want and os.access(binary, os.X_OK):
                return binary
    except OSError:
        pass
    if not shutil.which("g++"):
        raise ClprojError(f"building {kind} needs g++", "install g++ (apt-get install g++)")
    os.makedirs(build, exist_ok=True)
    proc = subprocess.run(
        build_command(kind, suite, binary), capture_output=True, text=True, cwd=build
    )
    if proc.returncode != 0 or not os.access(binary, os.X_OK):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ClprojError(
            f"building {kind} failed (g++ exit {proc.returncode}: {tail[0]})",
            f"see the suite's README for its build line; sources: {suite}",
        )
    if kind == "mixbench":  # the app opens mix_kernels.cl from its working directory
        shutil.copyfile(
            os.path.join(suite, "mixbench-opencl", "mix_kernels.cl"),
            os.path.join(build, "mix_kernels.cl"),
        )
    with open(stamp, "w", encoding="utf-8") as fh:
        fh.write(want + "\n")
    return binary


@dataclass
class RecordedRun:
    """One configuration's recording: where its records are, or why there are none."""

    tag: str
    args: list[str]
    ok: bool
    wall_s: float = 0.0
    cached: bool = False
    error: str | None = None
    records: list[str] = field(default_factory=list)
    output_tail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "tag": self.tag,
            "args": self.args,
            "ok": self.ok,
            "wall_s": self.wall_s,
            "cached": self.cached,
            "error": self.error,
            "records": len(self.records),
            **({"output_tail": self.output_tail} if not self.ok else {}),
        }


def _records(folder: str, kernels: Sequence[str]) -> list[str]:
    """The run's records of ``kernels`` (a run may hold other kernels too)."""
    from clproj.intercept.record import load

    paths = sorted(glob.glob(os.path.join(folder, "records", "*.clrec")))
    return [p for p in paths if load(p).kernel in kernels]


def record_run(
    work: str,
    binary: str,
    tag: str,
    args: Sequence[str],
    kernels: Sequence[str],
    timeout_s: float,
    snapshot_limit: int | None = None,
    on_start: Callable[[str, list[str]], None] | None = None,
) -> RecordedRun:
    """Run ``binary args`` once under ``clproj run --record`` (or find the finished run).

    ``snapshot_limit`` is the run's ``CLPROJ_RECORD_MAX_BYTES`` (0: none), for an app whose
    one sweep must be recorded whole: mixbench records 66-132 launches of one 256 MB
    buffer that no launch writes (one blob on disk, counted once), and a sweep cut short
    by the limit could only be run again from its start. ``on_start(tag, command)`` is called
    when the app is started (not for a finished run found on disk): a run can take minutes.
    """
    folder = os.path.join(work, "runs", tag)
    done = os.path.join(folder, "run.json")
    rec = os.path.join(folder, "record")
    # what a finished run must match to be reused: the same arguments, records of this
    # format version (e.g. not blobs named by sha256), every kernel asked for among its
    # kernels. A run that lacks some is made again with the kernels of both, so that two
    # truth folders judging different kernels (BabelStream's Dot) stop replacing each
    # other's runs.
    same = {"args": list(args), "record_version": RECORD_VERSION}
    wanted = list(kernels)
    if os.path.exists(done):
        with open(done, encoding="utf-8") as fh:
            meta = json.load(fh)
        had = meta.get("kernels") if isinstance(meta.get("kernels"), list) else []
        if all(meta.get(k) == v for k, v in same.items()):
            if set(wanted) <= set(had):
                return RecordedRun(
                    tag, list(args), True, meta.get("wall_s", 0.0), True, None,
                    _records(rec, wanted),
                )  # fmt: skip
            kernels = [*had, *(k for k in wanted if k not in had)]
    identity = {**same, "kernels": list(kernels)}
    if os.path.exists(folder):
        shutil.rmtree(folder)  # an interrupted or differently configured run
    os.makedirs(folder)
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "observe", "--record", rec]
    for k in kernels:
        cmd += ["--kernel", k]
    cmd += ["--json", "--", binary, *args]
    env = dict(os.environ)
    if snapshot_limit is not None:
        env["CLPROJ_RECORD_MAX_BYTES"] = str(snapshot_limit)
    if on_start:
        on_start(tag, [os.path.basename(binary), *args])
    session = run_in_session(cmd, os.path.dirname(binary), env, timeout_s)
    out, err, wall, rc = session.out, session.err, session.wall_s, session.returncode
    if session.timed_out:
        return RecordedRun(tag, list(args), False, wall, error=f"timed out after {timeout_s:.0f} s")
    tail = "\n".join(err.strip().splitlines()[-6:])
    records = _records(rec, wanted)
    if rc != 0 or not records:
        why = f"app exit code {rc}" if rc else "no launch was recorded"
        return RecordedRun(tag, list(args), False, wall, error=why, output_tail=tail)
    meta = {**identity, "wall_s": wall, "app_stdout": out[-4000:]}
    write_atomic(done, json.dumps(meta, indent=1).encode())
    return RecordedRun(tag, list(args), True, wall, False, None, records)
