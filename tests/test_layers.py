"""The layer order, checked: no import runs up it, inside functions included.

clproj's parts form a stack; each may use the ones below it and never one above, so a
newcomer can read any layer knowing only what lies beneath it (docs/layout.md, "Layers"):

1. ``clproj`` itself: settings, errors, console, paths (everything shares these);
2. ``clproj.devices``: device discovery, profiles, microbenchmarks;
3. ``clproj.intercept``: the shim's runtime inside the app, launch records, replay;
4. ``clproj.miniemu``: emulation of recorded launches;
5. ``clproj.runtime``: projection, partition, cluster, route mode, ``clproj run``;
6. ``clproj.runtime.evaluation`` and ``clproj.benchmarks``: what judges the product.

On top sit the entry points that only dispatch (``clproj.cli``, ``clproj.doctor``). An
import is an arrow wherever it stands: 192 imports inside functions once hid arrows that
ran up the order. Type-only imports (under ``if TYPE_CHECKING:``) are not arrows.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("clproj", "devices", "intercept", "miniemu", "runtime", "benchmarks")
ORDER = ("clproj", "devices", "intercept", "miniemu", "runtime", "judges")
ENTRY_POINTS = {"clproj.cli", "clproj.doctor"}


def layer(module: str) -> str | None:
    """The layer of a dotted module name (None: not clproj's, or an entry point)."""
    parts = module.split(".")
    if parts[0] != "clproj" or module in ENTRY_POINTS:
        return None
    if len(parts) == 1 or parts[1] not in FOLDERS:
        return "clproj"
    if parts[1] == "benchmarks" or parts[1:3] == ["runtime", "evaluation"]:
        return "judges"
    return parts[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "clproj" else ["clproj", *parts])


def _type_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for n in ast.walk(sub):
                    if isinstance(n, ast.Import | ast.ImportFrom):
                        lines.add(n.lineno)
    return lines


def imported(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in the file, at any depth."""
    skip = _type_only(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # ``from clproj import devices``: the names may be modules themselves
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def arrows_up() -> list[str]:
    bad = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            here = layer(module_name(path))
            if here is None:
                continue
            for line, target in imported(ast.parse(path.read_text(encoding="utf-8"))):
                there = layer(target)
                if there is not None and ORDER.index(there) > ORDER.index(here):
                    bad.append(
                        f"{path.relative_to(REPO)}:{line} ({here}) imports {target} ({there})"
                    )
    return bad


def test_no_import_runs_up_the_layer_order() -> None:
    bad = arrows_up()
    assert not bad, "imports that run up the layer order (docs/layout.md):\n" + "\n".join(bad)


def test_the_check_sees_an_arrow_inside_a_function() -> None:
    tree = ast.parse("def f():\n    from clproj.runtime.projection import model\n")
    assert (2, "clproj.runtime.projection") in imported(tree)
    assert layer("clproj.runtime.projection") == "runtime"
    assert ORDER.index(layer("clproj.intercept.record")) < ORDER.index("runtime")
    typed = ast.parse("if TYPE_CHECKING:\n    from clproj.runtime import x\n")
    assert imported(typed) == []
