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

import contextlib
import contextvars
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

from clproj import pyenv, settings
from clproj.background_thread import background_thread
from clproj.errors import ClprojError
from clproj.miniemu.backend import RawEmulation
from clproj.miniemu.plugin_output import parsed
from clproj.paths import scratch_dir, scratch_parent, temp_dir

RUNTIME = "/usr/lib/oclgrind/liboclgrind-rt.so"
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

# The nice value of the emulator runs started in this context (runs_at_nice), None: the
# asking thread's own.
_RUN_NICE: contextvars.ContextVar[int | None] = contextvars.ContextVar("run_nice", default=None)


@contextlib.contextmanager
def runs_at_nice(nice: int) -> Iterator[None]:
    """Emulator runs started inside the ``with`` (by this thread, or by threads it starts
    through ``map_in_threads``) run at ``nice`` or lower, while the caller keeps its own
    priority.

    Why not lower the caller's priority instead: ``clproj run`` is in the app's session,
    and where Linux groups tasks by session (autogroup) a nice-19 thread there waits
    behind every busy thread of the app. The emulator server has a session of its own;
    its runs, at nice 19, yield to the app where there is no autogroup and share the CPU
    evenly with it where there is. Measured on the 2-core VM, PolyBench 2mm (both cores
    busy for 37 s): its first kernel projected 7.3-7.5 s after its launch with the
    projecting thread at nice 19 (5.6-5.9 s of emulation that takes 0.5 s alone), 0.70 s
    with that thread at its own priority (benchmarks/results/first_projection.md)."""
    token = _RUN_NICE.set(nice)
    try:
        yield
    finally:
        _RUN_NICE.reset(token)


def _thread_nice() -> int:
    """The calling thread's own nice value (0 where it cannot be read)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except OSError:
        return 0


def run_nice() -> int:
    """The nice value an emulator run started here gets: the asking thread's, lowered to
    :func:`runs_at_nice`'s (never raised)."""
    nice, wanted = _thread_nice(), _RUN_NICE.get()
    return nice if wanted is None else max(nice, wanted)


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
        with scratch_dir("clproj-emu-") as tmp:
            out_path = os.path.join(tmp, "stats.jsonl")
            log_path = os.path.join(tmp, "oclgrind.log")
            env = self.environment(mode, out_path, log_path, threads)
            env.update(limits or {})
            # It dies with this thread and, inside an app, lowers its priority itself (no
            # preexec_fn: miniemu.worker says why).
            cmd = [
                pyenv.helper_python(),
                "-m",
                "clproj.miniemu.worker",
                os.path.abspath(record_path),
            ]
            cmd += ["--parent-pid", str(os.getpid())]
            # an increment over the nice value it inherits from this thread
            lower = run_nice() - _thread_nice()
            if settings.is_set("CLPROJ_EMULATION_NICE"):
                lower = max(lower, int(settings.get("CLPROJ_EMULATION_NICE")))
            if lower > 0:
                cmd += ["--nice", str(lower)]
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
                    "use --mode bounded (budgeted, as project mode emulates) or raise --timeout"
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
        return parsed(lines, proc.returncode, stderr_text, log, mode, wall)

    def server(self, mode: str = "bounded") -> WorkerServer | ServerSession:
        """A fork server for several runs of one emulation (miniemu.worker ``--serve``):
        a session of the server :func:`shared_server` holds, while it holds a live one,
        else a server of its own. Either ends the emulation's runs when it is closed."""
        reason = self.unavailable()
        if reason:
            raise ClprojError(f"Oclgrind cannot run here: {reason}", "run `make setup`")
        with _SHARED.lock:
            # not in a fork of the holder: the server's pipes are the holder's
            held = _SHARED.server if _SHARED.pid == os.getpid() else None
        if mode == "bounded" and held is not None and not held.gone:
            return ServerSession(held)
        return WorkerServer(self, mode)


class ServerRun:
    """One run submitted to a :class:`WorkerServer`: its folder, and its exit once known."""

    def __init__(
        self, rid: int, folder: str, start: float, template: ServerRun | None = None
    ) -> None:
        self.id, self.dir, self.start = rid, folder, start
        self.status: int | None = None
        self.end = 0.0
        self.discarded = False  # nobody collects it: its folder goes when it exits
        self.template = template  # the prepared launch it was forked from (miniemu.fork_server)


