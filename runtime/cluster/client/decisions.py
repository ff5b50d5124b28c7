"""Placement decisions: which device a launch goes to, cached per kernel key.

Why a module of its own: asking the broker (``place``) for every launch would double its
cost, so the client keeps the broker's answers and decides when to ask again. A launch
without an explicit device asks with the bytes that would have to move to each device;
the answer is cached per kernel key and asked again every 16 launches (in the
background), every 0.25 s, or when the broker's epoch changes (a projection arrived, a
node came or went). A launch may name a *family* (route mode: the same kernel and
NDRange with other scalar arguments, e.g. a factorisation's step index): a key without a
fresh decision of its own takes its family's and asks for its own in the background, so
a launch costs one message, not two, even when every launch brings a new key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clproj.runtime.cluster import protocol

if TYPE_CHECKING:
    from clproj.runtime.cluster.client.coherence import RemoteBuffer
    from clproj.runtime.cluster.client.platform import RemotePlatform

REASK_LAUNCHES = 16
REASK_S = 0.25
# a background re-ask goes out at most this often per key: each is a message to the broker
# and back (zmq I/O thread, broker, reply: ~20 us per launch on average when a tight
# launch+wait loop re-asked every 16 launches), and placements change only as often as
# projections arrive or nodes come and go
REASK_MIN_S = 0.02


def objective_fields() -> dict[str, Any]:
    """The ``place`` fields of ``clproj run --objective/--deadline/--max-slowdown``
    (settings), only those that differ from placing by time alone."""
    from clproj import settings

    out: dict[str, Any] = {}
    if settings.get("CLPROJ_OBJECTIVE") != "time":
        out["objective"] = settings.get("CLPROJ_OBJECTIVE")
    for name, field in (
        ("CLPROJ_DEADLINE_S", "deadline_s"),
        ("CLPROJ_MAX_SLOWDOWN", "max_slowdown"),
    ):
        if settings.get(name):
            out[field] = float(settings.get(name))
    return out


@dataclass
class KeyState:
    """The latest decision for one kernel key (or family) and when to ask again."""

    count: int = 0
    dev: str | None = None
    epoch: int = -1
    asked_at: float = 0.0
    since_ask: int = 0
    reason: str = ""
    asking: int = 0  # id of a background re-ask in flight (0: none)
    sent_at: float = 0.0  # when the last background re-ask went out

    def fresh(self, dead: set[str], epoch: int, now: float) -> bool:
        """The decision may be used as is: its device lives, the epoch has not moved and
        it is no older than REASK_S."""
        return (
            self.dev is not None
            and self.dev not in dead
            and self.epoch == epoch
            and now - self.asked_at <= REASK_S
        )


class Decisions:
    """Decisions per kernel key (``keys``) and per family, the background asks in flight,
    and the recent ``placements`` ((key, device, reason), newest last, at most 100)."""

    def __init__(self, p: RemotePlatform) -> None:
        self.p = p
        self.keys: dict[str, KeyState] = {}
        self.families: dict[str, KeyState] = {}  # family -> its latest decision
        # background place request id -> (kernel key, its family or None)
        self.reasks: dict[int, tuple[str, str | None]] = {}
        self.placements: list[tuple[str, str, str]] = []

    def place(self, key: str, bufs: list[RemoteBuffer], family: str | None = None) -> str:
        """The device for a launch of ``key`` (see the module docstring).

        The cached decision while it is fresh; the broker is asked again, and waited for,
        when it is not (none yet, its device died, older than REASK_S, the broker's epoch
        moved: a projection arrived, a node came or went), and in the background every
        REASK_LAUNCHES launches, at most once per REASK_MIN_S (the answer applies when it
        arrives). A key whose own decision is not fresh takes its ``family``'s fresh one
        instead of waiting, and asks for its own in the background (at most once per
        REASK_MIN_S per family): so a stream of launches that brings a new key every time
        waits for the broker only when the family's decision goes stale."""
        p = self.p
        now = time.monotonic()
        ks = self.keys.get(key)
        if ks is None:
            if len(self.keys) >= 100_000:  # every launch a new key: forget the oldest
                self.keys.clear()
            ks = self.keys[key] = KeyState()
        fs = self.families.get(family) if family else None
        dead, epoch = p.dead, p.epoch
        stale = not ks.fresh(dead, epoch, now)
        if stale and fs is not None and fs.fresh(dead, epoch, now):
            ks.dev, ks.epoch, ks.reason, ks.asked_at = fs.dev, fs.epoch, fs.reason, fs.asked_at
            ks.since_ask = REASK_LAUNCHES  # its own answer, in the background
            stale = False
        if stale:
            fields = self._fields(key, ks, bufs, fs)
            self._apply(key, p.requests.broker_call("place", **fields), now, family)
        elif (
            ks.since_ask >= REASK_LAUNCHES
            and not ks.asking
            # at most one background ask per REASK_MIN_S per key, and per family
            and now - max(ks.sent_at, fs.sent_at if fs is not None else 0.0) >= REASK_MIN_S
        ):
            rid = p.requests.next_id()
            p.transport.to_broker(protocol.pack("place", id=rid, **self._fields(key, ks, bufs, fs)))
            ks.asking, ks.since_ask, ks.sent_at = rid, 0, now
            if fs is not None:
                fs.sent_at = now
            self.reasks[rid] = (key, family)
        ks.count += 1
        ks.since_ask += 1
        if fs is not None:
            fs.count += 1
        return ks.dev  # type: ignore[return-value]

    def _fields(
        self, key: str, ks: KeyState, bufs: list[RemoteBuffer], fs: KeyState | None = None
    ) -> dict[str, Any]:
        live = self.p.directory.live()
        move = {d: sum(b.size for b in bufs if d not in b.valid) for d in live}
        # the launches still to come are guessed from those so far: of the key, or of its
        # family when every launch brings a new key
        count = max(ks.count, fs.count if fs is not None else 0)
        fields: dict[str, Any] = {"key": key, "move": move, "remaining": max(1, count)}
        if ks.dev and ks.dev in live:
            fields["current"] = ks.dev
        return fields | objective_fields()

    def _apply(
        self, key: str, h: dict[str, Any], now: float | None = None, family: str | None = None
    ) -> None:
        """Take the broker's answer ``h`` for ``key`` (``now``: asked and waited for at
        that time; None: a background answer, applied from inside a pump)."""
        p = self.p
        directory = p.directory
        if family is not None:  # the family's decision follows its newest answer
            fs = self.families.get(family)
            if fs is None:
                if len(self.families) >= 10_000:
                    self.families.clear()
                fs = self.families[family] = KeyState()
            if h["dev"] not in directory.dead and h["dev"] in directory.devices:
                fs.dev = h["dev"]
                fs.epoch, fs.reason = max(directory.epoch, h["epoch"]), h["reason"]
                fs.asked_at = time.monotonic() if now is None else now
            if h["id"] == fs.asking:
                fs.asking = 0
        ks = self.keys.setdefault(key, KeyState())
        if h["id"] == ks.asking:
            ks.asking = 0
        directory.epoch = max(directory.epoch, h["epoch"])
        if h["dev"] not in directory.devices and now is not None:  # not from inside a pump
            directory.refresh()
        if h["dev"] in directory.dead or h["dev"] not in directory.devices:
            return
        ks.dev, ks.epoch, ks.reason = h["dev"], directory.epoch, h["reason"]
        ks.asked_at = time.monotonic() if now is None else now
        if now is not None:
            ks.since_ask = 0
        self.placements.append((key, h["dev"], h["reason"]))
        del self.placements[:-100]

    def reask_answered(self, h: dict[str, Any]) -> bool:
        """Apply a ``placed`` answer if it is one of the background asks' (True then)."""
        if h["id"] not in self.reasks:
            return False
        key, fam = self.reasks.pop(h["id"])
        self._apply(key, h, family=fam)
        return True

    def reask_failed(self, rid: int) -> bool:
        """A background ask ``rid`` failed (True if it was one): ask again later."""
        if rid not in self.reasks:
            return False
        key, fam = self.reasks.pop(rid)
        for ks in (self.keys.get(key), self.families.get(fam) if fam else None):
            if ks is not None:
                ks.asking = 0
        return True

    def forget(self, dead: set[str]) -> None:
        """Decisions for the lost devices ``dead`` are void."""
        for ks in self.keys.values():
            if ks.dev in dead:
                ks.dev = None
