"""May a launch be split along its work-group grid? Decided from emulated store addresses.

A split runs sub-ranges of the NDRange (``global_work_offset``) on different devices, each
on its own copy of the buffers, and merges every written buffer by copying back each
share's written byte interval. That is correct when the *slabs* (the groups sharing one
index along the split dimension, the last dimension with more than one group) write
disjoint intervals whose position is an affine function of the slab index: then any run
of consecutive slabs writes ``[lo0 + a*stride, hi0 + (a+n-1)*stride)`` and shares never
overlap.

Check (docs/advisor.md): slabs 0, 1 and the last one are emulated in Oclgrind *as the
sub-launches a split would run* (one slab, global offset at the slab), in quick mode
(the slab's first and last group), with the plugin's store-range feature
(``CLPROJ_STORE_RANGES=1``). Per written buffer argument the three intervals must have the
same width, advance by one constant stride (non-zero) and not overlap. Kernels that read
``get_global_size``/``get_num_groups`` of the split dimension are refused (a share sees its
own sub-size), and so are writes to buffers that are no argument.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from clproj import pyenv
from clproj.background_thread import map_in_threads
from clproj.errors import ClprojError
from clproj.intercept.record import LaunchRecord
from clproj.paths import scratch_dir


@dataclass
class WrittenArg:
    """A buffer argument the kernel writes: slab 0's interval and the per-slab stride."""

    arg: int
    lo0: int  # first byte written by slab 0 (relative to the buffer)
    hi0: int  # one past the last byte written by slab 0
    stride: int  # bytes the interval moves per slab
    dense: bool  # slab 0 writes every byte of its interval exactly once
    read: bool  # the sampled groups also load from it

    def region(self, first: int, count: int, size: int) -> tuple[int, int]:
        """Byte interval written by ``count`` slabs starting at slab ``first``."""
        a = self.lo0 + first * self.stride
        b = self.lo0 + (first + count - 1) * self.stride
        lo = min(a, b)
        hi = max(a, b) + (self.hi0 - self.lo0)
        return max(0, lo), min(size, hi)


