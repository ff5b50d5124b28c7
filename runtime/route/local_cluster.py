"""The single-machine default of route mode: a broker and a node started as processes.

Why: without ``CLPROJ_BROKER`` the application still runs on the virtual platform; the
cluster it talks to is then started here, on this machine, at the application's first
clGetPlatformIDs (see :func:`clproj.runtime.route.platform.prestart`).
"""

from __future__ import annotations

import os

from clproj import pyenv, settings
from clproj.paths import socket_dir


def _app_stdout() -> int | None:
    """The app's stdout for the node (None: inherit it), or /dev/null where the app closed
    it: an inherited closed descriptor 1 would be the first file the node opens."""
    import subprocess

    try:
        os.fstat(1)
    except OSError:
        return subprocess.DEVNULL
    return None


class LocalCluster:
    """The single-machine default of route mode: a broker and a node, each its own process.

    Why not a broker on a thread of the caller (as the cluster tests' EmbeddedCluster does):
    inside the application a broker thread competes with the app for the GIL, and every
    message it forwards stalls the app's next OpenCL call (measured: ~165 us per send).
    Both processes run without LD_PRELOAD, on a private ipc:// endpoint in a 0700 temp
    dir, bounded by ``lifetime_s`` and stopped at exit."""

    def __init__(self, lifetime_s: float) -> None:
        import subprocess

        # inside `clproj run`'s run directory, which it removes however the app ends
        # (a short folder instead where that path is too long for a socket)
        self.tmp = socket_dir("clproj-route-")
        self.endpoint = f"ipc://{self.tmp.name}/broker"
        # clproj's own processes: its package on their path, run in their own folder, so
        # an app's devices.py or clproj.py next to the app is never imported by them
        env = pyenv.helper_environment(dict(os.environ))
        env.pop("LD_PRELOAD", None)
        life = str(max(1, int(lifetime_s)))
        # their logs would land in the app's stderr; CLPROJ_ROUTE_VERBOSE=1 keeps them
        quiet = None if settings.get("CLPROJ_ROUTE_VERBOSE") else subprocess.DEVNULL
        common = [pyenv.helper_python(), "-m", "clproj.cli"]
        # both stop when this app exits, even by a signal (clproj.lifeline); each in its own
        # session, so a Ctrl-C or kill for the app's process group reaches the app alone
        # (the cluster then serves the app's own shutdown instead of dying before it)
        parent = ["--parent-pid", str(os.getpid())]
        tail = ["--curve", "off", "--lifetime", life, *parent]

        def start(args: list[str], stdout: int | None) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [*common, *args, *tail],
                env=env,
                cwd=self.tmp.name,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=quiet,
            )

        self.procs = [
            start(["broker", "--bind", self.endpoint], subprocess.DEVNULL),
            # the node's stdout is the app's: a kernel's printf prints there, as natively
            # (the node's own lines go to stderr)
            start(["node", "--broker", self.endpoint, "--name", "local"], _app_stdout()),
        ]

    def gone(self) -> str | None:
        """Which of the two has exited, in one line (None: both run). Why: they are this
        app's children, so their death is known at once, and a call waiting for the
        cluster fails now instead of after the client's timeout (60 s per call)."""
        for name, p in zip(("broker", "node"), self.procs, strict=True):
            rc = p.poll()
            if rc is not None:
                how = f"killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
                return f"the embedded cluster's {name} (pid {p.pid}) {how}"
        return None

    def stop(self, grace_s: float = 5.0) -> None:
        """Both told at once, then waited for (one after the other cost ~0.3 s per app),
        each killed where it has not stopped after ``grace_s``."""
        import subprocess

        live = [p for p in reversed(self.procs) if p.poll() is None]
        for p in live:
            p.terminate()
        for p in live:
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.tmp.cleanup()
