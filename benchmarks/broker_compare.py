"""``python -m clproj.benchmarks.broker_bench --compare REF``: launch+wait of a git revision
(or a built checkout) against the working tree, each with its own broker and node
processes, rounds interleaved; the table is appended to benchmarks/results/broker.md."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clproj.benchmarks.broker_bench import (
    API_SCRIPT,
    KERNEL,
    LAUNCH_APP,
    N_APP_LAUNCH,
    N_LAUNCH,
    REPO,
    STEP_APP,
    local_numbers,
)


def _tree_of(ref: str) -> Path:
    """``ref`` exported from git and its shim built, in a temp dir (the comparison runs
    that revision's Python *and* C side)."""
    root = Path(tempfile.mkdtemp(prefix="clproj-bench-ref-"))
    tar = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(root)], input=tar.stdout, check=True)
    subprocess.run(
        [sys.executable, "native/build_shim.py"], cwd=root, capture_output=True, check=True
    )
    (root / "intercept" / "clproj.intercept._shim.so").rename(
        root / "intercept" / next(REPO.glob("intercept/_shim*.so")).name
    )
    return root


def compare(ref: str, rounds: int = 6) -> int:
    """launch+wait of ``ref`` vs the working tree: RemotePlatform API (median of N_LAUNCH,
    same-host Unix path) and the unmodified app under ``clproj run --mode route --broker``,
    each tree with its own broker + node processes; rounds interleaved, medians."""
    # ref: a git revision (exported and its shim built here), or the path of a checkout
    # whose native parts are already built (e.g. a `git worktree` after `make build`)
    trees = {ref: Path(ref) if os.path.isdir(ref) else _tree_of(ref), "working tree": REPO}
    tmp = tempfile.mkdtemp(prefix="clproj-bench-cmp-")
    app = Path(tmp) / "launch_heavy.py"
    app.write_text(LAUNCH_APP)
    step_app = Path(tmp) / "step_index.py"
    step_app.write_text(STEP_APP)
    procs, eps = [], {}

    def env_of(root: Path) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=str(root), PYOPENCL_CTX="0", CLPROJ_SUMMARY="0")
        env.setdefault("POCL_DEVICES", "pthread")
        env.pop("LD_PRELOAD", None)
        env.pop("CLPROJ_DIRECT", None)
        return env

    for i, (name, root) in enumerate(trees.items()):
        eps[name] = ep = f"ipc://{tmp}/b{i}"
        for args in (["broker", "--bind", ep], ["node", "--broker", ep]):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "clproj.cli",
                        *args,
                        "--lifetime",
                        "1800",
                        "--curve",
                        "off",
                    ],
                    cwd=root,
                    env=env_of(root),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    res: dict[str, dict[str, list[float]]] = {
        n: {"api": [], "app": [], "step": [], "step_local": []} for n in trees
    }
    res["plain (no clproj)"] = {"app": [], "step": []}
    load0 = os.getloadavg()

    def run(cmd: list[str], root: Path, tag: str) -> float:
        p = subprocess.run(cmd, cwd=root, env=env_of(root), capture_output=True, text=True)
        # under `clproj run --json` the app's own output goes to stderr
        out = p.stdout + "\n" + p.stderr
        line = next((ln for ln in out.splitlines() if ln.startswith(tag)), None)
        if p.returncode != 0 or line is None:
            raise RuntimeError(f"{cmd[:4]} failed: {p.stderr[-2000:]}")
        return float(line.split()[-1])

    try:
        for _ in range(rounds):
            res["plain (no clproj)"]["app"].append(
                run([sys.executable, str(app), str(N_APP_LAUNCH)], REPO, "RESULT")
            )
            res["plain (no clproj)"]["step"].append(
                run([sys.executable, str(step_app), str(N_APP_LAUNCH // 4)], REPO, "RESULT")
            )
            for name, root in trees.items():
                res[name]["api"].append(
                    run(
                        [sys.executable, "-c", API_SCRIPT, eps[name], KERNEL, str(N_LAUNCH)],
                        root,
                        "API",
                    )
                )
                cmd = [sys.executable, "-m", "clproj.cli", "run", "--mode", "route"]
                cmd += ["--broker", eps[name], "--json", "--", sys.executable, str(app)]
                res[name]["app"].append(run([*cmd, str(N_APP_LAUNCH)], root, "RESULT"))
                cmd[-1] = str(step_app)
                res[name]["step"].append(run([*cmd, str(N_APP_LAUNCH // 4)], root, "RESULT"))
                local_cmd = [a for a in cmd if a not in ("--broker", eps[name])]
                res[name]["step_local"].append(
                    run([*local_cmd, str(N_APP_LAUNCH // 4)], root, "RESULT")
                )
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    load1 = os.getloadavg()
    local = local_numbers()["launch_us"]
    plain = statistics.median(res["plain (no clproj)"]["app"])
    plain_step = statistics.median(res["plain (no clproj)"]["step"])
    now = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        f"## Run of {now}: launch+wait, {ref} vs working tree (`--compare {ref}`)",
        "",
        f"Machine: {platform.node()} ({os.cpu_count()} cores); load average (1/5/15 min) "
        f"{load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} at the start, "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} at the end. Each tree runs its own "
        f"broker + node processes (ipc, no CURVE; same-host Unix command path); {rounds} "
        "interleaved rounds, medians (all rounds in brackets). API: RemotePlatform launch+wait, "
        f"median of {N_LAUNCH}, 'added' = minus local pyopencl launch+wait ({local:.1f} us, "
        f"measured after the rounds). App: the launch-heavy app's {N_APP_LAUNCH // 4} waited "
        "launches under `clproj run --mode route --broker`, us per launch, 'added' = minus the "
        f"plain app ({plain:.1f} us). Step app: the same with a step index passed as a "
        f"scalar that changes every launch ({N_APP_LAUNCH // 16} waited launches; plain "
        f"{plain_step:.1f} us), with `--broker` and with the local cluster (`clproj run "
        "--mode route` alone: embedded broker + node, projection hooks as shipped).",
        "",
        "| tree | API launch+wait us (added) | app launch+wait us (added) "
        "| step app launch+wait us (added) | step app, local cluster (added) |",
        "|---|---|---|---|---|",
    ]
    for name in trees:
        r = {m: statistics.median(v) for m, v in res[name].items()}
        rounds_of = {m: [round(x) for x in v] for m, v in res[name].items()}
        lines.append(
            f"| {name} | {r['api']:.0f} (+{r['api'] - local:.0f}) {rounds_of['api']} "
            f"| {r['app']:.0f} (+{r['app'] - plain:.0f}) {rounds_of['app']} "
            f"| {r['step']:.0f} (+{r['step'] - plain_step:.0f}) {rounds_of['step']} "
            f"| {r['step_local']:.0f} (+{r['step_local'] - plain_step:.0f}) "
            f"{rounds_of['step_local']} |"
        )
    out = REPO / "benchmarks" / "results" / "broker.md"
    out.write_text(out.read_text().rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0
