"""clproj: projection and routing of OpenCL kernels across heterogeneous devices.

This package holds what every part shares: the command line (``clproj.cli``), console
output helpers (``clproj.console``), errors that name their fix (``clproj.errors``) and
the dependency doctor (``clproj.doctor``). The work itself lives in ``intercept``,
``miniemu``, ``devices`` and ``runtime``.
"""

__version__ = "0.1.0"
