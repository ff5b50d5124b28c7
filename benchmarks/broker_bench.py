"""Benchmark of the routing layer: remote vs local launch, transfer rate, placement rate.

Run: ``.venv/bin/python benchmarks/broker_bench.py`` (writes benchmarks/results/broker.md).
``--compare REF`` instead measures launch+wait (API and in an unmodified app) of git
revision REF (exported and built in a temp dir) against the working tree, interleaved.
Broker and node are separate processes (as in a real cluster) on loopback; the client is
this process. Every ratio in the report comes from this one run on this machine. Targets
(from the issue): <= 150 us added per launch, >= 1 GB/s buffer transfer through the
broker path, >= 5,000 placement decisions per second.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KERNEL = "__kernel void inc(__global float *x) { x[get_global_id(0)] += 1.0f; }"
N_LAUNCH = 400
ROUNDS = 3  # interleaved repeats; every launch figure is the median over them
# command paths of a client: (name, client environment, node). CLPROJ_DIRECT: the node's
# Unix socket (same host), its zmq socket, or through the broker (two round trips per
# command). Node "native" also offers the C-served fast-launch socket (runtime.cluster.node.nodelink):
# repeated launches go there (CLPROJ_FAST_LAUNCH=0 on the client keeps them on the command
# socket); node "pynode" offers none (CLPROJ_NODE_NATIVE=0), as before fast launches.
PATHS = [
    ("same-host Unix socket + fast launches", {"CLPROJ_DIRECT": "1"}, "native"),
    (
        "same-host Unix socket, fast launches off in the client",
        {"CLPROJ_DIRECT": "1", "CLPROJ_FAST_LAUNCH": "0"},
        "native",
    ),
    ("same-host Unix socket, node without fast socket", {"CLPROJ_DIRECT": "1"}, "pynode"),
    ("zmq socket to the node", {"CLPROJ_DIRECT": "zmq"}, "native"),
    ("through the broker", {"CLPROJ_DIRECT": "0"}, "native"),
]
NODES = {"native": {}, "pynode": {"CLPROJ_NODE_NATIVE": "0"}}
XFER_BYTES = 64 * 2**20
XFER_REPS = 6


def _proc(args: list[str], env_extra: dict[str, str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), **env_extra)
    env.pop("LD_PRELOAD", None)
    return subprocess.Popen(
        [sys.executable, "-m", "clproj.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _median_us(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def local_numbers() -> dict[str, float]:
    import pyopencl as cl

    from clproj.devices.discovery import opencl_devices

    dev = opencl_devices()[0]
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx)
    x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096 * 4)
    k = cl.Program(ctx, KERNEL).build().inc
    k.set_args(x)
    for _ in range(20):
        cl.enqueue_nd_range_kernel(q, k, (4096,), None).wait()
    launch = _median_us(lambda: cl.enqueue_nd_range_kernel(q, k, (4096,), None).wait(), N_LAUNCH)
    pipes = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        for _ in range(N_LAUNCH):
            cl.enqueue_nd_range_kernel(q, k, (4096,), None)
        q.finish()
        pipes.append((time.perf_counter() - t) / N_LAUNCH * 1e6)
    host = np.ones(XFER_BYTES // 4, np.float32)
    big = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, XFER_BYTES)
    cl.enqueue_copy(q, big, host, is_blocking=True)
    t = time.perf_counter()
    for _ in range(XFER_REPS):
        cl.enqueue_copy(q, big, host, is_blocking=True)
    write = XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(XFER_REPS):
        cl.enqueue_copy(q, host, big, is_blocking=True)
    read = XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
    return {
        "launch_us": launch,
        "pipelined_us": statistics.median(pipes),
        "write_Bps": write,
        "read_Bps": read,
        "device": dev.name.strip(),
    }


def _launch_numbers(plat, k, dev: str) -> dict[str, float]:
    """launch+wait (median of N_LAUNCH), pipelined and broker-placed per-launch times."""
    launch = _median_us(lambda: plat.enqueue_launch(k, [4096], device=dev).wait(), N_LAUNCH)
    t = time.perf_counter()
    for _ in range(N_LAUNCH):
        plat.enqueue_launch(k, [4096], device=dev)
    plat.finish()
    pipelined = (time.perf_counter() - t) / N_LAUNCH * 1e6
    t = time.perf_counter()
    for _ in range(N_LAUNCH):
        plat.enqueue_launch(k, [4096])  # broker placement, cached per kernel key
    plat.finish()
    routed = (time.perf_counter() - t) / N_LAUNCH * 1e6
    return {"launch_us": launch, "pipelined_us": pipelined, "routed_us": routed}


def remote_numbers(endpoint: str, curve: str, keys: str | None) -> dict[str, dict[str, float]]:  # noqa: C901
    """Per command path: launch figures (interleaved rounds, medians); transfers and the
    placement round trip once, on the default path."""
    from clproj.runtime.cluster.client.platform import RemotePlatform
    from clproj.runtime.cluster.keys import load

    member = load(Path(keys), "member") if keys else None
    plats = {}
    for name, env, node in PATHS:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        plat = RemotePlatform(endpoint, curve=curve, keys=member, wait_devices_s=60)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
        deadline = time.monotonic() + 60
        while not any(d.startswith(f"{node}/") for d in plat.devices):
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node} never registered")
            time.sleep(0.2)
            plat.refresh_devices(wait_s=5)
        dev = sorted(d for d in plat.devices if d.startswith(f"{node}/"))[0]
        k = plat.create_kernel(plat.create_program(KERNEL), "inc")
        x = plat.create_buffer(4096 * 4)
        k.set_args(x)
        for _ in range(20):
            plat.enqueue_launch(k, [4096], device=dev).wait()
        plats[name] = (plat, k, dev)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in plats}
    for _ in range(ROUNDS):
        for name, (plat, k, dev) in plats.items():
            rounds[name].append(_launch_numbers(plat, k, dev))
    out = {
        name: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for name, rs in rounds.items()
    }
    plat, k, dev = plats[PATHS[0][0]]
    host = np.ones(XFER_BYTES // 4, np.float32)
    big = plat.create_buffer(XFER_BYTES)
    plat.enqueue_write(big, host, device=dev)
    t = time.perf_counter()
    for _ in range(XFER_REPS):
        plat.enqueue_write(big, host, blocking=True, device=dev)
    write = XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
    dst = np.empty_like(host)
    t = time.perf_counter()
    for _ in range(XFER_REPS):
        big.host_valid = False  # force the read to travel (no host-copy shortcut)
        plat.enqueue_read(big, dst)
    read = XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
    # placement requests over the socket (client -> broker -> client)
    move = {d: 1 << 20 for d in plat.devices}
    for _ in range(50):
        plat.requests.broker_call("place", key="bench", move=move, remaining=10)
    place_rtt = _median_us(
        lambda: plat.requests.broker_call("place", key="bench", move=move, remaining=10), 2000
    )
    for p, _, _ in plats.values():
        p.close()
    out["_xfer"] = {"write_Bps": write, "read_Bps": read, "place_rtt_us": place_rtt}
    return out


ECHO = """
import sys, time, zmq
s = zmq.Context().socket(zmq.ROUTER); s.bind(sys.argv[1]); end = time.time() + 60
while time.time() < end:
    if s.poll(100):
        s.send_multipart(s.recv_multipart(copy=False), copy=False)
