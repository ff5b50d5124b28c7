"""Random mutations of a real launch record and of a device profile through the CLI (not a
timed test).

Why: launch records are files users copy between machines; the table of hand-made bad
records (tests/test_bad_input.py) covers the fields we thought of. This takes a real record
(``clproj run --record`` of the nbody app), mutates a copy at random (flipped bytes, a
truncation, or one top-level field replaced by a value of another type) and runs
``clproj replay``, ``clproj project --devices measured`` and ``clproj emulate`` on it. Each
run must end with exit 0 or a one-line error (exit 2): a traceback, another exit status or
a run past ``--timeout`` is reported with the mutated file kept for a test case. Device
profiles travel the same way: ``--profile-cases`` copies of the committed EPYC profile get
one to three of their values (any depth) replaced by an odd one (null, a negative, NaN,
1e308, a string, a list, ...) and project the record onto it; an accepted profile must give
finite, positive times.

    POCL_DEVICES=pthread .venv/bin/python -m clproj.benchmarks.record_mutations [--cases 80]
        [--profile-cases 80] [--seed 7]

Writes benchmarks/results/record_mutations.md (the command, the counts, each finding).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import msgpack

REPO = Path(__file__).resolve().parent.parent
CLPROJ = [sys.executable, "-m", "clproj.cli"]
ODD_VALUES = (None, -1, 2**62, "x", [], {}, 1.5, [1, -3, 0], {"a": 1})
ODD_LEAVES = (None, -1, 0, 1e308, float("nan"), "x", [], {}, True, -1e-9, 10**30, [[-1, 5]])
PROFILE = REPO / "devices" / "profiles" / "measured" / "pocl-pthread-amd-epyc.json"


def leaf_paths(node: object, path: tuple = ()) -> list[tuple]:
    """Every path to a non-container value of a JSON document."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in leaf_paths(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in leaf_paths(v, (*path, i))]
    return [path]


def mutate_profile(doc: dict, rng: random.Random) -> tuple[str, dict]:
    out = copy.deepcopy(doc)
    paths = leaf_paths(out)
    changed = []
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        node = out
        for part in path[:-1]:
            node = node[part]
        value = rng.choice(ODD_LEAVES)
        node[path[-1]] = value
        changed.append(".".join(map(str, path)) + f"={value!r}")
    return ", ".join(changed), out


def profile_cases(record: str, tmp: str, cases: int, rng: random.Random, timeout: float,
                  findings: list[str], exits: dict[str, dict[int, int]]) -> int:  # fmt: skip
    """Project ``record`` onto mutated copies of the EPYC profile; returns the runs made."""
    base = json.loads(PROFILE.read_text())
    for i in range(cases):
        how, doc = mutate_profile(base, rng)
        path = os.path.join(tmp, f"profile-{i}.json")
        with open(path, "w") as fh:
            fh.write(json.dumps(doc))
        cmd = [*CLPROJ, "project", record, "--devices", path, "--json"]
        try:
            p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            findings.append(f"profile case {i} ({how}): ran past {timeout:g} s")
            continue
        by = exits.setdefault("project onto a mutated profile", {})
        by[p.returncode] = by.get(p.returncode, 0) + 1
        bad = p.returncode not in (0, 2) or "Traceback" in p.stderr + p.stdout
        if p.returncode == 0 and not bad:
            times = [x["time_s"] for x in json.loads(p.stdout)["projections"]]
            bad = not all(isinstance(t, float) and 0 < t < 1e9 for t in times)
        if bad:
            keep = REPO / f"profile_mutation_{i}.json"
            shutil.copy(path, keep)
            last = (p.stderr.strip().splitlines() or [""])[-1]
            findings.append(f"profile case {i} ({how}): exit {p.returncode}: {last}"
                            f" (kept as {keep.name})")  # fmt: skip
    return cases


def record_one(workdir: str) -> str:
    """A folder with one real record of the nbody app's first launch."""
    rec = os.path.join(workdir, "rec")
    app = [sys.executable, "-m", "clproj.benchmarks.apps", "nbody", "--size", "small"]
    subprocess.run([*CLPROJ, "run", "--record", rec, "--", *app], cwd=REPO, check=True,
                   capture_output=True)  # fmt: skip
    return rec


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    how = rng.choice(("flip", "truncate", "field"))
    b = bytearray(data)
    if how == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif how == "truncate":
        b = b[: rng.randrange(len(b))]
    else:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
        key = rng.choice(sorted(doc, key=str))
        doc[key] = rng.choice(ODD_VALUES)
        how = f"field {key}"
        b = bytearray(msgpack.packb(doc, use_bin_type=True))
    return how, bytes(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=80)
    ap.add_argument("--profile-cases", type=int, default=80)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "record_mutations.md"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    findings: list[str] = []
    runs = 0
    exits: dict[str, dict[int, int]] = {}  # command -> exit status -> runs
    with tempfile.TemporaryDirectory(prefix="clproj-mutations-") as tmp:
        rec = record_one(tmp)
        src = sorted(glob.glob(os.path.join(rec, "records", "*.clrec")))[0]
        with open(src, "rb") as fh:
            data = fh.read()
        for i in range(a.cases):
            work = os.path.join(tmp, "case")
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(rec, work)
            path = os.path.join(work, "records", os.path.basename(src))
            how, mutated = mutate(data, rng)
            with open(path, "wb") as fh:
                fh.write(mutated)
            for cmd in (["replay", path], ["project", path, "--devices", "measured"],
                        ["emulate", path]):  # fmt: skip
                runs += 1
                try:
                    p = subprocess.run([*CLPROJ, *cmd], cwd=REPO, capture_output=True,
                                       text=True, timeout=a.timeout)  # fmt: skip
                except subprocess.TimeoutExpired:
                    findings.append(f"case {i} ({how}) {cmd[0]}: ran past {a.timeout:g} s")
                    continue
                by = exits.setdefault(cmd[0], {})
                by[p.returncode] = by.get(p.returncode, 0) + 1
                if p.returncode not in (0, 2) or "Traceback" in p.stderr + p.stdout:
                    keep = REPO / f"record_mutation_{i}_{cmd[0]}.clrec"
                    shutil.copy(path, keep)
                    last = (p.stderr.strip().splitlines() or [""])[-1]
                    findings.append(f"case {i} ({how}) {cmd[0]}: exit {p.returncode}: {last}"
                                    f" (kept as {keep.name})")  # fmt: skip
            print(f"case {i + 1}/{a.cases}: {len(findings)} findings", file=sys.stderr)
        runs += profile_cases(src, tmp, a.profile_cases, rng, a.timeout, findings, exits)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Random mutations of a real launch record through the CLI",
        "",
        f"Run {now}. Command: `POCL_DEVICES=pthread .venv/bin/python -m "
        f"clproj.benchmarks.record_mutations --cases {a.cases} --profile-cases {a.profile_cases} "
        f"--seed {a.seed}`. What and why: the module docstring.",
        "",
        f"{a.cases} mutated records through `clproj replay` / `project` / `emulate`, and "
        f"{a.profile_cases} mutated device profiles projected onto: {runs} runs, "
        f"**{len(findings)} findings** (a traceback, an exit other than 0 or 2, a run past "
        "the time limit, or an accepted profile giving a time that is not finite and "
        "positive).",
        "",
        "Exit statuses per command (0: the mutation kept the input valid; 2: a one-line "
        "error): "
        + "; ".join(
            f"{c} " + ", ".join(f"{n} x {rc}" for rc, n in sorted(by.items()))
            for c, by in exits.items()
        )
        + ".",
        "",
        *(f"- {f}" for f in findings),
    ]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
