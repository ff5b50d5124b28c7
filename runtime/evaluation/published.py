"""Projections judged against *published* results of devices nobody here has.

``clproj validate`` compares projections with times measured here on real devices.
``clproj validate-published`` asks the same question of spec-sheet device profiles: a
suite's authors published its times on fifteen-odd GPUs of three vendors, and the
projection of the same app's launches onto those devices' spec profiles is compared with
them. The app still runs unmodified, here, under ``clproj run --record``
(:mod:`runtime.evaluation.published_run`), once per configuration the published results
were measured at; each recorded launch is mini-emulated and projected as project mode
does (:func:`runtime.projection.live.project_record`, the same emulation mode and
projection cache). Two suite kinds, told apart by their folders:

* **BabelStream** (``src/ocl/`` and ``results/v1.0/opencl/``): per results file and kernel,
  the projected time of one launch at the file's array size vs the published Min (sec)
  (:mod:`runtime.evaluation.published_babelstream`). The streaming kernels' NULL local
  size is emulated and projected as project mode does it today; a change there shows up
  here when the validation is run again (the projection cache is keyed on the model's code).
  Dot's launch shape is chosen by the app from the device it runs on (here: this machine's),
  so a published Dot time is compared with the projection of this machine's shape.
* **mixbench** (``mixbench-opencl/`` and ``truth/``): per log, precision (SP, DP) and
  compute-iteration level, the projected launch time vs the published one, and the
  crossover level on both curves (:mod:`runtime.evaluation.published_mixbench`).

Per-kernel results are :class:`runtime.evaluation.validate_match.KernelResult` and the
metrics :mod:`runtime.evaluation.validate_scores`, exactly those of ``clproj validate``: a
result file's stem is the device label, BabelStream's app is ``babelstream`` and mixbench's
``mixbench-sp`` / ``mixbench-dp`` with one "kernel" per level.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from clproj.errors import ClprojError
from clproj.runtime.evaluation import published_babelstream as pbs
from clproj.runtime.evaluation import published_mixbench as pmb
from clproj.runtime.evaluation.published_run import (
    RecordedRun,
    default_work_dir,
    ensure_built,
    record_run,
)
from clproj.runtime.evaluation.validate import finite
from clproj.runtime.evaluation.validate_match import KernelResult
from clproj.runtime.evaluation.validate_scores import device_metrics, summarize

FORMAT = "clproj.published-validation"
VERSION = 2

Progress = Callable[[Iterable[Any], str], Iterable[Any]]


@dataclass
class PublishedDevice:
    """One published results file and what became of it."""

    label: str
    vendor: str
    profile: str | None  # spec profile key (None: nothing identified the file's device)
    status: str  # judged, no profile, unidentified, not selected, run failed
    device_name: str = ""
    config: str = ""  # BabelStream: elements; mixbench: the run's configuration tag
    matched_by: str = ""  # how the profile was found (published_files.Identity.matched_by)


@dataclass
class PublishedValidation:
    """The whole validation: devices, per-kernel results, curves and runs."""

    kind: str
    suite: str
    truth_dir: str
    work_dir: str
    devices: list[PublishedDevice]
    kernels: list[KernelResult]
    runs: list[RecordedRun]
    errors: list[str]  # result files that did not parse, one line each
    projected_only: list[dict[str, Any]]  # devices without a truth file: their projections
    curves: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def judged(self) -> list[str]:
        return [d.label for d in self.devices if d.status == "judged"]

    def apps(self) -> list[str]:
        return sorted({k.app for k in self.kernels})

    def summary(self) -> dict[str, Any]:
        """Per app: per-device metrics (as ``clproj validate``), selection, all devices pooled."""
        out: dict[str, Any] = {}
        for app in self.apps():
            ks = [k for k in self.kernels if k.app == app]
            labels = [d for d in self.judged if any(d in k.devices for k in ks)]
            s = summarize(ks, labels)
            s.pop("pairs")  # every pair of 18 devices is no table to read
            s["pooled"] = pooled_metrics(ks)
            out[app] = s
        return out

    def crossovers(self) -> dict[str, dict[str, dict[str, Any]]]:
        """mixbench: per device and precision, the published and projected crossover level."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for label, per_prec in self.curves.items():
            for prec, points in per_prec.items():
                pub = pmb.crossover([(p["level"], p["published_s"]) for p in points])
                proj = pmb.crossover(
                    [(p["level"], p["projected_s"]) for p in points if p["projected_s"]]
                )
                fpb = {p["level"]: p["flops_per_byte"] for p in points}
                out.setdefault(label, {})[prec] = {
                    "published": pub,
                    "projected": proj,
                    "published_flops_per_byte": fpb.get(pub) if pub is not None else None,
                    "projected_flops_per_byte": fpb.get(proj) if proj is not None else None,
                }
        return out

    def to_dict(self) -> dict[str, Any]:
        return finite(
            {
                "format": FORMAT,
                "version": VERSION,
                "kind": self.kind,
                "suite": self.suite,
                "truth": self.truth_dir,
                "work_dir": self.work_dir,
                "devices": [vars(d) for d in self.devices],
                "errors": self.errors,
                "runs": [r.to_dict() for r in self.runs],
                "kernels": [k.to_dict() for k in self.kernels],
                "summary": self.summary(),
                "projected_only": self.projected_only,
                **({"curves": self.curves, "crossovers": self.crossovers()} if self.curves else {}),
                "wall_s": self.wall_s,
            }
        )


