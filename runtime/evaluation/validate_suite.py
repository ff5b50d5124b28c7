"""Building a validation suite and running its apps unmodified under project mode.

``clproj validate`` builds the suite with its own ``build.sh`` (rebuilt only when the
sources change) and runs each app as ``clproj run --mode project --json`` in its own
folder and process session, so that a hung app can be ended with the shim's helpers. This
is the only part of validation that starts processes; everything else works on the JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clproj.errors import ClprojError
from clproj.lifeline import die_with_parent


def suite_fingerprint(suite: str) -> str:
    """A hash of the suite's build inputs (build.sh and src/): a changed source rebuilds."""
    h = hashlib.sha256()
    roots = [os.path.join(suite, "build.sh"), os.path.join(suite, "src")]
    for root in roots:
        if os.path.isfile(root):
            walk: Iterable[tuple[str, list[str], list[str]]] = [
                (os.path.dirname(root), [], [os.path.basename(root)])
            ]
        else:
            walk = os.walk(root)
        for dirpath, dirnames, filenames in walk:
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                h.update(
                    f"{os.path.relpath(path, suite)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
                )
    return h.hexdigest()[:16]


def default_build_dir(suite: str) -> str:
    from clproj import paths

    real = os.path.realpath(suite)
    tag = hashlib.sha256(real.encode()).hexdigest()[:8]
    return os.path.join(paths.cache_dir("validate"), f"{os.path.basename(real)}-{tag}")


def app_dirs(build_dir: str) -> list[str]:
    """Names of the build folder's app folders (each holds ``app`` if it built)."""
    if not os.path.isdir(build_dir):
        return []
    return sorted(
        d
        for d in os.listdir(build_dir)
        if os.path.isdir(os.path.join(build_dir, d)) and not d.startswith(".")
    )


def _built(build_dir: str, app: str) -> bool:
    path = os.path.join(build_dir, app, "app")
    return os.path.isfile(path) and os.access(path, os.X_OK)


STAMP = ".clproj-build-stamp"


def ensure_built(suite: str, build_dir: str | None) -> tuple[str, str]:
    """The build folder and what was done: ``given``, ``up to date`` or ``built``.

    A ``--build-dir`` that already holds built apps is used as is (the user built it); the
    default folder (in clproj's cache) is rebuilt whenever the suite's sources change.
    """
    script = os.path.join(suite, "build.sh")
    if build_dir and any(_built(build_dir, a) for a in app_dirs(build_dir)):
        return build_dir, "given"
    build_dir = build_dir or default_build_dir(suite)
    stamp = os.path.join(build_dir, STAMP)
    fingerprint = suite_fingerprint(suite)
    try:
        with open(stamp, encoding="utf-8") as fh:
            if fh.read().strip() == fingerprint and any(
                _built(build_dir, a) for a in app_dirs(build_dir)
            ):
                return build_dir, "up to date"
    except OSError:
        pass
    if not os.path.isfile(script):
        raise ClprojError(
            f"{suite} has no build.sh", "a suite folder holds build.sh OUTDIR (or pass --build-dir)"
        )
    os.makedirs(build_dir, exist_ok=True)
    proc = subprocess.run(
        ["bash", os.path.abspath(script), os.path.abspath(build_dir)],
        cwd=suite,
        capture_output=True,
        text=True,
    )
    if not any(_built(build_dir, a) for a in app_dirs(build_dir)):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ClprojError(
            f"building the suite built no app (build.sh exit {proc.returncode}: {tail[0]})",
            f"run `bash {script} DIR` by hand to see why",
        )
    if proc.returncode == 0:
        with open(stamp, "w", encoding="utf-8") as fh:
            fh.write(fingerprint + "\n")
    return build_dir, "built"


@dataclass
class AppRun:
    """One app's project-mode run: its JSON document or why there is none."""

    app: str
    ok: bool
    wall_s: float = 0.0
    error: str | None = None
    doc: dict[str, Any] | None = None
    output_tail: str = ""


def parse_run_output(stdout: str) -> dict[str, Any]:
    """The JSON document of ``clproj run --json``: from the first line that is exactly ``{``.

    The app's own output may precede it on stdout, and that output may contain braces, so
    the document is found by its first line rather than by the first ``{`` character.
    """
    lines = stdout.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == "{":
            return json.loads("".join(lines[i:]))
    raise ValueError("no JSON document in the output")


def _tail(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def run_app(
    build_dir: str, app: str, devices: str, timeout_s: float, env: Mapping[str, str] | None = None
) -> AppRun:
    """Run ``build_dir/app/app`` unmodified under ``clproj run --mode project --json``.

    The app runs in its own folder (the apps open their ``.cl`` from the working directory)
    and in its own session, so that a timeout ends the app and the shim's helpers with it.
    """
    folder = os.path.join(build_dir, app)
    if not _built(build_dir, app):
        return AppRun(app, ok=False, error="build failed (no app binary)")
    cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--devices", devices]
    cmd += ["--json", "--", "./app"]
    session = run_in_session(cmd, folder, env, timeout_s)
    out, err, wall = session.out, session.err, session.wall_s
    if session.timed_out:
        return AppRun(
            app,
            ok=False,
            wall_s=wall,
            error=f"timed out after {timeout_s:.0f} s",
            output_tail=_tail(err),
        )
    try:
        doc = parse_run_output(out)
    except ValueError as exc:
        why = f"clproj run exit {session.returncode}, {exc}"
        return AppRun(app, ok=False, wall_s=wall, error=why, output_tail=_tail(err or out))
    rc = doc.get("exit_code", session.returncode)
    if rc != 0:
        return AppRun(
            app, ok=False, wall_s=wall, error=f"app exit code {rc}", doc=doc, output_tail=_tail(err)
        )
    if not doc.get("projections"):
        return AppRun(
            app,
            ok=False,
            wall_s=wall,
            error="no launch was projected",
            doc=doc,
            output_tail=_tail(err),
        )
    return AppRun(app, ok=True, wall_s=wall, doc=doc, output_tail=_tail(err))


@dataclass
class Session:
    """What one command run in a session of its own left: its output, status and time."""

    out: str
    err: str
    returncode: int
    wall_s: float
    timed_out: bool


def run_in_session(
    cmd: list[str], cwd: str, env: Mapping[str, str] | None, timeout_s: float
) -> Session:
    """Run ``cmd`` in ``cwd`` in its own session, so that a timeout ends it and every
    helper it started (the shim's, the embedded cluster) with it (:func:`kill_group`).

    The session also keeps a terminal's Ctrl-C from reaching the run, so it ends with
    ours: an interruption (Ctrl-C, any exception) ends the group before it goes on, and a
    ``clproj validate`` killed outright sends the run SIGTERM (``PR_SET_PDEATHSIG``), which
    it forwards to its app. Otherwise the app being judged would run on, orphaned."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        preexec_fn=lambda: die_with_parent(signal.SIGTERM),
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    except BaseException:
        kill_group(proc)
        raise
    return Session(out, err, proc.returncode, time.perf_counter() - start, timed_out)


def kill_group(proc: subprocess.Popen) -> None:
    """End the run's process group (ours: started with start_new_session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
