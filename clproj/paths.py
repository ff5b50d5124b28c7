"""Where clproj keeps its per-user caches (device profiles measured on the fly, projections)."""

from __future__ import annotations

import os


def cache_dir(kind: str) -> str:
    """``$CLPROJ_CACHE/<kind>`` (default ``~/.cache/clproj/<kind>``), created on demand."""
    base = os.environ.get("CLPROJ_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "clproj"
    )
    path = os.path.join(base, kind)
    os.makedirs(path, exist_ok=True)
    return path
