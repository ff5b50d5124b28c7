"""``clproj doctor``: check every dependency and say, for each failure, the cause and the fix."""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from clproj import native
from clproj.console import emit_json, print_table
from clproj.errors import ClprojError

APT = "apt-get install -y {}  (or run `make setup`, which installs all system packages)"


@dataclass
class Check:
    name: str
    required: bool
    probe: Callable[[], str]  # returns a detail string, raises on failure
    fix: str


def _load(lib: str) -> str:
    ctypes.CDLL(lib)
    return lib


def _python_module(name: str) -> Callable[[], str]:
    def probe() -> str:
        mod = importlib.import_module(name)
        return f"{name} {getattr(mod, '__version__', getattr(mod, 'VERSION', ''))}".strip()

    return probe


def _opencl_platforms() -> str:
    import pyopencl as cl

    names = [f"{p.name.strip()} ({len(p.get_devices())} dev)" for p in cl.get_platforms()]
    if not names:
        raise RuntimeError("no OpenCL platform")
    return ", ".join(names)


def _pocl() -> str:
    import pyopencl as cl

    for p in cl.get_platforms():
        if "Portable Computing Language" in p.name:
            return ", ".join(d.name.strip() for d in p.get_devices())
    raise RuntimeError("PoCL platform not visible")


def probe_oclgrind() -> str:
    exe = shutil.which("oclgrind")
    if exe is None:
        raise RuntimeError("oclgrind not on PATH")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
    return (out.stdout.strip().splitlines() or ["oclgrind"])[0]


def _exists(path: str) -> Callable[[], str]:
    def probe() -> str:
        if not os.path.exists(path):
            raise RuntimeError(f"{path} missing")
        return path

    return probe


def _nvidia() -> str:
    from clproj.devices import nvml

    gpus = nvml.gpus()
    if not gpus:
        raise RuntimeError("no NVIDIA driver / GPU (normal on CPU-only machines)")
    return ", ".join(g["name"] for g in gpus)


CHECKS = [
    Check(
        "OpenCL ICD loader",
        True,
        lambda: _load("libOpenCL.so.1"),
        APT.format("ocl-icd-libopencl1 ocl-icd-opencl-dev"),
    ),
    Check(
        "pyopencl",
        True,
        _python_module("pyopencl"),
        "pip install 'pyopencl>=2024.1' (or `make setup`)",
    ),
    Check("OpenCL platforms", True, _opencl_platforms, APT.format("pocl-opencl-icd")),
    Check("PoCL CPU device", True, _pocl, APT.format("pocl-opencl-icd")),
    Check("Oclgrind", True, probe_oclgrind, APT.format("oclgrind")),
    Check(
        "Oclgrind headers",
        True,
        _exists("/usr/include/oclgrind/Plugin.h"),
        APT.format("liboclgrind-dev"),
    ),
    Check(
        "LLVM 14 headers",
        True,
        _exists("/usr/lib/llvm-14/include/llvm/IR/Instruction.h"),
        APT.format("llvm-14-dev"),
    ),
    Check("interception shim", True, lambda: native.shim_library(), native.BUILD_FIX),
    Check("Oclgrind plugin", True, lambda: _load(native.oclgrind_plugin()), native.BUILD_FIX),
    Check("pyzmq", True, _python_module("zmq"), "pip install 'pyzmq>=25' (or `make setup`)"),
    Check(
        "msgpack", True, _python_module("msgpack"), "pip install 'msgpack>=1.0.5' (or `make setup`)"
    ),
    Check(
        "NVIDIA driver (optional)",
        False,
        _nvidia,
        "only needed for NVIDIA GPUs: install the NVIDIA driver",
    ),
]


def run_checks() -> list[dict[str, object]]:
    results = []
    for check in CHECKS:
        try:
            detail, ok = check.probe(), True
        except (Exception, ClprojError) as exc:
            detail, ok = str(exc).splitlines()[0] if str(exc) else type(exc).__name__, False
        results.append(
            {
                "check": check.name,
                "ok": ok,
                "required": check.required,
                "detail": detail,
                "fix": None if ok else check.fix,
            }
        )
    return results


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor", help="check dependencies and print the fix for each problem"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    results = run_checks()
    failed = [r for r in results if not r["ok"] and r["required"]]
    if args.json:
        emit_json({"checks": results, "ok": not failed})
    else:
        print_table(
            ["check", "status", "detail / fix"],
            [
                (
                    r["check"],
                    "ok" if r["ok"] else ("FAIL" if r["required"] else "absent"),
                    r["detail"] if r["ok"] else f"{r['detail']} -> fix: {r['fix']}",
                )
                for r in results
            ],
            title="clproj doctor",
        )
    return 1 if failed else 0
