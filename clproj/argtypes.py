"""argparse value types shared by every subcommand: a bad value is argparse's one-line
usage error (exit 2), never a traceback or a silently absurd setting (``--timeout nan``)."""

from __future__ import annotations

import argparse
import math

# The longest time a command may be told to wait: 10^6 s (11.5 days). Why a bound: the
# waits downstream are integers of milliseconds or nanoseconds (ZeroMQ's poll takes a C
# int of milliseconds, 2^31 ms = 24.8 days; Python's waits convert to int), and "1e308"
# is a finite float that passed the old check and then raised OverflowError there.
MAX_SECONDS = 1e6


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 and at most ``MAX_SECONDS``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} seconds is more than the longest wait, {MAX_SECONDS:.0f} s (11.5 days)"
        )
    return value


def count_at_least_1(text: str) -> int:
    """A whole number of repetitions, 1 to 10^6 (``--repeat 0`` would time nothing and
    take a median of no rounds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count from 1 to 1000000")
    return value
