"""The client's sockets never hang an app: a broker that takes no message fails the send."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq

from clproj.errors import ClprojError
from clproj.runtime.cluster import protocol
from clproj.runtime.cluster.client.transports import SEND_QUEUE, Transports


@pytest.mark.parametrize("closing", [False, True])
def test_a_broker_that_reads_nothing_fails_the_send_instead_of_hanging(closing):
    """A listener that accepts the TCP connection and never speaks (a broker stopped with
    SIGSTOP, or hung): the client's queue for it fills, and the next send used to wait
    forever inside the app's OpenCL call. It now fails after the send timeout, naming the
    broker; once the client is closing (``stop_waiting``) it fails at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    endpoint = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    ctx = zmq.Context()
    t = Transports(
        None,  # type: ignore[arg-type]  (the directory is only asked where devices go)
        endpoint,
        "off",
        None,
        None,
        ctx,
        direct_mode="0",
        on_link_closed=lambda: None,
        send_timeout_s=0.5,
    )
    outcome: dict[str, object] = {}

    def flood() -> None:
        started = time.monotonic()
        try:
            for i in range(SEND_QUEUE * 2):
                if closing and i == SEND_QUEUE:
                    t.stop_waiting()
                t.to_broker(protocol.pack("projection", key="k", times={}, source="client"))
        except ClprojError as exc:
            outcome["error"] = str(exc)
        outcome["s"] = time.monotonic() - started

    th = threading.Thread(target=flood, daemon=True)
    th.start()
    th.join(20)
    try:
        assert not th.is_alive(), "a send to a broker that reads nothing hung"
        assert f"the broker at {endpoint} took no message" in str(outcome.get("error"))
    finally:
        t.close()
        ctx.destroy(linger=0)
        listener.close()
