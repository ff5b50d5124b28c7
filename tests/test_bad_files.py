"""Files a user hands clproj by path (device profiles, sheets, the config file, results):
each hostile one is one ClprojError naming it, never a hang, a MemoryError or a
traceback, and ``--json`` still prints a document.

The files are made here the way a careless or hostile user makes them: a device file, a
FIFO, a file too large to be one, JSON or TOML nested past the parser's recursion, a
profile reusing a shipped profile's key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from clproj import settings
from clproj.devices.profile import load_profile
from clproj.devices.sheet import read_sheet
from clproj.errors import ClprojError
from clproj.runtime.projection import device_set

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "devices" / "profiles" / "measured" / "pocl-pthread-amd-epyc.json"


def _deep_json(path: Path) -> str:
    path.write_text("[" * 100_000 + "]" * 100_000)
    return str(path)


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def _huge(path: Path) -> str:
    with open(path, "wb") as fh:
        fh.truncate(64 << 20)  # sparse: 64 MiB of zeros, four times a profile's limit
    return str(path)


def _link_loop(path: Path) -> str:
    other = path.with_name("other.json")
    os.symlink(other, path)
    os.symlink(path, other)
    return str(path)


def _bom(path: Path) -> str:
    path.write_bytes(b"\xef\xbb\xbf" + SHIPPED.read_bytes())  # a Windows editor's save
    return str(path)


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda p: "/dev/zero", "is a character device, not a regular file"),
        (_fifo, "is a FIFO"),
        (_huge, "more than the 16777216 accepted"),
        (_deep_json, "nests JSON too deeply"),
        (_link_loop, "Too many levels of symbolic links"),  # was: "no device profile file"
    ],
    ids=["dev-zero", "fifo", "huge", "deep", "link-loop"],
)
def test_a_hostile_device_profile_file_is_one_error(
    tmp_path: Path, make: Callable[[Path], str], expect: str
) -> None:
    path = make(tmp_path / "profile.json")
    with pytest.raises(ClprojError, match=expect) as err:
        load_profile(path)
    assert "\n" not in err.value.cause and "device profile" in err.value.cause


def test_a_byte_order_mark_is_no_error(tmp_path: Path) -> None:
    assert load_profile(_bom(tmp_path / "bom.json")).key == "pocl-pthread-amd-epyc"


@pytest.mark.parametrize("key", ["../../x", "a\nb", "with blank", "", "k" * 129])
def test_a_profile_key_is_a_name_without_blanks_or_separators(tmp_path: Path, key: str) -> None:
    doc = json.loads(SHIPPED.read_text())
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**doc, "key": key}))
    with pytest.raises(ClprojError, match="field key"):
        load_profile(str(path))


def test_a_profile_reusing_a_shipped_key_is_refused_beside_it(tmp_path: Path) -> None:
    """Two different profiles under one key: one column, one choice, the other silently
    gone (a CPU profile answered as 'h100-sxm-spec'). The same profile named twice is
    one device."""
    doc = json.loads(SHIPPED.read_text())
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**doc, "key": "h100-sxm-spec"}))
    with pytest.raises(ClprojError, match="two different profiles have the key 'h100-sxm-spec'"):
        device_set.resolve(f"{path},h100-sxm-spec")
    assert [p.key for p in device_set.resolve("h100-sxm-spec,all")].count("h100-sxm-spec") == 1
    assert [p.key for p in device_set.resolve(f"{path}")] == ["h100-sxm-spec"]  # alone: fine


def test_a_sheet_nested_past_recursion_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n")  # 50 KB: under the limit
    with pytest.raises(ClprojError, match="nests tables too deeply"):
        read_sheet(str(path))


@pytest.mark.parametrize("kind", ["deep", "dev-zero", "directory"])
def test_a_hostile_config_file_is_one_error(tmp_path: Path, monkeypatch, kind: str) -> None:
    if kind == "deep":
        path = tmp_path / "config.toml"
        path.write_text("a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n")
        expect = "nests tables too deeply"
    elif kind == "dev-zero":
        path, expect = Path("/dev/zero"), "is a character device"
    else:
        path, expect = tmp_path, "is a directory"
    monkeypatch.setenv("CLPROJ_CONFIG", str(path))
    settings.reload()
    try:
        with pytest.raises(ClprojError, match=expect):
            settings.get("CLPROJ_DEVICES")
    finally:
        monkeypatch.delenv("CLPROJ_CONFIG")
        settings.reload()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        cwd=REPO,
        env={**os.environ, "POCL_DEVICES": "pthread", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_commands_print_an_error_document_on_failure(tmp_path: Path) -> None:
    proc = _cli("project", str(tmp_path / "missing.clrec"), "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["format"] == "clproj.error" and doc["status"] == 2
    assert "no such file" in doc["error"] and doc["fix"]
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli("project", str(tmp_path / "missing.clrec"))  # no --json: stdout stays empty
    assert proc.returncode == 2 and proc.stdout == ""


def test_project_takes_its_devices_from_the_setting(tmp_path: Path) -> None:
    """``--devices`` mirrors CLPROJ_DEVICES (docs/settings.md) in ``clproj project`` too."""
    apps = json.loads(
        (REPO / "benchmarks/results/kernel-profiles/aes-paper-single.json").read_text()
    )
    profile = tmp_path / "aes.json"  # one kernel profile out of the app's cache file
    profile.write_text(json.dumps(apps["groups"][0]["variants"][0]["profile"]))
    proc = _cli("project", str(profile), "--json", CLPROJ_DEVICES="h100-sxm-spec,h200-spec")
    assert proc.returncode == 0, proc.stderr
    keys = {p["device_key"] for p in json.loads(proc.stdout)["projections"]}
    assert keys == {"h100-sxm-spec", "h200-spec"}
    proc = _cli("project", str(profile), CLPROJ_DEVICES="no-such-profile")
    assert proc.returncode == 2 and "no device profile with key 'no-such-profile'" in proc.stderr
    proc = _cli("project", str(profile), "--devices", "h200-spec", "--json",
                CLPROJ_DEVICES="no-such-profile")  # fmt: skip
    assert proc.returncode == 0  # the option wins over the setting


def test_records_of_a_folder_with_an_unreadable_file_is_no_clean_listing(tmp_path: Path) -> None:
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "broken.clrec").write_bytes(b"")
    proc = _cli("records", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "0 launch record(s)" in proc.stdout and "1 unreadable" in proc.stdout
    proc = _cli("records", str(tmp_path), "--json")
    assert proc.returncode == 2
    (row,) = json.loads(proc.stdout)["records"]
    assert "broken.clrec" in row["path"] and row["error"]
