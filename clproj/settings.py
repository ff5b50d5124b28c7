"""clproj's settings table: the one place that knows every ``CLPROJ_*`` setting.

Each row gives a setting's name, type, default, scope and meaning, as Intel's
opencl-intercept-layer does with its controls table. A value comes from, in rising
precedence: the default here, the user's config file (``~/.config/clproj/config.toml``, or
``$CLPROJ_CONFIG``; keys are the names without ``CLPROJ_``, lower case), the environment,
then a command-line flag that mirrors the setting. A bad value is a one-line error naming
the setting and what it accepts, never a traceback deep inside the code that uses it.

``python -m clproj.settings`` prints docs/settings.md from this table (a test checks the
committed file is current). Settings not yet listed here are still read where they are used
(docs/settings.md lists those too); they move into the table as their modules are touched.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any

from clproj.errors import ClprojError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Setting:
    name: str
    type: str  # "bool" | "str" | "path" | "choice" | "float" | "int"
    default: Any
    scope: str  # who reads it: "cli", "app" (inside the intercepted app), "both"
    description: str
    choices: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None  # "int" / "float": inclusive range


TABLE: tuple[Setting, ...] = (
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
        "CLPROJ_DEVICES",
        "str",
        "local",
        "both",
        "The devices projections are made for (`--devices`): `local`, `measured`, `all`, "
        "or a comma list of profile keys and profile files.",
    ),
)

_BY_NAME = {s.name: s for s in TABLE}


def _config_file() -> dict[str, Any]:
    path = os.path.expanduser(
        os.environ.get("CLPROJ_CONFIG") or os.path.join("~", ".config", "clproj", "config.toml")
    )
    if not os.path.isfile(path):
        return {}
    import tomllib

    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ClprojError(
            f"cannot read the config file {path}: {exc}",
            "fix its TOML syntax or remove it (see docs/settings.md)",
        ) from None
    return doc if isinstance(doc, dict) else {}


def _parse(s: Setting, raw: Any, origin: str) -> Any:
    text = str(raw).strip() if not isinstance(raw, bool) else ("1" if raw else "0")
    if s.type == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ClprojError(
            f"{s.name}={raw!r} ({origin}) is not a boolean", f"use one of {', '.join(_TRUE)} / 0"
        )
    if s.type == "choice":
        if text not in s.choices:
            raise ClprojError(
                f"{s.name}={raw!r} ({origin}) is not a valid value",
                f"use one of {', '.join(s.choices)}",
            )
        return text
    if s.type in ("float", "int"):
        try:
            value: float = int(text) if s.type == "int" else float(text)
        except ValueError:
            value = float("nan")
        lo, hi = s.bounds or (float("-inf"), float("inf"))
        if not math.isfinite(value) or not lo <= value <= hi:
            want = f"{'an integer' if s.type == 'int' else 'a number'}"
            if s.bounds:
                want += f" from {lo:g} to {hi:g}"
            raise ClprojError(f"{s.name}={raw!r} ({origin}) is not {want}", f"give {want}")
        return value
    if s.type == "path":
        return os.path.expanduser(text) if text else os.path.expanduser(str(s.default))
    return text


def get(name: str) -> Any:
    """The value of setting ``name``: environment, else config file, else default."""
    s = _BY_NAME[name]
    raw = os.environ.get(name)
    if raw is not None:
        return _parse(s, raw, "environment")
    key = name.removeprefix("CLPROJ_").lower()
    if name != "CLPROJ_CONFIG":
        conf = _config_file()
        if key in conf:
            return _parse(s, conf[key], "config file")
    return _parse(s, s.default, "default") if s.type != "bool" else bool(s.default)


def check_all() -> None:
    """Read every setting once, so a bad value fails the command at its start with one
    line naming it, not later inside an application or a server it started."""
    for s in TABLE:
        get(s.name)


def markdown() -> str:
    """docs/settings.md, generated from :data:`TABLE`."""
    lines = [
        "# Settings",
        "",
        "Generated by `python -m clproj.settings` from `clproj/settings.py`; do not edit.",
        "",
        "Precedence, lowest first: the default, the config file "
        "(`~/.config/clproj/config.toml`, keys without `CLPROJ_` in lower case), the "
        "environment, a command-line flag that mirrors the setting.",
        "",
        "| name | type | default | scope | description |",
        "|---|---|---|---|---|",
    ]
    for s in TABLE:
        kind = s.type if not s.choices else " \\| ".join(s.choices)
        lines.append(f"| `{s.name}` | {kind} | `{s.default}` | {s.scope} | {s.description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
