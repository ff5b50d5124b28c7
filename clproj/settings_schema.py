"""The shape of a row of clproj's settings table (:mod:`clproj.settings_table`): a setting's
name, type, default, scope and meaning, and what the scopes and boolean spellings are.

Why a module of its own: the rows are split by subsystem over several modules
(:mod:`clproj.settings_table`, :mod:`clproj.settings_cluster`), and every one of them, the
reader (:mod:`clproj.settings`) and the renderer (:mod:`clproj.settings_render`) share
this one definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCOPES = {
    "cli": "clproj's commands",
    "app": "inside the intercepted app (shim or its Python side)",
    "both": "clproj's commands and the app",
    "bench": "the benchmark host programs",
    "internal": "set by clproj for its own processes; not a user setting",
    "test": "tests only",
}
"""What each ``scope`` means (docs/settings.md lists it)."""

TRUE = ("1", "true", "yes", "on")
"""Boolean spellings of true (any case): the Python reader and the generated C header share them."""
FALSE = ("0", "false", "no", "off")
"""Boolean spellings of false (any case); an empty value is unset, i.e. the default."""


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
