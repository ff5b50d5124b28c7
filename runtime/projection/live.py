"""Projection of recorded launches, cached per kernel signature (``clproj run --mode project``).

A launch record is mini-emulated once per signature (program + kernel + NDRange shape +
scalar arguments) and projected on the local devices' profiles; the result is cached on
disk (``~/.cache/clproj/projections``, or ``$CLPROJ_CACHE/projections``) so a second run
of the same application gets its projections without emulating again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from clproj import native, paths, settings
from clproj.atomic import write_atomic
from clproj.errors import ClprojError, say_once
from clproj.untrusted import read_regular_file

FORMAT = "clproj.launch-projection"
VERSION = 1


def cache_dir() -> str:
    return paths.cache_dir("projections")


def emulation_mode() -> str:
    """The emulation mode of project mode: ``$CLPROJ_EMULATION_MODE``, default ``bounded``.

    ``bounded`` is the default because project mode must give every launch a profile
    within a budget, heavy work-groups included (docs/miniemu.md); the app and
    :func:`complete_run` read the same variable, so both sides emulate alike.
    """
    return str(settings.get("CLPROJ_EMULATION_MODE"))


# The code a cached projection depends on: after any change to the model or to the
# emulation that feeds it (or an upgrade of clproj) its projections are made again instead
# of served from the cache. Whole packages, so that a module added later counts too.
_MODEL_PACKAGES = ("clproj.runtime.projection", "clproj.miniemu")
_model_version: str | None = None


def model_sources() -> list[str]:
    """The Python files of :data:`_MODEL_PACKAGES` (top level of each), in a stable order."""
    import importlib.util

    files: list[str] = []
    for package in _MODEL_PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(
                os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")
            )
    return files


def model_version() -> str:
    """A hash of the bound model's and the emulation's code (:func:`model_sources`), the
    Oclgrind plugin that counts its inputs (a rebuilt plugin may count new statistics, e.g.
    ``dependence.fp_chain``) and this format."""
    global _model_version
    if _model_version is None:
        h = hashlib.sha256(f"{FORMAT}/{VERSION}".encode())
        for path in model_sources():
            h.update(os.path.basename(path).encode())
            with open(path, "rb") as fh:
                h.update(fh.read())
        try:
            with open(native.oclgrind_plugin(), "rb") as fh:
                h.update(fh.read())
        except ClprojError:
            pass  # not built: nothing is emulated, nothing cached from it
        _model_version = h.hexdigest()[:12]
    return _model_version


def devices_id(devices: list[Any]) -> str:
    """The devices *and* their numbers: a re-measured profile of the same key gives a new id."""
    text = "|".join(
        f"{d.key}@{d.data.get('source', {}).get('date', '')}@{_profile_digest(d)}" for d in devices
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


_digests: dict[int, tuple[Any, str]] = {}


def _profile_digest(profile: Any) -> str:
    """Hash of a profile's numbers, once per profile object (LU projects 2000 launches)."""
    hit = _digests.get(id(profile))
    if hit is None or hit[0] is not profile:
        text = json.dumps(profile.data, sort_keys=True).encode()
        hit = (profile, hashlib.sha256(text).hexdigest()[:12])
        _digests[id(profile)] = hit
    return hit[1]


def _header(record: Any) -> dict[str, Any]:
    """What every projection document of ``record`` starts with, made or failed (with
    ``asked`` and ``note`` where the app read launch-sizing answers first)."""
    return _asked(record) | {
        "format": FORMAT,
        "version": VERSION,
        "signature": record.signature,
        "kernel": record.kernel,
        "global_size": record.global_size,
        "local_size": record.local_size,
        "measured_device": record.device.get("name"),
        "measured_time_ns": record.measured_time_ns,
    }


def _asked(record: Any) -> dict[str, Any]:
    """The launch-sizing answers the app read before ``record``'s launch, and what that
    means for its projection (intercept.size_queries); empty when it read none."""
    from clproj.intercept.size_queries import record_note

    said = record_note(record)
    return {"asked": dict(record.asked), "note": said} if said else {}


def _with_asked(doc: dict[str, Any], record: Any) -> dict[str, Any]:
    """A cached projection document with this launch's :func:`_asked`, not the one of the
    launch it was first made for."""
    kept = {k: v for k, v in doc.items() if k not in ("asked", "note")}
    return kept | _asked(record)


def failed_projection(record: Any, error: str) -> dict[str, Any]:
    """The projection document of a launch that could not be projected: its row says why."""
    return _header(record) | {"error": error, "cached": False}


