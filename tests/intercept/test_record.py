"""Launch record format: round trip, content addressing, errors on bad files."""

from __future__ import annotations

import os
import re
from pathlib import Path

import blake3
import msgpack
import numpy as np
import pytest

from clproj.errors import ClprojError
from clproj.intercept import launch_lines as L
from clproj.intercept import record as R
from clproj.intercept.blobs import BlobStore
from clproj.intercept.record_writer import RecordWriter

SRC = "__kernel void axpy(float a, __global const float *x, __global float *y) { int i = get_global_id(0); y[i] = a * x[i] + y[i]; }"


def _rec(n=64):
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    return R.from_arrays(
        SRC, "axpy", [np.float32(2.0), x, y], n, 16, options="-cl-fast-relaxed-math"
    )


def test_round_trip(tmp_path):
    rec = _rec()
    rec.device = {"name": "d", "vendor": "v", "type": "CPU", "driver": "1"}
    rec.measured_time_ns = 1234
    rec.outputs = {2: rec.args[2].blob}
    path = R.save(rec, str(tmp_path))
    assert path.endswith(".clrec") and os.path.dirname(path) == str(tmp_path / "records")
    back = R.load(path)
    assert back.kernel == "axpy" and back.source == SRC and back.options == "-cl-fast-relaxed-math"
    assert back.global_size == [64] and back.local_size == [16] and back.work_dim == 1
    assert [a.kind for a in back.args] == ["scalar", "buffer", "buffer"]
    assert back.args[0].data == np.float32(2.0).tobytes()
    assert back.buffer_bytes(1) == np.arange(64, dtype=np.float32).tobytes()
    assert back.output_bytes(2) == np.ones(64, dtype=np.float32).tobytes()
    assert back.output_bytes(1) is None
    assert back.measured_time_ns == 1234 and back.device["name"] == "d"
    assert back.signature == rec.signature and back.program_hash == rec.program_hash
    assert R.list_records(str(tmp_path)) == [path]
    m = msgpack.unpackb(Path(path).read_bytes(), raw=False)
    assert m["format"] == R.FORMAT and m["version"] == 2 and m["signature"] == rec.signature


def test_local_null_and_signature():
    a = R.from_arrays(SRC, "k", [R.LocalArg(256), None, np.int32(3)], (8, 8), None)
    assert [x.kind for x in a.args] == ["local", "null", "scalar"] and a.args[0].size == 256
    assert a.local_size is None and a.work_dim == 2
    b = R.from_arrays(SRC, "k", [R.LocalArg(256), None, np.int32(4)], (8, 8), None)
    c = R.from_arrays(SRC, "k", [R.LocalArg(256), None, np.int32(3)], (8, 8), None)
    assert a.signature != b.signature and a.signature == c.signature
    with pytest.raises(ClprojError):
        R.from_arrays(SRC, "k", [object()], 8)


def test_content_addressing(tmp_path):
    r1, r2 = _rec(), _rec()
    R.save(r1, str(tmp_path))
    R.save(r2, str(tmp_path))
    blobs = os.listdir(tmp_path / "blobs")
    assert len(blobs) == 2  # x and y, shared by both records
    assert len(R.list_records(str(tmp_path))) == 2
    store = BlobStore(str(tmp_path))
    assert store.put(b"abc") == store.put(b"abc") and store.get(R.content_key(b"abc")) == b"abc"


