"""Signals, crashes and dead peers: no hang, no leaked process or file, no lost exit code.

Everything here is real: ``clproj run`` as a subprocess, route mode's broker and node
processes, PoCL, /dev/shm. Each case checks the exit status, the one-line message, and
that nothing clproj started outlives what started it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from clproj.devices.profile import load_profile
from tests.conftest import helpers_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = [sys.executable, "-m", "clproj.cli"]

# An app that launches one kernel (so route mode starts its broker, node and shm files),
# then ends as argv[1] says: normally, by a signal, or by sleeping until it is told.
APP = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import pyopencl as cl
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, "__kernel void k(__global int *a) { a[get_global_id(0)] += 1; }").build()
    host = np.zeros(1 << 18, np.int32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    prg.k(q, host.shape, None, buf)
    cl.enqueue_copy(q, host, buf)
    print("RAN", int(host.sum()), os.getpid(), flush=True)
    how = sys.argv[1]
    if how.startswith("signal"):
        os.kill(os.getpid(), int(how[6:]))
    if how == "sleep":  # in short steps: see test_a_signal_to_clproj_run_is_forwarded_to_the_app
        for _ in range(1200):
            time.sleep(0.1)
    sys.exit(int(how) if how.isdigit() else 0)
    """
)


def _first_device_name() -> str:
    from clproj.devices.discovery import opencl_devices

    return opencl_devices()[0].name.strip()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], seconds: float = 8.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def shm_of(pid: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"clproj-c{pid}-")]


@pytest.fixture
def app(tmp_path) -> str:
    path = tmp_path / "app.py"
    path.write_text(APP)
    return str(path)


def run(args: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw
    )


def app_pid(text: str) -> int:
    line = next(ln for ln in text.splitlines() if ln.startswith("RAN"))
    return int(line.split()[2])


