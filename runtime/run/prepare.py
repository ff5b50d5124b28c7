"""What ``clproj run`` settles before the app starts: the device profiles the app's
projections use, and ``--split``'s live profiles and decision file."""

from __future__ import annotations

import os
import sys

from clproj.errors import ClprojError


def pin_profiles(env: dict[str, str], tmp: str, spec: str, mode: str) -> str:
    """Resolve ``--devices`` here, before the app starts, and hand the app the profile files.

    Returns the spec that names the same profiles after the app exits (the files), so
    the projections made in the app and after it are onto the same devices. Why here:
    local devices without a profile are measured now (a progress bar, once per machine);
    inside the app nothing is measured, and its projection thread must not query OpenCL
    either (a daemon thread still inside a pyopencl call when the interpreter finalises
    aborts the app). ``cluster`` (route mode) is resolved inside the app from the nodes'
    profiles; the local devices are resolved here anyway, so the embedded node finds them.
    """
    from clproj.runtime.projection import device_set

    if spec == "cluster":
        if mode != "route":
            raise ClprojError("--devices cluster is for --mode route", "use local or measured")
        if not env.get("CLPROJ_BROKER"):
            device_set.local_profiles(measure_missing=True)
        env["CLPROJ_DEVICES"] = "cluster"
        return "cluster"
    profiles = device_set.resolve(spec, measure_missing=True)
    files = []
    for i, prof in enumerate(profiles):
        path = os.path.join(tmp, f"device-profile-{i}.json")
        prof.save(path)
        files.append(path)
    env["CLPROJ_DEVICES"] = ",".join(files)
    low = [p.key for p in profiles if p.low_confidence]
    if low:
        print(
            f"clproj: low-confidence (generic, not measured) profiles: {', '.join(low)}",
            file=sys.stderr,
        )
    return env["CLPROJ_DEVICES"]


def split_environment(env: dict[str, str], tmp: str) -> str:
    """``--split``: turn it on in the app, pin live-adjusted profiles of the local devices
    (a thread-limited PoCL device priced with its live compute units; resolved here
    because the app must not query OpenCL itself, see pin_profiles) and name the
    file the app appends its decisions to. Returns that file."""
    env["CLPROJ_SPLIT"] = "1"
    out = os.path.join(tmp, "splits.jsonl")
    env["CLPROJ_SPLIT_FILE"] = out
    if not env.get("CLPROJ_SPLIT_DEVICES"):
        try:
            from clproj.devices.discovery import opencl_devices
            from clproj.runtime.partition.advisor import profile_for_live_device

            files = []
            for i, dev in enumerate(opencl_devices()):
                prof = profile_for_live_device(dev, measure_missing=True)
                files.append(os.path.join(tmp, f"split-profile-{i}.json"))
                prof.save(files[-1])
            env["CLPROJ_SPLIT_DEVICES"] = ",".join(files)
        except Exception as exc:  # the nodes' own profiles are used instead
            print(f"clproj: live device profiles for --split not resolved: {exc}", file=sys.stderr)
    return out