def pooled_metrics(kernels: list[KernelResult]) -> dict[str, Any]:
    """Every (kernel, device) pair in one pool: the suite's single-number summary."""
    pairs = [(k.measured_s[d], k.projected_s[d]) for k in kernels for d in k.devices]
    ratios = [p / m for m, p in pairs]
    return {
        "pairs": len(pairs),
        "median_ratio": statistics.median(ratios) if ratios else math.nan,
        "within_25": sum(1 for r in ratios if 0.8 <= r <= 1.25),
        "mape": statistics.fmean(abs(p - m) / m for m, p in pairs) if pairs else math.nan,
    }


def per_device(val: PublishedValidation, app: str) -> dict[str, dict[str, Any]]:
    ks = [k for k in val.kernels if k.app == app]
    return {d: device_metrics(ks, d) for d in val.judged if any(d in k.devices for k in ks)}


# ---------------------------------------------------------------------------------------
# the suite and its devices


def detect(suite: str, truth: str | None) -> tuple[str, str]:
    """The suite's kind and its truth folder (``--truth`` or the suite's own)."""
    if os.path.isdir(os.path.join(suite, "src", "ocl")):
        return "babelstream", truth or os.path.join(suite, "results", "v1.0", "opencl")
    if os.path.isdir(os.path.join(suite, "mixbench-opencl")):
        return "mixbench", truth or os.path.join(suite, "truth")
    raise ClprojError(
        f"{suite} is neither a BabelStream folder (src/ocl/) nor a mixbench one (mixbench-opencl/)",
        "pass the suite folder, e.g. /path/to/shared/validation/babelstream",
    )


def resolve_devices(spec: str, table_keys: list[str]) -> tuple[list[Any], set[str]]:
    """Profiles named by ``--devices`` and the identified keys that have no profile.

    ``truth`` (the default) stands for every profile the truth files were identified with
    (:mod:`published_files`); a missing one is reported as "no profile", not an error,
    because a suite's file table may name a profile this installation lacks. A key named
    explicitly must exist.
    """
    from clproj.runtime.projection import device_set

    out: list[Any] = []
    missing: set[str] = set()
    for item in [i.strip() for i in spec.split(",") if i.strip()]:
        if item == "truth":
            for key in dict.fromkeys(table_keys):
                try:
                    out += device_set.resolve(key)
                except ClprojError:
                    missing.add(key)
        else:
            out += device_set.resolve(item)
    seen: set[str] = set()
    return [p for p in out if not (p.key in seen or seen.add(p.key))], missing


def _identified(
    spec: str, files: list[tuple[str, str, str, Any]]
) -> tuple[list[Any], list[PublishedDevice]]:
    """The profiles ``--devices`` selects and one :class:`PublishedDevice` per result file,
    from each file's (label, device name, configuration, ``published_files.Identity``)."""
    profiles, missing = resolve_devices(spec, [i.key for *_, i in files if i.key])
    selected = {p.key for p in profiles}
    devs = [
        PublishedDevice(
            label, i.vendor, i.key, _status(i.key, missing, selected), name, config, i.matched_by
        )
        for label, name, config, i in files
    ]
    return profiles, devs


