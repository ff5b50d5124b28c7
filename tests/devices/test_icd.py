"""Device identities read through the system's ICD loader (devices.icd) are pyopencl's
devices, in pyopencl's order, and looking up the local profiles imports no pyopencl."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from clproj.devices import discovery
from clproj.devices.icd import LOADER_VARIABLES, IcdDevice, icd_devices
from clproj.errors import ClprojError

FIELDS = [f.name for f in dataclasses.fields(IcdDevice) if f.name != "platform"]


def test_identities_are_pyopencls_devices_in_its_order():
    theirs = discovery.opencl_devices()
    ours = icd_devices()
    if ours is None:  # pyopencl is asked instead: say why, and check that it is
        platforms = {d.platform.int_ptr for d in theirs}
        assert any(os.environ.get(v) for v in LOADER_VARIABLES) or len(platforms) > 1
        assert discovery.device_identities() == theirs
        return
    assert len(ours) == len(theirs)
    for mine, dev in zip(ours, theirs, strict=True):
        assert mine.platform.name == dev.platform.name
        for field in FIELDS:
            assert getattr(mine, field) == getattr(dev, field), field


def test_a_loader_that_cannot_be_loaded_gives_none():
    assert icd_devices("/nonexistent/libOpenCL.so.1") is None


@pytest.mark.parametrize("variable", LOADER_VARIABLES)
def test_a_loader_variable_leaves_the_devices_to_pyopencl(monkeypatch, variable):
    """A system loader need not read them: its devices could be others than pyopencl's."""
    monkeypatch.setenv(variable, "/etc/OpenCL/vendors")
    assert icd_devices() is None
    assert discovery.device_identities() == discovery.opencl_devices()


def test_as_opencl_maps_by_index_and_checks_the_name():
    ours = discovery.device_identities()
    dev = discovery.as_opencl(ours[0], 0)
    assert dev.name == ours[0].name and hasattr(dev, "int_ptr")
    if isinstance(ours[0], IcdDevice):
        wrong = dataclasses.replace(ours[0], name="no such device")
        with pytest.raises(ClprojError, match="is not pyopencl's device 0"):
            discovery.as_opencl(wrong, 0)
        with pytest.raises(ClprojError):
            discovery.as_opencl(ours[0], len(ours))


def test_resolving_the_local_profiles_imports_no_pyopencl():
    """Not pyopencl, nor numpy: 0.21 s before the app (module docstring of devices.icd)."""
    code = (
        "import sys\n"
        "from clproj.devices.local import resolve_all\n"
        "profiles = resolve_all(measure_missing=False)\n"
        "assert profiles, 'no local device'\n"
        "print('pyopencl' in sys.modules, 'numpy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    # (where pyopencl must be asked, test above, it is imported: that is the fallback)
    without = icd_devices() is not None
    assert out.stdout.split() == [str(not without)] * 2, out.stdout + out.stderr
