"""argparse value types shared by every subcommand: a bad value is argparse's one-line
usage error (exit 2), never a traceback or a silently absurd setting (``--timeout nan``)."""

from __future__ import annotations

import argparse
import math


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value
