"""The node's command handlers: one small function per protocol ``op``, found by table.

Why a module of its own: carrying out a client's command on a local device (check the
arguments, enqueue the OpenCL call, hand its event to runtime.cluster.node.completions)
is a job apart from serving sockets. A table from op name to handler keeps each op's
checks in one place; an op without a handler does nothing (protocol.validate admits only
known ops). Handlers raise ProtocolError/KeyError/ValueError to reject a command and let
``cl.Error`` through; the server turns both into the reply.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from clproj.intercept import identity
from clproj.runtime.cluster import introspect, protocol, unixlink
from clproj.runtime.cluster.node.completions import Completions, Dev, reply
from clproj.runtime.cluster.node.slots import Slots
from clproj.runtime.cluster.node.store import ObjectStore

log = logging.getLogger("clproj.node")

# the access bits a buffer is created with: CL_MEM_READ_WRITE | WRITE_ONLY | READ_ONLY
# (host-pointer flags are the client's business; its data arrives with the command)
ACCESS_FLAGS = ("READ_WRITE", "WRITE_ONLY", "READ_ONLY")


@dataclass
class Command:
    """One decoded command: who sent it (``sock``, ``client``), its id, device and fields."""

    client: bytes
    rid: int
    dev: Dev
    op: str
    a: dict[str, Any]
    data: list[Any]
    sock: Any
    key: str | None = None  # launch: placement key, for the measured times


def shm_open(path: str, n: int, write: bool = False) -> Any:
    """Map a same-host client's /dev/shm file (protocol-checked name) of at least n bytes."""
    fd = os.open(path, (os.O_RDWR if write else os.O_RDONLY) | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_size < n or n <= 0:
            raise ValueError("shm file smaller than the transfer")
        pop = getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
        return mmap.mmap(fd, n, flags=mmap.MAP_SHARED | pop, prot=prot)
    finally:
        os.close(fd)


def build_exactly(prog: Any, opts: bytes, device: Any) -> None:
    """Build raw program ``prog`` for ``device`` with exactly ``opts``.

    Why the private ``_build``: pyopencl replaces the raw program's public ``build`` with
    one that appends every device's build log to the error and warns with the compiler's
    output on success; the node reports the driver's own error and log itself. No public
    pyopencl call builds without that."""
    prog._build(options=opts, devices=[device])  # noqa: SLF001


class Executor:
    """Carries out commands on this node's devices."""

    def __init__(self, cl: Any, store: ObjectStore, slots: Slots, done: Completions) -> None:
        self.cl = cl
        self.store = store
        self.slots = slots
        self.done = done
        # public: the buf_create handler (a module function) reads it
        self.access_mask = 0
        for name in ACCESS_FLAGS:
            self.access_mask |= int(getattr(cl.mem_flags, name))

    def execute(self, cmd: Command) -> None:
        handler = HANDLERS.get(cmd.op)
        if handler is not None:
            handler(self, cmd)

    # ---- helpers the handlers share --------------------------------------------------
    def answer(self, cmd: Command, **fields: Any) -> None:
        """Reply to ``cmd`` at once (a command that enqueues nothing)."""
        reply(cmd.sock, cmd.client, cmd.rid, **fields)

    def enqueued(self, cmd: Command, event: Any, kind: str, **fields: Any) -> None:
        """``cmd`` was enqueued as ``event``: answer it when the event completes."""
        self.done.enqueued(event, cmd.client, cmd.rid, cmd.dev, kind, cmd.sock, cmd.key, **fields)

    def buffer(self, cmd: Command, h: int) -> Any:
        return self.store.get(cmd.client, cmd.dev, h, self.cl.Buffer)


# ---- buffers ---------------------------------------------------------------------------
def buf_create(ex: Executor, cmd: Command) -> None:
    cl, a, dev, client = ex.cl, cmd.a, cmd.dev, cmd.client
    size = a["size"]
    if size > dev.device.max_mem_alloc_size:
        raise ValueError(f"buffer of {size} bytes exceeds the device's max allocation")
    flags = a["flags"] & ex.access_mask or cl.mem_flags.READ_WRITE
    if (client, dev.index, a["h"]) in ex.store.objects:  # replaced: slots naming it go
        ex.slots.drop_client(client, dev.index)
        ex.store.forget_subs(client, dev, a["h"])
    buf = cl.Buffer(dev.ctx, flags, size)
    ex.store.objects[(client, dev.index, a["h"])] = buf
    if a.get("shm"):
        mm = shm_open(a["shm"], size)
        ev = cl.enqueue_copy(dev.queue, buf, np.frombuffer(mm, np.uint8), is_blocking=False)
        ex.enqueued(cmd, ev, "write", keep=[mm])
    elif cmd.data:
        mv = cmd.data[0].buffer
        if len(mv) != size:
            raise ValueError("initial data size differs from buffer size")
        ev = cl.enqueue_copy(dev.queue, buf, mv, is_blocking=False)
        ex.enqueued(cmd, ev, "write", keep=[cmd.data[0]])
    else:
        ex.answer(cmd)


def buf_write(ex: Executor, cmd: Command) -> None:
    a = cmd.a
    buf = ex.buffer(cmd, a["h"])
    keep: Any = shm_open(a["shm"], a["n"]) if a.get("shm") else cmd.data[0]
    mv = np.frombuffer(keep, np.uint8) if a.get("shm") else cmd.data[0].buffer
    if len(mv) != a["n"] or a["off"] + a["n"] > buf.size:
        raise ValueError("write outside the buffer")
    ev = ex.cl.enqueue_copy(cmd.dev.queue, buf, mv, dst_offset=a["off"], is_blocking=False)
    ex.enqueued(cmd, ev, "write", keep=[keep])


def buf_read(ex: Executor, cmd: Command) -> None:
    a, q = cmd.a, cmd.dev.queue
    buf = ex.buffer(cmd, a["h"])
    if a["off"] + a["n"] > buf.size or a["n"] == 0:
        raise ValueError("read outside the buffer")
    if a.get("shm"):  # same host: into the client's /dev/shm file
        mm = shm_open(a["shm"], a["n"], write=True)
        out = np.frombuffer(mm, np.uint8)
        ev = ex.cl.enqueue_copy(q, out, buf, src_offset=a["off"], is_blocking=False)
        ex.enqueued(cmd, ev, "read", keep=[mm])
        return
    out = np.empty(a["n"], dtype=np.uint8)
    ev = ex.cl.enqueue_copy(q, out, buf, src_offset=a["off"], is_blocking=False)
    ex.enqueued(cmd, ev, "read", out=out)


def buf_copy(ex: Executor, cmd: Command) -> None:
    a = cmd.a
    src = ex.buffer(cmd, a["src"])
    dst = ex.buffer(cmd, a["dst"])
    if a["soff"] + a["n"] > src.size or a["doff"] + a["n"] > dst.size or a["n"] == 0:
        raise ValueError("copy outside the buffers")
    ev = ex.cl.enqueue_copy(
        cmd.dev.queue, dst, src, byte_count=a["n"], src_offset=a["soff"], dst_offset=a["doff"]
    )
    ex.enqueued(cmd, ev, "copy")


def buf_fill(ex: Executor, cmd: Command) -> None:
    a = cmd.a
    buf = ex.buffer(cmd, a["h"])
    pat = a["pattern"]
    if a["off"] + a["n"] > buf.size or a["n"] % len(pat) or a["off"] % len(pat):
        raise ValueError("fill outside the buffer or not a multiple of the pattern")
    pattern = np.frombuffer(pat, np.uint8)
    ev = ex.cl.enqueue_fill_buffer(cmd.dev.queue, buf, pattern, a["off"], a["n"])
    ex.enqueued(cmd, ev, "fill")


# ---- programs --------------------------------------------------------------------------
def program(ex: Executor, cmd: Command) -> None:
    """prog_build (source + options), prog_compile (source + options + embedded
    headers, not linked) and prog_link (compiled programs of this client + options).

    Built from the raw source with exactly the client's options plus
    -cl-kernel-arg-info (runtime.cluster.introspect: what the client reports about kernels
    comes from the real driver); the reply's ``res`` carries the introspection
    (``kernels``, ``log``), also for a failure (``code``: the OpenCL error, ``log``)."""
    cl, a, op, dev, client = ex.cl, cmd.a, cmd.op, cmd.dev, cmd.client
    Prog = ex.store.Program
    d = dev.device
    opts = introspect.with_arg_info(a["opts"]) if op != "prog_compile" else a["opts"]
    src, headers = ("", []) if op == "prog_link" else protocol.program_source(a, cmd.data)
    if op == "prog_link":
        parts = [ex.store.program(client, dev, h) for h in a["parts"]]
        ident = "link\0" + a["opts"] + "\0" + ",".join(str(id(p)) for p in parts)
        digest = hashlib.sha256(ident.encode()).hexdigest()
    elif op == "prog_compile":
        ident = "compile\0" + src + "\0" + a["opts"] + "\0" + repr(headers or None)
        digest = hashlib.sha256(ident.encode()).hexdigest()
    else:  # a plain build is cached under the program's own identity (intercept.identity)
        digest = identity.program_hash(src, a["opts"])
    key = (dev.index, digest)
    got = ex.store.prog_cache.get(key) if op != "prog_link" else None
    if got is None:
        prog = None
        try:
            if op == "prog_link":
                failed = "link"
                prog = Prog.link(dev.ctx, parts, opts.encode(), [d])
            else:
                prog = Prog(dev.ctx, src)
                if op == "prog_compile":
                    failed = "compile"
                    hdrs = [(n, Prog(dev.ctx, src)) for n, src in headers]
                    prog.compile(opts.encode(), [d], hdrs)
                else:
                    failed = "build"
                    build_exactly(prog, opts.encode(), d)
        except cl.Error as exc:
            blog = introspect.build_log(cl, prog, d) if prog is not None else ""
            ex.answer(
                cmd,
                ok=False,
                err=f"{failed} failed: {exc}\n{blog[:1500]}",
                res={"code": int(getattr(exc, "code", -11)), "log": blog[:200000]},
            )
            return
        if op == "prog_compile":
            meta: dict[str, Any] = {"log": introspect.build_log(cl, prog, d), "kernels": []}
        else:
            meta = introspect.program_meta(cl, prog, d)
        got = (prog, meta)
        if op != "prog_link":
            ex.store.prog_cache[key] = got
    ex.store.objects[(client, dev.index, a["h"])] = got[0]
    ex.answer(cmd, res=got[1])


# ---- launches --------------------------------------------------------------------------
def launch(ex: Executor, cmd: Command) -> None:
    cl, a, dev, client = ex.cl, cmd.a, cmd.dev, cmd.client
    kkey = (client, dev.index, a["prog"], a["kernel"])
    ent = ex.store.kernels.get(kkey)
    if ent is None:
        prog = ex.store.program(client, dev, a["prog"])
        if prog.get_info(cl.program_info.CONTEXT) != dev.ctx:
            raise ValueError("program was built for another device")
        kern = cl.Kernel(prog, a["kernel"])
        ent = ex.store.kernels[kkey] = (kern, kern.num_args, {})
    kern, nargs, last = ent
    if len(a["args"]) != nargs:
        raise ValueError(f"kernel {a['kernel']} takes {nargs} arguments, got {len(a['args'])}")
    slot = None
    # the client saw this launch before: it may come as a fast frame (same-host link only)
    if a.get("slot") and isinstance(cmd.sock, unixlink.Link):
        slot = ex.slots.slot_for(client, dev, a)
    # clSetKernelArg only for arguments that changed since this kernel's last launch
    # (a launch loop re-sends the same arguments; each set_arg is a driver call)
    for i, arg in enumerate(a["args"]):
        kind = arg[0]
        if kind == "b" or kind == "r":
            v: Any = ex.store.arg_value(client, dev, arg)
        elif kind == "s":
            v = arg[1]
        elif kind == "l":
            v = ("l", max(1, arg[1]))
        else:
            v = None
        old = last.get(i, last)
        if old is v or (kind in "sln" and type(old) is type(v) and old == v):
            continue
        kern.set_arg(i, cl.LocalMemory(v[1]) if kind == "l" else v)
        last[i] = v
    ev = cl.enqueue_nd_range_kernel(
        dev.queue,
        kern,
        tuple(a["gsize"]),
        tuple(a["lsize"]) if a.get("lsize") else None,
        tuple(a["goff"]) if a.get("goff") else None,
    )
    ex.enqueued(cmd, ev, "launch", res=None if slot is None else {"slot": slot})


# ---- order and lifetime ----------------------------------------------------------------
def finish(ex: Executor, cmd: Command) -> None:
    ex.enqueued(cmd, ex.cl.enqueue_marker(cmd.dev.queue), "finish")


def release(ex: Executor, cmd: Command) -> None:
    ex.slots.drop_client(cmd.client, cmd.dev.index)
    ex.store.release(cmd.client, cmd.dev, cmd.a["h"])
    ex.answer(cmd)


def release_all(ex: Executor, cmd: Command) -> None:
    ex.slots.drop_client(cmd.client)
    ex.store.release_all(cmd.client)
    ex.answer(cmd)


HANDLERS: dict[str, Callable[[Executor, Command], None]] = {
    "buf_create": buf_create,
    "buf_write": buf_write,
    "buf_read": buf_read,
    "buf_copy": buf_copy,
    "buf_fill": buf_fill,
    "prog_build": program,
    "prog_compile": program,
    "prog_link": program,
    "launch": launch,
    "finish": finish,
    "release": release,
    "release_all": release_all,
}
