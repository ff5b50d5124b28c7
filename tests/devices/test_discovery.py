"""clproj.devices.discovery: facts about this host's devices that OpenCL does not report."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clproj.devices.discovery import CPU_CACHE_DIR, host_l1_data_bytes


def fake_caches(root: Path, entries: list[tuple[str, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    return root


@pytest.mark.parametrize(
    ("entries", "expect"),
    [
        ([("1", "Instruction", "64K"), ("1", "Data", "48K"), ("2", "Unified", "2048K")], 48 << 10),
        ([("1", "Data", "32K")], 32 << 10),
        ([("1", "Data", "1M")], 1 << 20),
        ([("2", "Unified", "1024K")], None),  # no level-1 data cache listed
        ([("1", "Data", "lots")], None),  # unreadable size: unknown, not a guess
        ([], None),
    ],
)
def test_l1_data_cache_from_sysfs(tmp_path, entries, expect):
    assert host_l1_data_bytes(fake_caches(tmp_path / "cache", entries)) == expect


def test_missing_sysfs_is_unknown(tmp_path):
    assert host_l1_data_bytes(tmp_path / "no-such-dir") is None


@pytest.mark.skipif(not CPU_CACHE_DIR.exists(), reason="no Linux sysfs cache topology here")
def test_this_host_reports_a_plausible_l1():
    l1 = host_l1_data_bytes()
    assert l1 is None or 8 << 10 <= l1 <= 4 << 20


def test_add_host_l1_sets_or_clears_the_field_and_its_provenance(monkeypatch):
    from clproj.devices import discovery

    memory, prov = {"l1_data_bytes": 48 << 10}, {"memory.l1_data_bytes": "spec"}
    monkeypatch.setattr(discovery, "host_l1_data_bytes", lambda: 32 << 10)
    discovery.add_host_l1(memory, prov)
    assert memory["l1_data_bytes"] == 32 << 10
    assert prov["memory.l1_data_bytes"] == discovery.L1_DATA_PROVENANCE
    monkeypatch.setattr(discovery, "host_l1_data_bytes", lambda: None)
    discovery.add_host_l1(memory, prov)  # unknown here: another core's value must not stay
    assert "l1_data_bytes" not in memory and "memory.l1_data_bytes" not in prov


def test_pocl_without_a_writable_kernel_cache_is_named_as_the_cause(tmp_path):
    """PoCL offers no device when it cannot write its kernel cache (a read-only HOME, a
    file in the way): the error names that and its fix, not "install OpenCL"."""
    import subprocess
    import sys

    (tmp_path / "file").write_text("x")
    env = dict(os.environ, POCL_CACHE_DIR=str(tmp_path / "file" / "pocl"), POCL_DEVICES="pthread")
    p = subprocess.run(
        [sys.executable, "-m", "clproj.cli", "devices"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert "its kernel cache" in p.stderr and "POCL_CACHE_DIR" in p.stderr
    assert "install an OpenCL implementation" not in p.stderr
