"""Benchmark of the routing layer: remote vs local launch, transfer rate, placement rate.

Run: ``.venv/bin/python benchmarks/broker_bench.py`` (writes benchmarks/results/broker.md).
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

    from devices.discovery import opencl_devices

    dev = opencl_devices()[0]
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx)
    x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096 * 4)
    k = cl.Program(ctx, KERNEL).build().inc
    k.set_args(x)
    for _ in range(20):
        cl.enqueue_nd_range_kernel(q, k, (4096,), None).wait()
    launch = _median_us(lambda: cl.enqueue_nd_range_kernel(q, k, (4096,), None).wait(), N_LAUNCH)
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
    return {"launch_us": launch, "write_Bps": write, "read_Bps": read, "device": dev.name.strip()}


def remote_numbers(endpoint: str, curve: str, keys: str | None) -> dict[str, float]:
    from runtime.client import RemotePlatform
    from runtime.keys import load

    plat = RemotePlatform(
        endpoint, curve=curve, keys=load(Path(keys), "member") if keys else None, wait_devices_s=60
    )
    dev = next(iter(plat.devices))
    k = plat.create_kernel(plat.create_program(KERNEL), "inc")
    x = plat.create_buffer(4096 * 4)
    k.set_args(x)
    for _ in range(20):
        plat.enqueue_launch(k, [4096], device=dev).wait()
    launch = _median_us(lambda: plat.enqueue_launch(k, [4096], device=dev).wait(), N_LAUNCH)
    t = time.perf_counter()
    for _ in range(N_LAUNCH):
        plat.enqueue_launch(k, [4096], device=dev)
    plat.finish()
    pipelined = (time.perf_counter() - t) / N_LAUNCH * 1e6
    # routed launches (broker placement, cached per kernel key)
    t = time.perf_counter()
    for _ in range(N_LAUNCH):
        plat.enqueue_launch(k, [4096])
    plat.finish()
    routed = (time.perf_counter() - t) / N_LAUNCH * 1e6
    host = np.ones(XFER_BYTES // 4, np.float32)
    big = plat.create_buffer(XFER_BYTES)
    plat.enqueue_write(big, host, device=dev)
    t = time.perf_counter()
    for _ in range(XFER_REPS):
        plat.enqueue_write(big, host, blocking=True, device=dev)
    write = XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
    out = np.empty_like(host)
    t = time.perf_counter()
    for _ in range(XFER_REPS):
        big.host_valid = False  # force the read to travel (no host-copy shortcut)
        plat.enqueue_read(big, out)
    read = XFER_BYTES * XFER_REPS / (time.perf_counter() - t)
    # placement requests over the socket (client -> broker -> client)
    move = {d: 1 << 20 for d in plat.devices}
    for _ in range(50):
        plat._broker_call("place", key="bench", move=move, remaining=10)
    place_rtt = (
        _median_us(lambda: plat._broker_call("place", key="bench", move=move, remaining=10), 2000)
        / 1e6
    )
    plat.close()
    return {
        "launch_us": launch,
        "pipelined_us": pipelined,
        "routed_us": routed,
        "write_Bps": write,
        "read_Bps": read,
        "place_rtt_us": place_rtt * 1e6,
    }


ECHO = """
import sys, time, zmq
s = zmq.Context().socket(zmq.ROUTER); s.bind(sys.argv[1]); end = time.time() + 60
while time.time() < end:
    if s.poll(100):
        s.send_multipart(s.recv_multipart(copy=False), copy=False)
