"""Fixtures of the evaluation tests: ``clproj evaluate`` on the committed results, once.

Evaluating the committed results takes seconds and drawing its report (a plot per app
and device pair) most of a quarter of a minute; several tests read the same evaluation
and the same report, none changes them, so each is made once per session.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def evaluation() -> Any:
    """``evaluate()`` of the committed results (all apps, mode ``single``)."""
    from clproj.runtime.evaluation.evaluate import evaluate

    return evaluate()


@pytest.fixture(scope="session")
def evaluate_cli_report(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """(the run, its report folder) of ``clproj evaluate --json --report FOLDER``: the
    same evaluation as ``evaluation`` (same results, same defaults) with its HTML report
    written by ``report.write_report``."""
    report = tmp_path_factory.mktemp("evaluate") / "report"
    out = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "evaluate", "--json", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out, report
