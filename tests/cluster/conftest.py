"""Fixtures of the cluster tests: real brokers (threads), real nodes, route-mode runs.

Nodes are separate ``clproj node`` processes with their own PoCL driver (``basic`` = one
thread, ``pthread`` = all cores), so the "cluster" is genuinely heterogeneous and a node
can be killed for real; ``embedded_cluster`` also offers a node on a thread of the test,
whose object the test can inspect. Everything is bounded by ``--lifetime``/``until`` and
stopped at the end of the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
LIFETIME = 150

ADD_SRC = """
__kernel void advance(__global float *a, __global const float *b, const float s, const int reps) {
    int i = get_global_id(0);
    float x = a[i];
    for (int r = 0; r < reps; ++r) x = x * 0.999f + b[i] * s;
    a[i] = x;
}
"""

# route mode's projection hook for ``route_env(fast=...)``: projects each recorded kernel
# fast on the devices whose id contains ROUTE_TEST_FAST, after ROUTE_TEST_DELAY seconds
ROUTE_HOOK = textwrap.dedent(
    """
    import os, threading, time

    def on_record(rec):
        from clproj.runtime.route import platform as route_runtime

        fast = os.environ["ROUTE_TEST_FAST"]
        delay = float(os.environ.get("ROUTE_TEST_DELAY", "0"))

        def post():
            time.sleep(delay)
            r = route_runtime.route()
            times = {d.id: (0.0005 if fast in d.id else 0.05) for d in r.p.devices.values()}
            route_runtime.post_projection(rec.signature, times)

        if delay:
            threading.Thread(target=post, daemon=True).start()
        else:
            post()
    """
)


# ---- plain helpers, handed to tests by the fixtures below --------------------------------
def _reference_step(a: Any, b: Any, s: float, reps: int, times: int) -> Any:
    """What ``times`` launches of ADD_SRC's ``advance`` make of ``a`` (numpy reference)."""
    import numpy as np

    a = a.astype(np.float32).copy()
    for _ in range(times):
        for _ in range(reps):
            a = (a * np.float32(0.999) + b * np.float32(s)).astype(np.float32)
    return a


def _spawn_node(
    endpoint: str, name: str, pocl: str, log_path: Path, extra: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """A ``clproj node`` process on PoCL driver(s) ``pocl``, logging to ``log_path``."""
    env = dict(os.environ)
    env["POCL_DEVICES"] = pocl
    env["PYTHONPATH"] = str(REPO)
    env.pop("LD_PRELOAD", None)
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process by the OS
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clproj.cli",
            "node",
            "--broker",
            endpoint,
            "--name",
            name,
            "--lifetime",
            str(LIFETIME),
            *(extra or []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_devices(broker: Any, n: int, timeout: float = 30.0) -> None:
    """Until ``n`` devices have registered with ``broker`` (AssertionError after timeout)."""
    deadline = time.monotonic() + timeout
    while len(broker.devices) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(broker.devices)} of {n} devices registered")
        time.sleep(0.05)


@contextlib.contextmanager
def _broker_and_two_nodes(
    tmp_path: Path,
    liveness_s: float = 3.0,
    names: tuple[str, str] = ("nb", "np"),
    until_s: float = 170,
) -> Iterator[dict[str, Any]]:
    """Broker thread + a ``basic`` node and a ``pthread`` node (named ``names``), as
    processes: yields ``{"endpoint", "broker", "nodes", "thread"}``; stopped afterwards
    (also a broker the test put in place of the first one)."""
    from clproj.runtime.cluster.broker import Broker
    from clproj.runtime.cluster.broker import serve_in_thread as broker_thread

    endpoint = f"ipc://{tmp_path}/broker"
    broker = Broker(endpoint, liveness_s=liveness_s)
    th = broker_thread(broker, until=time.time() + until_s)
    nb, np_ = names
    nodes = {
        nb: _spawn_node(endpoint, nb, "basic", tmp_path / f"{nb}.log"),
        np_: _spawn_node(endpoint, np_, "pthread", tmp_path / f"{np_}.log"),
    }
    c = {"endpoint": endpoint, "broker": broker, "nodes": nodes, "thread": th}
    try:
        _wait_devices(broker, 2, timeout=60)
        yield c
    finally:
        for p in nodes.values():
            _stop(p)
        c["broker"].stop()
        c["thread"].join(3)


class EmbeddedCluster:
    """A broker on a thread of the test and one local node, on a private ipc:// endpoint
    (0700 temporary directory). ``node="process"``: a ``clproj node`` process without
    LD_PRELOAD; ``node="thread"``: a Node on a thread (``node_obj``, inspectable).
    Stops by itself after ``lifetime_s`` at the latest."""

    def __init__(
        self, node: str = "process", lifetime_s: float = 24 * 3600, name: str = "local"
    ) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="clproj-")
        os.chmod(self.tmp.name, 0o700)
        self.endpoint = f"ipc://{self.tmp.name}/broker"
        self.until = time.time() + lifetime_s
        self.node_mode = node
        self.name = name
        self.broker: Any = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.node_obj: Any = None
        self.threads: list[Any] = []

    def start(self) -> EmbeddedCluster:
        from clproj.runtime.cluster.broker import Broker
        from clproj.runtime.cluster.broker import serve_in_thread as broker_thread

        self.broker = Broker(self.endpoint)
        self.threads.append(broker_thread(self.broker, until=self.until))
        if self.node_mode == "thread":
            from clproj.runtime.cluster.node.server import Node
            from clproj.runtime.cluster.node.server import serve_in_thread as node_thread

            self.node_obj = Node(self.endpoint, name=self.name)
            self.threads.append(node_thread(self.node_obj, until=self.until))
        else:
            env = dict(os.environ)
            env.pop("LD_PRELOAD", None)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
            )
            life = str(max(1, int(self.until - time.time())))
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "clproj.cli", "node"),
                    *("--broker", self.endpoint, "--name", self.name, "--lifetime", life),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        return self

    def stop(self) -> None:
        if self.node_obj is not None:
            self.node_obj.stop()
        if self.proc is not None:
            _stop(self.proc)
        if self.broker is not None:
            self.broker.stop()
        for th in self.threads:
            th.join(2)
        self.tmp.cleanup()


