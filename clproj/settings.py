"""clproj's settings: reads every ``CLPROJ_*`` setting by the rows of its table.

The table (:mod:`clproj.settings_table`) gives each setting's name, type, default, scope and
meaning, as Intel's opencl-intercept-layer does with its controls table; this module holds
the rules that read a value. A value comes from, in rising
precedence: the default here, the user's config file (``~/.config/clproj/config.toml``, or
``$CLPROJ_CONFIG``; keys are the names without ``CLPROJ_``, lower case), the environment,
then a command-line flag that mirrors the setting. An empty value counts as unset. A bad
value is a one-line error naming the setting and what it accepts, never a traceback deep
inside the code that uses it.

Python reads a setting only through :func:`get`; C and C++ (the shim, the Oclgrind plugin)
only through ``native/clproj_settings.h``, generated from the table by
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
from typing import Any

from clproj.errors import ClprojError
from clproj.settings_schema import FALSE, TRUE, Setting
from clproj.settings_table import TABLE

INT_RE = re.compile(r"[+-]?[0-9]+")
"""An ``int`` value: what C's scanner in the generated header accepts too (no ``_``)."""
FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""A ``float`` value (no ``inf``/``nan``/hex/``_``), the same grammar as the C header's."""
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


# A config file is a few lines; past this it is not one.
MAX_CONFIG_BYTES = 1 << 20


def _config_file(path: str) -> dict[str, Any]:
    doc = _config_docs.get(path)
    if doc is not None:
        return doc
    doc = {}
    fix = "fix it or remove it (see docs/settings.md)"
    # An absent file is no config (tests and scripts point $CLPROJ_CONFIG at one to leave
    # the user's out); anything else at the path must be a readable regular file.
    if os.path.lexists(path):
        from clproj.untrusted import read_toml_file

        doc = read_toml_file(path, "config file", MAX_CONFIG_BYTES, fix)
    _config_docs[path] = doc
    return doc


def _text(raw: Any) -> str:
    if isinstance(raw, bool):
        return "1" if raw else "0"
    if isinstance(raw, (list, tuple)):
        return ",".join(str(x) for x in raw)
    return str(raw).strip()


def _bound(x: float) -> str:
    """A range end as a user types it: an integer exactly (2**63 - 1, not 9.22337e+18)."""
    return str(int(x)) if isinstance(x, int) or (math.isfinite(x) and x == int(x)) else f"{x:g}"


def _parse(s: Setting, raw: Any, origin: str) -> Any:  # noqa: C901
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
                want += f" from {_bound(lo)} to {_bound(hi)}"
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
