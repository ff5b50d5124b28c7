"""``clproj broker``, ``clproj node``, ``clproj status`` and ``clproj keys``.

Servers run until Ctrl-C or ``--lifetime`` seconds; CURVE is on for tcp:// endpoints
unless ``--curve off`` (trusted networks only). See docs/cluster.md.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import time
from pathlib import Path
from typing import Any

from clproj.argtypes import positive_seconds
from clproj.console import emit_json, print_table, stderr
from clproj.errors import ClprojError
from clproj.runtime.cluster import keys as keys_mod


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--curve",
        choices=("auto", "on", "off"),
        default="auto",
        help="CURVE authentication+encryption (auto: on for tcp://)",
    )
    p.add_argument(
        "--keys",
        type=Path,
        default=None,
        help="key directory (default $CLPROJ_KEYS or ~/.config/clproj/keys)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _lifetime(p: argparse.ArgumentParser) -> None:
    """A server's bounds: seconds, and the process whose death ends it (clproj.lifeline)."""
    p.add_argument(
        "--lifetime", type=positive_seconds, default=None, help="stop after this many seconds"
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="stop when process PID (the one that started this) exits, however it exits",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "broker",
        help="run the cluster broker (registry, liveness, placement)",
        description="Run the broker: nodes register their devices with it, clients ask it "
        "where to launch, and it forwards commands to the chosen node.",
    )
    p.add_argument(
        "--bind", required=True, help="endpoint, e.g. tcp://0.0.0.0:5555 or ipc:///tmp/clproj"
    )
    _lifetime(p)
    p.add_argument(
        "--liveness",
        type=positive_seconds,
        default=3.0,
        help="seconds without heartbeat before a node is dead (at least: a node whose "
        "heartbeats have been coming late gets longer)",
    )
    p.add_argument(
        "--probe-deadline",
        type=positive_seconds,
        default=5.0,
        help="seconds a node may leave a probe unanswered before it is dropped as wedged "
        "(at least: a node whose round trips have been slow gets longer)",
    )
    _common(p)
    p.set_defaults(func=run_broker)

    p = subparsers.add_parser(
        "node",
        help="serve this machine's OpenCL devices to the cluster",
        description="Register this machine's OpenCL devices with the broker and execute "
        "clients' commands on them.",
    )
    p.add_argument("--broker", required=True, help="broker endpoint")
    p.add_argument("--name", default=None, help="node name (default host-pid)")
    p.add_argument(
        "--profiles", type=Path, default=None, help="directory of measured device profiles (*.json)"
    )
    p.add_argument("--device", default=None, help="only devices whose name contains this")
    p.add_argument(
        "--direct",
        default="auto",
        help="endpoint clients send commands to directly (one round trip instead of two "
        "through the broker): auto (ipc next to a local broker, tcp otherwise), off, or an "
        "address to bind such as tcp://0.0.0.0:5600",
    )
    _lifetime(p)
    _common(p)
    p.set_defaults(func=run_node)

    p = subparsers.add_parser(
        "status",
        help="show the cluster's nodes, devices, load and recent placements",
        description="Ask the broker for its nodes, devices, load and recent placements.",
    )
    p.add_argument("--broker", required=True, help="broker endpoint")
    p.add_argument(
        "--timeout", type=positive_seconds, default=5.0, help="seconds to wait for the broker"
    )
    _common(p)
    p.set_defaults(func=run_status)

    keys_mod.register(subparsers)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _keys_for(endpoint: str, args: argparse.Namespace, role: str) -> keys_mod.Keys | None:
    return keys_mod.load(args.keys, role) if keys_mod.needs_curve(endpoint, args.curve) else None


_stopped_by: list[int] = []  # the signal that stopped the broker or node, if one did


def _stop_on_signal(obj: Any, args: argparse.Namespace) -> None:
    """Stop on SIGTERM / SIGINT / SIGHUP (cleanly: sockets closed, files removed, then
    :func:`_end_like_the_signal`), and when ``--parent-pid`` exits (clproj.lifeline).
    SIGTERM and SIGINT stop it even where the starter ignored them (a shell script's
    background job ignores SIGINT, and `kill -INT` of a broker is still meant to stop it);
    a SIGHUP ignored by the starter (``nohup``) stays ignored."""

    def stop(sig: int, _frame: Any) -> None:
        _stopped_by.append(sig)
        obj.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, stop)
    if args.parent_pid is not None:
        from clproj.lifeline import watch_parent

        watch_parent(args.parent_pid, obj.stop)


def _end_like_the_signal() -> None:
    """After a clean stop by a signal, end by it (lifeline.die_by): a shell loop stops at
    Ctrl-C, a supervisor sees a death by SIGTERM, not an exit status of 0."""
    if _stopped_by:
        from clproj.lifeline import die_by

        die_by(_stopped_by[0])


def _until(lifetime: float | None) -> float | None:
    return None if lifetime is None else time.time() + lifetime


ENDPOINT_FIX = (
    "an endpoint is tcp://HOST:PORT or ipc:///PATH (and --direct: auto, off or tcp://IP:PORT)"
)