"""


UNIX_ECHO = """
import socket, sys, time
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); l.bind(sys.argv[1]); l.listen()
c, _ = l.accept(); end = time.time() + 60
while time.time() < end:
    b = c.recv(65536)
    if not b:
        break
    c.sendall(b)
"""


def unix_baseline(path: str) -> float:
    """A bare Unix-socket echo between two processes (the same-host link's floor)."""
    import socket

    srv = subprocess.Popen([sys.executable, "-c", UNIX_ECHO, path])
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for _ in range(100):
            try:
                s.connect(path)
                break
            except OSError:
                time.sleep(0.05)
        for _ in range(100):
            s.send(b"x" * 64)
            s.recv(65536)
        rtt = _median_us(lambda: (s.send(b"x" * 64), s.recv(65536)), 2000)
        s.close()
        return rtt
    finally:
        srv.terminate()
        srv.wait(5)


def zmq_baseline(endpoint: str) -> dict[str, float]:
    """A bare zmq echo between two processes: the machine's floor for one message hop pair."""
    import zmq

    srv = subprocess.Popen([sys.executable, "-c", ECHO, endpoint])
    try:
        s = zmq.Context.instance().socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        for _ in range(100):
            s.send(b"x")
            s.recv()
        rtt = _median_us(lambda: (s.send(b"x"), s.recv()), 2000)
        big = np.ones(XFER_BYTES, np.uint8)
        t = time.perf_counter()
        for _ in range(XFER_REPS):
            s.send(big, copy=False)
            s.recv(copy=False)
        bw = (
            XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
        )  # bytes delivered one way per s (sent+echoed)
        s.close()
        return {"rtt_us": rtt, "echo_Bps": bw}
    finally:
        srv.terminate()
        srv.wait(5)


LAUNCH_APP = """
import sys, time
import numpy as np
import pyopencl as cl

n_launch = int(sys.argv[1])
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096 * 4)
cl.enqueue_fill_buffer(q, x, np.float32(0), 0, 4096 * 4)
k = cl.Program(ctx, "__kernel void inc(__global float *x) { x[get_global_id(0)] += 1.0f; }").build().inc
k.set_args(x)
cl.enqueue_nd_range_kernel(q, k, (4096,), None).wait()
t = time.perf_counter()
for _ in range(n_launch):
    cl.enqueue_nd_range_kernel(q, k, (4096,), None)
q.finish()
pipelined = time.perf_counter() - t
t = time.perf_counter()
for _ in range(n_launch // 4):
    cl.enqueue_nd_range_kernel(q, k, (4096,), None).wait()
waited = time.perf_counter() - t
out = np.empty(4096, np.float32)
cl.enqueue_copy(q, out, x)
assert out[0] == 1 + n_launch + n_launch // 4, out[0]
print(f"RESULT {pipelined / n_launch * 1e6:.1f} {waited / (n_launch // 4) * 1e6:.1f}")
"""
N_APP_LAUNCH = 2000

# The same app shape with a step index passed as a scalar that changes every launch (a
# factorisation's loop): every launch is a new signature and a new placement key.
STEP_APP = (
    LAUNCH_APP.replace(
        '"__kernel void inc(__global float *x) { x[get_global_id(0)] += 1.0f; }").build().inc',
        '"__kernel void stepk(__global float *x, const int t) '
        '{ int i = get_global_id(0); if (i >= t) x[i] += 1.0f; }").build().stepk',
    )
    .replace("k.set_args(x)\n", "k.set_args(x, np.int32(0))\n")
    .replace(
        "for _ in range(n_launch):\n    cl.enqueue_nd_range_kernel",
        "for i in range(n_launch):\n    k.set_args(x, np.int32(i))\n    cl.enqueue_nd_range_kernel",
    )
    .replace(
        "for _ in range(n_launch // 4):\n    cl.enqueue_nd_range_kernel",
        "for i in range(n_launch // 4):\n    k.set_args(x, np.int32(n_launch + i))\n"
        "    cl.enqueue_nd_range_kernel",
    )
    .replace(
        "assert out[0] == 1 + n_launch + n_launch // 4, out[0]",
        "assert out[0] == 2 and out[4095] == 1 + n_launch + n_launch // 4, out[[0, 4095]]",
    )
)
assert "np.int32(n_launch + i)" in STEP_APP, "STEP_APP no longer matches LAUNCH_APP"


def route_vs_observe(broker: str | None = None) -> dict[str, dict[str, float]]:
    """The same launch-heavy pyopencl app run plainly (no clproj), under ``clproj run
    --mode observe`` and ``--mode route`` (local cluster, or ``broker``); the modes are
    interleaved over ROUNDS rounds and each figure is the median."""
    app = Path(tempfile.mkdtemp(prefix="clproj-bench-app-")) / "launch_heavy.py"
    app.write_text(LAUNCH_APP)
    clproj = [sys.executable, "-m", "clproj.cli", "run"]
    route = [*clproj, "--mode", "route", "--json", "--"]
    modes: list[tuple[str, list[str], dict[str, str]]] = [
        ("plain (no clproj)", [], {}),
        ("observe", [*clproj, "--json", "--"], {}),
        ("route (local broker + node)", route, {}),
        ("route (local), node without fast socket", route, {"CLPROJ_NODE_NATIVE": "0"}),
        ("route (local), fast launches off in the client", route, {"CLPROJ_FAST_LAUNCH": "0"}),
    ]
    if broker:
        modes.append(
            (
                "route (--broker, separate processes)",
                [*clproj, "--mode", "route", "--broker", broker, "--json", "--"],
                {},
            )
        )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in modes}
    for _ in range(ROUNDS):
        for name, prefix, extra_env in modes:
            env = dict(os.environ, PYTHONPATH=str(REPO), PYOPENCL_CTX="0", CLPROJ_SUMMARY="0")
            env.update(extra_env)
            env.pop("LD_PRELOAD", None)
            env.pop("CLPROJ_DIRECT", None)
            t = time.perf_counter()
            p = subprocess.run(
                [*prefix, sys.executable, str(app), str(N_APP_LAUNCH)],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            wall = time.perf_counter() - t
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")), None)
            if p.returncode != 0 or line is None:
                raise RuntimeError(f"{name}: app failed: {p.stderr[-2000:]}")
            pipe, waited = map(float, line.split()[1:])
            runs[name].append({"pipelined_us": pipe, "waited_us": waited, "wall_s": wall})
    return {
        name: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for name, rs in runs.items()
    }


def placement_numbers() -> dict[str, float]:
    from clproj.runtime.cluster import placement
    from clproj.runtime.cluster.broker import Broker

    views = {
        f"n{i}/0": placement.DeviceView(f"n{i}/0", 1e12 * (i + 1), 1e10, 0.001 * i)
        for i in range(8)
    }
    times = {d: 0.001 / (i + 1) for i, d in enumerate(views)}
    move = {d: 1 << 20 for d in views}
    n = 100_000
    t = time.perf_counter()
    for _ in range(n):
        placement.decide(times, views, move, 10, current="n0/0")
    pure = n / (time.perf_counter() - t)
    b = Broker(f"ipc://{tempfile.mkdtemp()}/p")
    for d, v in views.items():
        b.devices[d] = type("D", (), {"view": v, "launch_ewma_s": 0.0})()  # registry entries
        b.projections.setdefault("k", {})[d] = times[d]
    t = time.perf_counter()
    for _ in range(n // 4):
        b.place("k", move, 10, "n0/0")
    cached = (n // 4) / (time.perf_counter() - t)
    b.close()
    return {"pure_per_s": pure, "broker_cached_per_s": cached}


def main() -> int:
    os.environ.setdefault("POCL_DEVICES", "pthread")
    local = local_numbers()
    pl = placement_numbers()
    tmp = tempfile.mkdtemp(prefix="clproj-bench-")
    keys = f"{tmp}/keys"
    from clproj.runtime.cluster.keys import generate

    generate(Path(keys))
    port = 20000 + os.getpid() % 20000
    configs = [
        ("ipc broker (no CURVE)", f"ipc://{tmp}/b", "off", None),
        ("tcp loopback broker + CURVE", f"tcp://127.0.0.1:{port}", "on", keys),
    ]
    remote = {}
    load0 = os.getloadavg()
    base = zmq_baseline(f"ipc://{tmp}/echo")
    unix_rtt = unix_baseline(f"{tmp}/uecho")
    for name, ep, curve, kd in configs:
        extra = ["--curve", curve] + (["--keys", kd] if kd else [])
        b = _proc(
            ["broker", "--bind", ep, "--lifetime", "300", *extra], {"POCL_DEVICES": "pthread"}
        )
        nds = [
            _proc(
                ["node", "--broker", ep, "--name", nname, "--lifetime", "300", *extra],
                {"POCL_DEVICES": "pthread", **nenv},
            )
            for nname, nenv in NODES.items()
        ]
        try:
            remote[name] = remote_numbers(ep, curve, kd)
            if ep.endswith("/b"):
                # the app under --broker must see only the native node: stop the other and
                # let the broker's liveness check drop it
                nds[1].terminate()
                nds[1].wait(10)
                time.sleep(4)
                rvo = route_vs_observe(ep)
        finally:
            for p in (*nds, b):
                p.terminate()
                p.wait(10)
    load1 = os.getloadavg()
    now = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        f"## Run of {now}: full benchmark",
        "",
        f"Machine: {platform.node()} ({os.cpu_count()} cores), device {local['device']} (PoCL), "
        f"{now}; load average (1/5/15 min) {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} at the "
        f"start, {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} at the end (other work shares the "
        f"2 cores: compare within this run). Launch figures are medians of {ROUNDS} interleaved "
        "rounds; broker, node and client are separate processes.",
        "",
        f"Local pyopencl: launch+wait {local['launch_us']:.1f} us (median of {N_LAUNCH}), "
        f"pipelined {local['pipelined_us']:.1f} us per launch ({N_LAUNCH} launches + finish). "
        f"Local blocking write of {XFER_BYTES >> 20} MiB {local['write_Bps'] / 1e9:.2f} GB/s, "
        f"read {local['read_Bps'] / 1e9:.2f} GB/s.",
        "",
        f"Bare echo round trip between two processes: zmq ipc {base['rtt_us']:.0f} us, "
        f"Unix socket {unix_rtt:.0f} us (the floors of one command round trip on each link).",
        "",
        "RemotePlatform API (`runtime.cluster.client.platform`), kernel of 4096 work-items; 'added' = minus the "
        "local figure above:",
        "",
        "| broker | command path | launch+wait us (added) | pipelined us/launch (added) "
        "| broker-placed us/launch (added) |",
        "|---|---|---|---|---|",
    ]
    for cname, paths in remote.items():
        for pname, r in paths.items():
            if pname.startswith("_"):
                continue
            lines.append(
                f"| {cname} | {pname} | {r['launch_us']:.0f} "
                f"(+{r['launch_us'] - local['launch_us']:.0f}) | {r['pipelined_us']:.0f} "
                f"(+{r['pipelined_us'] - local['pipelined_us']:.0f}) | {r['routed_us']:.0f} "
                f"(+{r['routed_us'] - local['pipelined_us']:.0f}) |"
            )
    lines += ["", "| broker | write GB/s (x local) | read GB/s | place request RTT us |"]
    lines += ["|---|---|---|---|"]
    for cname, paths in remote.items():
        x = paths["_xfer"]
        lines.append(
            f"| {cname} | {x['write_Bps'] / 1e9:.2f} ({x['write_Bps'] / local['write_Bps']:.2f}x) "
            f"| {x['read_Bps'] / 1e9:.2f} | {x['place_rtt_us']:.0f} |"
        )
    lines += [
        "",
        f"Placement decisions per second: pure policy (8 devices) {pl['pure_per_s']:,.0f}/s; "
        f"broker `place()` from cache {pl['broker_cached_per_s']:,.0f}/s "
        f"(one decision = {1e6 / pl['broker_cached_per_s']:.1f} us).",
        "",
        f"Launch-heavy pyopencl app (tiny kernel; {N_APP_LAUNCH} non-blocking launches + "
        f"clFinish, then {N_APP_LAUNCH // 4} launches each waited for), unmodified; per-launch "
        "times measured inside the app; 'added' = minus the plain run; wall = the whole "
        f"command incl. start-up; medians of {ROUNDS} interleaved rounds:",
        "",
        "| mode | N launches + clFinish, us/launch (added) | launch+wait us (added) | wall s |",
        "|---|---|---|---|",
    ]
    plain = rvo["plain (no clproj)"]
    for name, r in rvo.items():
        lines.append(
            f"| {name} | {r['pipelined_us']:.1f} (+{r['pipelined_us'] - plain['pipelined_us']:.1f}) "
            f"| {r['waited_us']:.1f} (+{r['waited_us'] - plain['waited_us']:.1f}) "
            f"| {r['wall_s']:.1f} |"
        )
    out = REPO / "benchmarks" / "results" / "broker.md"
    previous = (
        out.read_text() if out.exists() else "# Broker benchmark (benchmarks/broker_bench.py)\n"
    )
    out.write_text(previous.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


API_SCRIPT = """
import statistics, sys, time
try:  # a tree from before runtime/ was split by subsystem (tried first: an editable
    from clproj.runtime.client import RemotePlatform  # install resolves missing modules elsewhere)
except ImportError:
    from clproj.runtime.cluster.client.platform import RemotePlatform
plat = RemotePlatform(sys.argv[1], curve="off", wait_devices_s=60)
dev = next(iter(plat.devices))
k = plat.create_kernel(plat.create_program(sys.argv[2]), "inc")
k.set_args(plat.create_buffer(4096 * 4))
for _ in range(50):
    plat.enqueue_launch(k, [4096], device=dev).wait()
ts = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    plat.enqueue_launch(k, [4096], device=dev).wait()
    ts.append(time.perf_counter() - t)
print(f"API {statistics.median(ts) * 1e6:.1f}")
plat.close()
"""


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--compare":
        from clproj.benchmarks.broker_compare import compare

        sys.exit(compare(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 6))
    sys.exit(main())
