"""Every file path and module the documentation names exists.

README.md and docs/*.md point readers at code (``runtime/cluster/broker.py``,
``runtime.evaluation.validate.load_validation``) and at tests; a restructure that moves a module
silently turns those pointers into dead ends. This checks each one against the tree:

* a path whose first part is a top-level folder of the repository (``runtime/...``,
  ``tests/...``, ``benchmarks/results/...``) must exist; a pattern (followed by ``*``,
  ``{`` or ``<``) is not a path and is skipped;
* a dotted name under one of our Python packages (``runtime.projection.model.project``)
  must resolve: its longest prefix that is a module or package, then the next part a name
  defined at the top level of that module. ``clproj.*`` dotted names are not checked: most
  are format and logger names (``clproj.launch-record``, ``clproj.route.split``).

And docs/layout.md, the map of the tree, has a line for every module of the folders it
maps, so that a module split off later shows up there.
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOPS = (
    "clproj",
    "runtime",
    "intercept",
    "miniemu",
    "devices",
    "benchmarks",
    "native",
    "tests",
    "docs",
    "scripts",
)
PACKAGES = ("runtime", "intercept", "miniemu", "devices", "benchmarks")
_TOP, _PKG = "|".join(TOPS), "|".join(PACKAGES)
PATH = re.compile(rf"(?<![\w./-])((?:{_TOP})/[\w./-]*)")
DOTTED = re.compile(rf"(?<![\w./-])((?:clproj\.)?(?:{_PKG})(?:\.[A-Za-z_]\w*)+)")
FILE_SUFFIX = re.compile(r"\.(py|md|c|h|cpp|json|so|png|cl|sh|tsv)$")


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(``file:line``, mention) for every match of ``pattern`` in the docs."""
    out = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for m in pattern.finditer(line):
                if line[m.end() : m.end() + 1] in ("*", "{", "<"):
                    continue
                out.append((f"{doc.relative_to(REPO)}:{n}", m.group(1).rstrip(".")))
    return out


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level (not inside functions)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    """Whether a dotted name names a module (or a name in one); the subsystems install as
    ``clproj.<folder>`` from folders at the root."""
    parts = dotted.split(".")
    if parts[0] == "clproj" and len(parts) > 1 and parts[1] in PACKAGES:
        parts = parts[1:]
    for i in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else None
        if module is None and base.is_dir():
            module = base / "__init__.py"
            if i == len(parts):
                return True
        if module is None:
            continue
        rest = parts[i:]
        return not rest or (module.is_file() and rest[0] in _top_level_names(module))
    return False


def _build_output(path: str) -> bool:
    """Whether ``path`` is something the build makes (git ignores it): named by the docs,
    present after `make setup`, absent in a fresh checkout."""
    return any(
        subprocess.run(["git", "check-ignore", "-q", p], cwd=REPO).returncode == 0
        for p in (path, path.rstrip("/") + "/")
    )


def test_the_docs_mention_paths_at_all() -> None:
    assert len(_mentions(PATH)) > 50 and len(_mentions(DOTTED)) > 10


def test_every_path_in_the_docs_exists() -> None:
    missing = [
        f"{where}: {p}"
        for where, p in _mentions(PATH)
        if not (REPO / p).exists() and not _build_output(p)
    ]
    assert not missing, "\n".join(missing)


def test_every_module_name_in_the_docs_resolves() -> None:
    bad = [
        f"{where}: {d}"
        for where, d in _mentions(DOTTED)
        if not FILE_SUFFIX.search(d) and not _resolves(d)
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "dotted", ["clproj.runtime.evaluation.validate.load_validation", "clproj.runtime.projection"]
)
def test_resolving_accepts_modules_packages_and_their_names(dotted: str) -> None:
    assert _resolves(dotted)


@pytest.mark.parametrize(
    "dotted", ["clproj.runtime.broker", "clproj.runtime.evaluation.validate.nothing_like_this"]
)
def test_resolving_refuses_moved_modules_and_missing_names(dotted: str) -> None:
    assert not _resolves(dotted)


LAYOUT_FOLDERS = (
    "clproj",
    "intercept",
    "runtime/route",
    "miniemu",
    "devices",
    "runtime",
    "runtime/projection",
    "runtime/projection/models",
    "runtime/cluster",
    "runtime/cluster/client",
    "runtime/cluster/node",
    "runtime/partition",
    "runtime/evaluation",
    "benchmarks",
)


def test_layout_lists_every_module() -> None:
    """docs/layout.md has a line for each module of these folders: a new module gets one."""
    text = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`([\w/]+\.py)`", text))
    modules = {
        str(p.relative_to(REPO)) for folder in LAYOUT_FOLDERS for p in (REPO / folder).glob("*.py")
    }
    missing = sorted(modules - listed)
    assert not missing, f"add a line to docs/layout.md for each of {missing}"


def test_readme_is_for_users_and_short() -> None:
    """README: what clproj does, the two commands, a tour and the current measured tables,
    each with its command, in at most 150 lines; how figures moved is git's to keep."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for needed in ("make demo", "make test", "## A tour", "## Measured accuracy"):
        assert needed in text
    history = re.findall(r"\b(?:session|round|issue \d+|before this|until 20\d\d)\b", text, re.I)
    assert not history, history
