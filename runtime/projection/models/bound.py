"""Panwar et al.'s bound model with this project's additions, behind the model interface."""

from __future__ import annotations

from typing import Any

from clproj.runtime.projection.model import project
from clproj.runtime.projection.models.base import ModelPrediction


class BoundModel:
    """Wraps :func:`runtime.projection.model.project` unchanged (the reference model)."""

    name = "bound"

    def predict(
        self, profile: dict[str, Any], device: Any, footprint_bytes: float | None = None
    ) -> ModelPrediction:
        p = project(profile, device, footprint_bytes)
        return ModelPrediction(
            time_s=p.time_s,
            bound=p.bound,
            breakdown={
                "t_compute": p.t_compute,
                "t_global": p.t_global,
                "t_local": p.t_local,
                "t_latency": p.t_latency,
                "t_launch": p.t_launch,
                "tail_factor": p.details.get("tail_factor", 1.0),
            },
        )