@dataclass
class Safety:
    """Whether a launch may be split, along which dimension, and what each slab writes."""

    ok: bool
    reason: str
    dim: int = 0  # split dimension
    slabs: int = 1  # groups along ``dim``
    slab_items: int = 1  # work-items per slab along ``dim`` (the local size)
    groups_per_slab: int = 1
    written: list[WrittenArg] = field(default_factory=list)
    read_args: list[int] = field(default_factory=list)  # buffer args loaded by sampled groups
    sampled_slabs: list[int] = field(default_factory=list)
    emulation_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_dimension(record: LaunchRecord) -> tuple[int, list[int]]:
    """The dimension to split (last one with several groups) and the groups per dimension."""
    if record.local_size is None:
        raise ClprojError(
            f"{record.kernel}: the launch passed no local size, so its work-groups are the "
            "runtime's choice and cannot be split reproducibly",
            "launch with an explicit local size",
        )
    groups = [
        -(-g // max(1, loc)) for g, loc in zip(record.global_size, record.local_size, strict=True)
    ]
    dims = [d for d, n in enumerate(groups) if n > 1]
    return (dims[-1] if dims else record.work_dim - 1), groups


def sub_record(record: LaunchRecord, dim: int, first: int, count: int) -> LaunchRecord:
    """The launch of ``count`` slabs starting at slab ``first``: what one share runs."""
    sub = copy.copy(record)
    local = record.local_size[dim] if record.local_size else 1
    offset = list(record.global_offset or [0] * record.work_dim)
    gsize = list(record.global_size)
    offset[dim] += first * local
    gsize[dim] = min(count * local, record.global_size[dim] - first * local)
    sub.global_offset, sub.global_size = offset, gsize
    sub.path, sub.id = None, f"{record.id or record.kernel}-slab{first}x{count}"
    return sub


_SIZE_QUERY = re.compile(r"\b(get_global_size|get_num_groups)\s*\(\s*([^)]*?)\s*\)")


def size_query_problem(source: str | None, dim: int) -> str | None:
    """Why the source's NDRange-size queries forbid a split along ``dim`` (None: they don't)."""
    for fn, arg in _SIZE_QUERY.findall(source or ""):
        if not arg.isdigit():
            return f"the kernel calls {fn}({arg}) with a non-constant dimension"
        if int(arg) == dim:
            return f"the kernel calls {fn}({dim}), which a share would see as its own sub-size"
    return None


def emulate_store_ranges(record: LaunchRecord, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Quick-mode Oclgrind run with store ranges: the plugin's group lines of ``record``."""
    from clproj.intercept.record import save
    from clproj.miniemu.oclgrind import OclgrindBackend

    backend = OclgrindBackend()
    why = backend.unavailable()
    if why:
        raise ClprojError(f"Oclgrind cannot run here: {why}", "run `make setup`")
    with scratch_dir("clproj-split-") as tmp:
        path = save(copy.copy(record), tmp, link_blobs=True)
        out, log = os.path.join(tmp, "stats.jsonl"), os.path.join(tmp, "oclgrind.log")
        env = backend.environment("quick", out, log)
        env["CLPROJ_STORE_RANGES"] = "1"
        try:
            proc = subprocess.run(
                [pyenv.helper_python(), "-m", "clproj.miniemu.worker", path],
                env=env,
                capture_output=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise ClprojError(
                f"store-range emulation of {record.kernel} exceeded {timeout_s:g} s",
                "raise --timeout",
            ) from None
        lines = []
        if os.path.exists(out):
            with open(out, encoding="utf-8") as fh:
                lines = [json.loads(line) for line in fh if line.strip()]
    groups = [g for g in lines if g.get("type") == "group"]
    if proc.returncode != 0 or not groups:
        tail = proc.stderr.decode(errors="replace").strip()[-800:]
        raise ClprojError(
            f"store-range emulation of {record.kernel} failed (exit {proc.returncode}): {tail}",
            "check the record with `clproj emulate RECORD --mode quick`",
        )
    if any("store_ranges" not in g for g in groups):
        raise ClprojError(
            "the Oclgrind plugin does not report store ranges", "rebuild it with `make build`"
        )
    return groups


def _slab_ranges(groups: list[dict[str, Any]], groups_per_slab: int) -> dict[int, dict[str, int]]:
    """Per argument: the union interval, bytes stored and loaded over a slab's groups.

    Quick mode emulates a slab's first and last group only; byte counts are scaled to the
    slab's ``groups_per_slab`` groups (intervals are not: first and last bound them).
    """
    out: dict[int, dict[str, int]] = {}
    factor = groups_per_slab / max(1, len(groups))
    for g in groups:
        for r in g["store_ranges"]:
            e = out.setdefault(
                int(r["arg"]),
                {"lo": 1 << 62, "hi": 0, "store_bytes": 0, "load_bytes": 0, "atomics": 0},
            )
            if r["hi"] > 0:
                e["lo"] = min(e["lo"], int(r["lo"]))
                e["hi"] = max(e["hi"], int(r["hi"]))
            for k in ("store_bytes", "load_bytes", "atomics"):
                e[k] += int(r[k])
    for e in out.values():
        for k in ("store_bytes", "load_bytes", "atomics"):
            e[k] = round(e[k] * factor)
    return out


def check(record: LaunchRecord, timeout_s: float = 120.0) -> Safety:
    """Emulate slabs 0, 1 and the last one and apply the disjoint-affine rule."""
    import time

    dim, groups = split_dimension(record)
    slabs = groups[dim]
    gps = 1
    for d, n in enumerate(groups):
        if d != dim:
            gps *= n
    base = Safety(
        ok=False,
        reason="",
        dim=dim,
        slabs=slabs,
        slab_items=int(record.local_size[dim]),
        groups_per_slab=gps,
    )
    if slabs < 2:
        base.reason = "the launch has a single work-group along every dimension"
        return base
    if any(g % loc for g, loc in zip(record.global_size, record.local_size, strict=True)):
        base.reason = "the global size is not a multiple of the local size"
        return base
    problem = size_query_problem(record.source, dim)
    if problem:
        base.reason = problem
        return base
    sampled = sorted({0, 1, slabs - 1})
    start = time.perf_counter()
    runs = map_in_threads(
        lambda s: emulate_store_ranges(sub_record(record, dim, s, 1), timeout_s),
        sampled,
        "clproj-safety",
        workers=2,
    )
    base.emulation_s = time.perf_counter() - start
    base.sampled_slabs = sampled
    ranges = [_slab_ranges(r, gps) for r in runs]
    return _decide(base, record, sampled, ranges)


def _decide(  # noqa: C901
    base: Safety, record: LaunchRecord, sampled: list[int], ranges: list[dict[int, dict[str, int]]]
) -> Safety:
    written_sets = [{a for a, e in r.items() if e["hi"] > 0} for r in ranges]
    if not written_sets[0]:
        base.reason = "the sampled work-groups write no global memory"
        return base
    if any(w != written_sets[0] for w in written_sets):
        base.reason = (
            "slabs write different buffers ("
            + "; ".join(
                f"slab {s}: args {sorted(w)}" for s, w in zip(sampled, written_sets, strict=True)
            )
            + ")"
        )
        return base
    if -1 in written_sets[0]:
        base.reason = "the kernel writes a buffer that is not one of its arguments"
        return base
    base.read_args = sorted(
        {a for r in ranges for a, e in r.items() if e["load_bytes"] > 0 and a >= 0}
    )
    for arg in sorted(written_sets[0]):
        e = [r[arg] for r in ranges]
        lo, hi = [x["lo"] for x in e], [x["hi"] for x in e]
        stride = lo[1] - lo[0]
        what = f"argument {arg}"
        if e[0]["atomics"]:
            what += " (atomics)"
        if stride == 0 or hi[1] - hi[0] != stride:
            base.reason = (
                f"{what}: slabs {sampled[0]} and {sampled[1]} write [{lo[0]},{hi[0]}) and "
                f"[{lo[1]},{hi[1]}): not a region that moves with the slab"
            )
            return base
        width = hi[0] - lo[0]
        if width > abs(stride):
            base.reason = (
                f"{what}: slab regions overlap (each spans {width} bytes but moves only "
                f"{abs(stride)} bytes per slab)"
            )
            return base
        if len(sampled) > 2:
            k = sampled[2]
            if lo[2] != lo[0] + k * stride or hi[2] != hi[0] + k * stride:
                base.reason = (
                    f"{what}: slab {k} writes [{lo[2]},{hi[2]}), not the affine prediction "
                    f"[{lo[0] + k * stride},{hi[0] + k * stride})"
                )
                return base
        size = int(record.arg(arg).size or 0)
        base.written.append(
            WrittenArg(
                arg=arg,
                lo0=lo[0],
                hi0=hi[0],
                stride=stride,
                dense=e[0]["store_bytes"] == width and not e[0]["atomics"],
                read=any(x["load_bytes"] > 0 for x in e),
            )
        )
        if size and max(hi) > size:
            base.reason = f"{what}: writes past the end of the buffer"
            return base
    base.ok = True
    base.reason = (
        f"slabs along dimension {base.dim} write disjoint regions that move by a constant "
        f"stride (checked on slabs {', '.join(map(str, sampled))})"
    )
    return base