@pytest.mark.parametrize(
    ("how", "status", "named"),
    [("signal11", 139, "SIGSEGV"), ("signal9", 137, "SIGKILL"), ("signal6", 134, "SIGABRT")],
)
def test_route_app_killed_by_a_signal_leaves_nothing(app, tmp_path, how, status, named):
    scratch = tmp_path / "tmp"  # the temporary folder of clproj run and all it starts
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    out = run(["run", "--mode", "route", "--", sys.executable, app, how], env=env)
    # clproj run ends by the app's signal, as the app alone would (a shell still says 128+N)
    assert out.returncode == -getattr(signal, named), out.stderr[-2000:]
    assert f"the app was killed by {named} (exit status {status})" in out.stderr
    pid = app_pid(out.stdout)
    assert wait_gone(helpers_of(pid)) == []  # broker and node followed the app
    assert helpers_of(pid) == []
    assert shm_of(pid) == []
    assert [n.name for n in scratch.iterdir()] == []
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("mode", ["observe", "project", "route"])
def test_the_apps_exit_code_is_kept_and_json_stays_parseable(app, mode):
    out = run(["run", "--mode", mode, "--json", "--", sys.executable, app, "3"])
    assert out.returncode == 3, out.stderr[-2000:]
    doc = json.loads(out.stdout)  # the summary alone: the app's output went to stderr
    assert doc["exit_code"] == 3
    assert "RAN" in out.stderr and "RAN" not in out.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_clproj_run_is_forwarded_to_the_app(app, sig):
    """The app sleeps in steps of 0.1 s, not in one call: Linux may hand a process's
    signal to any thread not blocking it, PoCL's worker threads included (clproj's own
    block them), and CPython's main thread then sees it only when its sleep returns.
    Measured on the 2-core VM, the plain app, no clproj: 1 of 80 SIGINTs missed a
    120-s sleep this way; with clproj's threads unblocked, 3 of 80 under project mode."""
    proc = subprocess.Popen(
        [*CLI, "run", "--mode", "project", "--", sys.executable, app, "sleep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    pid = app_pid(proc.stdout.readline())
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -sig, err[-2000:]  # ended by the app's signal, as the app was
    assert f"killed by {signal.Signals(sig).name} (exit status {128 + sig})" in err
    assert not alive(pid)
    assert "projected" in err  # what was projected before the interruption is still shown


def test_ctrl_c_stops_a_shell_loop_of_clproj_runs():
    """bash ends a loop at Ctrl-C only when its foreground job died of SIGINT: clproj run,
    whose app died of it, must die of it too (after an exit status of 130 the loop runs on)."""
    loop = f"for i in 1 2 3; do {' '.join(CLI)} run -- sleep 5; echo next $i; done"
    proc = subprocess.Popen(
        ["bash", "-c", loop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    time.sleep(2.0)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, err[-2000:]
    assert "next" not in out, out


@pytest.mark.parametrize("mode", ["observe", "project", "route"])
def test_signals_the_starter_ignored_stay_ignored_in_the_app(mode):
    """A background job of a script (SIGINT ignored) or a nohup'ed one (SIGHUP) keeps
    ignoring them under clproj run. Project and route modes load PoCL into clproj run
    itself, which catches SIGINT and more as it starts: unless restored, the app gets SIGINT
    at its default, and a Ctrl-C meant for the script's foreground job kills the background
    app."""
    ignored = (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)

    def starter() -> None:
        for sig in ignored:
            signal.signal(sig, signal.SIG_IGN)

    app = [sys.executable, "-c", "import signal; print('IGN', *sorted(int(s) for s in "
           "signal.valid_signals() if signal.getsignal(s) is signal.SIG_IGN))"]  # fmt: skip
    env = dict(os.environ, POCL_DEVICES="pthread")
    out = run(["run", "--mode", mode, "--", *app], env=env, preexec_fn=starter)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = next(ln for ln in out.stdout.splitlines() if ln.startswith("IGN")).split()[1:]
    assert {int(s) for s in ignored} <= {int(s) for s in seen}, out.stdout


# An app that lists, after its launch, the signals each clproj thread inside it blocks.
THREADS_APP = textwrap.dedent(
    """
    import threading, time
    import numpy as np
    import pyopencl as cl
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, "__kernel void k(__global int *a) { a[get_global_id(0)] += 1; }").build()
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096)
    prg.k(q, (1024,), None, buf)
    q.finish()
    time.sleep(0.5)  # the record writer and the projection worker have started
    for th in threading.enumerate():
        with open(f"/proc/self/task/{th.native_id}/status") as fh:
            blk = next(ln.split()[1] for ln in fh if ln.startswith("SigBlk"))
        print("THREAD", th.name, blk, flush=True)
    """
)


@pytest.mark.parametrize("mode", ["project", "route"])
def test_clproj_threads_inside_the_app_leave_its_signals_to_it(tmp_path, mode):
    """Linux gives a process's signal to any thread that does not block it; one taken by a
    clproj thread never wakes an app sleeping in its main thread (a Ctrl-C lost: it was
    seen, ~4 runs in 100, before clproj's threads blocked them)."""
    path = tmp_path / "threads.py"
    path.write_text(THREADS_APP)
    out = run(["run", "--mode", mode, "--", sys.executable, str(path)])
    assert out.returncode == 0, out.stderr[-2000:]
    masks = {
        ln.split()[1]: int(ln.split()[2], 16)
        for ln in out.stdout.splitlines()
        if ln.startswith("THREAD")
    }
    ours = {name: m for name, m in masks.items() if name.startswith("clproj-")}
    assert "clproj-record-writer" in ours or mode == "route", masks
    assert ours, masks
    bit = lambda sig: 1 << (sig - 1)  # noqa: E731
    for name, mask in ours.items():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1):
            assert mask & bit(sig), (name, sig)
        assert not mask & bit(signal.SIGSEGV), name  # faults stay the thread's own
    assert masks["MainThread"] & bit(signal.SIGINT) == 0  # the app's own thread untouched


def test_map_in_threads_keeps_order_raises_and_blocks_signals():
    from clproj.background_thread import map_in_threads

    def masked(x: int) -> tuple[int, bool, bool]:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        time.sleep(0.01 * (5 - x))  # finish out of order
        return x * x, signal.SIGINT in blocked, signal.SIGSEGV in blocked

    assert map_in_threads(masked, range(5), "t", workers=2) == [
        (x * x, True, False) for x in range(5)
    ]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # caller untouched

    def fail(x: int) -> int:
        if x in (1, 3):
            raise ValueError(x)
        return x

    with pytest.raises(ValueError, match="1"):
        map_in_threads(fail, range(4), "t")
    assert map_in_threads(fail, [], "t") == []


def test_killing_clproj_run_kills_the_app_and_its_cluster(app, tmp_path):
    """SIGKILL to ``clproj run``: the app and clproj's helpers die with it; the run's
    folder, which nothing alive can remove then, goes with the next clproj run."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [*CLI, "run", "--mode", "route", "--", sys.executable, app, "sleep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert proc.stdout is not None
    pid = app_pid(proc.stdout.readline())
    assert len(helpers_of(pid, "broker")) == len(helpers_of(pid, "node")) == 1  # embedded
    helpers = helpers_of(pid)  # and the emulator server once a kernel is projected
    proc.kill()
    proc.wait(10)
    assert wait_gone([pid, *helpers]) == []
    left = [n.name for n in tmp_path.iterdir() if n.name.startswith("clproj-run-")]
    assert left  # killed outright: nothing removed it
    out = run(["run", "--mode", "observe", "--", "true"], env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [n.name for n in tmp_path.iterdir() if n.name.startswith("clproj-")] == []


UNWIND = textwrap.dedent(
    """
    import os, signal, sys, tempfile, time
    from clproj.lifeline import unwinding_on
    if sys.argv[1] == "ignored":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as under nohup
    with unwinding_on(signal.SIGTERM, signal.SIGHUP):
        with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            print("still here", flush=True)
    """
)


@pytest.mark.parametrize("how", ["default", "ignored"])
def test_a_terminating_signal_unwinds_cleanups_then_ends_by_it(tmp_path, how):
    """What ``clproj run`` does outside the app's run (before it starts, after it ends): a
    SIGTERM removes the temporary folders of the ``with`` blocks, then ends the process by
    SIGTERM (it left /tmp/clproj-run-* behind); one the parent ignored stays ignored."""
    p = subprocess.run(
        [sys.executable, "-c", UNWIND, how, str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert os.listdir(tmp_path) == []
    if how == "default":
        assert p.returncode == -signal.SIGTERM, p.stderr
        assert "still here" not in p.stdout
    else:
        assert p.returncode == 0 and "still here" in p.stdout, p.stderr


def test_stale_folders_are_swept_and_live_ones_kept(tmp_path):
    """paths.sweep_stale: a folder named by a process that is gone is removed; one of a
    live process, one of another pid namespace, and one named otherwise stay."""
    from clproj.paths import owned_prefix, sweep_stale

    code = (
        "from clproj.paths import temp_dir; import sys; print(temp_dir('clproj-t-', sys.argv[1]))"
    )
    dead = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO
    )
    stale = dead.stdout.strip()
    assert os.path.isdir(stale), dead.stderr
    live = tmp_path / (owned_prefix("clproj-t-") + "x")  # this process's
    ns, dead_pid = os.path.basename(stale).removeprefix("clproj-t-").split(".", 1)
    foreign = tmp_path / f"clproj-t-{int(ns) + 1}.{dead_pid}"  # the dead pid, another namespace
    plain = tmp_path / "clproj-t-unrelated"
    for d in (live, foreign, plain):
        d.mkdir()
    assert sweep_stale(str(tmp_path), "clproj-t-") == [stale]
    assert not os.path.exists(stale)
    assert live.is_dir() and foreign.is_dir() and plain.is_dir()
    assert sweep_stale(str(tmp_path), "clproj-t-") == []  # once per process and kind


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--record", "FILE", "--", "true"], "is a file, not a folder"),
        (["run", "--", "/etc/passwd"], "cannot run /etc/passwd"),  # exit 126, as a shell
        (["run", "--", "/nonexistent/app"], "command not found"),  # exit 127, as a shell
        (["run", "--devices", "local", "--", "true"], "--devices is for --mode project or route"),
        (["run", "--mode", "project", "--devices", ",", "--", "true"], "names no device"),
        (["run", "--mode", "project", "--devices", "cluster", "--", "true"], "is for --mode route"),
        (["node", "--broker", "ipc:///tmp/none", "--device", "nosuch"], "serves no OpenCL device"),
        (["broker", "--bind", "ipc://SOCK", "--lifetime", "-5"], "not a positive"),
        (["emulate", "FILE", "--timeout", "nan"], "not a positive"),
        (["emulate", "FILE", "--timeout", "1e308"], "more than the longest wait"),
        (["broker", "--bind", "ipc://SOCK", "--lifetime", "1e308"], "more than the longest wait"),
        (["validate", "FILE", "--timeout", "1e308"], "more than the longest wait"),
        (["validate-published", "FILE", "--timeout", "1e308"], "more than the longest wait"),
        (["status", "--broker", "garbage"], "cannot connect to 'garbage'"),
        (
            ["node", "--broker", "ipc://SOCK", "--direct", "bogus", "--lifetime", "2"],
            "--direct bogus",
        ),
        (
            ["profile-device", "--mode", "tiny", "-o", "/proc/none/x.json"],
            "cannot write the profile",
        ),
        (
            ["node", "--broker", "ipc://SOCK", "--profiles", "BADPROFILES", "--lifetime", "5"],
            "compute_units",
        ),
        (["run", "--mode", "project", "--", "true", "NICE=abc"], "CLPROJ_EMULATION_NICE='abc'"),
        (["devices", "--profiles", "COLD=fast"], "CLPROJ_COLD_PROFILE='fast'"),
        (["run", "--mode", "route", "--", "true", "FOREIGN=perhaps"], "CLPROJ_FOREIGN_MACHINE"),
    ],
)
def test_simple_mistakes_are_one_line_errors(tmp_path, args, message):
    """Each is one line naming the cause, exit 2 (a program that cannot be started: 127
    when it does not exist, 126 when it cannot be executed, as ``env`` and shells say), no
    traceback (and nothing started)."""
    env = dict(os.environ)
    for key, name in (
        ("NICE=", "EMULATION_NICE"),
        ("COLD=", "COLD_PROFILE"),
        ("FOREIGN=", "FOREIGN_MACHINE"),
    ):
        for a in [a for a in args if a.startswith(key)]:
            env[f"CLPROJ_{name}"] = a[len(key) :]
            args = [x for x in args if x != a]
    bad = tmp_path / "bad"
    bad.mkdir()
    prof = load_profile("pocl-pthread-amd-epyc").to_dict()
    prof["identity"]["name"] = _first_device_name()  # the node matches profiles by name
    prof["compute_units"] = "two"
    (bad / "p.json").write_text(json.dumps(prof))
    args = [
        a.replace("BADPROFILES", str(bad))
        .replace("FILE", str(tmp_path / "f"))
        .replace("SOCK", str(tmp_path / "s"))
        for a in args
    ]
    (tmp_path / "f").write_text("")
    out = run(args, timeout=60, env=env)
    status = {"command not found": 127, "cannot run": 126}.get(message.split(" /")[0], 2)
    assert out.returncode == status, (out.stdout, out.stderr)
    assert message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_orphaned_shm_files_are_swept(tmp_path):
    from clproj.runtime.cluster.client.platform import sweep_orphan_shm

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = f"/dev/shm/clproj-c{os.getpid()}-test{os.urandom(4).hex()}"
    orphan = f"/dev/shm/clproj-c{dead.pid}-test{os.urandom(4).hex()}"
    for path in (mine, orphan):
        with open(path, "wb") as fh:
            fh.write(b"x" * 4096)
    try:
        assert sweep_orphan_shm() >= 1
        assert os.path.exists(mine) and not os.path.exists(orphan)
    finally:
        for path in (mine, orphan):
            if os.path.exists(path):
                os.unlink(path)


def test_registration_is_all_or_nothing(tmp_path):
    """A node announcing one valid and one broken profile registers no device at all."""
    import zmq

    from clproj.runtime.cluster import protocol
    from clproj.runtime.cluster.cli import fetch_status

    endpoint = f"ipc://{tmp_path}/broker"
    broker = subprocess.Popen(
        [*CLI, "broker", "--bind", endpoint, "--curve", "off", "--lifetime", "60"],
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    good = load_profile("pocl-pthread-amd-epyc").to_dict()
    bad = json.loads(json.dumps(good))
    bad["compute_units"] = "two"
    sock = zmq.Context.instance().socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.ROUTING_ID, b"node-test")
        sock.connect(endpoint)
        for profiles in ([good, bad], [good, good]):
            devices = [{"name": f"d{i}", "profile": p} for i, p in enumerate(profiles)]
            sock.send(protocol.pack("register", node="n", host="h", pid=1, devices=devices))
            time.sleep(0.5)
            status = fetch_status(endpoint, None, 10)
            if profiles[1] is bad:
                assert status["nodes"] == [] and status.get("devices", []) == [], status
        assert len(status["nodes"]) == 1 and len(status["nodes"][0]["devices"]) == 2
    finally:
        sock.close(0)
        broker.terminate()
        broker.wait(10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_broker_stopped_by_a_signal_cleans_up_and_dies_by_it(tmp_path, sig):
    """`clproj broker` told to stop by Ctrl-C or SIGTERM closes its socket, removes its
    ipc:// file (it was left behind) and then ends by that signal, as a shell loop and a
    supervisor expect (it exited 0)."""
    sock = tmp_path / "b.sock"
    p = subprocess.Popen(
        [*CLI, "broker", "--bind", f"ipc://{sock}", "--curve", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        # its line comes after the bind and the signal handlers (or EOF if it failed)
        assert "clproj broker on" in p.stderr.readline()
        assert sock.exists()
        p.send_signal(sig)
        p.wait(30)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -sig, p.stderr.read()[-2000:]
    assert not sock.exists()
