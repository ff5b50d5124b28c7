"""Where a node's direct command socket binds, and who may use it.

Why a module of its own: besides its connection to the broker, a node binds its own ROUTER
socket and announces it when it registers, so clients send commands for its devices
straight there (one round trip instead of two through the broker). Choosing the address
(ipc:// in a private 0700 directory next to a local broker, tcp:// otherwise) and, with
CURVE, accepting only the cluster's member keys are this module's job.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import tempfile
from typing import Any

from clproj.paths import socket_dir
from clproj.runtime.cluster.keys import Keys


def _outbound_ip(host: str) -> str:
    """The local address a connection to ``host`` leaves from (no packet is sent)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return str(s.getsockname()[0])
    return socket.gethostbyname(socket.gethostname())


def direct_bind(broker: str, direct: str) -> tuple[str, str]:
    """(address to bind, host to announce) for the node's direct socket.

    "auto": next to the broker: a loopback broker gets a loopback tcp port, a remote one
    a port on every interface announced with the address that reaches the broker, and a
    local ipc/inproc broker an ipc socket in a private directory ("" for the caller).
    """
    if direct != "auto":
        host = direct.split("://", 1)[-1].rsplit(":", 1)[0]
        return direct, host
    if not broker.startswith("tcp://"):
        return "", ""
    host = broker[6:].rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "localhost", "::1"):
        return "tcp://127.0.0.1:0", "127.0.0.1"
    return "tcp://0.0.0.0:0", _outbound_ip(host)


def private_dir() -> tempfile.TemporaryDirectory[str]:
    """A 0700 directory for the node's ipc and Unix sockets (in ``CLPROJ_RUN_DIR`` if set,
    short enough for a socket path: :func:`clproj.paths.socket_dir`)."""
    return socket_dir("clproj-node-")


def member_authenticator(ctx: Any, keys: Keys) -> Any:
    """ZAP handler of the direct socket: the keys the broker accepts (``authorized/``
    when this machine has it) and this node's own member key (clients share that pair)."""
    import zmq.auth
    from zmq.auth.thread import ThreadAuthenticator

    allowed = {keys.own_public}
    if keys.authorized_dir.is_dir():
        allowed |= set(zmq.auth.load_certificates(str(keys.authorized_dir)))

    class _Members:
        def callback(self, domain: str, key: bytes) -> bool:
            return domain == "clproj" and key in allowed

    auth = ThreadAuthenticator(ctx, log=logging.getLogger("clproj.node.auth"))
    auth.start()
    auth.configure_curve_callback(domain="clproj", credentials_provider=_Members())
    return auth
