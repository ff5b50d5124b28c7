"""The foundation: CLI, device discovery, doctor and the native builds."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

from clproj import native
from clproj.cli import COMMANDS, build_parser, main
from clproj.devices.discovery import list_devices, select_device

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def clproj(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_subcommands():
    text = build_parser([]).format_help()
    for cmd in COMMANDS:
        assert cmd in text


@pytest.mark.parametrize("module", sorted(set(COMMANDS.values())))
def test_command_table_names_what_each_module_registers(module):
    """A command imports only the module COMMANDS names for it: a module registering a
    command the table lacks (or missing one it names) would be unreachable (or fail)."""
    import argparse
    import importlib

    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(sub)
    assert set(sub.choices) == {c for c, m in COMMANDS.items() if m == module}


def test_a_command_imports_only_its_module():
    code = (
        "import sys; from clproj.cli import build_parser; build_parser(['run', '--help']); "
        "print(sorted(m for m in sys.modules if m.startswith('clproj.') and m.endswith('cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "clproj.runtime.run.cli" in out.stdout
    assert "clproj.runtime.cluster.cli" not in out.stdout and "clproj.miniemu.cli" not in out.stdout


def test_devices_json_lists_pocl_cpu():
    out = clproj("devices", "--json")
    assert out.returncode == 0, out.stderr
    devices = json.loads(out.stdout)["devices"]
    assert any(d["type"] == "CPU" and "Portable" in d["platform"] for d in devices)
    for d in devices:
        assert d["compute_units"] >= 1 and d["global_mem_bytes"] > 0


def test_devices_table_has_every_device():
    out = clproj("devices")
    assert out.returncode == 0, out.stderr
    for d in list_devices():
        assert d.name[:10] in out.stdout


def test_two_pocl_drivers_are_visible():
    names = [d.name for d in list_devices()]
    assert any(n.startswith("pthread") for n in names) and any(n.startswith("basic") for n in names)


def test_select_device_by_index_and_name():
    assert select_device(0).name == list_devices()[0].name
    assert "basic" in select_device("basic").name


def test_select_device_unknown_names_the_choices(capsys):
    assert main(["devices", "--json"]) == 0
    from clproj.errors import ClprojError

    with pytest.raises(ClprojError) as err:
        select_device("no-such-device")
    assert "use one of" in str(err.value)


def test_doctor_passes_here():
    out = clproj("doctor", "--json")
    report = json.loads(out.stdout)
    failed = [c for c in report["checks"] if c["required"] and not c["ok"]]
    assert not failed, failed
    assert out.returncode == 0


def test_doctor_reports_fix_for_missing_dependency(monkeypatch):
    from clproj import doctor

    monkeypatch.setattr(
        doctor,
        "probe_oclgrind",
        lambda: (_ for _ in ()).throw(RuntimeError("oclgrind not on PATH")),
    )
    monkeypatch.setattr(doctor.CHECKS[4], "probe", doctor.probe_oclgrind)
    result = {r["check"]: r for r in doctor.run_checks()}["Oclgrind"]
    assert not result["ok"] and "apt-get install -y oclgrind" in result["fix"]


def test_native_parts_are_built_and_load():
    ctypes.CDLL(native.oclgrind_plugin())
    assert native.shim_library().endswith(".so")


def test_docs_settings_is_generated_from_the_table():
    """docs/settings.md is `python -m clproj.settings`: edit the table, then regenerate."""
    from clproj import settings_render

    with open(os.path.join(REPO_ROOT, "docs", "settings.md"), encoding="utf-8") as fh:
        assert fh.read() == settings_render.markdown()


def test_settings_precedence_config_file_then_environment(tmp_path, monkeypatch):
    from clproj import settings
    from clproj.errors import ClprojError

    conf = tmp_path / "config.toml"
    conf.write_text('cold_profile = "off"\nforeign_machine = true\n')
    monkeypatch.setenv("CLPROJ_CONFIG", str(conf))
    monkeypatch.delenv("CLPROJ_COLD_PROFILE", raising=False)
    monkeypatch.delenv("CLPROJ_FOREIGN_MACHINE", raising=False)
    assert settings.get("CLPROJ_COLD_PROFILE") == "off"
    assert settings.get("CLPROJ_FOREIGN_MACHINE") is True
    monkeypatch.setenv("CLPROJ_COLD_PROFILE", "tiny")
    assert settings.get("CLPROJ_COLD_PROFILE") == "tiny"
    monkeypatch.setenv("CLPROJ_FOREIGN_MACHINE", "maybe")
    with pytest.raises(ClprojError, match="CLPROJ_FOREIGN_MACHINE='maybe'"):
        settings.get("CLPROJ_FOREIGN_MACHINE")
    conf.write_text("cold_profile = [")
    settings.reload()  # the config file is read once per process
    monkeypatch.delenv("CLPROJ_COLD_PROFILE")
    with pytest.raises(ClprojError, match="config file"):
        settings.get("CLPROJ_COLD_PROFILE")
