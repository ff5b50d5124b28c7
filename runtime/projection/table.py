"""The projection table ``clproj run --mode project`` prints after the app: one row per
launch shape (or per kernel launched in many shapes), projected time per device, bound,
energy, recommendation. Apart from runtime.projection.live, which makes the projections:
laying out a table is a job of its own."""

from __future__ import annotations

from collections import Counter
from typing import Any


def _energy_cell(doc: dict[str, Any], p: dict[str, Any]) -> str:
    """A device cell's projected energy (J) and average power (W) beside its time;
    ``no power`` where the device has none (never a guess)."""
    if p.get("energy_j") is None:
        return ", no power" if "energy_j" in p else ""
    low = " (low)" if p.get("power_confidence") == "low" else ""
    watts = f" {p['power_w']:.3g} W" if p.get("power_w") is not None else ""
    return f", {p['energy_j']:.3g} J{watts}{low}"


def _since_cell(doc: dict[str, Any]) -> str:
    """How long after its launch a projection existed, and whether the app still ran."""
    since = doc.get("since_launch_s")
    if since is None or not doc.get("projections"):
        return ""
    when = {"during app": ", app running", "after app": ", after app"}.get(doc.get("live", ""), "")
    return f"{since:.2f} s after launch{when}"


# A kernel launched in more shapes than this (PolyBench lu: 4095 NDRanges a kernel) gets
# one row in the table, over all its shapes; --json keeps every launch's projection.
SHAPES_PER_ROW = 4


def _most_common(values: list[str]) -> tuple[str, int]:
    """The most frequent value and its count (the first seen among equals)."""
    return Counter(values).most_common(1)[0] if values else ("", 0)


def _recommended(doc: dict[str, Any]) -> str:
    return doc.get("recommended") or f"error: {doc.get('error')}"


def _profile(doc: dict[str, Any]) -> str:
    """Where a projection's kernel profile came from: the disk cache, or its confidence."""
    return "cache" if doc.get("cached") else doc.get("emulation", {}).get("confidence", "")


def _device_cell(docs: list[dict[str, Any]], device: str) -> str:
    """A device's cell: the projected time (the mean over the shapes of a grouped row),
    the bound most of them have, energy where every one has it."""
    got = [(d, p) for d in docs for p in d.get("projections", []) if p["device"] == device]
    if not got:
        return "-"
    mean_s = sum(p["time_s"] for _, p in got) / len(got)
    bound, _ = _most_common([p["bound"] for _, p in got])
    if len(got) == 1:
        return f"{mean_s * 1e6:.1f} us {bound}" + _energy_cell(*got[0])
    energy = [p["energy_j"] for _, p in got if p.get("energy_j") is not None]
    cell = f"{mean_s * 1e6:.1f} us {bound} (mean of {len(got)})"
    if len(energy) == len(got):
        cell += f", {sum(energy) / len(energy):.3g} J"
    return cell


def _measured_cell(
    docs: list[dict[str, Any]], kernel_row: dict[str, Any], shapes: int
) -> str | None:
    """What the launch took on the app's own device. A kernel of one shape: its mean over
    all its timed launches. A row that is one of a kernel's several shapes: that shape's
    recorded launch (the record's profiling-event time; the shape's first launch, so it
    may hold a driver's first-launch work), marked "first". Why not the kernel's mean
    there: one kernel launched at 524,288 and at 2 work-items (a reduction's stages) has
    a mean that is neither launch's time. A row over many shapes: the kernel's mean."""
    device = str(kernel_row.get("device") or docs[0].get("measured_device") or "")[:20]
    mean = kernel_row.get("mean_ns")
    own = docs[0].get("measured_time_ns") if len(docs) == 1 and shapes > 1 else None
    if own is not None:
        return f"{own / 1e3:.1f} us on {device} (first)"
    if mean is None:
        return None
    return f"{mean / 1e3:.1f} us on {device}" + (" (kernel mean)" if shapes > 1 else "")


def _row_groups(projections: list[dict[str, Any]], most: int) -> list[list[dict[str, Any]]]:
    """The table's rows: one per projection, except that a kernel with more than ``most``
    projections gets a single row for them all (in first-launch order)."""
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for doc in projections:
        by_kernel.setdefault(doc["kernel"], []).append(doc)
    rows: list[list[dict[str, Any]]] = []
    for docs in by_kernel.values():
        rows += [docs] if len(docs) > most else [[d] for d in docs]
    return rows


def _shape_name(doc: dict[str, Any]) -> str:
    """``kernel[global size]`` of a launch-projection doc."""
    return f"{doc['kernel']}[{'x'.join(str(v) for v in doc['global_size'])}]"


def print_projections(
    projections: list[dict[str, Any]],
    measured_rows: list[dict[str, Any]],
    to: Any = None,
    shapes_per_row: int = SHAPES_PER_ROW,
) -> None:
    """One row per recorded launch shape (a kernel launched in many shapes: one row over
    them: over ``shapes_per_row``): projected time per device, bound, recommendation; on
    the console ``to`` (stdout unless told). Why grouped: a launch-heavy app projected
    thousands of shapes, a table nobody reads that took rich 7 s to lay out."""
    from clproj.console import print_table, stdout

    devices: list[str] = []
    low: set[str] = set()
    for doc in projections:
        for p in doc.get("projections", []):
            if p["device"] not in devices:
                devices.append(p["device"])
            if p.get("low_confidence"):
                low.add(p["device"])
    measured = {r["kernel"]: r for r in measured_rows}
    shapes = Counter(doc["kernel"] for doc in projections)
    rows = []
    for docs in _row_groups(projections, shapes_per_row):
        doc = docs[0]
        pick, n = _most_common([_recommended(d) for d in docs])
        if len(docs) == 1:
            name = _shape_name(doc)
        else:
            name, pick = f"{doc['kernel']}[{len(docs)} shapes]", f"{pick} ({n} of {len(docs)})"
        rows.append(
            (
                name,
                _measured_cell(docs, measured.get(doc["kernel"], {}), shapes[doc["kernel"]]),
                *[_device_cell(docs, d) for d in devices],
                pick,
                _most_common([_profile(d) for d in docs])[0],
                _since_cell(doc),
            )
        )
    print_table(
        [
            "kernel",
            "measured",
            # the flag on a line of its own: a narrow column wraps a header at its blanks
            *(d + ("\n(LOW confidence)" if d in low else "") for d in devices),
            "recommended",
            "profile",
            "projected",
        ],
        rows,
        title="clproj project: projected device time per kernel (bound: C compute, G global, L local, D dependent-latency)"
        + "".join(
            sorted(
                {f"; recommended by {d.get('objective', 'time')}" for d in projections}
                - {"; recommended by time"}
            )
        ),
        to=to,
    )
    # Launches the app sized from the device's answers: said once per shape.
    notes = {_shape_name(doc): doc["note"] for doc in projections if doc.get("note")}
    for shape, note in notes.items():
        (to or stdout).print(f"clproj: {shape}: {note}", highlight=False, soft_wrap=True)
