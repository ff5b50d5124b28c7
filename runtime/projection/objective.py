"""``--objective``, ``--deadline`` and ``--max-slowdown``: one definition for every command
that chooses a device (``clproj run`` in project and route modes, ``clproj
advise-partition``).

Why one module: the flags mirror the settings CLPROJ_OBJECTIVE, CLPROJ_DEADLINE_S and
CLPROJ_MAX_SLOWDOWN (a flag wins over the setting, docs/settings.md), and the commands
must read, check and pass them on the same way; the rule that applies them is
:func:`runtime.cluster.placement.constrained` (the broker's) and
:func:`runtime.projection.power.pick`.
"""

from __future__ import annotations

import argparse
from typing import Any

from clproj import settings
from clproj.errors import ClprojError
from clproj.runtime.cluster.placement import Objective

FLAGS = (
    ("objective", "CLPROJ_OBJECTIVE"),
    ("deadline", "CLPROJ_DEADLINE_S"),
    ("max_slowdown", "CLPROJ_MAX_SLOWDOWN"),
)


def add_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """The three flags; ``what`` says what they choose (in the help)."""
    p.add_argument(
        "--objective",
        choices=("time", "energy", "edp"),
        default=None,
        help=f"{what} by projected time (default), energy or energy x delay "
        "(docs/projection.md; setting CLPROJ_OBJECTIVE)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="only devices whose projected launch time is within SECONDS (none: the "
        "fastest); setting CLPROJ_DEADLINE_S",
    )
    p.add_argument(
        "--max-slowdown",
        type=float,
        default=None,
        metavar="FRACTION",
        help="only devices at most FRACTION slower than the fastest (0.1: 10%%); "
        "setting CLPROJ_MAX_SLOWDOWN",
    )


def given(args: argparse.Namespace) -> bool:
    """Whether any of the three flags was on the command line."""
    return any(getattr(args, a, None) is not None for a, _ in FLAGS)


def from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> Objective:
    """The flags, else their settings, checked against the settings' bounds; written into
    ``env`` (an app's environment) so route mode's placement requests carry them."""
    values: list[Any] = []
    for attr, name in FLAGS:
        value = getattr(args, attr, None)
        if value is None:
            value = settings.get(name)
        elif isinstance(value, float):
            hi = settings.setting(name).bounds[1]
            if not 0 <= value <= hi:
                raise ClprojError(
                    f"--{attr.replace('_', '-')} {value!r} is out of range", f"give 0 to {hi:g}"
                )
        if env is not None:
            env[name] = str(value)
        values.append(value)
    return Objective(str(values[0]), float(values[1]), float(values[2]))


def constrain(projections: list[dict[str, Any]], objective: Objective) -> None:
    """Project mode with a deadline or slowdown bound: each kernel's recommendation is
    the objective's choice among the devices the constraints allow, and the doc records
    the constraints."""
    if not (objective.deadline_s or objective.max_slowdown):
        return
    from clproj.runtime.projection.power import pick

    for doc in projections:
        rows = doc.get("projections") or []
        choice = pick(objective.name, rows, objective.deadline_s, objective.max_slowdown)
        if choice is not None:
            doc["recommended"] = choice
            doc["constraints"] = {
                "deadline_s": objective.deadline_s,
                "max_slowdown": objective.max_slowdown,
            }