def project_record(
    record: Any,
    devices: list[Any],
    mode: str = "single",
    timeout_s: float = 60.0,
    use_cache: bool = True,
    profile: dict[str, Any] | None = None,
    cache: Any = None,
) -> dict[str, Any]:
    """Emulate (or reuse) and project one record; returns a ``clproj.launch-projection`` dict.

    ``profile`` (a kernel profile, e.g. scaled from the reuse cache) skips emulation; a
    profile of method ``reused`` skips the disk cache too: such launches carry no buffer
    snapshots. ``cache`` (a
    :class:`miniemu.reuse.ReuseCache`) emulates the record as one of its anchors (a launch
    that was snapshotted to be emulated); without it the process-wide cache decides.
    """
    return _project_record(record, devices, mode, timeout_s, use_cache, profile, cache)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _cache_problem(doc: Any, record: Any) -> str:  # noqa: C901
    """Why a cached projection cannot be served ('' when it can). The cache is a file on
    disk like any other: a truncated, edited or foreign one must not reach the tables
    (a missing field was a traceback after the app; a NaN time was shown and ranked)."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        return "another format or version"
    if doc.get("signature") != record.signature:
        return "another launch's signature"
    for key in ("kernel", "recommended"):
        if not isinstance(doc.get(key), str):
            return f"field {key} missing or not text"
    shape = doc.get("global_size")
    if not isinstance(shape, list) or not all(type(v) is int and v > 0 for v in shape):
        return "field global_size missing or not a list of positive integers"
    projections = doc.get("projections")
    if not isinstance(projections, list) or not projections:
        return "field projections missing or empty"
    for p in projections:
        if not isinstance(p, dict) or not isinstance(p.get("device"), str):
            return "a projection without a device"
        for key in ("time_s", "t_compute", "t_global", "t_local"):
            v = p.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                return f"field {key} of {p['device']} is not a finite number"
        if p["time_s"] <= 0:
            return f"field time_s of {p['device']} is not positive"
        if p.get("bound") not in ("C", "G", "L", "D"):
            return f"field bound of {p['device']} is not one of C, G, L, D"
    if doc["recommended"] not in {p["device"] for p in projections}:
        return "the recommended device is none of the projected ones"
    if not isinstance(doc.get("emulation"), dict):
        return "field emulation missing"
    if doc.get("profile") is not None:
        from clproj.miniemu.profile import validate_profile

        try:
            validate_profile(doc["profile"])
        except ClprojError as exc:
            return f"its kernel profile: {exc.cause}"
    return ""


MAX_CACHED_BYTES = 16 << 20  # one projection with its kernel profile: kilobytes


def _read_cached(path: str, record: Any) -> dict[str, Any] | None:
    """The cached projection at ``path`` when it is whole and valid for ``record``; else
    None (projected again), with one line saying why when the file is bad. The cache is a
    folder of files anyone may have touched: the read is bounded and refuses what is not a
    regular file (a FIFO would block for ever, ``/dev/zero`` never end); a bad entry that
    is not a folder is removed, so that this projection takes its place."""
    try:
        raw = read_regular_file(path, "cached projection", MAX_CACHED_BYTES)
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        problem = _cache_problem(doc, record)
    except ClprojError as exc:
        if not os.path.lexists(path):
            return None  # gone meanwhile (another run replaced it): projected again, quietly
        problem = exc.cause
    except ValueError as exc:  # not UTF-8, not JSON, NaN or Infinity
        problem = f"not valid JSON ({exc})"
    if not problem:
        return doc
    print(f"clproj: ignored a bad cached projection ({problem}); projecting again", file=sys.stderr)
    paths.discard_cache_entry(path)
    return None


def _cache_path(name: str) -> str | None:
    """The projection cache's file ``name``, or None where the cache folder cannot be made
    (a read-only or full disk): projections are then made and shown, not kept."""
    try:
        return os.path.join(cache_dir(), name)
    except OSError as exc:
        _cache_unwritable(os.path.join(settings.get("CLPROJ_CACHE"), "projections"), exc)
        return None


def _cache_unwritable(where: str, exc: OSError) -> None:
    """One line per process: the projection cache cannot be written (the projections of
    this run are still made, shown and posted; the next run makes them again)."""
    say_once(
        "projection-cache",
        f"cannot write the projection cache {where} ({exc.strerror or exc}); "
        "projections are made but not kept (set CLPROJ_CACHE to a writable folder)",
    )


def _keep(path: str | None, doc: dict[str, Any]) -> None:
    """Store a projection in the cache, where it can be: a failed write costs the cache
    entry, never the projection."""
    if path is None:
        return
    try:
        write_atomic(path, json.dumps(doc).encode())
    except OSError as exc:
        _cache_unwritable(path, exc)


def _project_record(
    record: Any,
    devices: list[Any],
    mode: str,
    timeout_s: float,
    use_cache: bool,
    profile: dict[str, Any] | None,
    cache: Any,
) -> dict[str, Any]:
    from clproj.runtime.projection.model import rank, record_footprint

    path = _cache_path(
        f"{record.signature[:32]}-{mode}-{devices_id(devices)}-{model_version()}.json"
    )
    reused = profile is not None and profile["emulation"].get("method") == "reused"
    if not reused and use_cache and path is not None and os.path.lexists(path):
        doc = _read_cached(path, record)
        if doc is not None:
            if doc.get("profile"):  # let later launches of the family reuse it
                from clproj.miniemu.profile import KernelProfile
                from clproj.miniemu.reuse import default_cache

                (cache or default_cache(mode, timeout_s)).seed(
                    record, KernelProfile.from_dict(doc["profile"])
                )
            doc["cached"] = True
            return _with_asked(doc, record)
    start = time.perf_counter()
    base = _header(record)
    if not record.emulatable:
        return failed_projection(record, record.not_emulatable_reason or "not emulatable")
    if profile is None:
        try:
            # Launches differing only in NDRange / pivot-like scalars reuse one emulation
            # (miniemu.reuse: explicit per-work-item scaling, sampled drift checks).
            from clproj.miniemu.reuse import profile_for

            if cache is not None:
                profile = cache.emulated(record).to_dict()
            else:
                profile = profile_for(record, mode=mode, timeout_s=timeout_s).to_dict()
        except ClprojError as exc:
            return failed_projection(record, exc.cause)
    from clproj.runtime.projection.power import OBJECTIVES, project_power, rank_by

    footprint = record_footprint(record)
    ranked = rank(profile, devices, footprint)
    low = {d.key for d in devices if d.low_confidence}
    by_key = {d.key: d for d in devices}
    powers = {p.device_key: project_power(p, profile, by_key[p.device_key]) for p in ranked}
    doc = base | {
        "emulation": profile["emulation"],
        "footprint_bytes": footprint,
        "elapsed_s": time.perf_counter() - start,
        # from the launch (its record was made then) to its projection: what routing waits
        "since_launch_s": round(time.time() - record.created, 4) if record.created else None,
        "projections": [
            {
                "device": p.device_key,
                "name": p.device_name,
                "time_s": p.time_s,
                "bound": p.bound,
                "t_compute": p.t_compute,
                "t_global": p.t_global,
                "t_local": p.t_local,
                "energy_j": powers[p.device_key].energy_j,
                "power_w": powers[p.device_key].power_w,
                "power_confidence": powers[p.device_key].confidence,
                **({"low_confidence": True} if p.device_key in low else {}),
            }
            for p in ranked
        ],
        "recommended": ranked[0].device_key,
        # every objective's choice, so `clproj run --objective` picks after the app
        # without projecting again (runtime/projection/power.py)
        "recommended_by": {o: rank_by(o, ranked, powers)[0].device_key for o in OBJECTIVES},
        "cached": False,
    }
    if reused:
        return doc
    doc["profile"] = profile
    if profile["emulation"].get("budget") == "wall":
        # Bounded emulation cut short by the wall-clock backstop: its statistics depend on
        # the machine's load, not only on the launch, so they are not cached as its own.
        return doc
    _keep(path, doc)
    return doc


def complete_run(
    record_dir: str,
    deferred_file: str | None = None,
    devices_spec: str = "local",
    mode: str | None = None,
    objective: str = "time",
    live: Any = None,
    run_tag: str = "",
) -> list[dict[str, Any]]:
    """After the app exited: project every record not projected while it ran, and every
    launch the app left to the reuse cache (``deferred_file``). With ``run_tag``
    (intercept.identity.run_tag) only this run's records count: others in a shared
    ``--record`` folder are an earlier or another run's.

    ``live`` (a :class:`runtime.projection.live_run.LiveProjector`, started before the
    app) has emulated and projected records while the app ran; it finishes the rest one
    per core. Without it (``CLPROJ_LIVE_EMULATION=0``) every record is emulated here. The
    reuse cache is rebuilt from the records in launch order: a projected record seeds its
    profile, a missing one is emulated (it was snapshotted because the app's cache chose
    it as an anchor or drift check). Each deferred launch is then scaled from the nearest
    anchor of its entry (``ReuseCache.scaled``). ``mode`` defaults to
    :func:`emulation_mode`, as in the app. ``recommended`` is each launch's choice by
    ``objective`` (time, energy or edp).
    """
    from clproj.intercept.identity import of_run
    from clproj.intercept.live_view import remove_live_files
    from clproj.intercept.record import SUFFIX, list_records, load
    from clproj.runtime.projection import device_set

    mode = mode or emulation_mode()
    start = time.perf_counter()
    done: dict[str, dict[str, Any]] = {}
    during = 0
    if live is not None:
        try:
            done.update(live.finish())
        except KeyboardInterrupt:  # Ctrl-C after the app: keep what is projected so far
            print("clproj: interrupted; showing the launches projected so far", file=sys.stderr)
            done.update(live.done)
            _summary(done, live.during_app, live.after_app, time.perf_counter() - start)
            return choose(list(done.values()), objective)
        finally:  # read no more: each launch has its record proper (intercept.live_view)
            remove_live_files(record_dir)
        during = live.during_app
    try:
        paths = [
            p
            for p in list_records(record_dir)
            if of_run(os.path.basename(p).removesuffix(SUFFIX), run_tag)
        ]
    except ClprojError:
        paths = []
    records = []
    for path in paths:  # one unreadable record (e.g. an older clproj's) costs only itself
        try:
            records.append(load(path))
        except ClprojError as exc:
            print(f"clproj: not projected: {exc.cause}", file=sys.stderr)
    records.sort(key=lambda r: (r.created, r.id))
    _settle_published(done, records)
    missing = [r for r in records if r.signature not in done]
    programs = {r.program_hash: (r.source, r.options) for r in records}
    from clproj.intercept.launch_lines import read_launch_lines

    deferred = [r for r in read_launch_lines(deferred_file, programs) if r.signature not in done]
    after = live.after_app if live is not None else 0
    if not missing and not deferred:
        _summary(done, during, after, time.perf_counter() - start)
        return choose(list(done.values()), objective)
    devices = live.devices() if live is not None else device_set.resolve(devices_spec)
    try:
        _complete(records, missing, deferred, done, devices, mode)
    except KeyboardInterrupt:  # Ctrl-C after the app: keep what is projected so far
        print("clproj: interrupted; showing the launches projected so far", file=sys.stderr)
    emulated = sum(1 for r in missing if r.signature in done)  # all, unless interrupted
    _summary(done, during, after + emulated, time.perf_counter() - start)
    return choose(list(done.values()), objective)


def _settle_published(done: dict[str, dict[str, Any]], records: list[Any]) -> None:
    """Project mode publishes a record at its launch and writes it again with the launch's
    measured time (intercept.shim_runtime.pre_launch); the live projection read the first
    file. Its document takes the time from the file as the app left it (and the arguments
    whose copies the app stopped, intercept.live_view.release), and a launch whose record
    the app withdrew (the launch failed) loses its document."""
    final = {r.signature: r for r in records}
    for signature in [s for s in done if s not in final]:
        del done[signature]
    for signature, doc in done.items():
        if doc.get("measured_time_ns") is None:
            doc["measured_time_ns"] = final[signature].measured_time_ns
        dropped = [a.index for a in final[signature].args if a.dropped]
        if dropped:  # the app stopped copying these once the projection stood
            doc["dropped_snapshots"] = dropped


def choose(docs: list[dict[str, Any]], objective: str) -> list[dict[str, Any]]:
    """Each projection's ``recommended`` set to its choice by ``objective``; a cached
    projection from before energy was projected keeps its choice by time."""
    for doc in docs:
        pick = (doc.get("recommended_by") or {}).get(objective)
        if pick:
            doc["recommended"] = pick
        if doc.get("projections"):
            doc["objective"] = objective if pick else "time"
    return docs


def _complete(
    records: list[Any],
    missing: list[Any],
    deferred: list[Any],
    done: dict[str, dict[str, Any]],
    devices: list[Any],
    mode: str,
) -> None:
    """complete_run's work: fills ``done`` (signature -> projection) as it goes."""
    from clproj.background_thread import map_in_threads
    from clproj.console import track
    from clproj.miniemu.profile import KernelProfile
    from clproj.miniemu.reuse import ReuseCache

    cache = ReuseCache(mode=mode)
    todo = set(id(r) for r in missing)
    for r in records:  # the projected records first: anchors of their families
        doc = done.get(r.signature)
        if id(r) in todo or doc is None or not doc.get("profile"):
            continue
        cache.seed(r, KernelProfile.from_dict(doc["profile"]))
    # Launches snapshotted but not emulated before the app exited: the app is gone, so
    # every core is idle; one emulation per core (each runs in a subprocess of its own,
    # the reuse cache takes its anchors under its lock), in launch order per batch.
    pending = [r for r in records if id(r) in todo]
    workers = max(1, os.cpu_count() or 1)
    batches = [pending[i : i + workers] for i in range(0, len(pending), workers)]
    for batch in track(batches, "projecting recorded launches"):
        docs = map_in_threads(
            lambda r: project_record(r, devices, mode, cache=cache), batch, "clproj-emulate"
        )
        for r, doc in zip(batch, docs, strict=True):
            done[r.signature] = doc
    for r, doc in zip(deferred, project_reused(deferred, cache, devices, mode), strict=True):
        done[r.signature] = doc


