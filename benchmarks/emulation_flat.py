"""Emulation cost against buffer size and loop length: is the first projection flat?

The paper's promise is a projection whose cost "stays relatively constant with the input
data size". This benchmark times what project mode pays per new kernel, the bounded
emulation of a saved launch record (`miniemu.emulate(record, mode="bounded")`, worker
process included), over two axes:

* buffer size: a streaming copy over 1 MiB to 1 GiB per buffer (NULL local size, as
  BabelStream launches it);
* loop length: 256 work-items each summing a row of 10^2 to 10^5 elements.

Each record is emulated three times from a cold page cache (its blobs evicted): in the
attempt-then-probes order with one worker process per run (``speculate=False``), with
the fork server, scout and speculative probes (docs/miniemu.md "Bounded emulation"), and
the same forked from a server held and warmed before, as ``clproj run`` holds one for a
whole run (``miniemu.oclgrind.shared_server``); the row says whether the three profiles
are identical and how many snapshot bytes the first two read
(``mincore`` on the blobs). Beside the copies it times reading and hashing the whole
snapshots (``LaunchRecord.buffer_bytes``): what an emulator handed whole buffers pays.
``--records`` adds saved launch records (PolyBench, the heavy apps) to the comparison.

``--loop-axis`` times the loop axis alone in half decades (10^2 to 10^5 trips, where the
cost of a whole-group attempt peaked between the decades), in a run's server, with the
probes' cost rule off (``CHEAPER_RATIO`` infinite: the attempt decides up to its budget)
and on, interleaved per point for ``--rounds`` rounds, and compares every counter of each
profile with the whole group's (``single`` mode, up to 10^4 trips).

    python -m clproj.benchmarks.emulation_flat [--max-mib 1024] [--records R.clrec ...] [--out FILE]
    python -m clproj.benchmarks.emulation_flat --loop-axis [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import sys
import tempfile
import time

import numpy as np

from clproj.console import publish
from clproj.intercept.record import from_arrays, load, save

COPY = """
__kernel void copy(__global const double *a, __global double *c) {
  const size_t i = get_global_id(0);
  c[i] = a[i];
}
"""
ROWSUM = """
__kernel void rowsum(__global const float *m, __global float *out, int n) {
  const int r = get_global_id(0);
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc += m[r * n + j];
  out[r] = acc;
}
"""
ROWS = 256


def evict(path: str) -> None:
    """Drop a file's pages from the page cache (written back first): the next reader
    reads from the disk, as an emulation long after the app's run would."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_bytes(path: str) -> int:
    """Bytes of a file in the page cache (``mincore``): after :func:`evict`, what was
    read since (read-ahead included)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    page = mmap.PAGESIZE
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        base = ctypes.c_char.from_buffer(mm)
        vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        if libc.mincore(ctypes.addressof(base), size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        del base
        return sum(1 for v in vec if v & 1) * page
    finally:
        mm.close()


def blob_files(record: object) -> list[str]:
    """The blob files of a saved record's buffer snapshots."""
    from clproj.intercept.blobs import BlobStore

    store = BlobStore(record.store_dir)  # type: ignore[attr-defined]
    return [
        os.path.join(store.path, a.blob)
        for a in record.args  # type: ignore[attr-defined]
        if a.kind == "buffer" and a.blob
    ]


def timed_emulation(record: object, speculate: bool) -> dict[str, object]:
    """One bounded emulation of a saved record from a cold page cache: its seconds, the
    snapshot bytes it read, its method and profile."""
    from clproj.miniemu.bounded import emulate_bounded

    files = blob_files(record)
    for f in files:
        evict(f)
    t0 = time.perf_counter()
    profile = emulate_bounded(record, speculate=speculate)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    return {
        "s": seconds,
        "read": sum(resident_bytes(f) for f in files),
        "method": profile.emulation.get("method", profile.emulation["mode"]),
        "runs": profile.emulation.get("emulator_runs", 1),
        "instructions": profile.emulation.get("instructions_emulated", 0),
        "profile": profile,
    }


