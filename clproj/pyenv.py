"""How clproj's Python reaches interpreters it does not own, without touching the app's.

clproj installs one top-level package, ``clproj``; its subsystems (``clproj.devices``,
``clproj.runtime``, ...) live in folders at the repository root that ``setup.py`` maps
under it. Two kinds of interpreter need to import it:

* the **app's** interpreter (a pyopencl script, or the one the shim embeds in a C app):
  the shim appends :func:`app_import_paths` to the *end* of its ``sys.path`` from
  ``CLPROJ_PYTHON_PATH`` (native/build_shim.py). Nothing goes into ``PYTHONPATH``, so the
  app's own modules come first, its child processes (another Python version, a pip) see
  their own paths, and clproj's names cannot collide with the app's: they are all under
  ``clproj``.
* **clproj's own** helper processes (the embedded broker and node, emulation workers):
  :func:`helper_environment` points them at the package, and they run in a folder of
  their own, so an app's ``devices.py`` next to it is never on their path.
"""

from __future__ import annotations

import os
import sys
import sysconfig


def package_root() -> str:
    """The folder that holds the ``clproj`` package (a checkout's root, or site-packages)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def installed() -> bool:
    """Whether this interpreter has clproj installed (editable or wheel): its site folder
    then imports ``clproj`` through the install's own path hooks. Installed means a
    metadata folder of the ``clproj`` distribution on the interpreter's path, where
    ``importlib.metadata.distribution`` looks too; listed directly because importing
    ``importlib.metadata`` took 49 ms (2-core VM) of every ``clproj run`` before the app
    started, and of each helper process."""
    for folder in sys.path:
        try:
            names = os.listdir(folder or os.curdir)
        except OSError:
            continue
        if any(_is_clproj_metadata(name) for name in names):
            return True
    return False


def _is_clproj_metadata(name: str) -> bool:
    """``clproj-<version>.dist-info`` (a wheel or an editable install) or an egg's
    ``clproj[-<version>].egg-info``; another distribution's name differs before the dash
    (``clproj_x-1.0.dist-info``)."""
    low = name.lower()
    return (low.startswith("clproj-") and low.endswith((".dist-info", ".egg-info"))) or (
        low == "clproj.egg-info"
    )


def app_import_paths() -> list[str]:
    """Folders an app's interpreter needs, in order, to import clproj and its dependencies:
    this interpreter's site folders (their ``.pth`` files install an editable install's
    finder), and the package's own folder only where clproj is not installed (a checkout
    run from ``PYTHONPATH``), because that folder also holds the subsystem folders."""
    site = sysconfig.get_paths()
    paths = [site["purelib"], site["platlib"]]
    if not installed():
        paths.insert(0, package_root())
    return list(dict.fromkeys(paths))


def helper_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for one of clproj's own Python processes (``python -m clproj...``): the
    package's folder first on ``PYTHONPATH`` (it may run on an interpreter other than
    clproj's, e.g. the system Python of a C app), and ``PYTHONSAFEPATH`` so that the
    folder it starts in (often the app's) is not put on its path. Preloads are the
    caller's business."""
    env = dict(env)
    env["PYTHONSAFEPATH"] = "1"
    # inside a C app this interpreter is the system's: the folders `clproj run` handed the
    # shim (its venv's site folders) are what the helper needs for clproj's dependencies
    handed = env.get("CLPROJ_PYTHON_PATH") or os.pathsep.join(app_import_paths())
    paths = [
        package_root(),
        *handed.split(os.pathsep),
        *env.get("PYTHONPATH", "").split(os.pathsep),
    ]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return env


def helper_python() -> str:
    """The interpreter to start one of clproj's own Python processes with.

    ``clproj run`` hands the app its own (``CLPROJ_PYTHON``). Without it: this
    interpreter where ``sys.executable`` is one, else the base installation's ``python3``.
    Why not ``sys.executable`` alone: inside a C app the interpreter the shim embeds takes
    it from the first ``python3`` on ``PATH``, which may be a pyenv shim (a shell script:
    slow to start, so a helper outlived an app that exited meanwhile, and it may run
    another Python) or nothing at all.
    """
    from clproj import settings

    handed = str(settings.get("CLPROJ_PYTHON") or "")
    if handed and os.access(handed, os.X_OK):
        return handed
    exe = sys.executable
    if exe and os.path.basename(exe).startswith("python") and _is_binary(exe):
        return exe
    return os.path.join(sys.base_prefix, "bin", "python3")


def _is_binary(path: str) -> bool:
    """An executable file that is not a script (no ``#!``): an interpreter, not a shim."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) != b"#!"
    except OSError:
        return False
