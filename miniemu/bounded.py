"""Bounded-cost mini-emulation: a kernel profile for every launch within a budget.

The paper's premise, "one work-group is cheap to emulate", fails for kernels whose
work-items loop millions of times. ``emulate_bounded`` keeps every emulation inside a
:class:`Budget` (instructions per emulator run, sampled work-items; wall time only as a
backstop) and says how each profile was obtained (``emulation.method``), what stopped it
(``emulation.budget``) and how far to trust it (``emulation.confidence``).

The bound is *counted*, never timed: the plugin counts instructions and work-items and
stops at the same instruction on an idle and on a loaded machine, and every decision and
extrapolation below uses counted quantities only (instructions, work-items, loop
iterations, ScalarEvolution trip counts), so a profile is a function of the kernel and its
inputs. A wall-clock budget that stops runs and decides whether there is time left for
the probes gives the same launch different profiles run to run (measured with a 3 s one:
PolyBench gemver_kernel2 at 0.34x or 0.93x of measured on the GPUs). The wall clock is
only a backstop (``Budget.wall_s``, 30 s of emulation per run): where it cuts a run short
the profile says ``budget: "wall"``, gets confidence ``low`` and is not written to the
projection cache.

Steps (docs/miniemu.md, "Bounded emulation"):

1. **Attempt**: group 0 in quick mode; without barriers the plugin stops after
   ``budget.work_items`` work-items (whole warps of consecutive local ids) and writes its
   statistics (``sampled-work-items``); any run stops at the instruction budget.
   A run that finishes is the profile (``full-group`` or ``sampled-work-items``).
2. **Loop extrapolation**: when the attempt hit the budget, the plugin's ScalarEvolution
   analysis (``loops``: backedge-taken counts as expressions over kernel arguments) picks
   the scalar argument (the *knob*) that sets the trip count of the heaviest loop. The
   launch is re-emulated with the knob shrunk so that the loop runs a few dozen times
   (``d + 2`` probes for a loop nest of arg-dependent depth ``d``, each knob value of the
   launch's residue modulo 32 elements); every counter is fitted as a degree-``d``
   polynomial of the loop's trip count on the ``d + 1`` largest probes, checked on the
   smallest, and evaluated at the trip count of the launch's real argument values.
   All work-items take part in the probes, so warp-level statistics (transactions,
   divergence, bank conflicts) are real, not guessed. The probes are rejected when the
   knob also changes how many work-items reach the loop (loop entries per probe, counted:
   header executions / trip count, must agree): PolyBench's ``if (i < n) for (j < n)``
   probed at n = 16..48 runs the loop in 16..48 of the 128 sampled work-items, and the
   fit extrapolated that shrinkage (0.37x the instructions). The probes' trip counts reach
   ``probe_trips`` (128), so that the smallest is >= 32: a knob that is also a row stride
   (``A[i*n + j]``) then keeps rows of 4-byte elements >= 128 B apart, the largest segment
   counted, and the probes coalesce as the real launch does (at 16..48, PolyBench
   atax_kernel1's 128-byte transactions came out 1.41x those of the whole work-group).
3. **Budget extrapolation** (trip count not derivable from arguments): the partial
   statistics of the attempt are scaled by the ratio of the loop's trip count (exact
   constant -> ``medium``; symbolic maximum -> ``low``; none -> a lower bound, ``low``)
   to the iterations observed.

With a fork server (the default, :func:`_attempt`), a short *scout* run beside the attempt
plans the probes at once; when they predict that the attempt would stop at its budget, the
attempt is not waited for. The profile is the one the steps above give, in less time.
Probes also replace an attempt that would end within its budget where their fit checks
and counts at most half the attempt's instructions (``CHEAPER_RATIO``), in either order of
the runs, so that the cost stops growing with the trip count well before the budget.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clproj.background_thread import map_in_threads
from clproj.errors import ClprojError
from clproj.miniemu.counters import (
    lower_confidence,
)
from clproj.miniemu.extrapolate import (
    FIT_HIGH,
    ProbePlan,
    budget_extrapolate,
    fit_probes,
    loop_extrapolate,
    plan_probes,
    profile_of,
    run_probes,
    scalar_changes,
    start_probes,
    wait_probes,
)
from clproj.miniemu.profile import KernelProfile, scale_stats
from clproj.miniemu.scev import (
    scalar_args,
)
from clproj.paths import scratch_dir

if TYPE_CHECKING:
    from clproj.intercept.record import LaunchRecord

# Seconds a worker needs before the kernel starts (python, pyopencl, Oclgrind's build).
STARTUP_S = 0.7


@dataclass
class Budget:
    """Cost limits of one bounded emulation.

    Counted (the bound; the same on any machine): ``instructions`` per emulator run (the
    plugin counts them); ``work_items`` sampled per group when the kernel has no barrier
    (two warps of the widest warp width, 64); ``probe_trips``: largest trip count of the
    heaviest loop in a probe run (probes also stay under half the instruction budget;
    128 keeps the smallest of the d + 2 probes >= 32 trips, module docstring).
    ``wall_s``: a safety backstop in wall seconds per emulator run, timed by the plugin
    from the kernel's start (loading the record is not emulation: a 256 MB PolyBench
    record takes seconds to load under load), ten times what the counted budget costs
    there on the loaded 2-core VM; where it fires, the profile is marked
    ``budget: "wall"`` (as the budget itself, 3 s for all runs of a profile, it made
    profiles depend on the machine's load: module docstring).
    """

    wall_s: float = 30.0
    instructions: int = 2_000_000
    work_items: int = 128
    probe_trips: int = 128

    @classmethod
    def parse(cls, text: str | float | Budget | None) -> Budget:
        """``"30"`` (backstop seconds) or ``"wall=30,instructions=2e6,work_items=128,probe_trips=128"``."""
        if text is None:
            return cls()
        if isinstance(text, Budget):
            return text
        if isinstance(text, (int, float)):
            return cls(wall_s=float(text))
        out = cls()
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            key, _, val = part.partition("=") if "=" in part else ("wall", "", part)
            key = {"wall": "wall_s", "wall_s": "wall_s", "time": "wall_s"}.get(key, key)
            if key not in ("wall_s", "instructions", "work_items", "probe_trips"):
                raise ClprojError(
                    f"unknown budget field {key!r}",
                    "use wall=S,instructions=N,work_items=N,probe_trips=N",
                )
            try:
                setattr(out, key, float(val) if key == "wall_s" else int(float(val)))
            except ValueError:
                raise ClprojError(f"budget field {key} is not a number: {val!r}") from None
        if out.work_items < 64 or out.wall_s <= 0 or out.instructions <= 0:
            raise ClprojError(
                "budget too small: work_items >= 64, wall_s > 0 and instructions > 0",
                "the statistics need whole warps of 64 work-items",
            )
        return out


# ---------------------------------------------------------------- the bounded emulation


class Runner:
    """Runs emulator attempts of one record (and modified copies).

    Each run is bounded by the counted budget (instructions, sampled work-items); the
    wall-clock backstop (``budget.wall_s`` of emulation, in the plugin; the worker is
    killed at twice that plus its start-up) only catches a run that would otherwise not
    end. ``wall_stops`` counts the runs it stopped: a profile with any is marked
    ``budget: "wall"``. With a fork server (``server``, miniemu.fork_server) runs
    are started with :meth:`start` and collected with :meth:`wait`, in parallel; without
    one :meth:`start` runs the worker to its end.
    """

    def __init__(
        self, record: LaunchRecord, budget: Budget, backend: Any, tmp: str, server: Any = None
    ) -> None:
        self.record, self.budget, self.backend, self.tmp = record, budget, backend, tmp
        self.server = server
        self.template: Any = None  # the record's launch prepared once, for the server's runs
        self.start_s = time.perf_counter()
        self.runs = 0
        self.instructions = 0  # counted by the plugin, all runs
        self.wall_stops = 0

    def timeout(self) -> float:
        return 2 * self.budget.wall_s + STARTUP_S + 10.0

    def start(self, record: LaunchRecord, instructions: int | None = None) -> Any:
        limits = {
            "CLPROJ_STATS_MAX_WORK_ITEMS": str(self.budget.work_items),
            "CLPROJ_STATS_MAX_INSTRUCTIONS": str(instructions or self.budget.instructions),
            "CLPROJ_STATS_BUDGET_S": f"{self.budget.wall_s:.3f}",
        }
        self.runs += 1
        # Not for a live record (intercept.live_pages): a thread of the process that maps
        # its buffers fills their pages, and a fork carries neither (its pages read zeros).
        templates = self.server is not None and self.server.templates and not self.record.live
        changes = scalar_changes(self.record, record) if templates else None
        if changes is not None:
            # The runs of one emulation (attempt, scout, probes) differ in their budgets
            # and the knob: each is forked from the launch prepared once (miniemu.
            # fork_server says why). The attempt waits for the preparation too: forked
            # whole beside it, it was no faster at 100 loop trips (0.044-0.048 s against
            # 0.045-0.049 s) and the probes' path past 1,000 was slower (0.072-0.091 s
            # against 0.064-0.087 s; benchmarks/emulation_flat.py --loop-axis, 2 x 3 rounds).
            if self.template is None:
                self.template = self.server.template(self._saved(self.record))
            return self.server.submit_from(self.template, changes, limits)
        path = self._saved(record)
        if self.server is not None:
            return self.server.submit(path, limits)
        # The plugin stops itself at the budget; the kill is the backstop for a hang
        # outside the kernel (start-up, loading the record, writing the statistics).
        try:
            return Finished(self.backend.run(path, "bounded", self.timeout(), limits=limits))
        except ClprojError as exc:
            return Finished(None, exc)

    def _saved(self, record: LaunchRecord) -> str:
        from clproj.intercept.record import save

        # a folder of its own per record: they share the record's id (its file name)
        folder = tempfile.mkdtemp(prefix="r", dir=self.tmp)
        return save(copy.copy(record), folder, link_blobs=True)

    def wait(self, handle: Any) -> Any:
        """The run's statistics (raises its error)."""
        if isinstance(handle, Finished):
            raw, err = handle.raw, handle.error
        else:
            raw, err = None, None
            try:
                raw = self.server.result(handle, self.timeout())
            except ClprojError as exc:
                err = exc
        if err is not None:
            if "exceeded its time budget" in err.cause:
                self.wall_stops += 1
            raise err
        self.instructions += raw.instructions_executed
        if raw.stop_reason == "time-budget":
            self.wall_stops += 1
        return raw

    def cancel(self, handle: Any) -> None:
        """Drop a run whose result is no longer needed (killed if still going)."""
        if self.server is not None and not isinstance(handle, Finished):
            self.server.cancel(handle)

    def done(self, handles: list[Any], timeout_s: float) -> Any:
        """The first of ``handles`` that has finished, waiting up to ``timeout_s``."""
        finished = [h for h in handles if isinstance(h, Finished)]
        if finished or self.server is None:
            return finished[0] if finished else None
        return self.server.wait_any(handles, timeout_s)

    def finished(self, handle: Any) -> bool:
        """Whether the run has ended (its result is there to collect)."""
        return isinstance(handle, Finished) or handle.status is not None

    def run(self, record: LaunchRecord) -> Any:
        return self.wait(self.start(record))

    def run_all(self, records: list[LaunchRecord]) -> list[Any]:
        """Runs in parallel: forks of the server, else worker processes from threads."""
        if self.server is None:
            return map_in_threads(self.run, records, "clproj-probe")
        handles = [self.start(r) for r in records]
        out, first_error = [], None
        for h in handles:
            try:
                out.append(self.wait(h))
            except ClprojError as exc:
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return out


@dataclass
class Finished:
    """A run of the one-shot worker, already over: its statistics or its error."""

    raw: Any
    error: ClprojError | None = None


def emulate_bounded(
    record: LaunchRecord,
    budget: Budget | None = None,
    backend: Any = None,
    speculate: bool = True,
) -> KernelProfile:
    """A kernel profile of ``record`` within ``budget`` (module docstring: the steps).

    ``speculate=False``: one worker process per run and no scout or speculative probes
    (the attempt, then the probes); the same profiles, slower (benchmarks compare them)."""
    from clproj.miniemu.backend import get_backend

    budget = budget or Budget()
    backend = backend or get_backend("oclgrind")
    server = backend.server() if speculate and hasattr(backend, "server") else None
    with (
        scratch_dir("clproj-bounded-") as tmp,
        server or contextlib.nullcontext(),
    ):
        runner = Runner(record, budget, backend, tmp, server)
        args = scalar_args(record)
        first, decided, speculation = _attempt(runner, args)
        method = {"": "full-group", "sampled-work-items": "sampled-work-items"}.get(
            first.stop_reason
        )
        not_probed = ""
        if isinstance(decided, tuple) and decided[1].get("instead_of_attempt"):
            prof, method = decided[0], "loop-extrapolated"
        elif method is not None:
            prof = profile_of(first, record)
            if method == "sampled-work-items":
                prof.emulation["flags"].append(
                    f"sampled-work-items: {prof.emulation['work_items_emulated']} of "
                    f"{prof.launch['group_size']} work-items of group 0 (no barrier)"
                )
        else:
            result: tuple[KernelProfile, dict] | str = ""
            if decided is not None:
                result = decided
            elif first.stop_reason == "instruction-budget":
                try:
                    result = loop_extrapolate(runner, first, args)
                except ClprojError as exc:
                    result = f"a probe failed: {exc.cause[:200]}"
            if isinstance(result, tuple):
                prof, _ = result
                method = "loop-extrapolated"
            else:
                not_probed = result
                prof = profile_of(first, record)
                factor, confidence, flags = budget_extrapolate(first, args, record)
                wi, gwi = prof.total.get("work_items"), prof.per_group.get("work_items")
                prof.total = scale_stats(prof.total, factor)
                prof.per_group = scale_stats(prof.per_group, factor)
                prof.total["work_items"], prof.per_group["work_items"] = wi, gwi
                if not_probed:
                    flags.append(f"no loop extrapolation: {not_probed}")
                prof.emulation["flags"] += flags
                prof.emulation["confidence"] = lower_confidence(
                    confidence, prof.emulation["confidence"]
                )
                method = "budget-extrapolated"
        stopped_by, stop_reason = _what_bounded(first, prof, runner)
        prof.emulation.update(
            mode="bounded",
            method=method,
            wall_s=round(time.perf_counter() - runner.start_s, 4),
            emulator_runs=runner.runs,
            instructions_emulated=runner.instructions,
            stop_reason=stop_reason,
            budget=stopped_by,
            budget_limits={
                "instructions": budget.instructions,
                "work_items": budget.work_items,
                "probe_trips": budget.probe_trips,
                "wall_s_backstop": budget.wall_s,
            },
            loops=first.loops,
        )
        if speculation:
            prof.emulation["speculation"] = speculation
        return prof


def _what_bounded(first: Any, prof: KernelProfile, runner: Runner) -> tuple[str, str]:
    """``emulation.budget`` and ``stop_reason``: what bounded the emulation. Counted
    budgets give the same profile on any machine; the wall-clock backstop does not, so
    its profiles say so (flag, confidence ``low``)."""
    stopped_by = {
        "": "none",
        "sampled-work-items": "work-items",
        "instruction-budget": "instructions",
        "time-budget": "wall",
    }.get(first.stop_reason, "wall")
    stop_reason = first.stop_reason
    if prof.emulation.get("loop_extrapolation", {}).get("instead_of_attempt"):
        # no run stopped: the probes were chosen for their cost (CHEAPER_RATIO)
        stopped_by = stop_reason = "probes"
    if runner.wall_stops:
        stopped_by = "wall"
        prof.emulation["flags"].append(
            f"wall-clock backstop ({runner.budget.wall_s:g} s of emulation per run) stopped "
            f"{runner.wall_stops} of {runner.runs} runs: the statistics depend on this "
            "machine's speed and load (not cached)"
        )
        prof.emulation["confidence"] = "low"
    return stopped_by, stop_reason


# Instructions of the scout run: the plugin checks its budget every 4096 instructions, so
# the scout stops at its 4th check, enough for the instructions per trip of a loop body.
SCOUT_INSTRUCTIONS = 4 * 4096
# The attempt is not waited for when the probes predict at least this many times its
# instruction budget (the fit's own check error is at most 10% where it is used).
SPECULATION_MARGIN = 1.5
# Probes replace an attempt that would end within its budget when their fit checks within
# FIT_HIGH and predicts the attempt at >= this many times the instructions the probes
# counted, all together (``_cheaper``). Why: otherwise the attempt's cost grows with
# the loop's trip count up to the budget and past it (SPECULATION_MARGIN), while the probes
# cost the same at any trip count, so the first projection is not flat in the loop length
# (a 64-item group summing n floats, in a run's server, the attempt deciding: 0.05 s at
# n = 100, 0.22 s at 1,000, 0.65 s at 3,000, 0.14 s from 10,000 on).
# Why 2: the probes are d + 2 runs, each with its own fork and record load; measured, three
# probes of about 210,000 instructions together take 0.13-0.14 s, as long as an attempt of
# about 500,000 (0.09 s at 250,000, 0.22 s at 785,000): benchmarks/results/emulation_flat.md.
CHEAPER_RATIO = 2.0


def _attempt(runner: Runner, args: dict[int, int]) -> tuple[Any, Any, dict[str, Any]]:  # noqa: C901
    """The attempt's statistics (step 1), the loop extrapolation where the speculation below
    already decided it (else None: step 2 as usual), and what the speculation did.

    Why: an attempt that hits the instruction budget costs the whole budget (2e6
    instructions, 0.4-1 s) before the probes can even start, and every worker paid its
    imports again. With a fork server, beside the attempt a *scout* runs the same launch
    to ``SCOUT_INSTRUCTIONS``: its loops (ScalarEvolution) and instructions per trip plan
    the probes. A scout that finishes is the attempt (same launch, same counted budgets,
    deterministic), so the attempt is dropped. Where the planned probes are not capped by
    the instruction budget and the heaviest loop's trips x instructions per trip x
    emulated work-items reach the budget, the probes start at once, beside the attempt.
    When they end first and their fit predicts the attempt's instructions at >=
    ``SPECULATION_MARGIN`` x the budget (the attempt is paused meanwhile), the attempt
    would certainly stop at the budget
    and plan these same probes: it is killed and the fit is the profile. Otherwise the
    attempt decides as without speculation, and its probes are the speculative ones
    where its plan names the same knob values (else they are dropped and run anew), so
    the profile is the one the attempt-then-probes order gives. (The plugin's wall-clock
    backstop counts the pause too: a pause of the order of ``Budget.wall_s`` would mark
    the profile ``budget: "wall"``; the probes are bounded by the instruction budget.)
    """
    rec, budget = runner.record, runner.budget
    attempt = runner.start(rec)
    if runner.server is None:
        first = runner.wait(attempt)
        return first, _cheaper_probes(runner, first, args), {}
    try:
        scout = runner.wait(runner.start(rec, instructions=SCOUT_INSTRUCTIONS))
    except ClprojError as exc:
        first = runner.wait(attempt)
        return first, _cheaper_probes(runner, first, args), {"scout": f"failed: {exc.cause[:120]}"}
    if scout.stop_reason in ("", "sampled-work-items"):
        runner.cancel(attempt)
        info = {"scout": "finished the sample: it is the attempt"}
        return scout, _cheaper_probes(runner, scout, args), info
    counted = {"scout_instructions": scout.instructions_executed}
    plan = plan_probes(scout, args, budget) if scout.stop_reason == "instruction-budget" else ""
    if isinstance(plan, str) or not plan.uncapped or not _worth_probing(plan, budget):
        first = runner.wait(attempt)
        info = {"scout": "no speculative probes", **counted}
        return first, _cheaper_probes(runner, first, args), info
    # The attempt pauses while the probes run: on 2 cores four runs would share them, and
    # where the attempt is needed after all it continues from where it stopped.
    runner.server.pause(attempt)
    probes = start_probes(runner, plan)
    pending = [attempt, *probes]
    while len(pending) > 1:
        h = runner.done(pending[1:], runner.timeout())
        if h is None:
            break
        pending.remove(h)
    raws: list[Any] | str | None = None
    info: dict[str, Any] = {"scout": "speculative probes", "probe_values": plan.values, **counted}
    if attempt in pending and len(pending) == 1:  # the probes ended first
        raws = wait_probes(runner, probes)
        if not isinstance(raws, str):
            fitted = fit_probes(rec, plan, raws, scout.loops, args)
            predicted = _predicted_instructions(plan, raws)
            info["predicted_attempt_instructions"] = round(predicted)
            if (
                isinstance(fitted, tuple)
                and predicted >= SPECULATION_MARGIN * budget.instructions
                and not runner.finished(attempt)  # one that ended before its pause decides
            ):
                runner.cancel(attempt)
                info["attempt"] = "not waited for (predicted over the budget)"
                prof, _ = fitted
                prof.emulation["flags"].append(
                    f"attempt not run to its instruction budget: the probes predict "
                    f"{predicted:.3g} instructions for it (budget {budget.instructions:g})"
                )
                return scout, fitted, info
            if (cheaper := _cheaper(fitted, predicted, raws)) is not None:
                # decided on counted quantities alone, whether or not the attempt ended
                runner.cancel(attempt)
                info["attempt"] = "not waited for (the probes are cheaper)"
                return scout, cheaper, info
    runner.server.pause(attempt, False)
    first = runner.wait(attempt)
    info["attempt"] = "waited for"
    same = (
        first.stop_reason == "instruction-budget"
        and isinstance(again := plan_probes(first, args, budget), ProbePlan)
        and again.same_runs(plan)
    )
    if not same:
        for h in probes:
            runner.cancel(h)
        info["probes"] = "dropped"
        tried = (plan, raws) if isinstance(raws, list) else None
        return first, _cheaper_probes(runner, first, args, tried), info
    if raws is None:
        raws = wait_probes(runner, probes)
    info["probes"] = "used"
    if isinstance(raws, str):
        return first, raws, info
    return first, fit_probes(rec, plan, raws, first.loops, args), info


def _predicted_instructions(plan: ProbePlan, raws: list[Any]) -> float:
    """The instructions the attempt would count, fitted on the probes' counted ones."""
    import numpy as np

    n = plan.degree + 1
    ys = [float(r.instructions_executed) for r in raws]
    coef = np.polyfit(plan.xs[-n:], ys[-n:], plan.degree)
    return float(np.polyval(coef, plan.x_actual))


def _worth_probing(plan: ProbePlan, budget: Budget) -> bool:
    """Whether the attempt, as the plan's run estimates it, reaches the instruction
    budget, or its loop trips (to the power of the fit's degree) reach ``CHEAPER_RATIO``
    x those of all probes together. Why trips: the counted ratio ``_cheaper`` decides
    on is never above the trips' ratio (the code outside the loop counts once per run, in
    every probe), so no probes are run that the counted rule could not prefer, and the
    scout's estimate of instructions per trip never decides."""
    d = plan.degree
    if plan.lanes * plan.x_actual**d * plan.ipi >= budget.instructions:
        return True
    return plan.x_actual**d >= CHEAPER_RATIO * sum(x**d for x in plan.xs)


def _cheaper(fitted: Any, predicted: float, raws: list[Any]) -> Any:
    """The fit, flagged as chosen for its cost (``emulation.budget`` ``"probes"``), where
    the counted rule of ``CHEAPER_RATIO`` prefers it: it checks within FIT_HIGH and
    predicts the attempt at >= CHEAPER_RATIO x the probes' instructions; else None."""
    probes = sum(r.instructions_executed for r in raws)
    if not (
        isinstance(fitted, tuple)
        and fitted[1]["check_error"] <= FIT_HIGH
        and predicted >= CHEAPER_RATIO * probes
    ):
        return None
    prof, detail = fitted
    detail["instead_of_attempt"] = True
    prof.emulation["flags"].append(
        f"attempt not run: the probes counted {probes:.3g} instructions, the fit predicts "
        f"{predicted:.3g} for it (>= {CHEAPER_RATIO:g}x)"
    )
    return fitted


def _cheaper_probes(
    runner: Runner, first: Any, args: dict[int, int], tried: tuple[ProbePlan, list] | None = None
) -> Any:
    """After an attempt that ended within its budget: the probes' fit where ``_cheaper``
    prefers it (else None), so that every order of the runs gives the same profile.
    ``tried``: speculative probes already run, used where the attempt's plan names the
    same knob values."""
    if first.stop_reason not in ("", "sampled-work-items"):
        return None
    plan = plan_probes(first, args, runner.budget)
    if isinstance(plan, str) or not plan.uncapped or not _worth_probing(plan, runner.budget):
        return None
    if tried and tried[0].same_runs(plan):
        raws = tried[1]
    else:
        try:
            raws = run_probes(runner, plan)
        except ClprojError:
            return None
    fitted = fit_probes(runner.record, plan, raws, first.loops, args)
    return _cheaper(fitted, _predicted_instructions(plan, raws), raws)
