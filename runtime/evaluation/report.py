"""HTML report with PNG plots for ``clproj evaluate`` (the paper's Figures 3 and 4 style).

Per app, the devices' actual and projected times are each normalised to the fastest
device (so the plot compares *relative* performance, which is what device selection
needs), side by side, with the projected bottleneck letter (C/G/L) above each bar.
"""

from __future__ import annotations

import html
import os
from typing import Any


def write_report(evaluation: Any, directory: str) -> str:
    """Write ``index.html`` and its PNGs into ``directory``; returns the HTML path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    apps = evaluation.apps
    devices = evaluation.devices
    n = len(apps)
    cols = 4
    rows = max(1, (n + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    width = 0.38
    for ax, a in zip(axes.flat, apps, strict=False):
        best_a = min(a.actual_s.values())
        best_p = min(a.projected_s.values())
        xs = range(len(devices))
        act = [a.actual_s[d] / best_a for d in devices]
        prj = [a.projected_s[d] / best_p for d in devices]
        ax.bar([x - width / 2 for x in xs], act, width, label="actual", color="#4c72b0")
        bars = ax.bar([x + width / 2 for x in xs], prj, width, label="projected", color="#dd8452")
        for bar, d in zip(bars, devices, strict=True):
            ax.annotate(
                a.bound[d],
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([d[:14] for d in devices], rotation=20, fontsize=7)
        ax.set_title(f"{a.app} (pen {a.penalty:.0%}, err {a.relative_error:.0%})", fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("time relative to the fastest device: actual vs projected (bound letter above)")
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "relative_times.png"), dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 5))
    for d in devices:
        xs = [a.actual_s[d] for a in apps]
        ys = [a.projected_s[d] for a in apps]
        ax.scatter(xs, ys, label=d, s=18)
    lo = min(min(a.actual_s.values()) for a in apps) / 2
    hi = max(max(a.actual_s.values()) for a in apps) * 2
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("projected time (s)")
    ax.legend(fontsize=7)
    ax.set_title("absolute time: projected vs measured")
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "absolute_times.png"), dpi=90)
    plt.close(fig)

    s = evaluation.summary()
    rows_html = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(c))}</td>"
            for c in (
                a.app,
                a.best_actual,
                a.best_projected,
                f"{a.penalty:.1%}",
                f"{a.relative_error:.1%}",
                " ".join(f"{d}:{a.bound[d]}" for d in devices),
            )
        )
        + "</tr>"
        for a in apps
    )
    dev_rows = "".join(
        f"<tr><td>{html.escape(d)}</td><td>{html.escape(evaluation.device_names[d])}</td>"
        f"<td>{s['per_device'][d]['mape']:.1%}</td></tr>"
        for d in devices
    )
    from clproj.runtime.evaluation.energy_html import section as energy_section

    low = {d for a in apps for d, c in a.power_confidence.items() if c == "low"}
    energy = energy_section(apps, directory, low=low).replace("per kernel", "per app (one run)")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>clproj evaluation</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd}}</style></head>
<body><h1>clproj projection accuracy</h1>
<p>{s["apps"]} apps on {len(devices)} devices. Best device chosen for {s["best_chosen"]}/{s["apps"]}
({s["best_chosen_fraction"]:.0%}); mean selection penalty {s["mean_penalty"]:.1%} (max {s["max_penalty"]:.1%});
mean relative error {s["mean_relative_error"]:.1%}.</p>
<h2>Per device</h2><table><tr><th>key</th><th>device</th><th>MAPE</th></tr>{dev_rows}</table>
<h2>Per app</h2><table><tr><th>app</th><th>best (actual)</th><th>best (projected)</th><th>penalty</th>
<th>relative error</th><th>bound</th></tr>{rows_html}</table>
<img src="relative_times.png"><img src="absolute_times.png">
{energy}
<p>Skipped: {html.escape(str(evaluation.skipped))}</p></body></html>"""
    path = os.path.join(directory, "index.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
