"""clproj's settings table: the one place that knows every ``CLPROJ_*`` setting.

Each row gives a setting's name, type, default, scope and meaning, as Intel's
opencl-intercept-layer does with its controls table. A value comes from, in rising
precedence: the default here, the user's config file (``~/.config/clproj/config.toml``, or
``$CLPROJ_CONFIG``; keys are the names without ``CLPROJ_``, lower case), the environment,
then a command-line flag that mirrors the setting. An empty value counts as unset. A bad
value is a one-line error naming the setting and what it accepts, never a traceback deep
inside the code that uses it.

Python reads a setting only through :func:`get`; C and C++ (the shim, the Oclgrind plugin)
only through ``native/clproj_settings.h``, generated from this table by
:mod:`clproj.settings_render`, which parses bool/int/float exactly as :func:`_parse` does.
``python -m clproj.settings`` prints docs/settings.md, ``--c-header`` the C header (tests
check both committed files are current).

Why a table: before it, 65 names were read in 18 files, booleans were parsed five ways and
ten settings were documented nowhere.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from clproj.errors import ClprojError

TRUE = ("1", "true", "yes", "on")
"""Boolean spellings of true (any case); public because the C header generator uses them."""
FALSE = ("0", "false", "no", "off")
"""Boolean spellings of false (any case); an empty value is unset, i.e. the default."""
INT_RE = re.compile(r"[+-]?[0-9]+")
"""An ``int`` value: what C's scanner in the generated header accepts too (no ``_``)."""
FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""A ``float`` value (no ``inf``/``nan``/hex/``_``), the same grammar as the C header's."""
SCOPES = {
    "cli": "clproj's commands",
    "app": "inside the intercepted app (shim or its Python side)",
    "both": "clproj's commands and the app",
    "bench": "the benchmark host programs",
    "internal": "set by clproj for its own processes; not a user setting",
    "test": "tests only",
}
"""What each ``scope`` means (docs/settings.md lists it)."""


@dataclass(frozen=True)
class Setting:
    """One row of the table."""

    name: str
    type: str  # "bool" | "str" | "list" | "path" | "choice" | "float" | "int"
    default: Any
    scope: str  # a key of SCOPES: who reads it
    description: str
    choices: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None  # "int" / "float": inclusive range