def test_content_key_is_blake3_whatever_the_threads_or_the_chunks():
    """Blob keys are BLAKE3-256: the published vectors of the empty input and "abc", and
    the same key hashed whole and chunk by chunk as a snapshot is copied
    (intercept.snapshot_hash)."""
    from clproj.intercept import blobs
    from clproj.intercept.snapshot_hash import StreamHash

    assert blobs.content_key(b"") == (
        "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    )
    assert blobs.content_key(b"abc") == (
        "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
    )
    data = np.random.default_rng(3).integers(0, 256, (8 << 20) + 12345, np.uint8)
    whole = blobs.content_key(data)
    assert whole == blake3.blake3(data.tobytes(), max_threads=blake3.blake3.AUTO).hexdigest()
    stream = StreamHash(memoryview(data), data.nbytes)
    for end in (1, 4096, 5 << 20, data.nbytes):
        stream.filled(end)
    assert stream.result() == whole and blobs.is_blob_key(whole)
    assert blobs.zeros_key(3 << 20) == blobs.content_key(bytes(3 << 20))


def test_errors(tmp_path):
    path = R.save(_rec(), str(tmp_path))
    m = msgpack.unpackb(Path(path).read_bytes(), raw=False)
    bad = tmp_path / "bad.clrec"

    def write(obj):
        bad.write_bytes(msgpack.packb(obj, use_bin_type=True))

    write({**m, "version": R.VERSION + 1})
    with pytest.raises(ClprojError, match="'version'"):
        R.load(str(bad))
    write({**m, "version": 1})  # its blob keys are sha256: refused, not misread
    with pytest.raises(ClprojError, match=r"'version' is 1 \(its blobs are named by sha256\)"):
        R.load(str(bad))
    write({**m, "format": "something"})
    with pytest.raises(ClprojError, match="'format'"):
        R.load(str(bad))
    write({**m, "work_dim": 7})
    with pytest.raises(ClprojError, match="'work_dim'"):
        R.load(str(bad))
    write({k: v for k, v in m.items() if k != "args"})
    with pytest.raises(ClprojError, match="'args'"):
        R.load(str(bad))
    bad.write_bytes(b"\xc1\xc1garbage")
    with pytest.raises(ClprojError, match="not a record's encoding"):
        R.load(str(bad))
    # a corrupted blob is detected by its hash
    rec = R.load(path)
    blob = tmp_path / "blobs" / rec.args[1].blob
    blob.write_bytes(b"xx")
    with pytest.raises(ClprojError, match="corrupt"):
        rec.buffer_bytes(1)
    with pytest.raises(ClprojError):
        R.list_records(str(tmp_path / "nope"))


def test_background_writer_hashes_and_writes_before_hooks(tmp_path):
    """Snapshots attached with add_blob are hashed and written on the writer thread; the
    hook sees a complete record file; a queue over its memory cap still writes all."""
    seen: list[tuple[str, bool]] = []
    writer = RecordWriter(max_bytes=300)  # smaller than two records: submit must wait
    recs = []
    for i in range(4):
        rec = _rec()
        data = np.full(64, i, np.float32).tobytes()
        rec.blobs.clear()
        rec.args[1].blob = rec.add_blob(data)
        rec.args[2].blob = rec.add_blob(data)  # same content twice: one blob file
        assert rec.args[1].blob.startswith(R.PENDING_BLOB)
        recs.append(rec)
        writer.submit(
            rec, str(tmp_path), then=lambda r: seen.append((r.id, os.path.exists(r.path)))
        )
    assert writer.drain(timeout=30)
    assert [s[0] for s in seen] == [r.id for r in recs] and all(s[1] for s in seen)
    for i, rec in enumerate(recs):
        back = R.load(rec.path)
        assert back.args[1].blob == back.args[2].blob == R.content_key(back.buffer_bytes(1))
        assert back.buffer_bytes(2) == np.full(64, i, np.float32).tobytes()
    assert len(os.listdir(tmp_path / "blobs")) == 4


def test_builds_differing_only_in_options_are_recorded_apart(tmp_path):
    """One source built twice with different -D options is two programs: each one's first
    launch is recorded (the C shim's signature hashes source and options)."""
    import subprocess
    import sys
    import textwrap

    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            """
            import numpy as np, pyopencl as cl
            ctx = cl.create_some_context(interactive=False)
            q = cl.CommandQueue(ctx)
            src = "__kernel void k(__global int *a) { a[get_global_id(0)] = VALUE; }"
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64 * 4)
            for value in (1, 2):
                cl.Program(ctx, src).build(options=[f"-DVALUE={value}"]).k(q, (64,), None, buf)
            out = np.empty(64, np.int32)
            cl.enqueue_copy(q, out, buf)
            assert (out == 2).all()
            """
        )
    )
    rec = tmp_path / "rec"
    env = dict(os.environ, POCL_DEVICES="pthread")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "run",
            "--record",
            str(rec),
            "--",
            sys.executable,
            str(app),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    from clproj.intercept.record import list_records, load

    options = sorted(load(path).options.split()[0] for path in list_records(str(rec)))
    assert options == ["-DVALUE=1", "-DVALUE=2"]  # pyopencl appends its own -I option


