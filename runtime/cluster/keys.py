"""CURVE keys for the cluster: generation (``clproj keys``), loading, and socket setup.

Why: every TCP connection between broker, nodes and clients is authenticated and
encrypted with ZeroMQ CURVE. The broker is the only CURVE *server*; nodes and clients are
CURVE clients that must know the broker's public key, and the broker accepts only the
public keys found in ``DIR/authorized/`` (an unknown key is rejected by the ZAP
authenticator before any message reaches the broker loop). Keys are stored with
``zmq.auth`` certificate files (plain text Z85, never pickle):

    DIR/broker.key  DIR/broker.key_secret     the server pair
    DIR/member.key  DIR/member.key_secret     the pair nodes and clients use
    DIR/authorized/member.key                 public keys the broker accepts

``DIR`` defaults to ``$CLPROJ_KEYS`` or ``~/.config/clproj/keys``. ipc:// and inproc://
endpoints are local (file permissions / same process) and run without CURVE unless asked.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clproj import settings
from clproj.errors import ClprojError


def default_dir() -> Path:
    return Path(settings.get("CLPROJ_KEYS"))


def generate(directory: Path, force: bool = False) -> dict[str, str]:
    """Create the broker and member keypairs and the authorized list; returns paths."""
    import zmq.auth

    directory = Path(directory)
    if (directory / "broker.key_secret").exists() and not force:
        raise ClprojError(
            f"keys already exist in {directory}", "pass --force to replace them, or use them"
        )
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    auth = directory / "authorized"
    auth.mkdir(exist_ok=True)
    for name in ("broker", "member"):
        for suffix in (".key", ".key_secret"):
            p = directory / f"{name}{suffix}"
            if p.exists():
                p.unlink()
        zmq.auth.create_certificates(str(directory), name)
        os.chmod(directory / f"{name}.key_secret", 0o600)
    shutil.copy(directory / "member.key", auth / "member.key")
    return {
        "dir": str(directory),
        "broker_public": str(directory / "broker.key"),
        "member_secret": str(directory / "member.key_secret"),
        "authorized": str(auth),
    }


@dataclass(frozen=True)
class Keys:
    """Loaded keys: the broker's public key, and this process's own pair."""

    directory: Path
    broker_public: bytes
    own_public: bytes
    own_secret: bytes

    @property
    def authorized_dir(self) -> Path:
        return self.directory / "authorized"


def load(directory: Path | None, role: str) -> Keys:
    """Load keys for ``role`` = "broker" (server pair) or "member" (node/client pair)."""
    import zmq.auth

    directory = Path(directory) if directory else default_dir()
    own = directory / f"{role}.key_secret"
    if not own.exists():
        raise ClprojError(
            f"no CURVE keys for {role} in {directory}",
            "run `clproj keys` (or `clproj keys --dir DIR`) and copy the directory to every "
            "machine, or pass --curve off on a trusted network",
        )
    try:
        broker_pub, _ = zmq.auth.load_certificate(str(directory / "broker.key"))
        pub, sec = zmq.auth.load_certificate(str(own))
    except Exception as exc:
        raise ClprojError(
            f"cannot read keys in {directory}: {exc}", "regenerate with `clproj keys --force`"
        ) from exc
    if sec is None:
        raise ClprojError(f"{own} holds no secret key", "regenerate with `clproj keys --force`")
    return Keys(directory, broker_pub, pub, sec)


def needs_curve(endpoint: str, mode: str = "auto") -> bool:
    """CURVE on for tcp:// by default; "on"/"off" force it."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return endpoint.startswith("tcp://")


def make_server(sock: Any, keys: Keys) -> None:
    import zmq

    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.own_secret)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.own_public)
    sock.setsockopt(zmq.ZAP_DOMAIN, b"clproj")


def make_client(sock: Any, keys: Keys) -> None:
    import zmq

    sock.setsockopt(zmq.CURVE_SERVERKEY, keys.broker_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.own_public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.own_secret)


def start_authenticator(ctx: Any, keys: Keys) -> Any:
    """ZAP handler accepting only keys in ``authorized/``; logs every rejection."""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx, log=logging.getLogger("clproj.broker.auth"))
    auth.start()
    auth.configure_curve(domain="clproj", location=str(keys.authorized_dir))
    return auth


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "keys",
        help="generate the CURVE keys of the cluster (broker + member pair)",
        description="Generate ZeroMQ CURVE keypairs: the broker's server pair and the member "
        "pair used by nodes and clients; copy the directory to every machine of the cluster.",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="key directory (default $CLPROJ_KEYS or ~/.config/clproj/keys)",
    )
    p.add_argument("--force", action="store_true", help="replace existing keys")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from clproj.console import emit_json, print_table

    paths = generate(args.dir or default_dir(), force=args.force)
    if args.json:
        emit_json(paths)
    else:
        print_table(["what", "path"], sorted(paths.items()), title="CURVE keys")
    return 0
