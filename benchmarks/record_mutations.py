"""Random mutations of a real launch record through the CLI (not a timed test).

Why: launch records are files users copy between machines; the table of hand-made bad
records (tests/test_bad_input.py) covers the fields we thought of. This takes a real record
(``clproj run --record`` of the nbody app), mutates a copy at random (flipped bytes, a
truncation, or one top-level field replaced by a value of another type) and runs
``clproj replay``, ``clproj project --devices measured`` and ``clproj emulate`` on it. Each
run must end with exit 0 or a one-line error (exit 2): a traceback, another exit status or
a run past ``--timeout`` is reported with the mutated file kept for a test case.

    POCL_DEVICES=pthread .venv/bin/python -m benchmarks.record_mutations [--cases 80] [--seed 7]

Writes benchmarks/results/record_mutations.md (the command, the counts, each finding).
"""

from __future__ import annotations

import argparse
import datetime
import glob
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


def record_one(workdir: str) -> str:
    """A folder with one real record of the nbody app's first launch."""
    rec = os.path.join(workdir, "rec")
    app = [sys.executable, "-m", "benchmarks.apps", "nbody", "--size", "small"]
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
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Random mutations of a real launch record through the CLI",
        "",
        f"Run {now}. Command: `POCL_DEVICES=pthread .venv/bin/python -m "
        f"benchmarks.record_mutations --cases {a.cases} --seed {a.seed}`. What and why: "
        "the module docstring.",
        "",
        f"{a.cases} mutated records, {runs} runs of `clproj replay` / `project` / "
        f"`emulate`: **{len(findings)} findings** (a traceback, an exit other than 0 or 2, "
        "or a run past the time limit).",
        "",
        "Exit statuses per command (0: the mutation kept the record valid; 2: a one-line "
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