TABLE: tuple[Setting, ...] = (
    # --- the user's settings: clproj's commands and the intercepted app ---
    Setting(
        "CLPROJ_CACHE",
        "path",
        "~/.cache/clproj",
        "both",
        "Folder of the per-user caches: device profiles measured on this machine "
        "(`profiles/`) and launch projections (`projections/`).",
    ),
    Setting(
        "CLPROJ_CONFIG",
        "path",
        "~/.config/clproj/config.toml",
        "both",
        "The user config file. Its keys are setting names without `CLPROJ_`, in lower "
        'case (`cold_profile = "tiny"`); the environment overrides it.',
    ),
    Setting(
        "CLPROJ_FOREIGN_MACHINE",
        "bool",
        False,
        "both",
        "Act as on a machine nobody profiled: the committed measured profiles never match "
        "a local device, so every local device takes the cold-start path (cached, measured "
        "now, or generic). `--devices measured` still lists the committed profiles. Tests "
        "use it with an empty `CLPROJ_CACHE` to run as a new user's machine would.",
    ),
    Setting(
        "CLPROJ_COLD_PROFILE",
        "choice",
        "quick",
        "cli",
        "How a local device with no committed or cached profile gets one: `quick` "
        "microbenchmarks (under a minute on a 2-core CPU), `tiny` (seconds, rough: tests), "
        "or `off` (no measuring: a spec-sheet or generic profile marked low-confidence).",
        ("quick", "tiny", "off"),
    ),
    Setting(
        "CLPROJ_EMULATION_NICE",
        "int",
        10,
        "both",
        "Scheduling priority (nice 0-19) of the Oclgrind emulator processes, so that an "
        "emulation inside an application never takes its cores (project mode uses 19 in "
        "the app).",
        bounds=(0, 19),
    ),
    Setting(
        "CLPROJ_EMULATION_MODE",
        "choice",
        "bounded",
        "both",
        "How project and route mode emulate a launch in Oclgrind (docs/miniemu.md): "
        "`bounded` (a budget per launch, heavy work-groups included), `single` (one "
        "work-group), `quick` (a few work-groups) or `full` (every work-item). The app and "
        "the post-run completion read the same value, so both sides emulate alike.",
        ("bounded", "single", "quick", "full"),
    ),
    Setting(
        "CLPROJ_DEVICES",
        "str",
        "local",
        "both",
        "The devices projections are made for (`--devices`): `local`, `measured`, `all`, "
        "or a comma list of profile keys and profile files. `clproj run` pins it for the "
        "app to the resolved profile files (or `cluster` in route mode).",
    ),
    Setting(
        "CLPROJ_MODE",
        "choice",
        "observe",
        "app",
        "What the shim does in the app (`--mode`, set by `clproj run`): `observe` (count "
        "and time launches), `project` (also record and emulate them) or `route` (a virtual "
        "platform whose kernels run on the cluster).",
        ("observe", "project", "route"),
    ),
    Setting(
        "CLPROJ_DISABLE",
        "bool",
        False,
        "app",
        "Load the shim but pass every OpenCL call straight to the real driver "
        "(no counting, timing or recording).",
    ),
    Setting(
        "CLPROJ_TIMING",
        "choice",
        "1",
        "app",
        "Launch timing in the app: `1` times a sample of the launches (see "
        "`CLPROJ_TIMING_FIRST` / `CLPROJ_TIMING_EVERY`), `all` times every launch "
        "(`clproj run --time-all`), `0` times none (no profiling queues).",
        ("1", "all", "0"),
    ),
    Setting(
        "CLPROJ_TIMING_FIRST",
        "int",
        100,
        "app",
        "Sampled timing: the first N launches of each kernel are all timed.",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_TIMING_EVERY",
        "int",
        128,
        "app",
        "Sampled timing: after the first ones, about 1 launch in K of each kernel is timed "
        "(chosen by a hash of its ticket; 0 or 1 times every launch).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_SUMMARY",
        "bool",
        True,
        "app",
        "Print the per-kernel table to the app's stderr at exit (when no "
        "`CLPROJ_SUMMARY_FILE` is given); `0` keeps the app's stderr clean.",
    ),
    Setting(
        "CLPROJ_RECORD_DIR",
        "path",
        "",
        "app",
        "Record launches (kernel source, arguments, buffer snapshots) into this folder "
        "(`clproj run --record`); empty: no recording outside project and route mode.",
    ),
    Setting(
        "CLPROJ_RECORD_WHICH",
        "choice",
        "first",
        "app",
        "Which launches are recorded (`--which`): `first` of each signature, `all`, or "
        "`none` (recording off).",
        ("first", "all", "none"),
    ),
    Setting(
        "CLPROJ_RECORD_KERNELS",
        "list",
        "",
        "app",
        "Record only the kernels with these names (comma list, `--kernels`); empty: all.",
    ),
    Setting(
        "CLPROJ_VERIFY",
        "bool",
        False,
        "app",
        "Check each recorded launch by replaying it and comparing its outputs "
        "(`clproj run --verify`).",
    ),
    Setting(
        "CLPROJ_HOOKS",
        "list",
        "",
        "app",
        "Python functions called with each launch record, as `module:function` (comma "
        "list). `clproj run --mode project` adds its own.",
    ),
    Setting(
        "CLPROJ_INAPP_EMULATION",
        "choice",
        "auto",
        "app",
        "Project mode: emulate launches inside the app while it runs (`1`), never (`0`: "
        "all after it exits), or `auto`: only when the machine has an idle core.",
        ("auto", "1", "0"),
    ),
    # --- route mode and the cluster ---
    Setting(
        "CLPROJ_BROKER",
        "str",
        "",
        "app",
        "Route mode: the cluster's broker address (`clproj run --broker`); empty: an "
        "embedded broker and a local node start with the app.",
    ),
    Setting(
        "CLPROJ_KEYS",
        "path",
        "~/.config/clproj/keys",
        "both",
        "Folder of the cluster's CURVE keys (`clproj keys`, `--keys`).",
    ),
    Setting(
        "CLPROJ_DIRECT",
        "choice",
        "1",
        "both",
        "How a client reaches a node: `1` directly (a Unix socket on the same host, else "
        "zmq), `zmq` directly but always over zmq, `0` everything through the broker.",
        ("1", "zmq", "0"),
    ),
    Setting(
        "CLPROJ_FAST_LAUNCH",
        "bool",
        True,
        "both",
        "A client sends a repeated launch as a 24-byte frame to the node's native link; "
        "`0` keeps every launch on the command socket (benchmarks compare both).",
    ),
    Setting(
        "CLPROJ_SHM",
        "bool",
        True,
        "both",
        "Move buffer data between a client and a node on the same host through shared "
        "memory (`/dev/shm`); `0` sends every byte through the sockets.",
    ),
    Setting(
        "CLPROJ_SHM_MIN",
        "int",
        1 << 20,
        "both",
        "Smallest transfer (bytes) that goes through shared memory instead of the socket.",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_NODE_NATIVE",
        "bool",
        True,
        "both",
        "A node offers its native fast link (C thread) when it is built; `0` offers none "
        "(benchmarks compare both).",
    ),
    Setting(
        "CLPROJ_NODE_SETTLE_US",
        "float",
        150.0,
        "both",
        "A node polls a lone command on its serving thread for up to this many "
        "microseconds before its waiter thread takes it over; `0` turns that off.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_ROUTE_WAIT",
        "float",
        60.0,
        "app",
        "Route mode: seconds the app waits for the cluster's devices to be announced.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_ROUTE_LIFETIME",
        "float",
        86400.0,
        "app",
        "Route mode: seconds the embedded broker and local node live at most (they stop "
        "with the app in any case).",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_ROUTE_PRESTART",
        "bool",
        True,
        "app",
        "Route mode: start the embedded cluster at the app's first `clGetPlatformIDs` "
        "instead of at its first context.",
    ),
    Setting(
        "CLPROJ_ROUTE_VERBOSE",
        "bool",
        False,
        "app",
        "Route mode: let the embedded broker's and node's logs reach the app's stderr.",
    ),
    Setting(
        "CLPROJ_ROUTE_REPROJECT_S",
        "float",
        0.05,
        "app",
        "Route mode: at most one fresh projection per this many seconds for a family of "
        "launches the reuse cache answers.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_SPLIT",
        "bool",
        False,
        "app",
        "Route mode: split qualifying launches across devices (`clproj run --split`).",
    ),
    Setting(
        "CLPROJ_SPLIT_WAIT_S",
        "float",
        0.0,
        "app",
        "Route mode with `--split`: seconds a kernel's first launches wait for the split "
        "decision instead of running unsplit meanwhile.",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_SPLIT_CHECK",
        "bool",
        True,
        "app",
        "Route mode with `--split`: check a split against the measured times; `0` trusts "
        "the projection alone (tests of the split's mechanics).",
    ),
    Setting(
        "CLPROJ_SPLIT_FILE",
        "path",
        "",
        "app",
        "Route mode with `--split`: append each split decision to this file (JSON lines).",
    ),
    # --- benchmark host programs (benchmarks/apps/c_hosts) ---
    Setting(
        "CLPROJ_DEVICE",
        "int",
        0,
        "bench",
        "The benchmark C hosts' device, an index in clproj's order (platforms as the "
        "loader returns them, devices within each).",
        bounds=(0, 2**31 - 1),
    ),
    Setting(
        "CLPROJ_KERNEL_DIR",
        "path",
        "",
        "bench",
        "Where the benchmark C hosts find their `.cl` sources; empty: next to the "
        "executable (`<exe dir>/..`).",
    ),
    # --- internal: set by clproj for its own processes, not by users ---
    Setting(
        "CLPROJ_RUN_DIR",
        "path",
        "",
        "internal",
        "`clproj run`'s temporary folder for this run; the app's helper processes put "
        "their sockets and files in it.",
    ),
    Setting(
        "CLPROJ_SUMMARY_FILE",
        "path",
        "",
        "internal",
        "`clproj run`: the app writes its per-kernel summary here (TSV) instead of stderr.",
    ),
    Setting(
        "CLPROJ_PROJECTION_FILE",
        "path",
        "",
        "internal",
        "`clproj run --mode project`: the app appends the projections it made here.",
    ),
    Setting(
        "CLPROJ_DEFERRED_FILE",
        "path",
        "",
        "internal",
        "`clproj run --mode project`: the app appends here the launches left for the "
        "post-run completion.",
    ),
    Setting(
        "CLPROJ_SPLIT_DEVICES",
        "list",
        "",
        "internal",
        "`clproj run --split`: the device profile files the splitter uses (comma list).",
    ),
    Setting(
        "CLPROJ_STATS_OUT",
        "path",
        "",
        "internal",
        "The Oclgrind plugin appends its statistics (JSON lines) to this file.",
    ),
    Setting(
        "CLPROJ_STATS_STOP_AFTER_GROUPS",
        "int",
        0,
        "internal",
        "The Oclgrind plugin ends the emulation after writing this many work-groups (0: never).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_STATS_MAX_WORK_ITEMS",
        "int",
        0,
        "internal",
        "Bounded emulation: the plugin's budget of work-items (0: none).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_STATS_MAX_INSTRUCTIONS",
        "int",
        0,
        "internal",
        "Bounded emulation: the plugin's budget of instructions (0: none).",
        bounds=(0, 2**63 - 1),
    ),
    Setting(
        "CLPROJ_STATS_BUDGET_S",
        "float",
        0.0,
        "internal",
        "Bounded emulation: the plugin's wall-time budget in seconds (0: none).",
        bounds=(0, float("inf")),
    ),
    Setting(
        "CLPROJ_STORE_RANGES",
        "bool",
        False,
        "internal",
        "The Oclgrind plugin also reports each work-group's stored address ranges "
        "(the partition safety check).",
    ),
    Setting(
        "CLPROJ_FAULT",
        "choice",
        "",
        "test",
        "Fault injection for tests: `start` makes the app side's start-up fail, `launch` "
        "makes every recorded launch raise.",
        ("", "start", "launch"),
    ),
)