def run_broker(args: argparse.Namespace) -> int:
    import zmq

    from clproj.runtime.cluster.broker import Broker

    _logging()
    try:
        broker = Broker(
            args.bind,
            keys=_keys_for(args.bind, args, "broker"),
            liveness_s=args.liveness,
            probe_floor_s=args.probe_deadline,
        )
    except zmq.ZMQError as exc:
        raise ClprojError(
            f"cannot bind {args.bind}: {exc}", "pick a free port or another ipc path"
        ) from exc
    _stop_on_signal(broker, args)
    if args.json:
        emit_json({"endpoint": broker.endpoint, "curve": broker.keys is not None})
    else:
        stderr.print(f"clproj broker on {broker.endpoint} (CURVE {'on' if broker.keys else 'off'})")
    broker.run(until=_until(args.lifetime))
    _end_like_the_signal()
    return 0


def run_node(args: argparse.Namespace) -> int:
    import zmq

    from clproj.runtime.cluster.node.server import Node

    _logging()
    try:
        node = Node(
            args.broker,
            keys=_keys_for(args.broker, args, "member"),
            name=args.name,
            profiles_dir=args.profiles,
            device_filter=args.device,
            direct=args.direct,
        )
    except zmq.ZMQError as exc:
        raise ClprojError(
            f"cannot use --broker {args.broker} / --direct {args.direct}: {exc}", ENDPOINT_FIX
        ) from None
    if not node.devs:
        node.stop()
        raise ClprojError(
            "this node serves no OpenCL device"
            + (f" (none matches --device {args.device!r})" if args.device else ""),
            "see `clproj devices` for the names",
        )
    _stop_on_signal(node, args)
    if args.json:
        emit_json({"node": node.name, "devices": node.descr, "direct": node.direct})
    else:
        direct = f", direct {node.direct}" if node.direct else ""
        stderr.print(
            f"clproj node {node.name}: {len(node.devs)} device(s) -> {args.broker}{direct}"
        )
    node.run(until=_until(args.lifetime))
    _end_like_the_signal()
    if node.fatal:
        from clproj.runtime.cluster.node.server import CURVE_FIX

        raise ClprojError(node.fatal, CURVE_FIX)
    return 0


def fetch_status(endpoint: str, keys: keys_mod.Keys | None, timeout: float) -> dict[str, Any]:
    """One status request on a fresh socket (no device wait, unlike RemotePlatform)."""
    import os

    import zmq

    from clproj.runtime.cluster import protocol

    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    protocol.secure_socket_options(sock)
    sock.setsockopt(zmq.ROUTING_ID, b"s" + os.urandom(15))
    if keys:
        keys_mod.make_client(sock, keys)
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        sock.close(0)
        raise ClprojError(f"cannot connect to {endpoint!r}: {exc}", ENDPOINT_FIX) from None
    try:
        deadline = time.monotonic() + timeout
        # A peer that refuses the CURVE handshake can drop the connection before the send:
        # a DEALER with no peer blocks in send, so it waits no longer than the timeout.
        sock.setsockopt(zmq.SNDTIMEO, max(1, int(timeout * 1000)))
        with contextlib.suppress(zmq.Again):
            sock.send(protocol.pack("status", id=1))
        while time.monotonic() < deadline:
            if sock.poll(100):
                try:
                    h, _ = protocol.decode(sock.recv_multipart())
                except protocol.ProtocolError as exc:  # another service on that port
                    raise ClprojError(
                        f"{endpoint} answered, but not as a clproj broker ({exc})",
                        "check the address: it names another service, not `clproj broker`",
                    ) from None
                if h["t"] == "status_reply":
                    return h["status"]
        raise ClprojError(
            f"no answer from a broker at {endpoint} within {timeout:g}s",
            "check the address, that `clproj broker` runs, and the CURVE keys",
        )
    finally:
        sock.close(0)


def run_status(args: argparse.Namespace) -> int:
    st = fetch_status(args.broker, _keys_for(args.broker, args, "member"), args.timeout)
    if args.json:
        emit_json(st)
        return 0
    print_table(
        ["node", "host", "pid", "devices", "last seen s", "direct"],
        [
            (
                n["node"],
                n["host"],
                n["pid"],
                len(n["devices"]),
                n["last_seen_s"],
                n.get("direct") or "-",
            )
            for n in st["nodes"]
        ],
        title=f"nodes (epoch {st['epoch']}, {st['rejects']} rejected messages, {st['forwarded']} forwarded)",
    )
    print_table(
        ["device", "name", "in flight", "queue s", "peak GFLOP/s", "launch s"],
        [
            (
                d["id"],
                d["name"],
                d["inflight"],
                d["queue_s"],
                d["peak_flops"] / 1e9,
                d["launch_ewma_s"],
            )
            for d in st["devices"]
        ],
        title="devices",
    )
    print_table(
        ["time", "kernel key", "device", "reason"],
        [
            (
                time.strftime("%H:%M:%S", time.localtime(p["time"])),
                p["key"],
                p["device"],
                p["reason"],
            )
            for p in st["placements"]
        ],
        title="recent placements",
    )
    return 0
