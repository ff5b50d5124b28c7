"""``clproj validate --report DIR``: an HTML page with the tables and scatter plots.

One log-log scatter PNG per judged device (projected vs measured kernel totals, with the
ratio bands) beside the summary tables, for reading a suite's result at a glance. Apart
from the text tables because it is the only part that needs matplotlib.
"""

from __future__ import annotations

import html
import os
from typing import Any

from clproj.runtime.evaluation.validate_scores import BAND_2X, BAND_25
from clproj.runtime.evaluation.validate_tables import (
    device_cell,
    device_metrics,
    model_rows,
    pct,
    ratio_text,
    worst_rows,
)


def write_report(val: Any, directory: str) -> str:
    """``index.html`` with the summary tables and one log-log scatter PNG per device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    s = val.summary()
    images = []
    for d in val.devices:
        ks = [k for k in val.kernels if d in k.devices]
        if not ks:
            continue
        xs = [k.measured_s[d] for k in ks]
        ys = [k.projected_s[d] for k in ks]
        fig, ax = plt.subplots(figsize=(5.5, 5))
        lo = min(*xs, *ys) / 3
        hi = max(*xs, *ys) * 3
        ax.fill_between(
            [lo, hi],
            [lo * BAND_2X[0], hi * BAND_2X[0]],
            [lo * BAND_2X[1], hi * BAND_2X[1]],
            color="#eee",
            label="0.5-2x",
        )
        ax.fill_between(
            [lo, hi],
            [lo * BAND_25[0], hi * BAND_25[0]],
            [lo * BAND_25[1], hi * BAND_25[1]],
            color="#cde",
            label="0.8-1.25x",
        )
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        colors = {"C": "#c44e52", "G": "#4c72b0", "L": "#55a868", "D": "#8172b2"}
        for k, x, y in zip(ks, xs, ys, strict=True):
            b = k.bound.get(d, "?")
            ax.scatter([x], [y], s=22, color=colors.get(b, "#777"))
            ax.annotate(
                f"{k.app}/{k.kernel}", (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points"
            )
        for b, c in colors.items():
            ax.scatter([], [], color=c, s=22, label=f"bound {b}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured kernel total (s)")
        ax.set_ylabel("projected kernel total (s)")
        m = s["per_device"][d]
        ax.set_title(
            f"{val.device_names[d]}\nmedian {ratio_text(m['median_ratio'])}, MAPE {pct(m['mape'])}",
            fontsize=9,
        )
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        name = f"scatter_{''.join(c if c.isalnum() else '_' for c in d)}.png"
        fig.savefig(os.path.join(directory, name), dpi=90)
        plt.close(fig)
        images.append(name)

    def table(header: list[str], rows: list[list[Any]]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
        )
        return f"<table><tr>{head}</tr>{body}</table>"

    dev_rows = [
        [device_cell(val, d), val.device_names[d], *device_metrics(m)]
        for d, m in s["per_device"].items()
    ]
    kernel_rows = [
        [
            k.app,
            k.kernel,
            f"{k.launches_matched}/{k.launches_truth}",
            *[
                f"{ratio_text(k.ratio(d))} {k.bound.get(d, '')}" if d in k.devices else "-"
                for d in val.devices
            ],
            k.best_measured or "-",
            k.best_projected or "-",
            pct(k.penalty),
            pct(k.relative_error),
        ]
        for k in val.kernels
    ]
    worst = worst_rows(val, with_confidence=False)
    app_rows = [
        [
            r.app,
            "ok" if r.ok else f"FAILED: {r.error}",
            f"{r.wall_s:.1f} s",
            "; ".join(val.notes.get(r.app, [])),
        ]
        for r in val.runs
    ]
    pair_rows = [
        [" vs ".join(p["devices"]), p["kernels"], f"{p['agree']}/{p['kernels']}"]
        for p in s["pairs"]
    ]
    from clproj.runtime.evaluation.energy_html import section as energy_section

    energy = energy_section(
        val.kernels, directory, low={d for k in val.kernels for d in k.power_low}
    )
    models = ""
    if val.models:
        m_header, m_rows, trained = model_rows(val)
        notes = "".join(f"<p>{html.escape(t)}</p>" for t in trained)
        models = f"<h2>Models side by side</h2>{table(m_header, m_rows)}{notes}"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>clproj validate</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}}</style></head>
<body><h1>clproj validation: {html.escape(val.suite)}</h1>
<p>Truth: {html.escape(val.truth_dir)}. Best device chosen for {s["best_chosen"]}/{s["kernels"]} kernels;
mean penalty {pct(s["mean_penalty"])} (max {pct(s["max_penalty"])}); mean relative error
{pct(s["mean_relative_error"])}. Run took {val.wall_s:.0f} s.</p>
<h2>Per device</h2>{table(["label", "device", "kernels", "median proj/meas", "within 0.8-1.25x", "within 0.5-2x", "MAPE", "max off-factor"], dev_rows)}
{models}
<h2>Device order</h2>{table(["pair", "kernels", "order agrees"], pair_rows)}
<h2>Per kernel</h2>{table(["app", "kernel", "launches judged", *[f"{d} ratio" for d in val.devices], "best", "picked", "penalty", "rel. err"], kernel_rows)}
<h2>Worst kernels</h2>{table(["app", "kernel", "device", "measured", "projected", "ratio", "bound", "proj. energy", "proj. power", "emulation"], worst)}
<h2>Projected vs measured</h2>{"".join(f'<img src="{n}">' for n in images)}
{energy}
<h2>Apps</h2>{table(["app", "status", "run", "notes"], app_rows)}
<h2>Devices not judged</h2>{table(["device", "why"], [list(i) for i in sorted(val.skipped_devices.items())])}
</body></html>"""
    path = os.path.join(directory, "index.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