def whole_read_s(record: object) -> float:
    """Seconds to read and hash every snapshot (``LaunchRecord.buffer_bytes``) from a cold
    page cache: what an emulator that is handed whole buffers pays before it starts."""
    files = blob_files(record)
    for f in files:
        evict(f)
    t0 = time.perf_counter()
    for a in record.args:  # type: ignore[attr-defined]
        if a.kind == "buffer":
            record.buffer_bytes(a.index)  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f}" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def side_by_side(label: str, size: str, record: object, whole: bool, warm_up: object) -> str:
    """One table row: the attempt-then-probes order (one worker per run), the fork server
    of the emulation's own with speculative probes, and the same forked from the server a
    ``clproj run`` holds (miniemu.oclgrind.shared_server, started and warmed before), same
    record, one after the other. ``warm_up``: a tiny record emulated first in the run's
    server, whose imports then happen before the app's first launch."""
    from clproj.miniemu.oclgrind import shared_server

    a = timed_emulation(record, speculate=False)
    b = timed_emulation(record, speculate=True)
    with shared_server():
        timed_emulation(warm_up, speculate=True)
        c = timed_emulation(record, speculate=True)
    same = all(
        x["profile"].total == a["profile"].total  # type: ignore[attr-defined]
        for x in (b, c)
    )
    ref = f"{whole_read_s(record):.2f}" if whole else ""
    return (
        f"| {label} | {size} | {a['s']:.2f} | {b['s']:.2f} | {c['s']:.2f} | "
        f"{a['runs']} / {b['runs']} | {a['instructions']:,} / {b['instructions']:,} | "
        f"{_mib(a['read'])} / {_mib(b['read'])} | {a['method']} / {b['method']} | "
        f"{'yes' if same else 'NO'} | {ref} |"
    )


