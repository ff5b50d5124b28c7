"""Time models beside the bound model: one interface, several implementations.

``get_model(name)`` returns a fresh instance of ``bound`` (Panwar et al. with this
project's additions, wraps :func:`runtime.projection.model.project`), ``mwp-cwp`` (Hong & Kim's
analytical model), ``learned`` (extremely randomised trees after Braun et al.), or one of
two baselines: ``paper`` (Panwar et al.'s three terms as published, without our additions)
and ``roofline`` (spec-sheet peak flops and bandwidth). ``docs/models.md`` documents each
and compares them with ``clproj evaluate --models bound,paper,roofline,mwp-cwp,learned``.
"""

from __future__ import annotations

from clproj.runtime.projection.models.base import Model, ModelPrediction, TrainingRow

MODEL_NAMES = ("bound", "mwp-cwp", "learned", "paper", "roofline")


def get_model(name: str, **kwargs: object) -> Model:
    """A new instance of the model called ``name`` (one of :data:`MODEL_NAMES`)."""
    from clproj.errors import ClprojError

    if name == "bound":
        from clproj.runtime.projection.models.bound import BoundModel

        return BoundModel()
    if name == "mwp-cwp":
        from clproj.runtime.projection.models.mwp_cwp import MwpCwpModel

        return MwpCwpModel()
    if name == "paper":
        from clproj.runtime.projection.models.paper import PaperModel

        return PaperModel()
    if name == "roofline":
        from clproj.runtime.projection.models.roofline import RooflineModel

        return RooflineModel()
    if name == "learned":
        from clproj.runtime.projection.models.learned import LearnedModel

        return LearnedModel(**kwargs)  # type: ignore[arg-type]
    raise ClprojError(
        f"unknown model {name!r}", f"use one of {', '.join(MODEL_NAMES)} (comma-separated)"
    )


__all__ = ["MODEL_NAMES", "Model", "ModelPrediction", "TrainingRow", "get_model"]
