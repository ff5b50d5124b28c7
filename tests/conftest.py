"""Shared fixtures. Like pyopencl's own suite, device-level tests run once per device.

``cl_device`` is parametrised over every OpenCL device visible (with ``make test`` that is
PoCL's ``pthread`` and ``basic`` drivers; on a GPU machine the GPU too). Oclgrind is not
registered as an ICD, so the emulator never appears here by accident.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

import pytest

# Two PoCL drivers give a heterogeneous pair even when pytest is run by hand.
os.environ.setdefault("POCL_DEVICES", "pthread basic")
# The suite never reads or writes the user's caches: one fresh cache per session, so a
# device without a committed profile (CLPROJ_FOREIGN_MACHINE=1, or another CPU type) is
# measured once per session, with the test-sized microbenchmarks unless told otherwise
# (tests/test_foreign_machine.py runs the quick ones a user gets).
if "CLPROJ_CACHE" not in os.environ:
    os.environ["CLPROJ_CACHE"] = tempfile.mkdtemp(prefix="clproj-test-cache-")
    atexit.register(shutil.rmtree, os.environ["CLPROJ_CACHE"], True)
os.environ.setdefault("CLPROJ_COLD_PROFILE", "tiny")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def own_cache_env(tmp_path, **extra: str) -> dict[str, str]:
    """The environment for a test's runs with a cache of its own (``tmp_path/cache``): an
    empty projection cache, the session's device profiles copied in (a device is measured
    once a session). Once a profile is there it stays for every run of the test
    (``CLPROJ_COLD_PROFILE=off``): one measured while the suite kept the machine busy would
    be measured again by the first run that finds it quiet (devices.local), and a new
    profile is a new projection-cache key, so a later run would project anew."""
    cache = tmp_path / "cache"
    session_profiles = os.path.join(os.environ["CLPROJ_CACHE"], "profiles")
    if os.path.isdir(session_profiles) and not (cache / "profiles").exists():
        shutil.copytree(session_profiles, cache / "profiles")
    env = dict(os.environ, CLPROJ_CACHE=str(cache), **extra)
    if (cache / "profiles").is_dir() and any((cache / "profiles").iterdir()):
        env["CLPROJ_COLD_PROFILE"] = "off"
    return env


def clproj_project(*options: str) -> list[str]:
    """``clproj run --mode project --json OPTIONS`` (append ``--`` and the app)."""
    return [sys.executable, "-m", "clproj.cli", "run", "--mode", "project", "--json", *options]


def emulators_of(pid: int) -> list[int]:
    """Emulator processes (``clproj.miniemu.worker``) whose parent is ``pid``."""
    return [p for p, _ in _workers_of(pid)]


def emulations_of(pid: int) -> list[int]:
    """The emulator processes started by ``pid`` that run a record: its one-shot workers
    and the forks of its fork servers (``--serve``), not the idle servers themselves."""
    out = []
    for child, argv in _workers_of(pid):
        if b"--serve" in argv:
            out += [p for p, _ in _workers_of(child)]
        else:
            out.append(child)
    return out


def _workers_of(pid: int) -> list[tuple[int, bytes]]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"clproj.miniemu.worker" in argv:
            out.append((int(entry), argv))
    return out


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit status may wait for a PID 1 that never reaps)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def helpers_of(pid: int, role: str | None = None) -> list[int]:
    """Processes started with ``--parent-pid PID`` (route mode's broker and node), only
    those whose command line has the word ``role`` (``"node"``, ``"broker"``) if given."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if role is not None and role.encode() not in argv:
            continue
        if b"--parent-pid" in argv and argv[argv.index(b"--parent-pid") + 1] == str(pid).encode():
            out.append(int(entry))
    return out


def _device_ids() -> list[tuple[int, str]]:
    try:
        from clproj.devices.discovery import list_devices

        return [(d.index, d.name) for d in list_devices()]
    except Exception:
        return []


DEVICES = _device_ids()


@pytest.fixture(params=[i for i, _ in DEVICES], ids=[f"{i}:{n[:24]}" for i, n in DEVICES])
def cl_device(request: pytest.FixtureRequest):
    from clproj.devices.discovery import opencl_devices

    return opencl_devices()[request.param]


@pytest.fixture
def cl_context(cl_device):
    import pyopencl as cl

    return cl.Context([cl_device])


@pytest.fixture
def cl_queue(cl_context):
    import pyopencl as cl

    return cl.CommandQueue(cl_context, properties=cl.command_queue_properties.PROFILING_ENABLE)


@pytest.fixture(scope="session")
def repo_root() -> str:
    return REPO


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def sanitizer_env() -> dict[str, str]:
    """What a process needs to run code built with ``-fsanitize=address,undefined``: the
    AddressSanitizer runtime preloaded first (``LD_PRELOAD`` prefix), then the C++ runtime
    (the sanitizer finds the real ``__cxa_throw`` only if libstdc++ is there when it
    starts: Python does not link it, and pyopencl's first C++ exception failed a sanitizer
    check), leaks not reported (Python and PoCL keep memory until exit), the first report
    fatal."""
    import subprocess

    def lib(name: str) -> str:
        path = subprocess.run(
            ["g++", f"-print-file-name={name}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert os.path.isabs(path), f"g++ has no {name}: install g++ (libasan8, libstdc++)"
        return path

    return {
        "LD_PRELOAD": lib("libasan.so") + ":" + lib("libstdc++.so"),
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }


# How the sanitizer tests rebuild a native part: AddressSanitizer and UndefinedBehaviorSanitizer,
# the first report fatal, frames kept for the report.
SANITIZER_FLAGS = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
    "-g",
)


def sanitizer_reports(text: str) -> list[str]:
    """The lines of a process's output in which AddressSanitizer or UndefinedBehaviorSanitizer
    reported something."""
    return [ln for ln in text.splitlines() if "Sanitizer" in ln or "runtime error:" in ln]


def run_tests_sanitized(runner: str, tmp_path, env: dict[str, str]) -> None:
    """Run ``runner`` (a Python script that runs pytest against a sanitized build) in a
    process with ``env`` (the sanitizer runtime preloaded): it must pass, skip nothing and
    report nothing."""
    import subprocess

    script = tmp_path / "runner.py"
    script.write_text(runner)
    p = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0 and not sanitizer_reports(out), out[-4000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]


# ---- native builds kept between runs ---------------------------------------------------------
# The sanitizer tests build the plugin and the shim again with other flags (most of a minute
# on 2 cores). A build is kept under build/ (ignored by git, emptied by ``make clean``) under
# a key of everything it is made from, so an unchanged tree does not compile it again.
BUILD_CACHE = os.path.join(REPO, "build", "test-cache")


def build_key(command: list[str], files: list[str]) -> str:
    """The key of a build: its command, the bytes of its own ``files`` (sources, headers),
    the compiler's version (``command[0] --version``), and the size and time of the
    system headers and libraries it builds against (Oclgrind, LLVM's configuration,
    OpenCL). Any change makes another key, so a kept build is the one this tree makes."""
    import glob
    import hashlib
    import subprocess

    h = hashlib.sha256("\0".join(command).encode())
    for path in sorted(set(files)):
        with open(path, "rb") as fh:
            h.update(path.encode() + b"\0" + fh.read())
    h.update(subprocess.run([command[0], "--version"], capture_output=True, check=True).stdout)
    system = ["/usr/include/oclgrind/*", "/usr/lib/*/liboclgrind*", "/usr/include/CL/*"]
    system.append("/usr/lib/llvm-14/include/llvm/Config/*.h")
    for path in sorted(p for pattern in system for p in glob.glob(pattern)):
        st = os.stat(path)
        h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def kept_build(kind: str, key: str, filename: str, build: Callable[[str], str]) -> str:
    """The path of ``filename`` built under ``key``: kept from an earlier run, else
    ``build(folder)`` (which returns the built file) now, copied in whole or not at all."""
    kept = os.path.join(BUILD_CACHE, kind, key, filename)
    if not os.path.exists(kept):
        with tempfile.TemporaryDirectory(prefix=f"clproj-{kind}-") as tmp:
            built = build(tmp)
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            partial = f"{kept}.{os.getpid()}.tmp"
            shutil.copyfile(built, partial)
            os.replace(partial, kept)  # a run beside this one sees the whole file or none
    return kept


# ---- a profile pair for choosing by energy -------------------------------------------------
# The two local PoCL devices' committed profiles with power sections that make the faster
# one (pthread, two threads) the hungrier: the premise of the tests that show --objective
# energy changing a choice that time would not (a test pair, not a claim about the host).
POWER_PAIR = {"pocl-basic-amd-epyc": 15.0, "pocl-pthread-amd-epyc": 150.0}


def _powered_profile(key: str, tdp_w: float):
    import copy

    from clproj.devices.profile import DeviceProfile, load_profile

    data = copy.deepcopy(load_profile(key).data)
    data["power"] = {
        "version": 1,
        "rule": "spec",
        "confidence": "low",
        "tdp_w": tdp_w,
        "idle_w": 0.2 * tdp_w,
        "static_active_w": 0.2 * tdp_w,
        "provenance": {"tdp_w": "test: a profile pair, one faster and hungrier"},
    }
    return DeviceProfile(data)


@pytest.fixture()
def powered_profile():
    """``powered_profile(key, tdp_w)``: profile ``key`` with a spec-rule power section."""
    return _powered_profile


@pytest.fixture()
def power_pair(tmp_path) -> dict[str, str]:
    """profile key -> path of the POWER_PAIR profiles, saved under ``tmp_path``."""
    out = {}
    for key, tdp in POWER_PAIR.items():
        path = tmp_path / f"{key}.json"
        _powered_profile(key, tdp).save(path)
        out[key] = str(path)
    return out
