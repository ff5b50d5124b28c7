"""Where clproj keeps its per-user caches (device profiles measured on the fly, projections)."""

from __future__ import annotations

import os


def cache_dir(kind: str) -> str:
    """``$CLPROJ_CACHE/<kind>`` (default ``~/.cache/clproj/<kind>``), created on demand."""
    from clproj import settings

    base = settings.get("CLPROJ_CACHE")
    path = os.path.join(base, kind)
    os.makedirs(path, exist_ok=True)
    return path
