"""clproj: projection and routing of OpenCL kernels across heterogeneous devices.

Everything clproj installs lives under this one name. This package holds what every part
shares: the command line (``clproj.cli``), settings (``clproj.settings``), console output
(``clproj.console``), errors that name their fix (``clproj.errors``) and the dependency
doctor (``clproj.doctor``). The work itself lives in ``clproj.intercept``,
``clproj.miniemu``, ``clproj.devices`` and ``clproj.runtime``, whose folders sit at the
repository root (docs/layout.md).
"""

import os as _os

__version__ = "0.1.0"
# What tells this package from an app's own module named clproj in one interpreter (the
# shim's start-up inside the app: native/build_shim.py)
PACKAGE_ID = "clproj"

# In a checkout the subsystem folders are the package's siblings: ``setup.py`` maps them
# under ``clproj`` for an install, and this makes a checkout on PYTHONPATH (no install, as
# on a machine lent for measurements) resolve ``clproj.devices`` the same way. A wheel has
# them inside the package, found first.
_root = _os.path.dirname(_os.path.dirname(_os.path.realpath(__file__)))
if _os.path.isfile(_os.path.join(_root, "setup.py")) and _os.path.isdir(
    _os.path.join(_root, "intercept")
):
    __path__.append(_root)
