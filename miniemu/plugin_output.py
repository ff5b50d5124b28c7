"""The plugin's output, read: a run's statistics (``clproj.plugin-stats`` JSON lines,
docs/miniemu.md "Plugin output") or the error it reported, as one-line ``ClprojError``s.

Why a module of its own: the one-shot worker's runs and the fork server's runs
(miniemu.oclgrind) end alike, in a folder of output files, and read them alike."""

from __future__ import annotations

import itertools

from clproj.errors import ClprojError
from clproj.miniemu.backend import GroupStats, RawEmulation

EMULATOR = "oclgrind 21.10"  # the emulator a profile names (RawEmulation.emulator)


def parsed(
    lines: list[dict], returncode: int, stderr_text: str, log: str, mode: str, wall: float
) -> RawEmulation:
    """The run's statistics, or the error it reported (or its crash) as a ClprojError."""
    kernels = [d for d in lines if d.get("type") == "kernel"]
    if returncode != 0 or not kernels:
        worker_error(stderr_text)
        # one line, as every error: the exception the worker raised, else the emulator's
        # last words, newlines folded
        tail = (
            raised(stderr_text)
            or " | ".join((stderr_text.strip() or log.strip()).splitlines())[-1500:]
        )
        why = f"exit status {returncode}" if returncode >= 0 else f"signal {-returncode}"
        raise ClprojError(
            f"Oclgrind emulation failed ({why}"
            + ("" if kernels else ", no statistics written")
            + f"): {tail or 'no output'}",
            "replay the record on a real device with `clproj replay` to check it, "
            "or inspect it under `oclgrind python -m clproj.miniemu.worker RECORD`",
        )
    return parse_plugin_output(lines, mode, wall, log)


def constant_trip_loops(loops: list[dict]) -> set[str]:
    """Ids of the loops whose trip count ScalarEvolution found to be a constant (no
    argument, id or load in it): the loops a device compiler can unroll completely."""
    out = set()
    for lp in loops:
        exact = lp.get("exact")
        if isinstance(exact, dict) and "c" in exact and set(exact) <= {"c", "bits"}:
            out.add(str(lp.get("id")))
    return out


def with_loop_counts(stats: dict, iterations: dict, constant: set[str]) -> dict:
    """A group's statistics plus ``loops.constant_trip_headers``: the header executions of
    its constant-trip loops, a counter scaled like every other (docs/formats.md section 2)."""
    headers = sum(int(n) for k, n in iterations.items() if str(k) in constant)
    if not headers:
        return stats
    return {**stats, "loops": {"constant_trip_headers": headers}}


def worker_error(stderr_text: str) -> None:
    """Raise the error the worker reported (a record that does not build, a bad field) as
    its own one-line error; return when it reported none (a crash: the caller says so).
    Why: the worker's error came wrapped in the emulator's raw output, over several lines."""
    from clproj.miniemu.worker import ERROR_MARK, FIX_MARK

    cause = fix = None
    for line in stderr_text.splitlines():
        if line.startswith(ERROR_MARK):
            cause = line[len(ERROR_MARK) :]
        elif line.startswith(FIX_MARK):
            fix = line[len(FIX_MARK) :]
    if cause:
        raise ClprojError(f"emulation failed in Oclgrind: {cause}", fix)


TRACEBACK = "Traceback (most recent call last):"


def raised(stderr_text: str) -> str | None:
    """The exception the last Python traceback in ``stderr_text`` ends with, on one line
    (``OSError: [Errno 12] Cannot allocate memory``); None without a traceback. Why: an
    exception the worker did not turn into its own error (a bug; the fork server's runs
    print theirs) came as its whole traceback, frames and all, folded into the error."""
    lines = stderr_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(TRACEBACK)]
    if not starts:
        return None
    # the frames and their source lines are indented; the exception is the first line that
    # is not, up to a blank line
    body = itertools.dropwhile(lambda x: not x or x[0].isspace(), lines[starts[-1] + 1 :])
    text = " ".join(" ".join(itertools.takewhile(lambda x: x.strip(), body)).split())
    return text[:500] or None


def parse_plugin_output(lines: list[dict], mode: str, wall_s: float, log: str = "") -> RawEmulation:
    """The last kernel object of the plugin's JSON lines and the group objects before it."""
    last = max(i for i, d in enumerate(lines) if d.get("type") == "kernel")
    kernel = lines[last]
    if kernel.get("format") != "clproj.plugin-stats" or int(kernel.get("version", 0)) != 1:
        raise ClprojError(
            f"plugin output has format {kernel.get('format')!r} version {kernel.get('version')!r}",
            "rebuild the plugin with `make build`",
        )
    first = last
    while first > 0 and lines[first - 1].get("type") == "group":
        first -= 1
    constant = constant_trip_loops(kernel.get("loops", []))
    groups = [
        GroupStats(
            group_id=list(g["group_id"]),
            group_index=int(g["group_index"]),
            work_items=int(g["stats"]["work_items"]),
            stats=with_loop_counts(g["stats"], g.get("loop_iterations", {}), constant),
            loop_iterations=dict(g.get("loop_iterations", {})),
        )
        for g in lines[first:last]
    ]
    groups.sort(key=lambda g: g.group_index)
    dim = int(kernel["work_dim"])
    return RawEmulation(
        emulator=EMULATOR,
        mode=mode,
        work_dim=dim,
        global_size=[int(x) for x in kernel["global_size"][:dim]],
        local_size=[int(x) for x in kernel["local_size"][:dim]],
        num_groups=[int(x) for x in kernel["num_groups"][:dim]],
        groups=groups,
        local_bytes_per_group=int(kernel.get("local_bytes_per_group", 0)),
        private_bytes_per_work_item=int(kernel["private"]["bytes_per_work_item"]),
        wall_s=wall_s,
        private_detail=dict(kernel["private"]),
        log=log,
        stop_reason=str(kernel.get("stop_reason", "")),
        loops=list(kernel.get("loops", [])),
        has_barrier=bool(kernel.get("has_barrier", True)),
        instructions_executed=int(kernel.get("instructions_executed", 0)),
    )
