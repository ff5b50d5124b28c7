"""Compare third-party test outcomes under clproj's modes with the plain run.

Used by scripts/conformance.sh: reads ``DIR/<mode>-<file>.xml`` (pytest's JUnit XML) or,
when a run died before writing it (a crash), the ``-v`` lines of ``DIR/<mode>-<file>.log``;
prints per file and mode the passed / failed / skipped / xfailed counts, the wall time
and its ratio to the plain run, and every test id whose outcome differs from the plain
run. Exit status 1 when some test passes plainly but fails, errors or is missing under a
mode (a test a mode skips is listed but allowed: the virtual device may truthfully lack
a feature, see the pyopencl suite's README).

    python scripts/conformance_report.py DIR FILE... --modes plain,observe,route
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
# pytest -v prints ids relative to where it ran; the XML says file::name
# parametrised ids name the device / platform; the modes' devices differ by design
_DEVICE_IDS = (
    (re.compile(r"<context factory for <pyopencl\.Device '[^']*' on '[^']*'>>"), "<ctx>"),
    (re.compile(r"<pyopencl\.Device '[^']*' on '[^']*'( at 0x[0-9a-f]+)?>"), "<device>"),
    (re.compile(r"<pyopencl\.Platform '[^']*'( at 0x[0-9a-f]+)?>"), "<platform>"),
)
_VMAP = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "xfailed",
    "XPASS": "xpassed",
}


def normal_id(tid: str) -> str:
    for pat, repl in _DEVICE_IDS:
        tid = pat.sub(repl, tid)
    return tid


def from_xml(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("name", "")
        cls = tc.get("classname", "")
        tid = normal_id(f"{cls.rsplit('.', 1)[-1]}::{name}" if cls else name)
        kids = {child.tag: child for child in tc}
        if "failure" in kids:
            outcome = "failed"
        elif "error" in kids:
            outcome = "error"
        elif "skipped" in kids:
            typ = kids["skipped"].get("type", "")
            outcome = "xfailed" if "xfail" in typ else "skipped"
        else:
            outcome = "passed"
        if tid in out and out[tid] == "passed" and outcome == "error":
            outcome = "error"  # a teardown error after a pass
        out[tid] = outcome
    return out


def from_log(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        m = VERBOSE.match(line)
        if m:
            tid = normal_id(m.group(1).split("/")[-1].replace(".py::", "::", 1))
            out[tid] = _VMAP[m.group(2)]
    return out


def load(d: Path, mode: str, name: str) -> tuple[dict[str, str], str, float | None]:
    """(test id -> outcome, how the run ended, wall seconds)."""
    stem = name.removesuffix(".py")
    xml = d / f"{mode}-{stem}.xml"
    log = d / f"{mode}-{stem}.log"
    rc_file = d / f"{mode}-{stem}.rc"
    rc = rc_file.read_text().split() if rc_file.exists() else []
    secs = float(rc[1]) if len(rc) > 1 else None
    ended = "ok"
    if rc and rc[0] not in ("0", "1"):
        ended = f"exit {rc[0]}"
        text = log.read_text(errors="replace") if log.exists() else ""
        if "SIGSEGV" in text or "Segmentation fault" in text:
            ended = "crashed (SIGSEGV)"
        elif rc[0] == "124":
            ended = "timed out"
    if xml.exists() and xml.stat().st_size:
        try:
            return from_xml(xml), ended, secs
        except ET.ParseError:
            pass
    return from_log(log), ended if ended != "ok" else "no junit xml", secs


def main() -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--modes", default="plain,observe,route")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    bad = 0
    for name in args.files:
        runs = {m: load(args.dir, m, name) for m in modes}
        base, _, base_s = runs.get("plain", ({}, "", None))
        print(f"\n== {name}")
        print(f"  {'mode':8s} " + " ".join(f"{o:>7s}" for o in OUTCOMES) + "   time    ratio  end")
        for m in modes:
            res, ended, secs = runs[m]
            counts = [sum(1 for v in res.values() if v == o) for o in OUTCOMES]
            t = f"{secs:6.1f}s" if secs is not None else "     ? "
            ratio = f"{secs / base_s:6.2f}x" if secs and base_s else "      -"
            print(f"  {m:8s} " + " ".join(f"{c:7d}" for c in counts) + f"  {t} {ratio}  {ended}")
        for m in modes:
            if m == "plain":
                continue
            res, ended, _ = runs[m]
            diffs = []
            for tid in sorted(set(base) | set(res)):
                a, b = base.get(tid, "missing"), res.get(tid, "missing")
                if a == b:
                    continue
                diffs.append((tid, a, b))
                good = a not in ("passed", "xpassed") or b in ("passed", "skipped", "xpassed")
                if not good:
                    bad += 1
            if diffs:
                print(f"  differs from plain under {m} ({len(diffs)}):")
                for tid, a, b in diffs:
                    print(f"    {a:>8s} -> {b:<8s} {tid}")
    print()
    if bad:
        print(f"conformance: {bad} test outcome(s) worse than the plain run")
        return 1
    print("conformance: every mode passes what the plain run passes (skips listed above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