# Reused launches are projected in forked worker processes once there are this many per
# worker: a fork and its first answers cost about as much as 50 projections.
REUSED_PER_WORKER = 200
REUSED_CHUNK = 128
_forked: tuple[list[Any], Any, list[Any], str] | None = None  # what forked workers project


def _reused_doc(r: Any, cache: Any, devices: list[Any], mode: str) -> dict[str, Any]:
    """The projection of a launch the reuse cache answers: its family's anchors scaled to
    it (``ReuseCache.scaled`` changes nothing but counters, so any order gives the same)."""
    prof = cache.scaled(r)
    if prof is not None:
        return project_record(r, devices, mode, profile=prof.to_dict())
    return {
        "format": FORMAT,
        "version": VERSION,
        "signature": r.signature,
        "kernel": r.kernel,
        "global_size": r.global_size,
        "local_size": r.local_size,
        "error": "no launch of its family was emulated",
        "cached": False,
    }


def _reused_span(span: tuple[int, int]) -> list[dict[str, Any]]:
    assert _forked is not None
    deferred, cache, devices, mode = _forked
    return [_reused_doc(r, cache, devices, mode) for r in deferred[span[0] : span[1]]]


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def project_reused(
    deferred: list[Any], cache: Any, devices: list[Any], mode: str, workers: int | None = None
) -> Iterator[dict[str, Any]]:
    """The projections of the launches the app left to the reuse cache (``cache``, a
    :class:`miniemu.reuse.ReuseCache` seeded with their families' anchors), in their order;
    ``workers`` processes (default: one per core, when each gets REUSED_PER_WORKER).

    Why in processes: the app has exited and every core is idle, but the projections are
    Python (about 2.4 ms a launch on the 2-core VM; PolyBench lu leaves 8,190 launches, 20 s
    on one core). Forked workers inherit the seeded cache and the device profiles; only
    index ranges go to them and documents come back."""
    global _forked
    from clproj.console import track

    if workers is None:
        workers = min(os.cpu_count() or 1, len(deferred) // REUSED_PER_WORKER)
    if workers < 2:
        for r in track(deferred, "projecting reused launches"):
            yield _reused_doc(r, cache, devices, mode)
        return
    import multiprocessing

    n = len(deferred)
    spans = [(i, min(i + REUSED_CHUNK, n)) for i in range(0, n, REUSED_CHUNK)]
    _forked = (deferred, cache, devices, mode)
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_ignore_sigint) as pool:
            docs = pool.imap(_reused_span, spans)
            for chunk in track(docs, "projecting reused launches", total=len(spans)):
                yield from chunk
    finally:
        _forked = None


def _summary(done: dict[str, dict[str, Any]], during: int, after: int, seconds: float) -> None:
    """One stderr line: how every launch got its projection (benchmarks parse it)."""
    docs = list(done.values())
    reused = sum(1 for d in docs if d.get("emulation", {}).get("method") == "reused")
    projected = sum(1 for d in docs if d.get("projections"))
    print(
        f"clproj: {projected}/{len(docs)} launches projected; {during + after} snapshotted and "
        f"emulated ({during} while the app ran, {after} after it), {reused} reused; "
        f"post-run {seconds:.1f} s",
        file=sys.stderr,
    )
