"""The energy part of the HTML reports: a time-vs-energy plot per kernel (one point per
device, the Pareto front marked) and an EPPMiner-style table of GOPS/W per app and
device.

Why a Pareto front and not one ranking: with energy beside time, "the best device" depends
on the objective; the devices on the front are the only sensible choices under any mix of
the two (StarPU's dmda weights, a deadline, EDP), and those off it are beaten on both.
Why GOPS/W: it is how Wang's EPPMiner compares devices on a suite (useful work per joule),
independent of how long an app runs. The figures are projections: a device whose power
comes from the spec rule is marked ``(low)``, never shown as a measurement.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Mapping
from typing import Any


def pareto_front(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """The devices no other device beats on both time and energy (ties keep both)."""
    front = set()
    for d, (t, e) in points.items():
        dominated = any(
            t2 <= t and e2 <= e and (t2 < t or e2 < e) for d2, (t2, e2) in points.items() if d2 != d
        )
        if not dominated:
            front.add(d)
    return front


def kernel_points(kernels: Iterable[Any]) -> list[tuple[str, dict[str, tuple[float, float]]]]:
    """(``app/kernel``, device -> (projected s, projected J)) for kernels (or whole apps,
    ``clproj evaluate``) with a projected energy on at least two devices (one point is
    no trade-off)."""
    out = []
    for k in kernels:
        pts = {
            d: (float(k.projected_s[d]), float(j))
            for d, j in k.projected_j.items()
            if d in k.projected_s and k.projected_s[d] > 0 and j > 0
        }
        if len(pts) >= 2:
            kernel = getattr(k, "kernel", None)
            out.append((f"{k.app}/{kernel}" if kernel else str(k.app), pts))
    return out


def gops_per_watt(kernels: Iterable[Any]) -> dict[str, dict[str, float]]:
    """app -> device -> projected GOPS/W (arithmetic operations / joules / 1e9) over the
    app's kernels that have both counts and a projected energy on the device."""
    ops: dict[str, dict[str, float]] = {}
    joules: dict[str, dict[str, float]] = {}
    for k in kernels:
        if not k.ops:
            continue
        for d, j in k.projected_j.items():
            if j > 0:
                ops.setdefault(k.app, {}).setdefault(d, 0.0)
                ops[k.app][d] += float(k.ops)
                joules.setdefault(k.app, {}).setdefault(d, 0.0)
                joules[k.app][d] += float(j)
    return {a: {d: ops[a][d] / joules[a][d] / 1e9 for d in ops[a]} for a in ops}


def write_plots(kernels: Iterable[Any], directory: str, limit: int = 60) -> list[str]:
    """One small time-vs-energy PNG per kernel (log-log; front points filled and joined)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for i, (label, pts) in enumerate(kernel_points(kernels)[:limit]):
        front = pareto_front(pts)
        fig, ax = plt.subplots(figsize=(3.6, 3.0))
        for d, (t, e) in pts.items():
            on = d in front
            ax.scatter(
                [t], [e], s=30, marker="o", color="#c44e52" if on else "none", edgecolors="#333"
            )
            ax.annotate(d, (t, e), fontsize=6, xytext=(3, 2), textcoords="offset points")
        line = sorted(pts[d] for d in front)
        ax.plot([p[0] for p in line], [p[1] for p in line], color="#c44e52", lw=0.8)
        for values, axis in (
            ([p[0] for p in pts.values()], "x"),
            ([p[1] for p in pts.values()], "y"),
        ):
            # log where the devices span a decade or more, else linear (readable ticks)
            if max(values) >= 10 * min(values):
                (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
            else:
                ax.ticklabel_format(axis=axis, style="sci", scilimits=(-2, 3))
                ax.locator_params(axis=axis, nbins=3)
        ax.set_xlabel("projected time (s)", fontsize=7)
        ax.set_ylabel("projected energy (J)", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_title(f"{label}\nfilled: Pareto front", fontsize=7)
        fig.tight_layout()
        name = f"energy_{i:03d}.png"
        fig.savefig(os.path.join(directory, name), dpi=90)
        plt.close(fig)
        names.append(name)
    return names


def section(kernels: list[Any], directory: str, low: Iterable[str] = ()) -> str:
    """The HTML of the energy part: the plots and the GOPS/W table, or one line saying
    why there is none (no device with a power projection)."""
    images = write_plots(kernels, directory)
    table = gops_per_watt(kernels)
    if not images and not table:
        return (
            "<h2>Energy</h2><p>No kernel has a projected energy on two devices "
            "(no power section or sheet TDP among the judged devices).</p>"
        )
    low = set(low)
    devices = sorted({d for per in table.values() for d in per})
    head = "".join(
        f"<th>{html.escape(d)}{' (low)' if d in low else ''}</th>" for d in ["app", *devices]
    )
    body = "".join(
        "<tr><td>"
        + html.escape(app)
        + "</td>"
        + "".join(f"<td>{per[d]:.3g}</td>" if d in per else "<td>-</td>" for d in devices)
        + "</tr>"
        for app, per in sorted(table.items())
    )
    return (
        "<h2>Energy: projected time vs energy per kernel</h2>"
        + "<p>One point per device; filled and joined: the Pareto front (no other device "
        + "is both faster and uses less energy).</p>"
        + "".join(f'<img src="{n}">' for n in images)
        + "<h2>Projected GOPS/W per app and device (EPPMiner-style)</h2>"
        + "<p>Arithmetic operations counted by the emulator over projected joules; "
        + "(low): power from the spec rule, not measured.</p>"
        + f"<table><tr>{head}</tr>{body}</table>"
    )