_BY_NAME = {s.name: s for s in TABLE}
_DEFAULT_CONFIG = os.path.join("~", ".config", "clproj", "config.toml")

# get() is called on hot paths (per launch): a value parsed from the environment is kept
# with the raw text it came from, and the config file is read once per process and path
# (reload() forgets both, e.g. after a test rewrites the file).
_env_values: dict[str, tuple[str, Any]] = {}
_file_values: dict[tuple[str, str], Any] = {}
_config_docs: dict[str, dict[str, Any]] = {}


def setting(name: str) -> Setting:
    """The row of ``name`` (KeyError for a name not in the table: a typo, not a default)."""
    return _BY_NAME[name]


def reload() -> None:
    """Forget the cached values and config file, so the next :func:`get` reads them anew."""
    _env_values.clear()
    _file_values.clear()
    _config_docs.clear()


def config_path() -> str:
    """The config file's path: ``$CLPROJ_CONFIG``, else ``~/.config/clproj/config.toml``."""
    return os.path.expanduser(os.environ.get("CLPROJ_CONFIG") or _DEFAULT_CONFIG)


def _config_file(path: str) -> dict[str, Any]:
    doc = _config_docs.get(path)
    if doc is not None:
        return doc
    doc = {}
    if os.path.isfile(path):
        import tomllib

        try:
            with open(path, "rb") as fh:
                loaded = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ClprojError(
                f"cannot read the config file {path}: {exc}",
                "fix its TOML syntax or remove it (see docs/settings.md)",
            ) from None
        doc = loaded if isinstance(loaded, dict) else {}
    _config_docs[path] = doc
    return doc


