"""The cluster broker: node/device registry, liveness, placement, forwarding, status.

Why one ROUTER socket: nodes and clients only ever *connect* to the broker (one address,
one CURVE server key). Nodes that announce a *direct* endpoint get their commands
straight from clients (one round trip instead of two: the broker is out of the command
path); the broker then learns each device's queue and measured launch times from the
node's heartbeats (every 0.5 s) and keeps answering placements from its cache. Commands
that do come through the broker (nodes without a direct endpoint) are forwarded, and
for those it counts in-flight launches exactly and learns times from the replies. They are
forwarded with their original header frame and zero-copy data frames (no re-encoding of
bulk data). Every inbound message is validated (runtime.cluster.protocol) before use; rejects are
counted, logged (rate-limited) and never crash the loop.

Why probes beside heartbeats: a heartbeat says the node's process lives, not that it serves.
A node's devices are offered to clients only once the node has answered a ``probe`` (a
round trip through the loop that serves its commands), and the broker keeps probing every
node; one that leaves a probe unanswered past its deadline is dropped as wedged, and its
clients fail over as for a dead node. Deadlines scale with what each node has shown: a
probe's deadline is ``max(probe floor, PROBE_K x`` the EWMA of its answered round trips),
the heartbeat deadline ``max(liveness, HEARTBEAT_K x`` the EWMA of its heartbeat gaps),
so a node on a loaded machine, whose answers come late but come, is slow, not dead.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import zmq

from clproj.background_thread import background_thread
from clproj.devices.profile import DeviceProfile
from clproj.errors import ClprojError
from clproj.runtime.cluster import placement, protocol
from clproj.runtime.cluster.keys import Keys, make_server, start_authenticator

log = logging.getLogger("clproj.broker")

HEARTBEAT_S = 0.5
# message types a peer may send to the broker without an envelope
_INBOUND = frozenset(
    {"register", "heartbeat", "hello", "bye", "projection", "status", "place", "cmd", "probe_ok"}
)
LIVENESS_S = 3.0  # a node silent for this long is dead (the floor of its deadline)
PROBE_FLOOR_S = 5.0  # a probe unanswered this long marks a node wedged (the floor)
PROBE_EVERY_S = 1.0  # a node is probed again this long after its last answer
PROBE_K = 8.0  # a probe's deadline: PROBE_K x the node's round-trip EWMA, at least the floor
HEARTBEAT_K = 6.0  # a node is dead when silent HEARTBEAT_K x its heartbeat-gap EWMA
EWMA_ALPHA = 0.2
MAX_PROJECTIONS = 50_000  # kernel keys whose projections the broker keeps


@dataclass
class NodeRec:
    ident: bytes
    node: str
    host: str
    pid: int
    devices: list[str]
    last_seen: float
    load: dict[str, Any] = field(default_factory=dict)
    direct: str = ""
    direct_key: str = ""
    local: str = ""
    # devices held back until the node answers its first probe
    unoffered: list[DevRec] = field(default_factory=list)
    offered: bool = False
    probe_id: int = 0  # the probe in flight (0: none)
    probe_sent: float = 0.0  # when it was sent, or when the last one was answered
    rtt_ewma_s: float = 0.0  # answered probes' round trips (0: none yet)
    gap_ewma_s: float = HEARTBEAT_S  # gaps between heartbeats

    def probe_deadline(self, floor: float) -> float:
        """Seconds a probe may stay unanswered before the node counts as wedged."""
        return max(floor, PROBE_K * self.rtt_ewma_s)

    def silence_deadline(self, floor: float) -> float:
        """Seconds without a heartbeat before the node counts as dead."""
        return max(floor, HEARTBEAT_K * self.gap_ewma_s)


@dataclass
class DevRec:
    id: str
    node: str
    name: str
    profile: dict[str, Any]
    view: placement.DeviceView
    launch_ewma_s: float = 0.0


class Broker:
    """Run with :meth:`run` (bounded by ``until``/``stop``); one thread, one socket."""

    def __init__(
        self,
        bind: str,
        keys: Keys | None = None,
        ctx: zmq.Context | None = None,
        projector: placement.Projector | None = None,
        liveness_s: float = LIVENESS_S,
        probe_floor_s: float = PROBE_FLOOR_S,
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.keys = keys
        self.auth = start_authenticator(self.ctx, keys) if keys else None
        self.sock = self.ctx.socket(zmq.ROUTER)
        protocol.secure_socket_options(self.sock)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.sock.setsockopt(zmq.SNDHWM, 10000)
        self.sock.setsockopt(zmq.RCVHWM, 10000)
        if keys:
            make_server(self.sock, keys)
        self.sock.bind(bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.projector = projector
        self.liveness_s = liveness_s
        self.probe_floor_s = probe_floor_s
        self._probe_ids = itertools.count(1)
        self.nodes: dict[str, NodeRec] = {}
        self.devices: dict[str, DevRec] = {}
        self.by_ident: dict[bytes, str] = {}
        self.clients: dict[bytes, float] = {}
        self.projections: dict[str, dict[str, float | None]] = {}
        # projected joules per launch, posted with the times (placement by energy)
        self.energies: dict[str, dict[str, float | None]] = {}
        self.measured: dict[str, dict[str, float]] = {}
        self.inflight: dict[tuple[bytes, int], tuple[str, str | None]] = {}
        self.placements: deque[dict[str, Any]] = deque(maxlen=50)
        self.epoch = 1
        self.rejects = 0
        # called with (sender, reason) for every refused message: a public hook so that
        # tests and diagnostics can see *why* messages were refused without patching
        self.on_reject: Callable[[bytes, str], None] | None = None
        self.forwarded = 0
        self.started = time.time()
        self._stop = threading.Event()
        self._times_cache: dict[str, tuple[int, dict[str, float | None]]] = {}
        self._fwd: dict[str, int] = {}  # device -> launches forwarded and not yet replied

    # ---- lifecycle -------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.sock.close(0)
        if self.auth:
            self.auth.stop()
        if self.endpoint.startswith("ipc://"):  # the socket file goes with the broker
            with contextlib.suppress(OSError):
                os.unlink(self.endpoint[len("ipc://") :])

    def run(self, until: float | None = None) -> None:
        """Serve until :meth:`stop` or the UNIX time ``until``; always bounded."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        next_check = time.monotonic() + HEARTBEAT_S
        try:
            while not self._stop.is_set() and (until is None or time.time() < until):
                if poller.poll(100):
                    for _ in range(1000):  # drain a burst, then check liveness
                        try:
                            frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        try:
                            self._handle(frames)
                        except Exception as exc:  # never let one message stop the broker
                            self._reject(
                                frames[0].bytes, f"internal error {type(exc).__name__}: {exc}"
                            )
                            if self.rejects <= 5:
                                log.exception("broker failed on a message")
                now = time.monotonic()
                if now >= next_check:
                    self._check_liveness()
                    next_check = now + HEARTBEAT_S
        finally:
            self.close()

    # ---- inbound ---------------------------------------------------------------------
    def _reject(self, ident: bytes, why: str) -> None:
        self.rejects += 1
        if self.on_reject is not None:
            self.on_reject(ident, why)
        if self.rejects <= 20 or self.rejects % 1000 == 0:
            log.warning("rejected message #%d from %s: %s", self.rejects, ident.hex()[:16], why)

    def _send(self, ident: bytes, frames: list[Any]) -> bool:
        try:
            self.sock.send_multipart([ident, *frames], copy=False)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: the peer is gone
            log.info("cannot send to %s: %s", ident.hex()[:16], exc)
            return False

    def _handle(self, frames: list[Any]) -> None:
        ident = frames[0].bytes
        body = frames[1:]
        node = self.by_ident.get(ident)
        try:
            if node is not None and len(body) >= 2 and len(body[0].bytes) <= protocol.MAX_ID:
                # node reply: [client ident, header, *data]
                header, _ = protocol.decode(body[1:])
                if header["t"] == "reply":
                    self._on_reply(ident, body[0].bytes, header, body[1:])
                    return
                raise protocol.ProtocolError("node sent an enveloped non-reply")
            header, _ = protocol.decode(body)
        except protocol.ProtocolError as exc:
            self._reject(ident, str(exc))
            rid = protocol.lenient_id(body) if node is None else 0
            if rid:  # a client's request, answered at once: it would wait for a reply
                self._send(ident, [protocol.pack("error", id=rid, err=f"rejected: {exc}")])
            return
        t = header["t"]
        try:
            handler = getattr(self, f"_on_{t}", None) if t in _INBOUND else None
            if handler is None:
                raise protocol.ProtocolError(f"{t} is not a message to the broker")
            handler(ident, header, body)
        except protocol.ProtocolError as exc:
            self._reject(ident, str(exc))

    def _on_register(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        name = h["node"]
        # All or nothing: every device's profile is validated before any state changes, so
        # a node with one bad profile leaves no device behind for clients to be placed on.
        recs = []
        for i, d in enumerate(h["devices"]):
            did = f"{name}/{i}"
            prof = d["profile"]
            try:
                DeviceProfile(prof)
            except ClprojError as exc:
                raise protocol.ProtocolError(f"register: device {i}: {exc.cause}") from None
            h2d = prof["transfer"]["h2d_bytes_per_s"]
            view = placement.DeviceView(
                id=did, peak_flops=placement.peak_fp32(prof), h2d_bytes_per_s=float(h2d)
            )
            recs.append(DevRec(did, name, str(d["name"])[:200], prof, view))
        old = self.nodes.get(name)
        if old is not None:
            self._drop_node(name, notify=old.ident != ident)
        rec = NodeRec(
            ident,
            name,
            h["host"][:200],
            h["pid"],
            [r.id for r in recs],
            time.monotonic(),
            direct=h.get("direct") or "",
            direct_key=h.get("direct_key") or "",
            local=h.get("local") or "",
            unoffered=recs,
        )
        self.nodes[name] = rec
        self.by_ident[ident] = name
        log.info("node %s registered %d device(s): probing it", name, len(recs))
        self._probe(rec)

    def _probe(self, rec: NodeRec) -> None:
        rec.probe_id = next(self._probe_ids)
        rec.probe_sent = time.monotonic()
        self._send(rec.ident, [protocol.pack("probe", id=rec.probe_id)])

    def _on_probe_ok(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        name = self.by_ident.get(ident)
        rec = self.nodes.get(name) if name is not None else None
        if rec is None or name != h["node"] or h["id"] != rec.probe_id:
            return  # a late answer to a probe already given up on, or a stranger's
        now = time.monotonic()
        rtt = now - rec.probe_sent
        rec.rtt_ewma_s = (
            rtt if not rec.rtt_ewma_s else ((1 - EWMA_ALPHA) * rec.rtt_ewma_s + EWMA_ALPHA * rtt)
        )
        rec.probe_id, rec.probe_sent = 0, now
        if not rec.offered:
            rec.offered = True
            for dev in rec.unoffered:
                self.devices[dev.id] = dev
            rec.unoffered = []
            self.epoch += 1
            log.info(
                "node %s answered its probe in %.1f ms: %d device(s) offered",
                name,
                rtt * 1e3,
                len(rec.devices),
            )

    def _on_heartbeat(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        name = self.by_ident.get(ident)
        if name is None or name != h["node"]:
            self._send(ident, [protocol.pack("reregister")])
            return
        rec = self.nodes[name]
        now = time.monotonic()
        gap = now - rec.last_seen
        rec.gap_ewma_s = (1 - EWMA_ALPHA) * rec.gap_ewma_s + EWMA_ALPHA * gap
        rec.last_seen = now
        rec.load = {
            str(k): v for k, v in list(h["load"].items())[:64] if isinstance(v, (int, float))
        }
        lt = h.get("lt") or {}
        for i, did in enumerate(rec.devices):
            dev = self.devices.get(did)
            if dev is None:
                continue
            t = lt.get(str(i))
            if isinstance(t, (int, float)) and t >= 0:
                dev.launch_ewma_s = float(t)
            q = rec.load.get(str(i))
            if isinstance(q, (int, float)) and q >= 0:
                # the node's own count covers direct commands the broker never saw
                dev.view.inflight = max(int(q), self._forwarded_inflight(did))
            dev.view.queue_s = dev.view.inflight * dev.launch_ewma_s
        for key, per_dev in (h.get("measured") or {}).items():
            m = self.measured.setdefault(key, {})
            for i, t in per_dev.items():
                if not i.isdigit() or int(i) >= len(rec.devices) or t <= 0:
                    continue
                did = rec.devices[int(i)]
                if did not in m:
                    self._times_cache.pop(key, None)
                m[did] = float(t)

    def _forwarded_inflight(self, did: str) -> int:
        return self._fwd.get(did, 0)

    def _on_hello(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        self.clients[ident] = time.monotonic()
        self._send(ident, [protocol.pack("welcome", devices=self._device_list(), epoch=self.epoch)])

    def _on_bye(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        self.clients.pop(ident, None)

    def _on_projection(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        if len(self.projections) >= MAX_PROJECTIONS and h["key"] not in self.projections:
            # an app whose every launch is a new signature posts one every few tens of ms
            # per kernel: forget the oldest (dicts keep insertion order)
            for key in list(itertools.islice(self.projections, MAX_PROJECTIONS // 10)):
                del self.projections[key]
                self.energies.pop(key, None)
                self._times_cache.pop(key, None)
        self.projections[h["key"]] = {
            str(k): (None if v is None else float(v)) for k, v in h["times"].items()
        }
        self.energies[h["key"]] = {
            str(k): (None if v is None else float(v)) for k, v in (h.get("energies") or {}).items()
        }
        self._times_cache.pop(h["key"], None)
        self.epoch += 1

    def _on_status(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        self._send(ident, [protocol.pack("status_reply", id=h["id"], status=self.status())])

    def _on_place(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        self.clients[ident] = time.monotonic()
        if not self.devices:
            self._send(ident, [protocol.pack("error", id=h["id"], err="no live device")])
            return
        objective = placement.Objective(
            h.get("objective", "time"),
            float(h.get("deadline_s", 0.0)),
            float(h.get("max_slowdown", 0.0)),
        )
        dec, times = self.place(h["key"], h["move"], h["remaining"], h.get("current"), objective)
        self._send(
            ident,
            [
                protocol.pack(
                    "placed",
                    id=h["id"],
                    dev=dec.device,
                    reason=dec.reason,
                    epoch=self.epoch,
                    times=times,
                )
            ],
        )

    def _on_cmd(self, ident: bytes, h: dict[str, Any], body: list[Any]) -> None:
        self.clients[ident] = time.monotonic()
        dev = self.devices.get(h["dev"])
        if dev is None:
            self._send(
                ident, [protocol.pack("error", id=h["id"], err=f"gone: unknown device {h['dev']}")]
            )
            return
        node = self.nodes[dev.node]
        key = h["a"].get("key") if h["op"] == "launch" else None
        if not self._send(node.ident, [ident, *body]):
            self._send(
                ident,
                [protocol.pack("error", id=h["id"], err=f"gone: node of {h['dev']} unreachable")],
            )
            return
        self.forwarded += 1
        if h["op"] == "launch":
            self._fwd[dev.id] = self._fwd.get(dev.id, 0) + 1
            dev.view.inflight += 1
            dev.view.queue_s = dev.view.inflight * dev.launch_ewma_s
            self.inflight[(ident, h["id"])] = (dev.id, key if isinstance(key, str) else None)

    def _on_reply(
        self, node_ident: bytes, client: bytes, h: dict[str, Any], frames: list[Any]
    ) -> None:
        pend = self.inflight.pop((client, h["id"]), None)
        if pend is not None:
            did, key = pend
            dev = self.devices.get(did)
            t = (h.get("res") or {}).get("t")
            if dev is not None:
                self._fwd[did] = max(0, self._fwd.get(did, 0) - 1)
                dev.view.inflight = max(0, dev.view.inflight - 1)
                if isinstance(t, (int, float)) and t >= 0:
                    dev.launch_ewma_s = (
                        t if dev.launch_ewma_s == 0 else 0.8 * dev.launch_ewma_s + 0.2 * t
                    )
                dev.view.queue_s = dev.view.inflight * dev.launch_ewma_s
            if key and isinstance(t, (int, float)) and t > 0:
                m = self.measured.setdefault(key, {})
                first = did not in m
                m[did] = t if first else 0.7 * m[did] + 0.3 * t
                if first:
                    self._times_cache.pop(key, None)
        self._send(client, frames)

    # ---- placement -------------------------------------------------------------------
    def projected_times(self, key: str) -> dict[str, float | None]:
        """Per-device projected seconds for ``key``: posted > projector > fallback."""
        cached = self._times_cache.get(key)
        if cached is not None and cached[0] == self.epoch:
            return cached[1]
        views = {d: r.view for d, r in self.devices.items()}
        times: dict[str, float | None] = dict.fromkeys(views)
        posted = self.projections.get(key) or {}
        proj: Mapping[str, float | None] = {}
        if self.projector is not None:
            try:
                proj = self.projector(key, views) or {}
            except Exception as exc:  # a broken projector must not stop placement
                log.warning("projector failed for %s: %s", key, exc)
        fallback = placement.peak_ratio_projection(self.measured.get(key, {}), views)
        for d in views:
            for src in (posted, proj, fallback):
                if src.get(d) is not None:
                    times[d] = src[d]
                    break
        self._times_cache[key] = (self.epoch, times)
        return times

    def place(
        self,
        key: str,
        move: Mapping[str, int],
        remaining: float,
        current: str | None,
        objective: placement.Objective = placement.TIME,
    ) -> tuple[placement.Decision, dict[str, float | None]]:
        times = self.projected_times(key)
        views = {d: r.view for d, r in self.devices.items()}
        dec = placement.decide(
            times,
            views,
            move,
            remaining,
            current,
            energies=self.energies.get(key),
            objective=objective,
        )
        self.placements.append(
            {"time": time.time(), "key": key[:80], "device": dec.device, "reason": dec.reason}
        )
        return dec, times

    # ---- liveness --------------------------------------------------------------------
    def _check_liveness(self) -> None:
        now = time.monotonic()
        for name, rec in list(self.nodes.items()):
            silent = now - rec.last_seen
            if silent > rec.silence_deadline(self.liveness_s):
                log.warning(
                    "node %s missed heartbeats for %.1fs (its gaps average %.2fs): dropped",
                    name,
                    silent,
                    rec.gap_ewma_s,
                )
                self._drop_node(name, notify=True)
                continue
            waited = now - rec.probe_sent
            if rec.probe_id and waited > rec.probe_deadline(self.probe_floor_s):
                log.warning(
                    "node %s heartbeats but left a probe unanswered for %.1fs (its round "
                    "trips average %.1f ms): dropped as wedged",
                    name,
                    waited,
                    rec.rtt_ewma_s * 1e3,
                )
                self._drop_node(name, notify=True)
            elif not rec.probe_id and waited >= PROBE_EVERY_S:
                self._probe(rec)
        for ident, seen in list(self.clients.items()):
            if now - seen > 3600:
                del self.clients[ident]

    def _drop_node(self, name: str, notify: bool) -> None:
        rec = self.nodes.pop(name, None)
        if rec is None:
            return
        self.by_ident.pop(rec.ident, None)
        if not rec.offered:  # no client ever saw its devices
            return
        for d in rec.devices:
            self.devices.pop(d, None)
            self._fwd.pop(d, None)
        for k, (d, _) in list(self.inflight.items()):
            if d in rec.devices:
                del self.inflight[k]
        self.epoch += 1
        self._times_cache.clear()
        if notify:
            msg = protocol.pack("node_lost", node=name, devices=rec.devices, epoch=self.epoch)
            for client in list(self.clients):
                self._send(client, [msg])

    # ---- views -----------------------------------------------------------------------
    def _device_list(self) -> list[dict[str, Any]]:
        return [
            {
                "id": d.id,
                "node": d.node,
                "name": d.name,
                "profile": d.profile,
                "peak_flops": d.view.peak_flops,
                "host": self.nodes[d.node].host if d.node in self.nodes else "",
                "direct": self.nodes[d.node].direct if d.node in self.nodes else "",
                "direct_key": self.nodes[d.node].direct_key if d.node in self.nodes else "",
                "local": self.nodes[d.node].local if d.node in self.nodes else "",
            }
            for d in self.devices.values()
        ]

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "epoch": self.epoch,
            "uptime_s": round(time.time() - self.started, 3),
            "rejects": self.rejects,
            "forwarded": self.forwarded,
            "clients": len(self.clients),
            "nodes": [
                {
                    "node": n.node,
                    "host": n.host,
                    "pid": n.pid,
                    "devices": n.devices,
                    "last_seen_s": round(now - n.last_seen, 3),
                    "load": n.load,
                    "direct": n.direct,
                    "offered": n.offered,
                    "rtt_ms": round(n.rtt_ewma_s * 1e3, 3),
                }
                for n in self.nodes.values()
            ],
            "devices": [
                {
                    "id": d.id,
                    "name": d.name,
                    "inflight": d.view.inflight,
                    "queue_s": d.view.queue_s,
                    "peak_flops": d.view.peak_flops,
                    "launch_ewma_s": d.launch_ewma_s,
                }
                for d in self.devices.values()
            ],
            "placements": list(self.placements)[-20:],
            "projections": len(self.projections),
        }


def serve_in_thread(broker: Broker, until: float | None = None) -> threading.Thread:
    """Run ``broker`` on a daemon thread (embedded mode, tests)."""
    th = background_thread(broker.run, "clproj-broker", kwargs={"until": until})
    th.start()
    return th
