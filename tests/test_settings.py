"""The settings table (clproj.settings): parsing, bad values, precedence, and the generated C
header agreeing with Python on the same inputs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clproj import settings, settings_render, settings_schema, settings_table
from clproj.errors import ClprojError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("CLPROJ_CONFIG", str(tmp_path / "absent.toml"))
    settings.reload()
    yield
    settings.reload()


def test_every_name_read_in_the_code_has_a_row():
    names = {s.name for s in settings_table.TABLE}
    assert len(names) == len(settings_table.TABLE)
    for s in settings_table.TABLE:
        assert s.scope in settings_schema.SCOPES and s.description
        assert (s.type == "choice") == bool(s.choices)
        settings.get(s.name)  # every default parses


@pytest.mark.parametrize(
    ("raw", "want"),
    [("1", True), ("TRUE", True), (" yes ", True), ("On", True), ("0", False), ("off", False)],
)
def test_bool_spellings(monkeypatch, raw, want):
    monkeypatch.setenv("CLPROJ_VERIFY", raw)
    assert settings.get("CLPROJ_VERIFY") is want


def test_empty_is_unset(monkeypatch):
    monkeypatch.setenv("CLPROJ_SUMMARY", "")
    monkeypatch.setenv("CLPROJ_TIMING_FIRST", " ")
    monkeypatch.setenv("CLPROJ_EMULATION_MODE", "")
    assert settings.get("CLPROJ_SUMMARY") is True
    assert settings.get("CLPROJ_TIMING_FIRST") == 100
    assert settings.get("CLPROJ_EMULATION_MODE") == "bounded"


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("CLPROJ_VERIFY", "maybe", "is not a boolean"),
        ("CLPROJ_TIMING_FIRST", "1_0", "is not an integer"),
        ("CLPROJ_TIMING_FIRST", "-1", "is not an integer from 0 to 9223372036854775807"),
        ("CLPROJ_ROUTE_WAIT", "inf", "is not a number"),
        ("CLPROJ_ROUTE_WAIT", "0x10", "is not a number"),
        ("CLPROJ_MODE", "Route", "is not a valid value"),
        ("CLPROJ_EMULATION_NICE", "20", "from 0 to 19"),
    ],
)
def test_bad_values_are_one_line_errors(monkeypatch, name, raw, message):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ClprojError, match=message) as err:
        settings.get(name)
    assert f"{name}={raw!r}" in err.value.cause and "\n" not in err.value.cause
    with pytest.raises(ClprojError):
        settings.check_all()


def test_precedence_default_config_environment(tmp_path, monkeypatch):
    conf = tmp_path / "config.toml"
    conf.write_text('timing_every = 7\nhooks = ["a:b", "c:d"]\nsplit = true\n')
    monkeypatch.setenv("CLPROJ_CONFIG", str(conf))
    for name in ("CLPROJ_TIMING_EVERY", "CLPROJ_HOOKS", "CLPROJ_SPLIT", "CLPROJ_SHM_MIN"):
        monkeypatch.delenv(name, raising=False)
    assert settings.get("CLPROJ_TIMING_EVERY") == 7
    assert settings.get("CLPROJ_HOOKS") == ("a:b", "c:d")
    assert settings.get("CLPROJ_SPLIT") is True
    assert settings.get("CLPROJ_SHM_MIN") == 1 << 20
    monkeypatch.setenv("CLPROJ_TIMING_EVERY", "9")
    assert settings.get("CLPROJ_TIMING_EVERY") == 9
    assert settings.from_config_file() == {
        "CLPROJ_TIMING_EVERY": "7",
        "CLPROJ_HOOKS": "a:b,c:d",
        "CLPROJ_SPLIT": "1",
    }
    conf.write_text("timing_evry = 7\n")
    settings.reload()
    with pytest.raises(ClprojError, match="unknown key 'timing_evry'"):
        settings.check_all()


def test_path_expands_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.delenv("CLPROJ_CACHE", raising=False)
    assert settings.get("CLPROJ_CACHE") == "/home/someone/.cache/clproj"
    monkeypatch.setenv("CLPROJ_CACHE", "~/c")
    assert settings.get("CLPROJ_CACHE") == "/home/someone/c"


def test_c_header_is_generated_from_the_table():
    """native/clproj_settings.h is `python -m clproj.settings --c-header`."""
    assert (REPO / settings_render.C_PATH).read_text() == settings_render.c_header()


# (setting, C printf format of its accessor's value) compared below
_C_PROBES = [
    ("CLPROJ_VERIFY", "%d"),
    ("CLPROJ_SUMMARY", "%d"),
    ("CLPROJ_TIMING_FIRST", "%lld"),
    ("CLPROJ_ROUTE_WAIT", "%.17g"),
    ("CLPROJ_MODE", "%s"),
    ("CLPROJ_CACHE", "%s"),
]
_C_INPUTS = {
    "CLPROJ_VERIFY": ["1", " TRUE ", "no", "", "maybe"],
    "CLPROJ_SUMMARY": ["off", "On", "2"],
    "CLPROJ_TIMING_FIRST": ["5", "+7", " 12 ", "-1", "1_0", "abc", "99999999999999999999"],
    "CLPROJ_ROUTE_WAIT": ["1.5", ".5", "1e2", "1.", "inf", "nan", "0x10", "-1", "2e999"],
    "CLPROJ_MODE": ["route", "project", "Route", ""],
    "CLPROJ_CACHE": ["~/x", "/abs/y ", ""],
}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_header_parses_as_python(tmp_path, monkeypatch):
    """A tiny C program against the header prints each value; Python's get() agrees on the
    good inputs, and on the bad ones C warns on stderr and gives the default."""
    body = "".join(
        f'    printf("{fmt}\\n", clproj_setting_{n.removeprefix("CLPROJ_").lower()}());\n'
        for n, fmt in _C_PROBES
    )
    src = tmp_path / "probe.c"
    src.write_text(f'#include "clproj_settings.h"\nint main(void) {{\n{body}    return 0;\n}}\n')
    exe = tmp_path / "probe"
    subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{REPO / 'native'}",
            str(src),
            "-o",
            str(exe),
        ],
        check=True,
    )
    monkeypatch.setenv("HOME", "/home/someone")
    for name, inputs in _C_INPUTS.items():
        for raw in inputs:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CLPROJ_")}
            env[name] = raw
            out = subprocess.run([str(exe)], env=env, capture_output=True, text=True, check=True)
            c_value = out.stdout.splitlines()[[n for n, _ in _C_PROBES].index(name)]
            monkeypatch.setenv(name, raw)
            try:
                py_value = settings.get(name)
            except ClprojError:
                assert name in out.stderr, (name, raw)
                monkeypatch.delenv(name)
                py_value = settings.get(name)
            else:
                assert out.stderr == "", (name, raw, out.stderr)
            fmt = dict(_C_PROBES)[name]
            assert c_value == fmt.replace("lld", "d") % py_value, (name, raw)