def _text(raw: Any) -> str:
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if isinstance(raw, (list, tuple)):
        return ",".join(str(x) for x in raw)
    return str(raw).strip()


def _parse(s: Setting, raw: Any, origin: str) -> Any:
    text = _text(raw)
    if not text:
        text = _text(s.default)
    if s.type == "bool":
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise ClprojError(
            f"{s.name}={raw!r} ({origin}) is not a boolean",
            f"use one of {', '.join(TRUE)} / {', '.join(FALSE)}",
        )
    if s.type == "choice":
        if text not in s.choices:
            raise ClprojError(
                f"{s.name}={raw!r} ({origin}) is not a valid value",
                f"use one of {', '.join(c for c in s.choices if c)}",
            )
        return text
    if s.type in ("float", "int"):
        grammar = INT_RE if s.type == "int" else FLOAT_RE
        value: float = float("nan")
        if grammar.fullmatch(text):
            value = int(text) if s.type == "int" else float(text)
        lo, hi = s.bounds or (float("-inf"), float("inf"))
        if not math.isfinite(value) or not lo <= value <= hi:
            want = f"{'an integer' if s.type == 'int' else 'a number'}"
            if s.bounds:
                want += f" from {lo:g} to {hi:g}"
            raise ClprojError(f"{s.name}={raw!r} ({origin}) is not {want}", f"give {want}")
        return value
    if s.type == "path":
        return os.path.expanduser(text) if text else ""
    if s.type == "list":
        return tuple(x.strip() for x in text.split(",") if x.strip())
    return text


