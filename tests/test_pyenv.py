"""clproj.pyenv.installed agrees with importlib.metadata, which it replaces at start-up."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from clproj import pyenv


def test_installed_agrees_with_importlib_metadata():
    try:
        importlib.metadata.distribution("clproj")
        expected = True
    except importlib.metadata.PackageNotFoundError:
        expected = False
    assert pyenv.installed() is expected


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("clproj-0.1.0.dist-info", True),
        ("CLPROJ-2.0.dist-info", True),
        ("clproj.egg-info", True),
        ("clproj-0.1.0-py3.11.egg-info", True),
        ("clproj_extra-1.0.dist-info", False),
        ("clprojx-1.0.dist-info", False),
        ("clproj", False),
    ],
)
def test_a_metadata_folder_on_the_path_is_what_installed_means(tmp_path, monkeypatch, name, found):
    (tmp_path / name).mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path)])
    assert pyenv.installed() is found
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    try:
        importlib.metadata.distribution("clproj")
        metadata_finds = True
    except importlib.metadata.PackageNotFoundError:
        metadata_finds = False
    if name.endswith(".dist-info"):  # a bare folder is enough for both only for dist-info
        assert metadata_finds is found


def test_helpers_run_on_the_interpreter_clproj_run_hands_them(tmp_path, monkeypatch):
    """Inside a C app the embedded interpreter's sys.executable is the first python3 on
    PATH, possibly a pyenv shim (a shell script): helpers take clproj run's own instead,
    and without it never a script."""
    monkeypatch.setenv("CLPROJ_PYTHON", sys.executable)
    assert pyenv.helper_python() == sys.executable
    monkeypatch.delenv("CLPROJ_PYTHON")
    shim = tmp_path / "python3"
    shim.write_text('#!/bin/sh\nexec python3 "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(shim))
    chosen = pyenv.helper_python()
    assert chosen != str(shim) and chosen.endswith("python3")
    monkeypatch.setenv("CLPROJ_PYTHON", str(tmp_path / "missing"))  # not executable: ignored
    assert pyenv.helper_python() == chosen


def test_clproj_run_hands_the_app_its_interpreter():
    from clproj.intercept.environment import shim_environment

    assert shim_environment(mode="observe")["CLPROJ_PYTHON"] == pyenv.helper_python()
