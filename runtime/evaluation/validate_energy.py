"""``clproj validate --energy``: a suite's measured windows against the run's projections.

Why a module apart from :mod:`runtime.evaluation.validate`: the time judgement sums every
launch of a kernel against truth files; the energy judgement matches single launch shapes
against windows measured one shape at a time (:mod:`runtime.evaluation.energy_judge`), from
the same project-mode run, so no app runs twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clproj.runtime.evaluation import energy_judge
from clproj.runtime.evaluation.validate_match import project_shapes


def judge_suite_energy(val: Any, docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows, unmatched windows and the per-device summary (:func:`energy_judge.to_doc`)
    of the suite windows in ``docs``, projected by the runs of ``val`` (a Validation)."""
    shapes = {
        r.app: project_shapes((r.doc or {}).get("projections") or [])[0]
        for r in val.runs
        if r.ok and r.doc is not None
    }
    judged = []
    for doc in docs:
        profile = val.profile_named(energy_judge.device_name(doc))
        by_app = {app: energy_judge.shape_projector(s, profile) for app, s in shapes.items()}

        def project(w: energy_judge.Window, by_app: dict[str, Any] = by_app) -> Any:
            one = by_app.get(w.app)
            return None if one is None else one(w)

        judged.append(energy_judge.judge(doc, project, energy_judge.of_suite))
    return energy_judge.to_doc(judged)