def get(name: str) -> Any:
    """The value of setting ``name``: environment, else config file, else default.

    Typed by the row: bool, int, float, str (``str``/``choice``/``path``, a path with ``~``
    expanded, ``""`` when unset without default) or a tuple of str (``list``). Cheap: a
    dict lookup after the first call with the same environment value."""
    s = _BY_NAME[name]
    raw = os.environ.get(name)
    if raw:
        hit = _env_values.get(name)
        if hit is not None and hit[0] == raw:
            return hit[1]
        value = _parse(s, raw, "environment")
        _env_values[name] = (raw, value)
        return value
    # keyed by the raw $CLPROJ_CONFIG: no path expansion on the hot path
    key = (name, "" if name == "CLPROJ_CONFIG" else os.environ.get("CLPROJ_CONFIG") or "~")
    if key in _file_values:
        return _file_values[key]
    conf = _config_file(config_path()) if name != "CLPROJ_CONFIG" else {}
    short = name.removeprefix("CLPROJ_").lower()
    value = _parse(s, conf[short], "config file") if short in conf else _parse(s, "", "default")
    _file_values[key] = value
    return value


def is_set(name: str) -> bool:
    """Whether the user gave ``name`` (environment or config file) rather than leaving it to
    the default: some callers act only then (e.g. an emulator is niced only when asked)."""
    _BY_NAME[name]  # a typo is a KeyError, as in get()
    if os.environ.get(name, "").strip():
        return True
    short = name.removeprefix("CLPROJ_").lower()
    return name != "CLPROJ_CONFIG" and short in _config_file(config_path())


def from_config_file() -> dict[str, str]:
    """The settings the config file gives, as environment text (``{name: text}``).

    ``clproj run`` puts those the environment does not set into the app's environment:
    the shim and the Oclgrind plugin (C, C++) read only the environment."""
    out = {}
    for short, raw in _config_file(config_path()).items():
        name = "CLPROJ_" + short.upper()
        if name in _BY_NAME and name != "CLPROJ_CONFIG":
            _parse(_BY_NAME[name], raw, "config file")
            out[name] = _text(raw)
    return out


def check_all() -> None:
    """Read every setting once, so a bad value fails the command at its start with one
    line naming it, not later inside an application or a server it started; a key of the
    config file that is no setting is an error too (a typo would be silently ignored)."""
    for s in TABLE:
        get(s.name)
    for short in _config_file(config_path()):
        if "CLPROJ_" + short.upper() not in _BY_NAME:
            raise ClprojError(
                f"the config file {config_path()} has an unknown key {short!r}",
                "see docs/settings.md for the settings (names without CLPROJ_, lower case)",
            )


if __name__ == "__main__":
    from clproj import settings_render

    out = settings_render.c_header() if "--c-header" in sys.argv[1:] else settings_render.markdown()
    sys.stdout.write(out)
