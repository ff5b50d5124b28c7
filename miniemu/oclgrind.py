"""Oclgrind back-end: replay the record inside Oclgrind with our statistics plugin.

Modes map onto Oclgrind as follows (docs/miniemu.md):

* ``single``: quick mode (``OCLGRIND_QUICK=1``), one worker thread so that group 0 runs
  first, and the plugin exits the process right after writing group 0
  (``CLPROJ_STATS_STOP_AFTER_GROUPS=1``): the cost of one work-group.
* ``quick``: Oclgrind's quick mode, first and last work-group.
* ``full``: every work-group, on Oclgrind's default worker threads.

Oclgrind's own checkers stay off (no ``OCLGRIND_DATA_RACES`` / ``OCLGRIND_UNINITIALIZED``),
and its diagnostics go to a log file that is kept for the profile's flags.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from clproj.miniemu.backend import GroupStats, RawEmulation

from clproj import pyenv, settings
from clproj.errors import ClprojError
from clproj.paths import scratch_parent

RUNTIME = "/usr/lib/oclgrind/liboclgrind-rt.so"
VERSION = "oclgrind 21.10"
_CLEARED_ENV = (
    "OCLGRIND_QUICK",
    "OCLGRIND_DATA_RACES",
    "OCLGRIND_UNINITIALIZED",
    "OCLGRIND_INTERACTIVE",
    "OCLGRIND_INST_COUNTS",
    "OCLGRIND_CHECK_API",
    "OCLGRIND_PLUGINS",
    "CLPROJ_STATS_OUT",
    "CLPROJ_STATS_STOP_AFTER_GROUPS",
    "CLPROJ_STATS_MAX_WORK_ITEMS",
    "CLPROJ_STATS_MAX_INSTRUCTIONS",
    "CLPROJ_STATS_BUDGET_S",
)


class OclgrindBackend:
    """Runs ``python -m clproj.miniemu.worker`` under the Oclgrind runtime in a subprocess."""

    name = "oclgrind"

    def unavailable(self) -> str | None:
        if not os.path.exists(RUNTIME):
            return f"{RUNTIME} is missing: `apt-get install oclgrind`"
        try:
            from clproj.native import oclgrind_plugin

            oclgrind_plugin()
        except ClprojError as exc:
            return exc.cause
        return None

    def environment(
        self, mode: str, out_path: str, log_path: str, threads: int | None = None
    ) -> dict[str, str]:
        from clproj.native import oclgrind_plugin

        env = {k: v for k, v in os.environ.items() if k not in _CLEARED_ENV}
        preload = env.get("LD_PRELOAD", "")
        # Never stack the clproj interception shim under the emulator: the worker is ours.
        preload = ":".join(p for p in preload.split(":") if p and "_shim" not in p)
        env["LD_PRELOAD"] = RUNTIME + (":" + preload if preload else "")
        env["OCLGRIND_PLUGINS"] = oclgrind_plugin()
        env["CLPROJ_STATS_OUT"] = out_path
        env["OCLGRIND_LOG"] = log_path
        env = pyenv.helper_environment(env)
        if mode in ("single", "quick", "bounded"):
            env["OCLGRIND_QUICK"] = "1"
            env["OCLGRIND_NUM_THREADS"] = "1"
        if mode in ("single", "bounded"):
            env["CLPROJ_STATS_STOP_AFTER_GROUPS"] = "1"
        if threads is not None:
            env["OCLGRIND_NUM_THREADS"] = str(threads)
        return env

    def run(
        self,
        record_path: str,
        mode: str,
        timeout_s: float,
        threads: int | None = None,
        limits: dict[str, str] | None = None,
    ) -> RawEmulation:
        """``limits``: bounded-emulation settings for the plugin (``CLPROJ_STATS_MAX_*``)."""
        reason = self.unavailable()
        if reason:
            raise ClprojError(f"Oclgrind cannot run here: {reason}", "run `make setup`")
        with tempfile.TemporaryDirectory(prefix="clproj-emu-", dir=scratch_parent()) as tmp:
            out_path = os.path.join(tmp, "stats.jsonl")
            log_path = os.path.join(tmp, "oclgrind.log")
            env = self.environment(mode, out_path, log_path, threads)
            env.update(limits or {})
            # It dies with this thread and, inside an app, lowers its priority itself (no
            # preexec_fn: miniemu.worker says why).
            cmd = [sys.executable, "-m", "clproj.miniemu.worker", os.path.abspath(record_path)]
            cmd += ["--parent-pid", str(os.getpid())]
            if settings.is_set("CLPROJ_EMULATION_NICE"):
                cmd += ["--nice", str(settings.get("CLPROJ_EMULATION_NICE"))]
            start = time.perf_counter()
            proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout kills all of it
            )
            try:
                _, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise ClprojError(
                    f"emulation ({mode}) exceeded its time budget of {timeout_s:g} s and was killed",
                    "raise --timeout"
                    if mode == "single"
                    else "use --mode single (one work-group) or raise --timeout",
                ) from None
            wall = time.perf_counter() - start
            stderr_text = err.decode(errors="replace")
            log = ""
            if os.path.exists(log_path):
                with open(log_path, encoding="utf-8", errors="replace") as fh:
                    log = fh.read()
            lines = []
            if os.path.exists(out_path):
                with open(out_path, encoding="utf-8") as fh:
                    lines = [json.loads(line) for line in fh if line.strip()]
        kernels = [d for d in lines if d.get("type") == "kernel"]
        if proc.returncode != 0 or not kernels:
            worker_error(stderr_text)
            # one line, as every error: the emulator's last words, newlines folded
            tail = " | ".join((stderr_text.strip() or log.strip()).splitlines())[-1500:]
            why = (
                f"exit status {proc.returncode}"
                if proc.returncode >= 0
                else f"signal {-proc.returncode}"
            )
            raise ClprojError(
                f"Oclgrind emulation failed ({why}"
                + ("" if kernels else ", no statistics written")
                + f"): {tail or 'no output'}",
                "replay the record on a real device with `clproj replay` to check it, "
                "or inspect it under `oclgrind python -m clproj.miniemu.worker RECORD`",
            )
        return parse_plugin_output(lines, mode, wall, log)


def constant_trip_loops(loops: list[dict]) -> set[str]:
    """Ids of the loops whose trip count ScalarEvolution found to be a constant (no
    argument, id or load in it): the loops a device compiler can unroll completely."""
    out = set()
    for lp in loops:
        exact = lp.get("exact")
        if isinstance(exact, dict) and "c" in exact and set(exact) <= {"c", "bits"}:
            out.add(str(lp.get("id")))
    return out


def with_loop_counts(stats: dict, iterations: dict, constant: set[str]) -> dict:
    """A group's statistics plus ``loops.constant_trip_headers``: the header executions of
    its constant-trip loops, a counter scaled like every other (docs/formats.md section 2)."""
    headers = sum(int(n) for k, n in iterations.items() if str(k) in constant)
    if not headers:
        return stats
    return {**stats, "loops": {"constant_trip_headers": headers}}


def worker_error(stderr_text: str) -> None:
    """Raise the error the worker reported (a record that does not build, a bad field) as
    its own one-line error; return when it reported none (a crash: the caller says so).
    Why: the worker's error came wrapped in the emulator's raw output, over several lines."""
    from clproj.miniemu.worker import ERROR_MARK, FIX_MARK

    cause = fix = None
    for line in stderr_text.splitlines():
        if line.startswith(ERROR_MARK):
            cause = line[len(ERROR_MARK) :]
        elif line.startswith(FIX_MARK):
            fix = line[len(FIX_MARK) :]
    if cause:
        raise ClprojError(f"emulation failed in Oclgrind: {cause}", fix)


def parse_plugin_output(lines: list[dict], mode: str, wall_s: float, log: str = "") -> RawEmulation:
    """The last kernel object of the plugin's JSON lines and the group objects before it."""
    last = max(i for i, d in enumerate(lines) if d.get("type") == "kernel")
    kernel = lines[last]
    if kernel.get("format") != "clproj.plugin-stats" or int(kernel.get("version", 0)) != 1:
        raise ClprojError(
            f"plugin output has format {kernel.get('format')!r} version {kernel.get('version')!r}",
            "rebuild the plugin with `make build`",
        )
    first = last
    while first > 0 and lines[first - 1].get("type") == "group":
        first -= 1
    constant = constant_trip_loops(kernel.get("loops", []))
    groups = [
        GroupStats(
            group_id=list(g["group_id"]),
            group_index=int(g["group_index"]),
            work_items=int(g["stats"]["work_items"]),
            stats=with_loop_counts(g["stats"], g.get("loop_iterations", {}), constant),
            loop_iterations=dict(g.get("loop_iterations", {})),
        )
        for g in lines[first:last]
    ]
    groups.sort(key=lambda g: g.group_index)
    dim = int(kernel["work_dim"])
    return RawEmulation(
        emulator=VERSION,
        mode=mode,
        work_dim=dim,
        global_size=[int(x) for x in kernel["global_size"][:dim]],
        local_size=[int(x) for x in kernel["local_size"][:dim]],
        num_groups=[int(x) for x in kernel["num_groups"][:dim]],
        groups=groups,
        local_bytes_per_group=int(kernel.get("local_bytes_per_group", 0)),
        private_bytes_per_work_item=int(kernel["private"]["bytes_per_work_item"]),
        wall_s=wall_s,
        private_detail=dict(kernel["private"]),
        log=log,
        stop_reason=str(kernel.get("stop_reason", "")),
        loops=list(kernel.get("loops", [])),
        has_barrier=bool(kernel.get("has_barrier", True)),
        instructions_executed=int(kernel.get("instructions_executed", 0)),
    )
