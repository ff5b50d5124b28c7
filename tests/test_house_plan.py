"""The house plan, checked: what docs/layout.md promises about the code's shape.

These are the rules a restructure is easy to undo by accident: a module that grows back
into a god object, a ``CLPROJ_*`` variable read outside the settings table, runtime code
that depends on the evaluation or the benchmarks, a private member used across modules.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 600
PRODUCT = ("clproj", "intercept", "miniemu", "devices", "runtime")


def _py_files(*tops: str) -> list[Path]:
    return sorted(p for t in tops for p in (REPO / t).rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("top", ["runtime", "intercept"])
def test_no_module_over_600_lines(top: str) -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _py_files(top)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by job (docs/layout.md): {long}"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_product_does_not_import_evaluation_or_benchmarks() -> None:
    judged = ("runtime/projection", "runtime/cluster", "runtime/partition", "intercept")
    bad = {
        str(p.relative_to(REPO)): sorted(
            m for m in mods if m.startswith(("clproj.benchmarks", "clproj.runtime.evaluation"))
        )
        for p in _py_files(*judged)
        if (mods := _imported(p))
    }
    assert not {k: v for k, v in bad.items() if v}


def _reads_setting(node: ast.AST) -> str | None:
    """The CLPROJ_* name a node reads from the environment, if it does."""

    def const(n: ast.AST) -> str | None:
        if (
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and n.value.startswith("CLPROJ_")
        ):
            return n.value
        return None

    def is_environ(n: ast.AST) -> bool:
        return (isinstance(n, ast.Attribute) and n.attr == "environ") or (
            isinstance(n, ast.Name) and n.id == "environ"
        )

    if isinstance(node, ast.Call) and node.args:
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr in ("get", "getenv", "pop")
            and (is_environ(f.value) or f.attr == "getenv")
        ):
            return const(node.args[0]) if f.attr != "pop" else None
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and is_environ(node.value)
    ):
        return const(node.slice)
    if isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
        return const(node.left)
    return None


def test_only_the_settings_table_reads_clproj_variables() -> None:
    table = REPO / "clproj" / "settings.py"
    found = [
        f"{p.relative_to(REPO)}:{n.lineno} {name}"
        for p in _py_files(*PRODUCT)
        if p != table
        for n in ast.walk(ast.parse(p.read_text()))
        if (name := _reads_setting(n))
    ]
    c_reads = [
        f"{p.relative_to(REPO)}: {m.group(0)}"
        for p in sorted((REPO / "native").rglob("*"))
        if p.suffix in (".c", ".h", ".cpp") and p.name != "clproj_settings.h"
        for m in re.finditer(r'getenv\(\s*"CLPROJ_\w+"', p.read_text())
    ]
    assert not found + c_reads, (
        "read these through clproj/settings.py (C: native/clproj_settings.h)"
    )


def _native_module(module: str, name: str) -> bool:
    """``from package import _ext`` of a cffi-built extension (``runtime.cluster.node._nodelink``):
    private by how it is built, not a member of another module."""
    parts = module.split(".")
    if parts[0] == "clproj" and len(parts) > 1 and (REPO / parts[1]).is_dir():
        parts = parts[1:]  # clproj.<folder>: the subsystem folders sit at the root
    package = REPO.joinpath(*parts)
    return package.is_dir() and not (package / f"{name}.py").exists()


def test_every_thread_the_product_starts_leaves_signals_to_the_app() -> None:
    """Threads run inside applications and helper processes: each must block the app's
    signals (clproj/background_thread.py says why), so none is started directly; nor by
    ``ThreadPoolExecutor``, whose threads an exiting app would wait for."""
    bad = [
        f"{p.relative_to(REPO)}:{node.lineno}"
        for p in _py_files(*PRODUCT)
        if p.name != "background_thread.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "Thread")
            or (isinstance(node.func, ast.Name) and node.func.id == "ThreadPoolExecutor")
        )
    ]
    assert not bad, f"start these with clproj.background_thread: {bad}"


def test_no_preexec_fn_where_code_may_run_inside_an_app() -> None:
    """A ``preexec_fn`` makes ``subprocess`` fork, running the app's fork handlers
    (clproj.lifeline.die_with_starter says what that did); only clproj's own CLI processes
    (``clproj run`` starting the app, ``clproj replay``) may use one."""
    allowed = {"intercept/app_process.py", "intercept/replay.py"}
    bad = [
        f"{p.relative_to(REPO)}:{node.lineno}"
        for p in _py_files(*PRODUCT)
        if str(p.relative_to(REPO)) not in allowed
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.keyword) and node.arg == "preexec_fn"
    ]
    assert not bad, f"let the child set itself up after its exec: {bad}"


def test_no_private_name_imported_across_modules() -> None:
    """ruff's SLF001 sees ``obj._x``; this sees ``from mod import _x``, the same breach."""
    bad = [
        f"{p.relative_to(REPO)}:{node.lineno} {node.module}.{a.name}"
        for p in _py_files(*PRODUCT, "benchmarks", "scripts")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module
        and node.level == 0
        and node.module.split(".")[0] in (*PRODUCT, "benchmarks")
        for a in node.names
        if a.name.startswith("_")
        and not a.name.startswith("__")
        and not _native_module(node.module, a.name)
    ]
    assert not bad, f"make these public (they are used by another module): {bad}"


def test_ruff_clean_including_private_member_access() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment (pip install -e '.[dev]')")
    r = subprocess.run(
        [str(ruff), "check", "--select", "SLF001", *PRODUCT, "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stdout[-3000:]
