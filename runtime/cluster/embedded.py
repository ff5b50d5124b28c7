"""The single-machine default: a broker and a local node started by the client itself.

Why a node *process* by default: in route mode the client runs inside the app, where the
LD_PRELOAD shim intercepts every ``cl*`` call; a node thread in that process would call
OpenCL through the shim too. The node subprocess is started without LD_PRELOAD, so it
talks to the real OpenCL runtime. ``node="thread"`` keeps everything in-process (tests,
Python apps that are not preloaded). The broker always runs on a thread of the caller,
bound to a private ipc:// endpoint (local, no CURVE needed: the socket file lives in a
0700 temporary directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime.cluster.broker import Broker
from runtime.cluster.broker import serve_in_thread as broker_thread

REPO = Path(__file__).resolve().parents[3]


class EmbeddedCluster:
    """``with EmbeddedCluster() as c: RemotePlatform(c.endpoint)``; stops by itself after
    ``lifetime_s`` at the latest."""

    def __init__(
        self,
        node: str = "process",
        lifetime_s: float = 24 * 3600,
        node_env: dict[str, str] | None = None,
        name: str = "local",
    ) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="clproj-")
        os.chmod(self.tmp.name, 0o700)
        self.endpoint = f"ipc://{self.tmp.name}/broker"
        self.until = time.time() + lifetime_s
        self.node_mode = node
        self.node_env = node_env
        self.name = name
        self.broker: Broker | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.node_obj: Any = None
        self._threads: list[Any] = []

    def start(self) -> EmbeddedCluster:
        self.broker = Broker(self.endpoint)
        self._threads.append(broker_thread(self.broker, until=self.until))
        if self.node_mode == "thread":
            from runtime.cluster.node.server import Node
            from runtime.cluster.node.server import serve_in_thread as node_thread

            self.node_obj = Node(self.endpoint, name=self.name)
            self._threads.append(node_thread(self.node_obj, until=self.until))
        else:
            env = dict(os.environ if self.node_env is None else self.node_env)
            env.pop("LD_PRELOAD", None)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
            )
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "clproj.cli",
                    "node",
                    "--broker",
                    self.endpoint,
                    "--name",
                    self.name,
                    "--lifetime",
                    str(max(1, int(self.until - time.time()))),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        return self

    def stop(self) -> None:
        if self.node_obj is not None:
            self.node_obj.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.broker is not None:
            self.broker.stop()
        for th in self._threads:
            th.join(2)
        self.tmp.cleanup()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