"""


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


def route_vs_observe(broker: str | None = None) -> dict[str, dict[str, float]]:
    """The same launch-heavy pyopencl app under ``clproj run --mode observe`` and
    ``--mode route`` (embedded cluster, or ``broker``), back to back in one run."""
    app = Path(tempfile.mkdtemp(prefix="clproj-bench-app-")) / "launch_heavy.py"
    app.write_text(LAUNCH_APP)
    out: dict[str, dict[str, float]] = {}
    modes = [("observe", []), ("route (embedded broker + node)", ["--mode", "route"])]
    if broker:
        modes.append(
            ("route (--broker, separate processes)", ["--mode", "route", "--broker", broker])
        )
    for name, flags in modes:
        env = dict(os.environ, PYTHONPATH=str(REPO), PYOPENCL_CTX="0", CLPROJ_SUMMARY="0")
        env.pop("LD_PRELOAD", None)
        t = time.perf_counter()
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "clproj.cli",
                "run",
                *flags,
                "--json",
                "--",
                sys.executable,
                str(app),
                str(N_APP_LAUNCH),
            ],
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
        out[name] = {"pipelined_us": pipe, "waited_us": waited, "wall_s": wall}
    return out


def placement_numbers() -> dict[str, float]:
    from runtime import placement
    from runtime.broker import Broker

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
    configs = [
        ("ipc (no CURVE), same-host shm data path", f"ipc://{tmp}/b", "off", None),
        ("ipc (no CURVE), CLPROJ_SHM=0: bytes through the sockets", f"ipc://{tmp}/b0", "off", None),
    ]
    keys = f"{tmp}/keys"
    from runtime.keys import generate

    generate(Path(keys))
    port = 20000 + os.getpid() % 20000
    configs.append(
        ("tcp loopback + CURVE, same-host shm data path", f"tcp://127.0.0.1:{port}", "on", keys)
    )
    remote = {}
    base = zmq_baseline(f"ipc://{tmp}/echo")
    load = os.getloadavg()[0]
    for name, ep, curve, kd in configs:
        extra = ["--curve", curve] + (["--keys", kd] if kd else [])
        b = _proc(
            ["broker", "--bind", ep.replace("127.0.0.1", "127.0.0.1"), "--lifetime", "120", *extra],
            {"POCL_DEVICES": "pthread"},
        )
        nd = _proc(
            ["node", "--broker", ep, "--lifetime", "120", *extra], {"POCL_DEVICES": "pthread"}
        )
        try:
            os.environ["CLPROJ_SHM"] = "0" if "SHM=0" in name else "1"
            remote[name] = remote_numbers(ep, curve, kd)
            if ep.endswith("/b"):
                rvo = route_vs_observe(ep)
        finally:
            for p in (nd, b):
                p.terminate()
                p.wait(10)
    lines = [
        f"## Run of {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {platform.node()} ({os.cpu_count()} cores), device {local['device']} (PoCL), "
        f"{time.strftime('%Y-%m-%d %H:%M')}. Broker, node and client are three processes on one "
        "machine; every number below is from this one run.",
        "",
        f"Local pyopencl launch+wait (median of {N_LAUNCH}): {local['launch_us']:.1f} us. "
        f"Local blocking clEnqueueWriteBuffer of {XFER_BYTES >> 20} MiB: {local['write_Bps'] / 1e9:.2f} GB/s, "
        f"read {local['read_Bps'] / 1e9:.2f} GB/s.",
        "",
        f"Bare zmq echo between two processes over ipc (the floor of one round trip on this machine at "
        f"load average {load:.1f}): RTT {base['rtt_us']:.0f} us; {XFER_BYTES >> 20} MiB echoed at "
        f"{base['echo_Bps'] / 1e9:.2f} GB/s. A routed launch crosses two such round trips "
        "(client-broker, broker-node).",
        "",
        "| path | launch+wait us, median (added vs local) | pipelined launch us | routed launch us | write GB/s (ratio to local) | read GB/s | place request RTT us (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in remote.items():
        lines.append(
            f"| {name} | {r['launch_us']:.0f} (+{r['launch_us'] - local['launch_us']:.0f}) | {r['pipelined_us']:.0f} "
            f"| {r['routed_us']:.0f} | {r['write_Bps'] / 1e9:.2f} ({r['write_Bps'] / local['write_Bps']:.2f}x) "
            f"| {r['read_Bps'] / 1e9:.2f} | {r['place_rtt_us']:.0f} |"
        )
    lines += [
        "",
        f"Placement decisions per second: pure policy (8 devices) {pl['pure_per_s']:,.0f}/s; "
        f"broker `place()` from cache {pl['broker_cached_per_s']:,.0f}/s "
        f"(one decision = {1e6 / pl['broker_cached_per_s']:.1f} us, well inside the 1 ms budget).",
        "",
        "Targets: <= 150 us added per launch; >= 1 GB/s through the broker path; >= 5,000 decisions/s.",
        "'launch+wait' is a synchronous round trip client -> broker -> node -> broker -> client;",
        "'pipelined' is the per-launch cost when the app does not wait on each launch (OpenCL's",
        "normal non-blocking clEnqueueNDRangeKernel); 'routed' adds broker placement (cached per kernel).",
        "Writes copy the host data once (the copy is also the replay-log entry for node-failure recovery).",
        "",
        f"Launch-heavy pyopencl app (tiny kernel, {N_APP_LAUNCH} non-blocking launches + clFinish, then "
        f"{N_APP_LAUNCH // 4} launches each waited for), unmodified, under `clproj run`; per-launch "
        "times measured inside the app, wall = whole `clproj run` incl. start-up:",
        "",
        "| mode | pipelined us/launch (x observe) | launch+wait us (x observe) | wall s |",
        "|---|---|---|---|",
    ]
    base_o = rvo["observe"]
    for name, r in rvo.items():
        lines.append(
            f"| {name} | {r['pipelined_us']:.1f} ({r['pipelined_us'] / base_o['pipelined_us']:.1f}x) "
            f"| {r['waited_us']:.1f} ({r['waited_us'] / base_o['waited_us']:.1f}x) | {r['wall_s']:.1f} |"
        )
    out = REPO / "benchmarks" / "results" / "broker.md"
    previous = (
        out.read_text() if out.exists() else "# Broker benchmark (benchmarks/broker_bench.py)\n"
    )
    out.write_text(previous.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
