"""Build and install clproj.

Three native parts are built here, never by hand:

* the LD_PRELOAD interception shim, a cffi *embedding* library declared in
  ``native/build_shim.py`` (``cffi_modules``);
* the node's native same-host link, a cffi extension (``native/build_nodelink.py``);
* the Oclgrind statistics plugin (C++), compiled by ``native/build_plugin.py`` from
  our ``build_ext`` step, because Oclgrind loads it with ``dlopen`` and it must not
  depend on Python; likewise the plain-C libraries loaded with ``dlopen`` or ctypes
  (the energy-window preload, the emulator's live pages).

They land inside the Python packages (clproj.intercept, clproj.runtime.cluster.node,
clproj.miniemu), so an editable
install (``pip install -e .``) and a wheel find them the same way.
"""

from __future__ import annotations

import os
import sys

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "native"))


class BuildExtWithPlugin(build_ext):
    """Standard cffi extension build, plus the Oclgrind plugin."""

    def run(self) -> None:
        super().run()
        import build_plugin  # native/build_plugin.py

        target_dir = (
            "miniemu" if self.inplace else os.path.join(self.build_lib, "clproj", "miniemu")
        )
        build_plugin.build(os.path.join(target_dir, build_plugin.PLUGIN_FILENAME))
        import build_c_hosts  # native/build_c_hosts.py: plain-C OpenCL benchmark hosts

        build_c_hosts.build(build_c_hosts.DEFAULT_OUT)
        import build_energy_window  # native/build_energy_window.py: the energy-window preload

        build_energy_window.build(
            os.path.join(
                "devices" if self.inplace else os.path.join(self.build_lib, "clproj", "devices"),
                build_energy_window.LIBRARY_FILENAME,
            )
        )
        import build_live_pages  # native/build_live_pages.py: the emulator's live view

        build_live_pages.build(
            os.path.join(
                "intercept"
                if self.inplace
                else os.path.join(self.build_lib, "clproj", "intercept"),
                build_live_pages.LIBRARY_FILENAME,
            )
        )


TOP_FOLDERS = ("intercept", "miniemu", "devices", "runtime", "benchmarks")
# every package under each folder (clproj.runtime.cluster.node, clproj.devices.microbench, ...)
SUBPACKAGES = [
    name for top in TOP_FOLDERS for name in (top, *(f"{top}.{sub}" for sub in find_packages(top)))
]

setup(
    name="clproj",
    version="0.1.0",
    description="Online performance projection and routing of OpenCL kernels across heterogeneous devices",
    python_requires=">=3.10",
    # One namespace: the subsystem folders keep their places at the repository root and
    # install as clproj.<folder>, so nothing but ``clproj`` enters an app's interpreter.
    packages=["clproj", *(f"clproj.{p}" for p in SUBPACKAGES)],
    package_dir={f"clproj.{top}": top for top in TOP_FOLDERS},
    package_data={
        "clproj.miniemu": ["*.so"],
        "clproj.intercept": ["*.so"],
        "clproj.runtime.cluster.node": ["*.so"],
        "clproj.devices": ["*.so", "profiles/*.json"],
        "clproj.benchmarks.apps": ["*.cl", "c_hosts/*.c", "c_hosts/*.h"],
    },
    install_requires=[
        "pyopencl>=2024.1",
        "cffi>=1.16",
        "numpy>=1.24",
        "nvidia-ml-py>=12.535",
        "pyzmq>=25.0",
        "msgpack>=1.0.5",
        "blake3>=0.4",
        "rich>=13.0",
    ],
    extras_require={
        "dev": [
            "pytest>=7.4",
            "pytest-xdist>=3.3",
            "ruff>=0.4",
            "matplotlib>=3.7",
            "scikit-learn>=1.3",
            "mako>=1.2",
        ],
    },
    setup_requires=["cffi>=1.16"],
    cffi_modules=["native/build_shim.py:ffibuilder", "native/build_nodelink.py:ffibuilder"],
    cmdclass={"build_ext": BuildExtWithPlugin},
    entry_points={"console_scripts": ["clproj=clproj.cli:main"]},
    zip_safe=False,
)
