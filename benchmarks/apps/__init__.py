"""Our own OpenCL implementations of the paper's applications and extra model-stressing kernels.

``APPS`` is the registry every consumer uses (harness, tests, projection evaluation):
name -> :class:`~benchmarks.apps.base.App`, paper apps first.
"""

from __future__ import annotations

from clproj.benchmarks.apps.base import App, Launch, Plan
from clproj.benchmarks.apps.heavy import HEAVY_APPS
from clproj.benchmarks.apps.paper import PAPER_APPS
from clproj.benchmarks.apps.realistic import REALISTIC_APPS
from clproj.benchmarks.apps.stress import STRESS_APPS

APPS: dict[str, App] = {
    app.name: app for app in [*PAPER_APPS, *STRESS_APPS, *REALISTIC_APPS, *HEAVY_APPS]
}


def get_app(name: str) -> App:
    """The app called ``name``; ``KeyError`` lists the valid names."""
    try:
        return APPS[name]
    except KeyError:
        raise KeyError(f"unknown app {name!r}; known: {', '.join(APPS)}") from None


__all__ = ["APPS", "App", "Launch", "Plan", "get_app"]
