"""clproj.untrusted: the helpers every validator of untrusted input shares.

Four validators read what clproj does not control: launch records, kernel profiles,
device profiles and the wire protocol. Each names a bad field the same way, through these
helpers, and none keeps a copy of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from clproj.untrusted import BadField, field_at, short

REPO = Path(__file__).resolve().parent.parent
VALIDATORS = (
    "intercept/record_check.py",
    "miniemu/profile.py",
    "devices/profile_check.py",
    "runtime/cluster/protocol.py",
)


def test_field_at_names_the_first_bad_step() -> None:
    doc = {"a": {"b": {"c": 3}}, "x": 1}
    assert field_at(doc, "a.b.c") == 3
    with pytest.raises(BadField) as missing:
        field_at(doc, "a.q.c")
    assert (missing.value.field, missing.value.what) == ("a.q", "missing")
    with pytest.raises(BadField) as flat:
        field_at(doc, "x.y")
    assert flat.value.field == "x" and "expected an object" in flat.value.what


def test_short_cuts_long_values() -> None:
    assert short("abc") == "'abc'"
    cut = short("z" * 10_000)
    assert len(cut) == 60 and cut.endswith("...")


@pytest.mark.parametrize("path", VALIDATORS)
def test_every_validator_uses_the_shared_helpers(path: str) -> None:
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert not defined & {"BadField", "short", "_short", "_show", "field_at"}, path
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "clproj.untrusted"
        for a in n.names
    }
    assert imported, f"{path} validates untrusted input without clproj.untrusted"