class WorkerServer:
    """``python -m clproj.miniemu.worker --serve`` under Oclgrind: runs forked from one process
    that imported Python, numpy and pyopencl once (miniemu.fork_server says why).

    :meth:`submit` starts a run and returns at once (runs proceed in parallel);
    :meth:`template` prepares a record's launch once and :meth:`submit_from` forks a run
    from it; :meth:`result` waits for one and parses it as :meth:`OclgrindBackend.run` does;
    :meth:`cancel` kills a run whose result is no longer wanted, :meth:`pause` stops and
    continues one. :meth:`close` (or the
    ``with`` block) ends the server and every run still going.
    """

    def __init__(
        self,
        backend: OclgrindBackend,
        mode: str,
        templates: bool | None = None,
    ) -> None:
        """``templates``: whether an emulation forks its runs from a template
        (:meth:`template`) or each from the server (None: ``CLPROJ_EMULATOR_TEMPLATES``;
        False only for the benchmarks' comparison). Later runs of a source load the
        program an earlier run built (``intercept.built_programs``)."""
        self.mode = mode
        if templates is None:
            templates = settings.get("CLPROJ_EMULATOR_TEMPLATES") == "1"
        self.templates = templates
        self.tmp = temp_dir("clproj-emusrv-", scratch_parent())
        env = backend.environment(mode, os.path.join(self.tmp, "unused"), os.devnull)
        env["OPENBLAS_NUM_THREADS"] = "1"  # no BLAS thread pool beside the forks
        # No pyopencl compiler cache: its lock file is held while a run builds, and a run
        # paused (SIGSTOP) or killed then makes every other build wait 60 s and fail (a
        # killed holder leaves the lock for good). Oclgrind builds these kernels in
        # milliseconds.
        env["PYOPENCL_NO_CACHE"] = "1"
        self.stderr = open(os.path.join(self.tmp, "server.stderr"), "wb")  # noqa: SIM115
        cmd = [pyenv.helper_python(), "-m", "clproj.miniemu.worker", "--serve"]
        cmd += ["--binaries", os.path.join(self.tmp, "programs")]
        cmd += ["--parent-pid", str(os.getpid())]
        if settings.is_set("CLPROJ_EMULATION_NICE"):
            cmd += ["--nice", str(settings.get("CLPROJ_EMULATION_NICE"))]
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            # its own process group (close() kills all of it), and its own session: under
            # autogroup scheduling an equal share beside a busy app (live_run's docstring)
            start_new_session=True,
        )
        self.runs: dict[int, ServerRun] = {}
        self.cond = threading.Condition()
        self.send_lock = threading.Lock()  # one request line at a time, from any thread
        self.next_id = 0
        self.gone = False
        self.reader = background_thread(self._read, "clproj-emusrv")
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                run = self.runs.get(int(msg.get("id", -1)))
                if run is not None:
                    run.status, run.end = int(msg["status"]), time.perf_counter()
                self.cond.notify_all()
            if run is not None and run.discarded:
                self.forget(run)
        with self.cond:  # the server is gone: every run still open failed
            self.gone = True
            for run in self.runs.values():
                if run.status is None:
                    run.status, run.end = -int(signal.SIGKILL), time.perf_counter()
            self.cond.notify_all()

    def _send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        try:
            with self.send_lock:
                self.proc.stdin.write((json.dumps(msg) + "\n").encode())
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the server is gone; the reader marks the runs failed

    def submit(self, record_path: str, limits: dict[str, str] | None = None) -> ServerRun:
        """A run of the record at ``record_path``."""
        return self._request({"record": os.path.abspath(record_path)}, limits)

    def template(self, record_path: str) -> ServerRun:
        """A template of the record at ``record_path``: its launch prepared once, for
        :meth:`submit_from` (miniemu.fork_server says why). It ends when cancelled."""
        return self._request({"record": os.path.abspath(record_path), "template": True}, None)

    def submit_from(
        self, template: ServerRun, args: dict[int, bytes], limits: dict[str, str] | None = None
    ) -> ServerRun:
        """A run forked from ``template``, its scalar arguments ``args`` (index: bytes)
        set anew."""
        hexed = {str(i): data.hex() for i, data in args.items()}
        return self._request({"from": template.id, "args": hexed}, limits, template)

    def _request(
        self, what: dict, limits: dict[str, str] | None, template: ServerRun | None = None
    ) -> ServerRun:
        with self.cond:
            rid = self.next_id
            self.next_id += 1
            folder = os.path.join(self.tmp, f"run{rid}")
            os.makedirs(folder)
            run = ServerRun(rid, folder, time.perf_counter(), template)
            self.runs[rid] = run
            if self.gone:
                run.status, run.end = -int(signal.SIGKILL), run.start
        env = {
            "CLPROJ_STATS_OUT": os.path.join(folder, "stats.jsonl"),
            "OCLGRIND_LOG": os.path.join(folder, "oclgrind.log"),
            **(limits or {}),
        }
        # The run yields as the asking thread does, or as runs_at_nice says (live
        # emulation beside an app, runtime.projection.live_run): a fork of the server
        # would not inherit it.
        self._send({"id": rid, **what, "dir": folder, "env": env, "nice": run_nice()})
        return run

    def wait_any(self, runs: list[ServerRun], timeout_s: float) -> ServerRun | None:
        """The first of ``runs`` to have exited, waiting up to ``timeout_s``."""
        deadline = time.perf_counter() + timeout_s
        with self.cond:
            while True:
                done = [r for r in runs if r.status is not None]
                left = deadline - time.perf_counter()
                if done or left <= 0:
                    return min(done, key=lambda r: r.end) if done else None
                self.cond.wait(left)

    def cancel(self, run: ServerRun) -> None:
        if run.status is None:
            self._send({"signal": "kill", "to": run.id})

    def pause(self, run: ServerRun, paused: bool = True) -> None:
        """Stop (SIGSTOP) or continue a run: its core goes to runs needed sooner."""
        if run.status is None:
            self._send({"signal": "stop" if paused else "cont", "to": run.id})

    def result(self, run: ServerRun, timeout_s: float) -> RawEmulation:
        """The run's statistics; the same errors as :meth:`OclgrindBackend.run`."""
        if self.wait_any([run], timeout_s) is None:
            self.cancel(run)
            raise ClprojError(
                f"emulation ({self.mode}) exceeded its time budget of {timeout_s:g} s and was killed",
                "use --mode single (one work-group) or raise --timeout",
            )
        assert run.status is not None
        texts = {}
        for name in ("stderr", "oclgrind.log", "stats.jsonl"):
            path = os.path.join(run.dir, name)
            texts[name] = ""
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="replace") as fh:
                    texts[name] = fh.read()
        lines = [json.loads(x) for x in texts["stats.jsonl"].splitlines() if x.strip()]
        if run.status != 0 and not texts["stderr"] and run.template is not None:
            # its template could not prepare the launch: the error is the template's
            path = os.path.join(run.template.dir, "stderr")
            with contextlib.suppress(OSError), open(path, errors="replace") as fh:
                texts["stderr"] = fh.read()[-3000:]
        if self.gone and not texts["stderr"]:  # the server itself failed: its last words
            with open(os.path.join(self.tmp, "server.stderr"), errors="replace") as fh:
                texts["stderr"] = fh.read()[-3000:]
        self.forget(run)
        return parsed(
            lines,
            run.status,
            texts["stderr"],
            texts["oclgrind.log"],
            self.mode,
            run.end - run.start,
        )

    def forget(self, run: ServerRun) -> None:
        """Drop an exited run's folder and entry: a server shared by a whole ``clproj run``
        would otherwise keep one of each per run. A run still going keeps both."""
        with self.cond:
            if run.status is None:
                return
            self.runs.pop(run.id, None)
        shutil.rmtree(run.dir, ignore_errors=True)

    def discard(self, run: ServerRun) -> None:
        """Kill a run nobody will collect and drop its folder and entry once it exits
        (this server's reader does it then): an emulation whose profile is done returns
        at once instead of waiting for its killed attempt to exit (5-6 ms of a loop-
        extrapolated emulation's 0.1 s)."""
        with self.cond:
            run.discarded = True
            exited = run.status is not None
        if exited:
            self.forget(run)
        else:
            self.cancel(run)

    def close(self) -> None:
        """End the server and its runs at once (SIGKILL to its process group): nothing in
        it needs an orderly exit, and the interpreter's shutdown (numpy, pyopencl,
        Oclgrind's destructors) took 0.16 s of every emulation."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.reader.join(timeout=2.0)
        self.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> WorkerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ServerSession:
    """One emulation's share of a server that :func:`shared_server` holds: the same calls
    as :class:`WorkerServer`, and :meth:`close` ends only the runs it submitted (the scout
    and the speculative probes a bounded emulation no longer needs), not the server."""

    def __init__(self, server: WorkerServer) -> None:
        self.server = server
        self.mode = server.mode
        self.templates = server.templates
        self.mine: list[ServerRun] = []

    def submit(self, record_path: str, limits: dict[str, str] | None = None) -> ServerRun:
        return self._mine(self.server.submit(record_path, limits))

    def template(self, record_path: str) -> ServerRun:
        return self._mine(self.server.template(record_path))

    def submit_from(
        self, template: ServerRun, args: dict[int, bytes], limits: dict[str, str] | None = None
    ) -> ServerRun:
        return self._mine(self.server.submit_from(template, args, limits))

    def _mine(self, run: ServerRun) -> ServerRun:
        self.mine.append(run)  # ended with this session
        return run

    def wait_any(self, runs: list[ServerRun], timeout_s: float) -> ServerRun | None:
        return self.server.wait_any(runs, timeout_s)

    def cancel(self, run: ServerRun) -> None:
        self.server.cancel(run)

    def pause(self, run: ServerRun, paused: bool = True) -> None:
        self.server.pause(run, paused)

    def result(self, run: ServerRun, timeout_s: float) -> RawEmulation:
        return self.server.result(run, timeout_s)

    def close(self) -> None:
        """Kill this emulation's runs still going; their folders go once they exit."""
        for run in self.mine:
            self.server.discard(run)
        self.mine.clear()

    def __enter__(self) -> ServerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Shared:
    """The server :func:`shared_server` holds (None outside it) and its holders' count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: WorkerServer | None = None
        self.pid = 0  # the process that started it
        self.holders = 0


_SHARED = _Shared()


@contextlib.contextmanager
def shared_server(templates: bool | None = None) -> Iterator[None]:
    """Within the block, bounded emulations in any thread of this process fork their runs
    from one server, started here (so its imports overlap whatever the caller does next).

    Why: each bounded emulation started a server of its own, and its imports (Python,
    numpy, pyopencl) took 0.37-0.56 s of a BabelStream kernel's 0.4-0.6 s emulation on the
    2-core VM, against 0.05 s for each later run of the same server. ``clproj run`` holds
    one for the whole run. Enter it from a thread that outlives the block: the server dies
    with the thread that started it (``miniemu.worker --parent-pid``). Nested blocks share
    the first one's server; the last to leave closes it. Where Oclgrind cannot run, the
    block holds nothing and each emulation reports why, as before; with
    ``CLPROJ_EMULATOR_SERVER=emulation`` it holds nothing either (each emulation starts a
    server of its own: the benchmarks' comparison). ``templates``: as
    :class:`WorkerServer`'s (a benchmark's switch).
    """
    backend = OclgrindBackend()
    wanted = settings.get("CLPROJ_EMULATOR_SERVER") == "run"
    with _SHARED.lock:
        # An outer block that holds no server (entered with another setting, or in the
        # process this one was forked from) does not keep this one from starting one.
        held = _SHARED.server is not None and _SHARED.pid == os.getpid()
        if wanted and not held and backend.unavailable() is None:
            _SHARED.server = WorkerServer(backend, "bounded", templates=templates)
            _SHARED.pid = os.getpid()
        _SHARED.holders += 1
    try:
        yield
    finally:
        with _SHARED.lock:
            _SHARED.holders -= 1
            server = _SHARED.server if _SHARED.holders == 0 else None
            if server is not None:
                _SHARED.server = None
        if server is not None:
            server.close()
