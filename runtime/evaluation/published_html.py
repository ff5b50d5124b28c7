"""``clproj validate-published --report DIR``: the tables and the plots as one HTML page.

One log-log scatter per app (projected vs published time, every judged device, one colour
per vendor: AMD red, NVIDIA green, Intel blue) with the ratio bands of ``clproj validate``;
for mixbench also the projected and published curves (time vs flops/byte, per precision and
device), where the memory plateau, the compute slope and the crossover between them are
compared by eye. Apart from the tables because it is the only part that needs matplotlib.
"""

from __future__ import annotations

import hashlib
import html
import os
from typing import Any

from clproj.runtime.evaluation.published import PublishedValidation
from clproj.runtime.evaluation.published_tables import (
    DEVICE_HEADER,
    METRIC_HEADER,
    crossover_rows,
    device_rows,
    kernel_rows,
    metric_rows,
    projected_only_rows,
    summary_line,
)
from clproj.runtime.evaluation.validate_scores import BAND_2X, BAND_25

VENDOR_COLOURS = {"AMD": "#d62728", "NVIDIA": "#2ca02c", "Intel": "#1f77b4"}


# A figure's file name keeps this much of a label: labels come from --truth paths, and a
# file system takes 255 bytes a name.
SAFE_CHARS = 100


def _safe(name: str, taken: set[str] | None = None) -> str:
    """A file-name part for a label: ASCII letters and digits, the rest ``_``. A long
    label is cut, and a cut one or one whose part another label already took (``taken``,
    which this adds to) gets a hash of the label appended."""
    out = "".join(c if c.isascii() and c.isalnum() else "_" for c in name)
    if len(out) > SAFE_CHARS or (taken is not None and out in taken):
        digest = hashlib.blake2s(name.encode("utf-8", "surrogateescape"), digest_size=4)
        out = f"{out[:SAFE_CHARS]}_{digest.hexdigest()}"
    if taken is not None:
        taken.add(out)
    return out


def _scatter(plt: Any, val: PublishedValidation, app: str, directory: str) -> str | None:
    vendor = {d.label: d.vendor for d in val.devices}
    pts = [
        (k.measured_s[d], k.projected_s[d], d, k.kernel.strip())
        for k in val.kernels
        if k.app == app
        for d in k.devices
    ]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 6))
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    lo, hi = min(*xs, *ys) / 3, max(*xs, *ys) * 3
    for band, colour in ((BAND_2X, "#eee"), (BAND_25, "#cde")):
        ax.fill_between(
            [lo, hi], [lo * band[0], hi * band[0]], [lo * band[1], hi * band[1]], color=colour
        )
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    # One colour per vendor, one marker per kernel (BabelStream) or precision (mixbench's
    # apps are one per precision, so its points share a marker): labels would not fit.
    kinds = list(dict.fromkeys(kernel if app == "babelstream" else app for *_, kernel in pts))
    marker = dict(zip(kinds, "osD^v<>pP*", strict=False))
    for x, y, d, kernel in pts:
        ax.scatter(
            [x],
            [y],
            s=22,
            marker=marker.get(kernel if app == "babelstream" else app, "o"),
            color=VENDOR_COLOURS.get(vendor.get(d, ""), "#777"),
            alpha=0.8,
        )
    for v, c in VENDOR_COLOURS.items():
        if v in {vendor.get(p[2]) for p in pts}:
            ax.scatter([], [], color=c, s=22, label=v)
    if app == "babelstream":
        for k, m in marker.items():
            ax.scatter([], [], color="#555", marker=m, s=22, label=k)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published time per launch (s)")
    ax.set_ylabel("projected time per launch (s)")
    ax.set_title(f"{app}: projected vs published (bands 0.8-1.25x, 0.5-2x)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    name = f"scatter_{_safe(app)}.png"
    fig.savefig(os.path.join(directory, name), dpi=90)
    plt.close(fig)
    return name


def _curves(plt: Any, val: PublishedValidation, directory: str) -> list[str]:
    vendor = {d.label: d.vendor for d in val.devices}
    names: list[str] = []
    taken: set[str] = set()
    for label, per in val.curves.items():
        fig, axes = plt.subplots(1, len(per), figsize=(5.5 * len(per), 4.5), squeeze=False)
        colour = VENDOR_COLOURS.get(vendor.get(label, ""), "#777")
        for ax, (prec, points) in zip(axes[0], per.items(), strict=True):
            x = [p["flops_per_byte"] for p in points]
            ax.plot(x, [p["published_s"] for p in points], "o-", color=colour, label="published")
            proj = [(p["flops_per_byte"], p["projected_s"]) for p in points if p["projected_s"]]
            if proj:
                ax.plot(*zip(*proj, strict=True), "s--", color="k", label="projected", ms=4)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("flops/byte")
            ax.set_ylabel("time per launch (s)")
            ax.set_title(f"{label} {prec.upper()}", fontsize=9)
            ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"curve_{_safe(label, taken)}.png"
        fig.savefig(os.path.join(directory, name), dpi=90)
        plt.close(fig)
        names.append(name)
    return names


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(val: PublishedValidation, directory: str) -> str:
    """``index.html`` with the tables, the scatter per app and (mixbench) the curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    parts = [
        f"<h1>clproj validate-published: {html.escape(val.kind)}</h1>",
        f"<p>Suite {html.escape(val.suite)}; published results {html.escape(val.truth_dir)}; "
        f"took {val.wall_s:.0f} s.</p>",
        "<h2>Published results</h2>",
        _table(DEVICE_HEADER, device_rows(val)),
    ]
    for app in val.apps():
        parts.append(f"<h2>{html.escape(app)}</h2><p>{html.escape(summary_line(val, app))}</p>")
        parts.append(_table(METRIC_HEADER, metric_rows(val, app)))
        img = _scatter(plt, val, app, directory)
        if img:
            parts.append(f'<img src="{img}">')
        parts.append(
            _table(
                ["label", "kernel", "published", "projected", "ratio", "bound"],
                kernel_rows(val, app),
            )
        )
    if val.curves:
        parts.append("<h2>Crossover (first level above 1.1x the level-0 time)</h2>")
        parts.append(_table(["label", "precision", "published", "projected"], crossover_rows(val)))
        parts.append("<h2>Curves</h2>")
        parts += [f'<img src="{n}"><br>' for n in _curves(plt, val, directory)]
    if val.projected_only:
        parts.append("<h2>Projected only (no published result)</h2>")
        parts.append(
            _table(
                ["device", "configuration", "kernel", "projected", "bound"],
                projected_only_rows(val),
            )
        )
    runs = [[r.tag, " ".join(r.args), "ok" if r.ok else f"FAILED: {r.error}",
             f"{r.wall_s:.0f} s" + (" (cached)" if r.cached else ""), len(r.records)]
            for r in val.runs]  # fmt: skip
    parts.append("<h2>Runs</h2>" + _table(["tag", "arguments", "status", "run", "records"], runs))
    if val.errors:
        parts.append("<h2>Not read</h2>" + "".join(f"<p>{html.escape(e)}</p>" for e in val.errors))
    page = (
        '<!doctype html><html><head><meta charset="utf-8"><title>clproj validate-published'
        "</title><style>body{font-family:sans-serif;margin:2em} td,th{padding:2px 8px;"
        "border-bottom:1px solid #ddd;text-align:left}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )
    path = os.path.join(directory, "index.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