def test_launch_lines_round_trip_and_skip_what_is_not_a_launch(tmp_path):
    """A launch without buffers, one JSON line (docs/formats.md, "Deferred launches"): read
    back with its program it has the signature of the launch it was written from; the
    lines an app that died mid-write or another version left are skipped."""
    rec = _rec()
    rec.asked = {"CL_DEVICE_MAX_COMPUTE_UNITS": 2}  # the launch-sizing answers travel too
    path = tmp_path / "deferred.jsonl"
    good = L.launch_line(rec)
    path.write_text(
        good
        + '{"v": 2, "kernel": "axpy"}\n'
        + good.replace('"work_dim": 1', '"work_dim": "one"')
        + '{"v": 1, "kernel": "x", "program_hash": "'
        + rec.program_hash
        + '"}\n'
        + good.replace('"asked": {"CL_DEVICE_MAX_COMPUTE_UNITS": 2}', '"asked": {"X": 1}')
        + good[: len(good) // 2]
    )
    programs = {rec.program_hash: (rec.source, rec.options)}
    back = L.read_launch_lines(str(path), programs)
    assert len(back) == 1
    assert back[0].signature == rec.signature and back[0].args[0].data == rec.args[0].data
    assert back[0].asked == rec.asked
    assert L.read_launch_lines(str(path), {}) == []
    assert L.read_launch_lines(str(tmp_path / "missing.jsonl"), programs) == []


def test_a_record_over_the_size_limit_is_never_written(tmp_path):
    """clproj refuses to read a record over MAX_RECORD_BYTES (an untrusted file); one made
    from a program source that large is refused when written, not when read back later."""
    from clproj.errors import ClprojError
    from clproj.intercept.record_check import MAX_RECORD_BYTES

    rec = _rec()
    rec.source = SRC + "//" + "x" * MAX_RECORD_BYTES + "\n"
    with pytest.raises(ClprojError, match=r"over the 64 MiB a record may be .*not written"):
        R.save(rec, str(tmp_path))
    assert not list(tmp_path.rglob("*.clrec"))
    rec.source = SRC + "//" + "x" * (MAX_RECORD_BYTES - 2**20) + "\n"  # just under: kept
    R.load(R.save(rec, str(tmp_path)))


def test_a_snapshot_equal_to_its_buffers_last_takes_its_hash_unhashed(tmp_path, monkeypatch):
    """The shim found a snapshot byte-equal to snapshot k of its buffer
    (intercept.last_snapshots): the writer names it by k's hash without hashing it, where
    k is the buffer's last snapshot hashed (``last``), and hashes it otherwise."""
    src = "__kernel void k(__global float *a) { }"
    data = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
    last: dict[int, tuple[int, str]] = {}
    hashed: list[int] = []
    content_key = R.content_key
    big = lambda b: len(b) >= data.nbytes  # noqa: E731  (not from_arrays' 4-byte placeholder)
    monkeypatch.setattr(
        R, "content_key", lambda b: (big(b) and hashed.append(len(b))) or content_key(b)
    )

    def saved(content: np.ndarray, seq: int, same: int | None) -> R.LaunchRecord:
        rec = R.from_arrays(src, "k", [np.zeros(1, np.float32)], 1)
        rec.args[0].size = content.nbytes
        blob = bytearray(content.tobytes())
        rec.args[0].blob = rec.add_blob(blob, source=(0xB0F, seq, same))
        R.save(rec, str(tmp_path), last=last)
        return rec

    first = saved(data, 1, None)
    assert last == {0xB0F: (1, first.args[0].blob)} and first.stored_bytes == data.nbytes
    assert len(hashed) == 1
    again = saved(data, 1, 1)
    assert again.args[0].blob == first.args[0].blob and again.stored_bytes == 0
    assert len(hashed) == 1  # not hashed
    changed = data.copy()
    changed[-1] += 1
    other = saved(changed, 2, None)
    assert other.args[0].blob == BlobStore(str(tmp_path)).put(changed.tobytes())
    assert other.args[0].blob != first.args[0].blob and len(hashed) == 2
    stale = saved(data, 1, 1)  # equal to snapshot 1, but `last` holds snapshot 2: hashed
    assert stale.args[0].blob == first.args[0].blob and len(hashed) == 3


def test_last_snapshots_compare_every_byte(tmp_path):
    """The shim's comparison with a buffer's last snapshot (a mapping of its file) tells a
    change in the last byte, and a new snapshot of the buffer replaces the last one."""
    from clproj.intercept.last_snapshots import LastSnapshots, same_bytes

    data = np.arange(1 << 18, dtype=np.float32).tobytes()
    path = tmp_path / "snap"
    path.write_bytes(data)
    last = LastSnapshots()
    assert last.previous(7, len(data)) is None
    seq = last.remember(7, str(path), len(data))
    path.unlink()  # the writer renamed or removed the file: the mapping stays
    got, old = last.previous(7, len(data))
    assert got == seq and last.previous(7, len(data) - 4) is None
    changed = bytearray(data)
    changed[-1] ^= 1
    assert same_bytes(bytearray(data), old) and not same_bytes(changed, old)
    previous = last.previous(7, len(data))
    assert last.equals_previous(bytearray(data), previous)
    assert not last.equals_previous(changed, previous)
    with last.lock:
        stage = last.staging(len(data))
        stage[:] = changed
        assert not same_bytes(stage, old)


def test_last_snapshots_kept_are_bounded_by_the_record_limit(tmp_path, monkeypatch):
    """A kept mapping holds a removed file's disk space: the most recent ones are kept, up
    to CLPROJ_RECORD_MAX_BYTES in all."""
    from clproj.intercept.last_snapshots import LastSnapshots

    size = 1 << 20
    monkeypatch.setenv("CLPROJ_RECORD_MAX_BYTES", str(2 * size))
    last = LastSnapshots()
    for source in range(4):
        path = tmp_path / f"s{source}"
        path.write_bytes(bytes([source]) * size)
        last.remember(source, str(path), size)
    assert [s for s in range(4) if last.previous(s, size)] == [2, 3]


def test_a_snapshot_of_zeros_is_stored_sparse_and_hashed_once_per_size(tmp_path, monkeypatch):
    """A snapshot the shim found to be all zeros (a buffer no launch wrote yet) is named
    by the hash of that many zeros, computed once per size, and stored as a sparse file
    that reads back as zeros; the store's other blobs are hashed as before."""
    from clproj.intercept import blobs
    from clproj.intercept.last_snapshots import LastSnapshots, all_zero, same_bytes

    size = 4 << 20
    last = LastSnapshots()
    seq, zeros = last.remember_zeros(0xA, size)
    assert len(zeros) == size and all_zero(zeros) and last.previous(0xA, size)[0] == seq
    assert same_bytes(bytearray(size), zeros)
    # compared with the last snapshot, zeros are told from a change in the last byte
    changed = bytearray(size)
    changed[-1] = 1
    previous = last.previous(0xA, size)
    assert last.equals_previous(bytearray(size), previous)
    assert not last.equals_previous(changed, previous)
    src = "__kernel void k(__global float *a, __global float *b) { }"
    rec = R.from_arrays(src, "k", [np.zeros(1, np.float32)] * 2, 1)
    hashed: list[int] = []
    content_key = R.content_key
    monkeypatch.setattr(R, "content_key", lambda b: hashed.append(len(b)) or content_key(b))
    blobs.zeros_key.cache_clear()
    for i, a in enumerate(rec.args):
        a.size = size
        a.blob = rec.add_blob(memoryview(zeros), source=(0xA + i, seq, None), zeros=True)
    R.save(rec, str(tmp_path), last={})
    want = blake3.blake3(bytes(size)).hexdigest()
    assert rec.args[0].blob == rec.args[1].blob == want and rec.stored_bytes == size
    assert hashed == [] and blobs.zeros_key.cache_info().misses == 1  # one hash
    blob = tmp_path / "blobs" / want
    assert blob.stat().st_size == size and blob.stat().st_blocks == 0  # sparse
    assert R.load(rec.path).buffer_bytes(0) == bytes(size)  # content hash checked
    assert not [n for n in os.listdir(tmp_path / "blobs") if n.startswith(".")]


def test_all_zero_tells_any_set_byte():
    from clproj.intercept.last_snapshots import all_zero

    assert all_zero(bytearray(0)) and all_zero(bytearray(1 << 20))
    for where in (0, 1, (1 << 20) - 1):
        data = bytearray(1 << 20)
        data[where] = 1
        assert not all_zero(data)


def test_snapshot_comparisons_work_on_read_only_mappings_without_numpy():
    """The shim's snapshot path compares through the buffer protocol and memcmp: read-only
    mappings (a buffer's last snapshot) included, and without importing numpy, which a C
    app's first large snapshot would otherwise wait for."""
    import subprocess
    import sys

    code = (
        "import mmap, sys\n"
        "from clproj.intercept import last_snapshots as L, shim_runtime\n"
        "zeros = mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)\n"
        "data = bytearray(2 << 20)\n"
        "assert L.all_zero(zeros) and L.same_bytes(data, zeros)\n"
        "data[-1] = 7\n"
        "assert not L.all_zero(data) and not L.same_bytes(data, zeros)\n"
        "assert not L.same_bytes(data, bytearray(1 << 20))\n"
        "zeros.close()  # nothing still refers to the mapping\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_snapshot_hashed_while_copied_is_named_by_its_content(tmp_path, monkeypatch):
    """The shim copies a changed snapshot into its scratch file chunk by chunk while a
    thread hashes each copied chunk (intercept.snapshot_hash): the writer takes that hash
    without hashing the blob again, and it is the content key of the content, also for a size
    that is not a whole number of chunks."""
    from clproj.intercept import snapshot_hash as S

    monkeypatch.setattr(S, "CHUNK_BYTES", 1 << 16)
    src = "__kernel void k(__global float *a) { }"
    data = np.random.default_rng(5).random((1 << 18) + 3, np.float32)  # 4 chunks and a bit
    hashed: list[int] = []
    content_key = R.content_key
    monkeypatch.setattr(
        R, "content_key", lambda b: (len(b) > 8 and hashed.append(len(b))) or content_key(b)
    )
    path, view = BlobStore(str(tmp_path)).scratch(data.nbytes)
    digest = S.copy_and_hash(path, view, memoryview(data.tobytes()), data.nbytes)
    rec = R.from_arrays(src, "k", [np.zeros(1, np.float32)], 1)
    rec.args[0].size = data.nbytes
    rec.args[0].blob = rec.add_blob(view, scratch=path, digest=digest)
    R.save(rec, str(tmp_path))
    assert rec.args[0].blob == blake3.blake3(data.tobytes()).hexdigest()
    assert not hashed  # the writer hashed nothing
    assert not os.path.exists(path)  # the scratch file became the blob
    assert BlobStore(str(tmp_path)).get(rec.args[0].blob, data.nbytes) == data.tobytes()


def test_a_failed_copy_stops_its_hash_and_a_dropped_record_its_hasher(tmp_path):
    """A copy that fails part way cancels its hasher (the caller then closes the mapping
    it read); a record dropped before it was saved (the launch failed) cancels the hashes
    of its snapshots, so no thread reads a closed mapping."""
    import mmap

    from clproj.intercept.snapshot_hash import StreamHash, copy_and_hash

    path = tmp_path / "scratch"
    path.write_bytes(bytes(1 << 20))
    with open(path, "rb") as fh:
        target = mmap.mmap(fh.fileno(), 1 << 20, access=mmap.ACCESS_READ)
    with pytest.raises(ValueError, match="holds 524288 of 1048576 bytes"):
        copy_and_hash(str(path), target, memoryview(bytes(1 << 19)), 1 << 20)  # short source
    target.close()  # no view of it is left to the hasher

    rec = R.from_arrays("__kernel void k(__global float *a) { }", "k", [np.zeros(1, np.float32)], 1)
    view = mmap.mmap(-1, 1 << 20)
    half = StreamHash(view, 1 << 20)
    half.filled(1 << 19)  # the copy never ends
    rec.args[0].blob = rec.add_blob(view, digest=half)
    rec.drop_blobs()  # cancels, then closes the mapping
    assert view.closed
    with pytest.raises(RuntimeError, match="cancelled"):
        half.result()


def test_a_zeros_hash_started_at_the_snapshot_is_computed_once():
    """The shim starts the hash of a zeros snapshot's size when it finds one (before the
    launch runs); the writer then waits for that hash instead of computing it again."""
    from clproj.intercept import blobs

    size = (3 << 20) + 5
    blobs.zeros_key.cache_clear()
    blobs.prepare_zeros_key(size)
    blobs.prepare_zeros_key(size)  # once per size
    assert blobs.prepared_zeros_key(size) == blake3.blake3(bytes(size)).hexdigest()
    assert blobs.zeros_key.cache_info().misses == 1


def test_a_dropped_snapshot_is_kept_as_such_and_its_content_refused(tmp_path):
    """Project mode without --record stops copying a launch's snapshots once the launch is
    projected (intercept.live_view.release): the record says which, survives a round trip,
    and refuses to give their content rather than read them as zeros."""
    rec = _rec()
    rec.args[1].blob, rec.args[1].dropped = None, True
    back = R.load(R.save(rec, str(tmp_path)))
    assert back.args[1].dropped and back.args[1].blob is None and not back.args[2].dropped
    for read in (back.buffer_bytes, back.buffer_view):
        with pytest.raises(ClprojError, match="argument 1 of axpy has no snapshot") as err:
            read(1)
        assert "--record DIR" in str(err.value)
    assert back.buffer_bytes(2) == np.ones(64, dtype=np.float32).tobytes()

    m = msgpack.unpackb(Path(back.path).read_bytes(), raw=False)
    bad = tmp_path / "bad.clrec"
    for arg, field in (({"dropped": "yes"}, "args[1].dropped"),
                       ({"dropped": True, "blob": "ab" * 32}, "args[1].dropped")):  # fmt: skip
        args = [dict(a, **arg) if a["index"] == 1 else a for a in m["args"]]
        bad.write_bytes(msgpack.packb({**m, "args": args}, use_bin_type=True))
        with pytest.raises(ClprojError, match=re.escape(f"'{field}'")):
            R.load(str(bad))


def test_a_copy_asked_to_stop_stops_between_chunks(tmp_path, monkeypatch):
    """write_file asks ``stop`` before each chunk and says how much it wrote: what lets an
    app stop copying a snapshot nobody will read (intercept.live_view.LiveView.released)."""
    from clproj.intercept import snapshot_hash as S

    monkeypatch.setattr(S, "CHUNK_BYTES", 1 << 16)
    data = np.random.default_rng(3).integers(0, 255, 5 << 16, dtype=np.uint8).tobytes()
    path, view = BlobStore(str(tmp_path)).scratch(len(data))
    asked = []
    assert S.write_file(path, data, len(data), stop=lambda: asked.append(1) or len(asked) > 2) == (
        2 << 16
    )
    assert len(asked) == 3 and view[: 2 << 16] == data[: 2 << 16] and not any(view[2 << 16 :])
    assert S.write_file(path, data, len(data), stop=lambda: False) == len(data)
    assert view[:] == data
    view.close()


def test_a_live_view_is_released_only_where_it_may_be(tmp_path):
    """clproj run's release (the second word of the state file) reaches the app's view;
    a view that must copy whole (--record: CLPROJ_SNAPSHOT_VIEW=live) never says released,
    and a release after the app removed its files is no error."""
    from clproj.intercept.live_view import LiveView, release

    rec = _rec()
    views = {}
    for i, releasable in enumerate((True, False)):
        view = LiveView(str(tmp_path), releasable=releasable)
        view.publish(f"axpy-{i}", rec.to_map(), {})
        assert not view.released()
        views[releasable] = view
    for view in views.values():
        release(view.state_path)
    assert views[True].released() and not views[False].released()
    views[True].done()  # the app's own word stays apart from clproj run's
    assert views[True].released()
    os.unlink(views[True].state_path)
    release(views[True].state_path)
    assert not views[True].released()