def _status(key: str | None, missing: set[str], selected: set[str]) -> str:
    if key is None:
        return "unidentified"
    if key in selected:
        return "judged"
    return "no profile" if key in missing else "not selected"


def _project(records: list[str], profiles: list[Any], progress: Progress | None) -> list[dict]:
    """Every record projected onto every profile, as project mode does (cached)."""
    from clproj.intercept.record import load
    from clproj.runtime.projection import live

    mode = live.emulation_mode()
    items: Iterable[str] = progress(records, "projecting") if progress else records
    return [live.project_record(load(path), profiles, mode=mode, timeout_s=120.0) for path in items]


def _times(doc: dict[str, Any]) -> dict[str, tuple[float, str]]:
    return {p["device"]: (p["time_s"], p.get("bound", "")) for p in doc.get("projections", [])}


def _result(app: str, kernel: str) -> KernelResult:
    return KernelResult(app, kernel, {}, {}, {}, 0, 0, 0, 0)


def _add(k: KernelResult, label: str, measured: float, projected: tuple[float, str] | None) -> None:
    k.launches_truth += 1
    k.shapes_truth += 1
    k.measured_s[label] = measured
    if projected is not None:
        k.projected_s[label] = projected[0]
        k.bound[label] = projected[1]
        k.launches_matched += 1
        k.shapes_matched += 1
        k.signatures += 1


# ---------------------------------------------------------------------------------------
# the validation


def validate_published(
    suite: str,
    truth: str | None = None,
    devices: str = "truth",
    work_dir: str | None = None,
    timeout_s: float = 3600.0,
    progress: Progress | None = None,
    on_run: Callable[[RecordedRun], None] | None = None,
    on_start: Callable[[str, list[str]], None] | None = None,
) -> PublishedValidation:
    """Build, record (or reuse the records), project and judge one published suite.

    ``on_run`` is called with each finished (or reused) recording, ``on_start`` when an
    app run starts (see :func:`runtime.evaluation.published_run.record_run`).
    """
    start = time.perf_counter()
    kind, truth_dir = detect(suite, truth)
    work = work_dir or default_work_dir(suite, kind)
    if kind == "babelstream":
        val = _babelstream(suite, truth_dir, devices, work, timeout_s, progress, on_run, on_start)
    else:
        val = _mixbench(suite, truth_dir, devices, work, timeout_s, progress, on_run, on_start)
    val.wall_s = time.perf_counter() - start
    return val


