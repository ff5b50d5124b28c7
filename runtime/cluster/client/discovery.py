"""Discovery: which devices the cluster has, which were lost, and where work goes by default.

Why a module of its own: every other part of the client asks the same questions (is this
device alive, is it on this host, where does a launch go when nothing else decides) and
the answers change in one place only: the broker's ``welcome`` (asked for with
``hello``), its ``node_lost``, and the recovery that follows.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clproj.errors import ClprojError
from clproj.runtime.cluster import protocol

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.platform import RemotePlatform


@dataclass(frozen=True)
class RemoteDevice:
    """One device of a live node, as the broker's ``welcome`` describes it."""

    id: str
    node: str
    name: str
    peak_flops: float
    profile: dict[str, Any]
    host: str = ""
    direct: str = ""  # the node's direct command endpoint ("" = through the broker)
    direct_key: str = ""  # its CURVE server key (Z85), "" without CURVE
    local: str = ""  # the node's Unix socket (used when the node is on this host)


def _device(d: dict[str, Any]) -> RemoteDevice:
    return RemoteDevice(
        d["id"],
        str(d.get("node")),
        str(d.get("name")),
        float(d.get("peak_flops") or 0),
        d.get("profile") or {},
        str(d.get("host") or ""),
        str(d.get("direct") or ""),
        str(d.get("direct_key") or ""),
        str(d.get("local") or ""),
    )


class Directory:
    """The devices of every live node (``devices``), those lost (``dead``, never used
    again), the broker's ``epoch`` as last seen, this machine's ``host`` name, and
    ``default_device``: the device of the latest launch, where unpinned work goes."""

    def __init__(self, p: RemotePlatform) -> None:
        self.p = p
        self.devices: dict[str, RemoteDevice] = {}
        self.dead: set[str] = set()
        self.epoch = 0
        self.host = socket.gethostname()
        self.default_device: str | None = None
        # the broker's latest ``welcome`` (set by the reply dispatch, read by refresh)
        self.welcome: dict[str, Any] | None = None

    def live(self) -> list[str]:
        """Ids of the devices not lost."""
        return [d for d in self.devices if d not in self.dead]

    def forget(self, dead: set[str]) -> None:
        """Drop the lost devices ``dead`` (already in ``self.dead``) from the device list
        and from being the default."""
        for d in dead:
            self.devices.pop(d, None)
        if self.default_device in dead:
            self.default_device = None

    def default_target(self) -> str:
        """Where work goes that nothing else places: the latest launch's device while it
        lives, else the live device with the highest peak (asking the broker again when
        none is left)."""
        live = self.live()
        if not live:
            self.refresh()
            live = self.live()
        if self.default_device in live:
            return self.default_device  # type: ignore[return-value]
        return max(live, key=lambda d: (self.devices[d].peak_flops, d))

    def refresh(self, wait_s: float = 10.0) -> list[RemoteDevice]:
        """Ask the broker for the live devices (waits up to ``wait_s`` for at least one)."""
        p = self.p
        deadline = time.monotonic() + max(wait_s, 0.0)
        answered = False  # any welcome in this refresh: the broker is there
        while True:
            self.welcome = None
            p.transport.to_broker(protocol.pack("hello", client=p.transport.routing_id.hex()))
            t_end = (
                min(deadline, time.monotonic() + 2.0)
                if wait_s > 0
                else time.monotonic() + p.timeout_s
            )
            while self.welcome is None and time.monotonic() < t_end:
                p.pump(50)
            if self.welcome is not None:
                answered = True
                self.epoch = max(self.epoch, self.welcome["epoch"])
                self.devices = {
                    d["id"]: _device(d)
                    for d in self.welcome["devices"]
                    if isinstance(d, dict)
                    and isinstance(d.get("id"), str)
                    and d["id"] not in self.dead
                }
                if self.devices:
                    return list(self.devices.values())
            if time.monotonic() >= deadline:
                if not answered:  # (a last hello sent at the deadline is not its fault)
                    raise ClprojError(
                        "broker did not answer", "start `clproj broker` or check --broker/keys"
                    )
                raise ClprojError(
                    "no live device in the cluster", "start `clproj node --broker ADDR`"
                )
            time.sleep(0.1)
