"""Fast-launch slots: launches a same-host client repeats, run by the node's C thread.

Why a module of its own: a slot is a dedicated kernel whose buffer arguments are set once
and registered with the native link (runtime.cluster.node.nodelink), so a repeated launch
travels as a 24-byte frame that C enqueues and answers without Python. Granting slots,
dropping them whenever the objects they name may change, and folding the kernel times C
measured back into what the heartbeat reports are this module's job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from clproj.intercept import identity
from clproj.runtime.cluster.node import nodelink
from clproj.runtime.cluster.node.completions import Dev
from clproj.runtime.cluster.node.store import ObjectStore

MAX_SLOTS_PER_CLIENT = 256


@dataclass
class Slot:
    """A fast-launch slot: its own kernel with the arguments set once."""

    sig: tuple[Any, ...]
    client: bytes
    dev: int
    kernel: Any
    keep: list[Any]  # the buffers its arguments name, alive as long as the slot
    key: str | None


class Slots:
    """The slots granted on ``native`` (None: no fast link, no slot is ever granted)."""

    def __init__(
        self,
        cl: Any,
        native: nodelink.NativeLink | None,
        store: ObjectStore,
        learn_time: Callable[[int, str | None, float], None],
    ) -> None:
        self.cl = cl
        self.native = native
        self._store = store
        self._learn_time = learn_time
        self._slots: dict[int, Slot] = {}
        self._sigs: dict[tuple[Any, ...], int] = {}
        self._free = list(range(nodelink.MAX_SLOTS - 1, 0, -1))

    @property
    def granted(self) -> Mapping[int, Slot]:
        """The slots in use by number (read-only: tests watch slots go with their client)."""
        return MappingProxyType(self._slots)

    def slot_for(self, client: bytes, dev: Dev, a: dict[str, Any]) -> int | None:
        """The slot of this launch's shape for this client, made on first request: a
        dedicated kernel with these arguments, so no later set_arg can change them."""
        native = self.native
        if native is None:
            return None
        shape = identity.launch_shape(
            a["prog"], a["kernel"], a["args"], a["gsize"], a.get("lsize"), a.get("goff")
        )
        sig = (client, dev.index, *shape)
        n = self._sigs.get(sig)
        if n is not None:
            return n
        mine = sum(s.client == client for s in self._slots.values())
        if not self._free or mine >= MAX_SLOTS_PER_CLIENT:
            return None
        cl = self.cl
        kern = cl.Kernel(self._store.program(client, dev, a["prog"]), a["kernel"])
        keep: list[Any] = []
        for i, arg in enumerate(a["args"]):
            if arg[0] in ("b", "r"):
                buf = self._store.arg_value(client, dev, arg)
                keep.append(buf)
                kern.set_arg(i, buf)
            elif arg[0] == "s":
                kern.set_arg(i, arg[1])
            elif arg[0] == "l":
                kern.set_arg(i, cl.LocalMemory(max(1, arg[1])))
            else:
                kern.set_arg(i, None)
        n = self._free.pop()
        ok = native.add_slot(
            n,
            client,
            kern.int_ptr,
            dev.queue.int_ptr,
            dev.index,
            a["gsize"],
            a.get("lsize"),
            a.get("goff"),
        )
        if not ok:
            self._free.append(n)
            return None
        key = a.get("key")
        self._slots[n] = Slot(
            sig, client, dev.index, kern, keep, key if isinstance(key, str) else None
        )
        self._sigs[sig] = n
        return n

    def drop(self, which: Callable[[Slot], bool]) -> None:
        """Drop the slots ``which(slot)`` selects (their buffers or program may change)."""
        if not self._slots:
            return
        native = self.native
        for n in [n for n, s in self._slots.items() if which(s)]:
            self._fold(n)
            s = self._slots.pop(n)
            self._sigs.pop(s.sig, None)
            if native is not None:
                native.drop_slot(n)
            self._free.append(n)

    def drop_client(self, client: bytes, dev: int | None = None) -> None:
        """Drop ``client``'s slots (on device ``dev`` only, when given)."""
        if dev is None:
            self.drop(lambda s: s.client == client)
        else:
            self.drop(lambda s: s.client == client and s.dev == dev)

    def _fold(self, n: int) -> None:
        native = self.native
        s = self._slots.get(n)
        if native is None or s is None:
            return
        count, secs, key_count, key_secs = native.take_times(n)
        if key_count:  # launches of the slot's own key: that kernel's measured time
            self._learn_time(s.dev, s.key, key_secs / key_count)
        if count > key_count:  # other scalar values: the device's launch time only
            self._learn_time(s.dev, None, (secs - key_secs) / (count - key_count))

    def fold_times(self) -> None:
        """Fast launches' kernel times into the means the heartbeat reports."""
        for n in list(self._slots):
            self._fold(n)

    def clear(self) -> None:
        self._slots.clear()