def _babelstream(  # noqa: C901
    suite: str,
    truth_dir: str,
    spec: str,
    work: str,
    timeout_s: float,
    progress: Progress | None,
    on_run: Callable[[RecordedRun], None] | None,
    on_start: Callable[[str, list[str]], None] | None = None,
) -> PublishedValidation:
    results, errors = pbs.load_results(truth_dir)
    if not results:
        raise ClprojError(
            f"{truth_dir}: no BabelStream results file could be read", "; ".join(errors)[:300]
        )
    profiles, devs = _identified(
        spec, [(r.label, r.device_name, _babel_config(r), pbs.identity(r)) for r in results]
    )
    judged = [r for r, d in zip(results, devs, strict=True) if d.status == "judged"]
    kernels = sorted({k for r in results for k in r.min_s}, key=list(pbs.KERNELS.values()).index)
    # one recording per array size and precision: the run tag -> a result it serves
    needs = {_babel_tag(r): r for r in reversed(judged or results)}
    val = PublishedValidation("babelstream", suite, truth_dir, work, devs, [], [], errors, [])
    if not profiles:
        return val
    binary = ensure_built("babelstream", suite, work)
    runs = {}  # every app run first: a failed build or run shows before minutes of emulation
    for tag, need in sorted(needs.items()):
        args = ["-s", str(need.elements), "-n", "2"]
        args += ["--float"] if need.precision == "float" else []
        args += ["--only", "All"] if "nstream" in need.min_s else []  # Classic has no Nstream
        run = record_run(work, binary, tag, args, kernels, timeout_s, on_start=on_start)
        val.runs.append(run)
        runs[tag] = run
        if on_run:
            on_run(run)
    docs: dict[str, dict[str, dict[str, Any]]] = {}  # run tag -> kernel -> projection doc
    dots: dict[str, Any] = {}  # run tag -> its Dot record (None: the run recorded none)
    for tag, run in runs.items():
        if run.ok:
            docs[tag] = {d["kernel"]: d for d in _project(run.records, profiles, progress)}
            dots[tag] = _dot_record(run) if "stream_dot" in kernels else None
    results_by_kernel = {k: _result("babelstream", k) for k in kernels}
    by_key = {p.key: p for p in profiles}
    for r, d in zip(results, devs, strict=True):
        if d.status != "judged":
            continue
        tag = _babel_tag(r)
        if tag not in docs:
            d.status = "run failed"
            continue
        for kernel, t in r.time_s.items():
            doc = docs[tag].get(kernel, {})
            if kernel == "stream_dot" and doc:
                doc = _dot_as_launched(dots[tag], r, by_key[str(d.profile)]) or doc
            _add(results_by_kernel[kernel], r.label, t, _times(doc).get(str(d.profile)))
    val.kernels = [k for k in results_by_kernel.values() if k.devices]
    table_keys = {d.profile for d in devs}
    for tag, per_kernel in docs.items():
        # Dot on a device without a results file: in the launch the app makes there (its
        # rule; another file's printed config is that file's device's)
        sample = dataclasses.replace(needs[tag], dot_config=None)
        for kernel, doc in per_kernel.items():
            for key, (t, bound) in _times(doc).items():
                if key in table_keys:
                    continue
                if kernel == "stream_dot":
                    own = _dot_as_launched(dots[tag], sample, by_key[key])
                    t, bound = _times(own).get(key, (t, bound)) if own else (t, bound)
                val.projected_only.append(
                    {"device": key, "config": f"{_elements_text(needs[tag])} elements", "kernel": kernel,
                     "projected_s": t, "bound": bound}
                )  # fmt: skip
    return val


def _babel_tag(result: Any) -> str:
    """The recording a BabelStream result needs: ``s<elements>``, ``-float`` in FP32 (the
    app's ``--float``), ``-all`` where it has Nstream (the app's ``--only All``: its
    default, the classic five kernels, leaves Nstream out)."""
    return (
        f"s{result.elements}"
        + ("-float" if result.precision == "float" else "")
        + ("-all" if "nstream" in result.min_s else "")
    )


def _babel_config(result: Any) -> str:
    """A BabelStream result's array size, and its programming model where not OpenCL
    ("33554432 (CUDA)")."""
    model = result.implementation
    return _elements_text(result) + (f" ({model})" if model.lower() not in ("", "opencl") else "")


def _elements_text(result: Any) -> str:
    """The array size of a result as the projected-only table shows it ("65536 float")."""
    return f"{result.elements}" + (" float" if result.precision == "float" else "")


def _dot_record(run: RecordedRun) -> Any:
    """The run's record of Dot, or None."""
    from clproj.intercept.record import load

    return next((r for r in map(load, run.records) if r.kernel == "stream_dot"), None)


def _dot_as_launched(record: Any, result: Any, profile: Any) -> dict[str, Any] | None:
    """Dot's projection onto ``profile`` in the launch the app makes on that device
    (:func:`published_babelstream.dot_launch`), or None where that is the recorded one
    (or ``record``, the run's Dot record, is None).

    The recorded launch is re-sized as BabelStream sizes it (``OCLStream.cpp``): the
    NDRange, the ``__local`` scratch (argument 3: one element per work-item) and the
    partial-sums buffer (argument 2: one element per group, written only).
    """
    from clproj.runtime.projection import live

    launch = pbs.dot_launch(result, profile)
    if launch is None or record is None:
        return None
    groups, size = launch
    if record.global_size == [groups * size] and record.local_size == [size]:
        return None
    width = result.element_bytes
    args = [
        dataclasses.replace(a, size=size * width) if a.index == 3
        else dataclasses.replace(a, size=groups * width, blob=None) if a.index == 2
        else a
        for a in record.args
    ]  # fmt: skip
    record = dataclasses.replace(
        record, args=args, global_size=[groups * size], local_size=[size], outputs=None
    )
    return live.project_record(record, [profile], mode=live.emulation_mode(), timeout_s=120.0)


