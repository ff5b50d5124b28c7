"""Which device profile each truth file of ``clproj validate`` is judged on.

Why: a truth file names its device as the device's runtime printed it, and the profiles
chosen with ``--devices`` (default ``measured``: the devices measured for this project)
may have no profile of that name. Handing over a truth file is asking "how right are the
projections on this device?", so such a device is not left out while a profile can stand
in for it: the shipped measured profile of the same name, else the spec sheet its name
names (:func:`devices.specs.spec_for`: the same words, the same board; a spec-sheet profile
is low-confidence, and the tables say which devices were judged on one). Only a device
with neither is left unjudged, with the reason and what to do.

Names are compared as :func:`devices.profile.profile_for_device` compares them (case and
runs of blanks ignored), so a truth file written by another tool still finds its profile.
Kept apart from running apps so that the choice can be tested on the shipped profiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clproj.runtime.evaluation.validate_truth import TruthDevice

CHOSEN = "chosen"  # a profile of --devices has the device's name
MEASURED = "measured profile"  # a shipped measured profile of that name, added
SPEC = "spec sheet"  # the spec-sheet profile of the device's sheet, added


@dataclass(frozen=True)
class Assignment:
    """The profile one truth device is judged on, and why that one."""

    label: str  # the truth file's label
    profile: str  # the profile's key
    profile_name: str  # the device name the profile carries
    source: str  # CHOSEN, MEASURED or SPEC

    @property
    def stand_in(self) -> bool:
        """The profile was added for this truth file, not chosen with --devices."""
        return self.source != CHOSEN


def same_name(a: str | None, b: str | None) -> bool:
    return " ".join((a or "").split()).lower() == " ".join((b or "").split()).lower()


def assign(
    truth: Sequence[TruthDevice], chosen: Sequence[Any], shipped: Sequence[Any]
) -> tuple[dict[str, Assignment], dict[str, str]]:
    """The profile of each truth device (by label), and why the others have none.

    ``chosen``: the profiles of ``--devices``; ``shipped``: every shipped profile
    (:func:`devices.profile.known_profiles`). A chosen profile of the device's name wins,
    measured before spec-sheet ones (a spec sheet of a measured device names it too);
    then a shipped measured profile of that name; then the spec sheet of the name.
    """
    from clproj.devices.specs import spec_for

    def measured_first(profiles: Sequence[Any]) -> list[Any]:
        return sorted(profiles, key=lambda p: p.source_kind == "spec")

    by_key = {p.key: p for p in shipped}
    out: dict[str, Assignment] = {}
    why: dict[str, str] = {}
    for dev in truth:
        mine = measured_first([p for p in chosen if same_name(p.name, dev.name)])
        if mine:
            out[dev.label] = Assignment(dev.label, mine[0].key, mine[0].name, CHOSEN)
            continue
        ours = [p for p in shipped if p.source_kind != "spec" and same_name(p.name, dev.name)]
        if ours:
            out[dev.label] = Assignment(dev.label, ours[0].key, ours[0].name, MEASURED)
            continue
        sheet = spec_for(dev.name)
        profile = by_key.get(sheet.key) if sheet is not None else None
        if profile is not None:
            out[dev.label] = Assignment(dev.label, profile.key, profile.name, SPEC)
            continue
        why[dev.label] = (
            f"no profile named {dev.name!r} and no spec sheet of it; measure it "
            "(clproj profile-device) and pass its profile with --devices"
        )
    return out, why


def run_devices(spec: str, assigned: dict[str, Assignment]) -> str:
    """The ``--devices`` value the apps run with: ``spec`` and every stand-in's key."""
    extra = [a.profile for a in assigned.values() if a.stand_in]
    return ",".join(dict.fromkeys([spec, *extra])) if extra else spec