def _route_env(tmp_path: Path, fast: str | None = None, delay: float = 0.0) -> dict[str, str]:
    """The environment of a ``clproj run --mode route`` app; ``fast``: a hook projects
    every kernel onto the devices whose id starts with it, ``delay`` s after its record."""
    env = dict(os.environ)
    env.setdefault("POCL_DEVICES", "pthread basic")
    env.pop("LD_PRELOAD", None)
    env["PYOPENCL_CTX"] = "0"
    env["PYOPENCL_NO_CACHE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    if fast:
        (tmp_path / "route_test_hook.py").write_text(ROUTE_HOOK)
        env["CLPROJ_HOOKS"] = "route_test_hook:on_record"
        env["CLPROJ_RECORD_DIR"] = str(tmp_path / "records")
        env["ROUTE_TEST_FAST"] = fast
        env["ROUTE_TEST_DELAY"] = str(delay)
        # The test's hook is the only projection: the app's own (real) one is made for a
        # device no node has, so it maps to no cluster device and is not posted.
        env["CLPROJ_DEVICES"] = "h100-sxm-spec"
    return env


def _finish(proc: subprocess.Popen[str], timeout: int = 150) -> tuple[str, str, dict[str, Any]]:
    """(the app's output, stderr, the summary) of ``clproj run --json``: the summary is
    alone on stdout, the app's own stdout went to stderr."""
    out, err = proc.communicate(timeout=timeout)
    summary = json.loads(out) if out.strip() else {}
    return err, err, summary


# ---- fixtures ----------------------------------------------------------------------------
@pytest.fixture()
def add_kernel_source() -> str:
    """OpenCL source of ``advance(a, b, s, reps)``: a[i] = a[i]*0.999 + b[i]*s, reps times."""
    return ADD_SRC


@pytest.fixture()
def reference_step() -> Callable[..., Any]:
    """``reference_step(a, b, s, reps, times)``: numpy result of ``times`` advance launches."""
    return _reference_step


@pytest.fixture()
def wait_devices() -> Callable[..., None]:
    """``wait_devices(broker, n, timeout=30)``: until n devices registered."""
    return _wait_devices


@pytest.fixture()
def start_node() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``start_node(endpoint, name, pocl, log_path, extra=None)``: a node process, stopped
    at the end of the test (a test may kill it earlier)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(
        endpoint: str, name: str, pocl: str, log_path: Path, extra: list[str] | None = None
    ) -> subprocess.Popen[bytes]:
        procs.append(_spawn_node(endpoint, name, pocl, log_path, extra))
        return procs[-1]

    yield start
    for p in procs:
        _stop(p)


@pytest.fixture()
def broker_and_two_nodes() -> Callable[..., contextlib.AbstractContextManager[dict[str, Any]]]:
    """``with broker_and_two_nodes(tmp_path, liveness_s=3.0) as c``: broker thread + a
    ``basic`` node (nb) and a ``pthread`` node (np); ``c``: endpoint, broker, nodes."""
    return _broker_and_two_nodes


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Broker thread + a ``basic`` node (nb) and a ``pthread`` node (np), as processes."""
    with _broker_and_two_nodes(tmp_path, liveness_s=3.0) as c:
        yield c


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One cluster for a whole test module: broker thread (liveness 2 s) + nodes "basic"
    and "pthread" (processes on those PoCL drivers); ``tmp`` holds their logs. A test may
    replace the broker (``broker``, ``thread``): the replacement is stopped too."""
    tmp = tmp_path_factory.mktemp("cluster")
    with _broker_and_two_nodes(tmp, 2.0, ("basic", "pthread"), until_s=150) as c:
        c["tmp"] = tmp
        yield c


@pytest.fixture()
def embedded_cluster() -> Iterator[Callable[..., EmbeddedCluster]]:
    """``embedded_cluster(node="thread"|"process", lifetime_s=...)``: a started
    EmbeddedCluster, stopped at the end of the test."""
    made: list[EmbeddedCluster] = []

    def make(node: str = "process", lifetime_s: float = 60) -> EmbeddedCluster:
        made.append(EmbeddedCluster(node=node, lifetime_s=lifetime_s))
        return made[-1].start()

    yield make
    for c in reversed(made):
        c.stop()


@pytest.fixture()
def route_env() -> Callable[..., dict[str, str]]:
    """``route_env(tmp_path, fast=None, delay=0.0)``: a route-mode app's environment."""
    return _route_env


@pytest.fixture()
def finish() -> Callable[..., tuple[str, str, dict[str, Any]]]:
    """``finish(proc, timeout=150)``: (app output, stderr, summary) of ``clproj run --json``."""
    return _finish