def _mixbench(  # noqa: C901
    suite: str,
    truth_dir: str,
    spec: str,
    work: str,
    timeout_s: float,
    progress: Progress | None,
    on_run: Callable[[RecordedRun], None] | None,
    on_start: Callable[[str, list[str]], None] | None = None,
) -> PublishedValidation:
    logs, errors = pmb.load_logs(truth_dir)
    if not logs:
        raise ClprojError(f"{truth_dir}: no mixbench log could be read", "; ".join(errors)[:300])
    profiles, devs = _identified(
        spec, [(log.label, log.device_name, _tag(log), pmb.identity(log)) for log in logs]
    )
    val = PublishedValidation("mixbench", suite, truth_dir, work, devs, [], [], errors, [])
    if not profiles:
        return val
    binary = ensure_built("mixbench", suite, work)
    wanted = [log for log, d in zip(logs, devs, strict=True) if d.status == "judged"] or logs
    for log in wanted:  # every app run first, then the emulations
        tag = _tag(log)
        if any(r.tag == tag for r in val.runs):
            continue
        run = record_run(
            work,
            binary,
            tag,
            pmb.run_args(log),
            ["benchmark_func"],
            timeout_s,
            snapshot_limit=0,
            on_start=on_start,
        )
        val.runs.append(run)
        if on_run:
            on_run(run)
    docs: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}  # tag -> (prec, level) -> doc
    for run in val.runs:
        if run.ok:
            docs[run.tag] = _mixbench_docs(run.records, profiles, progress)
    results: dict[tuple[str, int], KernelResult] = {}
    for log, d in zip(logs, devs, strict=True):
        if d.status != "judged":
            continue
        if d.config not in docs:
            d.status = "run failed"
            continue
        for prec in pmb.JUDGED:
            points = []
            for level, pt in log.curve(prec):
                doc = docs[d.config].get((prec, level))
                proj = _times(doc).get(str(d.profile)) if doc else None
                k = results.setdefault((prec, level), _result(f"mixbench-{prec}", f"{level:3d}"))
                _add(k, log.label, pt.time_s, proj)
                points.append(
                    {"level": level, "flops_per_byte": pt.flops_per_byte,
                     "published_s": pt.time_s, "ex_time_ms": pt.ex_time_ms,
                     "projected_s": proj[0] if proj else None, "bound": proj[1] if proj else None}
                )  # fmt: skip
            val.curves.setdefault(log.label, {})[prec] = points
    val.kernels = [k for _, k in sorted(results.items()) if k.devices]
    table_keys = {d.profile for d in devs}
    for tag, per in docs.items():
        for (prec, level), doc in sorted(per.items()):
            for key, (t, bound) in _times(doc).items():
                if key not in table_keys:
                    val.projected_only.append(
                        {"device": key, "config": f"{tag} {prec}", "kernel": f"level {level}",
                         "projected_s": t, "bound": bound}
                    )  # fmt: skip
    return val


def _tag(log: pmb.MixLog) -> str:
    """The run configuration a log was measured at, as a folder name."""
    stride = "-w" if log.block_strided else ""
    return f"wg{log.workgroup}-m{log.elements // 2**20}-e{log.elements_per_thread}-f{log.fusion}{stride}"


def _mixbench_docs(
    records: list[str], profiles: list[Any], progress: Progress | None
) -> dict[tuple[str, int], dict[str, Any]]:
    """Projection docs of the judged precisions' records, by (precision, level)."""
    from clproj.intercept.record import load

    keep = []
    for path in records:
        which = pmb.level_of(load(path).options)
        if which and which[0] in pmb.JUDGED:
            keep.append((which, path))
    projected = _project([p for _, p in keep], profiles, progress)
    return {which: doc for (which, _), doc in zip(keep, projected, strict=True)}
