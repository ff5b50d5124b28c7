"""What a changed snapshot of a large buffer costs the app's launch: the copy into its file.

Project mode reads a large buffer into a staging buffer kept for the process, and copies
it into a new file of the blob store only when it differs from the buffer's last snapshot
and from zeros (intercept.last_snapshots); the copy runs in the app's thread, before the
launch, while another thread hashes what it copied (intercept.snapshot_hash). This
benchmark times that copy from a staging buffer (already touched, as in the app) into a
new file, interleaved round by round:

* ``mapped``: stores through a shared writable mapping of the file, the file created at
  its size (every first store to a page faults it in);
* ``pwrite``: ``os.pwrite`` of each chunk into the same kind of file
  (``snapshot_hash.write_file``, what the shim does);
* ``pwrite+hash``: the shim's whole path, the copy with the streamed hash beside it
  (``snapshot_hash.copy_and_hash``, the content key: BLAKE3); ``hash ready`` is when the
  digest is;
* ``pwrite+sha256``: the same with sha256 streamed beside the copy (hashlib's fastest
  here, the content key of launch records version 1).

Per method: the copy's median and range over the rounds, in ms per MiB and for the
buffer. The files go where project mode puts them unless ``--dir`` says otherwise
(``tempfile.gettempdir()``).

    python -m clproj.benchmarks.snapshot_copy [--mib 400] [--rounds 5] [--dir D] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from clproj.console import publish
from clproj.intercept.blobs import BlobStore, content_hasher
from clproj.intercept.snapshot_hash import CHUNK_BYTES, copy_and_hash, write_file

MiB = 1 << 20


def _through_mapping(path: str, view: Any, stage: memoryview) -> None:
    for start in range(0, len(stage), CHUNK_BYTES):
        end = min(len(stage), start + CHUNK_BYTES)
        view[start:end] = stage[start:end]


def _with_pwrite(path: str, view: Any, stage: memoryview) -> None:
    write_file(path, stage, len(stage))


def _timed(store: BlobStore, stage: memoryview, copy: Callable[..., None]) -> tuple[float, float]:
    """(copy seconds, the same again): ``copy`` into a new scratch file, then removed."""
    path, view = store.scratch(len(stage))
    t0 = time.perf_counter()
    copy(path, view, stage)
    copied = time.perf_counter() - t0
    view.close()
    os.unlink(path)
    return copied, copied


def mapped(store: BlobStore, stage: memoryview) -> tuple[float, float]:
    return _timed(store, stage, _through_mapping)


def pwrite(store: BlobStore, stage: memoryview) -> tuple[float, float]:
    return _timed(store, stage, _with_pwrite)


def pwrite_hash(
    store: BlobStore, stage: memoryview, hasher: Callable[[], Any] = content_hasher
) -> tuple[float, float]:
    path, view = store.scratch(len(stage))
    t0 = time.perf_counter()
    digest = copy_and_hash(path, view, stage, len(stage), hasher)
    copied = time.perf_counter() - t0
    digest.result()
    hashed = time.perf_counter() - t0
    view.close()
    os.unlink(path)
    return copied, hashed


METHODS: dict[str, Callable[[BlobStore, memoryview], tuple[float, float]]] = {
    "mapped": mapped,
    "pwrite": pwrite,
    "pwrite+hash": pwrite_hash,
    "pwrite+sha256": lambda store, stage: pwrite_hash(store, stage, hashlib.sha256),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=400, help="snapshot size (MiB)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the files go (default: the temp dir)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="clproj-snapshot-copy-", dir=args.dir)
    try:
        store = BlobStore(work)
        stage = memoryview(bytearray(os.urandom(MiB)) * args.mib)  # touched, as in the app
        copies: dict[str, list[float]] = {m: [] for m in METHODS}
        ready: dict[str, list[float]] = {m: [] for m in METHODS}
        for _ in range(args.rounds):
            for name, method in METHODS.items():
                c, h = method(store, stage)
                copies[name].append(c)
                ready[name].append(h)
        fs = os.statvfs(work)
        lines = [
            "## A changed snapshot's copy into its file (the app's launch waits for it)\n",
            f"`python -m clproj.benchmarks.snapshot_copy --mib {args.mib} --rounds "
            f"{args.rounds}{f' --dir {args.dir}' if args.dir else ''}` ({os.cpu_count()} cores, files in {os.path.dirname(work)}, "
            f"{fs.f_bsize}-byte blocks; load average at the end "
            f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n",
            "| method | copy, median (ms/MiB) | copy, range (ms/MiB) | copy of "
            f"{args.mib} MiB, median (s) | hash ready, median (s) |",
            "|---|---|---|---|---|",
        ]
        for name in METHODS:
            med = statistics.median(copies[name])
            lo, hi = min(copies[name]), max(copies[name])
            lines.append(
                f"| {name} | {med * 1e3 / args.mib:.3f} | {lo * 1e3 / args.mib:.3f}-"
                f"{hi * 1e3 / args.mib:.3f} | {med:.3f} | "
                + (f"{statistics.median(ready[name]):.3f} |" if "+" in name else "- |")
            )
        base = statistics.median(copies["mapped"])
        lines.append(
            f"\npwrite / mapped, copy medians: {statistics.median(copies['pwrite']) / base:.2f}x; "
            "hash ready, BLAKE3 / sha256 medians: "
            f"{statistics.median(ready['pwrite+hash']) / statistics.median(ready['pwrite+sha256']):.2f}x\n"
        )
        publish("\n".join(lines) + "\n", args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