LOOP_TRIPS = (100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
WHOLE_UP_TO = 10_000  # trips: a whole group beyond costs tens of seconds of emulation
# The loop axis's columns: key, label, whether the emulation forks its runs from a template
# (miniemu.fork_server; else each from the server), and the probes' cost rule
# (``bounded.CHEAPER_RATIO``; None: as shipped).
LOOP_COLUMNS = (
    ("off", "attempt decides", True, float("inf")),
    ("on", "with cheaper probes", True, None),
    ("whole", "with cheaper probes, every run forked whole from the server", False, None),
)


def warm_up_record(tmp: str) -> object:
    """A tiny saved record, emulated first in a fresh server so that no timed emulation
    pays the server's start."""
    tiny = np.zeros(256, np.float64)
    return load(save(from_arrays(COPY, "copy", [tiny, tiny], [256], None), tmp))


def loop_axis(tmp: str, rounds: int) -> list[str]:
    """Table lines: per trip count, seconds of the bounded emulation in a run's server
    with the probes' cost rule off and on, and on with every run forked whole from the
    server (no template, ``miniemu.fork_server``): median and range over ``rounds``, its
    method and whether its counters equal the whole group's."""
    import statistics

    from clproj import miniemu

    records = {}
    for trips in LOOP_TRIPS:
        m = np.ones(ROWS * trips, dtype=np.float32)
        rec = from_arrays(
            ROWSUM, "rowsum", [m, np.zeros(ROWS, np.float32), np.int32(trips)], [ROWS], [64]
        )
        records[trips] = load(save(rec, os.path.join(tmp, f"loop{trips}")))
        del m, rec
    times, profiles = _time_loop_axis(records, warm_up_record(tmp), rounds)
    lines = [
        "| trips | attempt decides (s) | with cheaper probes (s) | ... every run forked whole "
        "(s) | method, off / on | counters equal to the whole group's, off / on / whole |",
        "|---|---|---|---|---|---|",
    ]

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"

    keys = [key for key, *_ in LOOP_COLUMNS]
    for trips in LOOP_TRIPS:
        same = "not emulated whole"
        if trips <= WHOLE_UP_TO:
            whole = miniemu.emulate(records[trips], mode="single", timeout_s=600)  # type: ignore[arg-type]
            same = " / ".join(
                "yes" if profiles[(trips, c)].total == whole.total else "NO"  # type: ignore[attr-defined]
                for c in keys
            )
        methods = " / ".join(profiles[(trips, c)].emulation["method"] for c in keys[:2])  # type: ignore[attr-defined]
        seconds = " | ".join(cell(times[(trips, c)]) for c in keys)
        lines.append(f"| {trips:,} | {seconds} | {methods} | {same} |")
    for key, label, *_ in LOOP_COLUMNS:
        meds = [statistics.median(times[(t, key)]) for t in LOOP_TRIPS]
        lines.append(f"\n{label}: largest / smallest median {max(meds) / min(meds):.2f}x")
    return lines


def _time_loop_axis(
    records: dict[int, object], warm: object, rounds: int
) -> tuple[dict[tuple[int, str], list[float]], dict[tuple[int, str], object]]:
    """Seconds and profiles per (trips, column of ``LOOP_COLUMNS``) for :func:`loop_axis`:
    in each round a server without templates, then one with them, each warmed by one
    emulation first and running the columns it serves."""
    from clproj.miniemu import bounded
    from clproj.miniemu.bounded import emulate_bounded
    from clproj.miniemu.oclgrind import shared_server

    rule = bounded.CHEAPER_RATIO
    times: dict[tuple[int, str], list[float]] = {}
    profiles: dict[tuple[int, str], object] = {}

    def emulate(trips: int, column: str) -> None:
        t0 = time.perf_counter()
        prof = emulate_bounded(records[trips])  # type: ignore[arg-type]
        times.setdefault((trips, column), []).append(time.perf_counter() - t0)
        profiles[(trips, column)] = prof

    for _ in range(rounds):
        for templated in (False, True):
            with shared_server(templates=templated):
                emulate_bounded(warm)  # type: ignore[arg-type]
                for trips in LOOP_TRIPS:
                    for key, _, uses, ratio in LOOP_COLUMNS:
                        if uses != templated:
                            continue
                        bounded.CHEAPER_RATIO = rule if ratio is None else ratio
                        try:
                            emulate(trips, key)
                        finally:
                            bounded.CHEAPER_RATIO = rule
    return times, profiles


def _short(path: str) -> str:
    """A record path as the table names it: its folder's name and its file name (the
    records are made by ``clproj run --mode project --record FOLDER``, module docstring)."""
    return os.path.join(
        os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(path)))),
        os.path.basename(path),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-mib", type=int, default=1024, help="largest buffer (MiB)")
    ap.add_argument("--records", nargs="*", default=[], help="also compare these .clrec files")
    ap.add_argument("--out", help="also write the tables (Markdown) here")
    ap.add_argument(
        "--loop-axis", action="store_true", help="the loop axis alone: rule off/on, templates off"
    )
    ap.add_argument("--rounds", type=int, default=3, help="--loop-axis: rounds per point")
    args = ap.parse_args(argv)
    if args.loop_axis:
        load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        with tempfile.TemporaryDirectory(prefix="clproj-flat-") as tmp:
            rows = loop_axis(tmp, max(1, args.rounds))
        head = [
            "## Emulation cost along the loop axis: the probes' cost rule off and on, and "
            "every run forked whole from the server (one run)",
            "",
            f"`python -m clproj.benchmarks.emulation_flat --loop-axis --rounds {args.rounds} "
            f"--out benchmarks/results/emulation_flat.md` ({os.cpu_count()}-core machine, "
            f"load average at the start {load_avg}). A 256-row sum (groups of 64, rows of n "
            "floats: n = 1,000 and 3,000 rows start off a 128-byte line) emulated bounded in a "
            "run's server (`miniemu.oclgrind.shared_server`), with `CHEAPER_RATIO` infinite "
            "(the attempt decides up to its budget) and as shipped, and as shipped in a server "
            "whose runs each fork whole from it (`WorkerServer(templates=False)`: each run "
            "loads the record and makes its context, program and kernel; as shipped, the runs "
            "of one emulation fork from a template that did that once, `miniemu.fork_server`), "
            "a server for each column in each round; seconds: median (range) over the rounds.",
            "",
        ]
        publish("\n".join(head + rows) + "\n", args.out)
        return 0
    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        "## Emulation cost vs buffer size and loop length (bounded mode, one run)",
        "",
        "`python -m clproj.benchmarks.emulation_flat"
        + (" --records " + " ".join(_short(r) for r in args.records) if args.records else "")
        + " --out benchmarks/results/emulation_flat.md` "
        f"({os.cpu_count()}-core machine, Oclgrind 21.10, load average at the start "
        f"{load_avg}). Each row: the same saved record emulated three times from a cold page "
        "cache, *before* (attempt, then probes; one worker process per run), *after* "
        "(fork server, scout and speculative probes; docs/miniemu.md) and *in a run* (the "
        "same, forked from the one server `clproj run` holds, started before: "
        "`miniemu.oclgrind.shared_server`).",
        "",
        "| launch | size | before (s) | after (s) | in a run (s) | runs | instructions emulated | "
        "snapshot MiB read | method | same profile (all three) | reading whole snapshots (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def emit(line: str) -> None:
        lines.append(line)
        sys.stderr.write(line + "\n")

    with tempfile.TemporaryDirectory(prefix="clproj-flat-") as tmp:
        warm = warm_up_record(tmp)
        mib = 1
        while mib <= args.max_mib:
            n = mib * 2**20 // 8
            a = np.arange(n, dtype=np.float64)
            rec = from_arrays(COPY, "copy", [a, np.zeros_like(a)], [n], None)
            record = load(save(rec, os.path.join(tmp, f"c{mib}")))
            del a, rec
            emit(side_by_side("copy, NULL local", f"2 x {mib} MiB", record, True, warm))
            mib *= 8 if mib < 64 else 4
        for trips in (100, 1000, 10_000, 100_000):
            m = np.ones(ROWS * trips, dtype=np.float32)
            arrays = [m, np.zeros(ROWS, np.float32), np.int32(trips)]
            rec = from_arrays(ROWSUM, "rowsum", arrays, [ROWS], [64])
            record = load(save(rec, os.path.join(tmp, f"r{trips}")))
            emit(side_by_side(f"rowsum, {ROWS} rows", f"{trips} trips", record, False, warm))
        for path in args.records:
            record = load(path)
            app = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(path))))
            emit(side_by_side(record.kernel, f"record ({app})", record, False, warm))
    text = "\n".join(lines) + "\n"
    publish(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
