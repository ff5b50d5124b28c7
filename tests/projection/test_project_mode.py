"""`clproj run --mode project`: every distinct kernel of an unmodified app gets projected."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import clproj_project, own_cache_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_project(
    cmd: list[str], tmp_path, path: str | None = None, options: tuple[str, ...] = ()
) -> dict:
    """``clproj run --mode project --json`` with a projection cache of this test's own
    (the session's device profiles are copied in, so a device is measured once a session)."""
    env = own_cache_env(tmp_path)
    if path is not None:
        env["PATH"] = path
    out = subprocess.run(
        [*clproj_project("--record", str(tmp_path / "rec"), *options), "--", *cmd],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout[out.stdout.index("{") :])


def check_projections(doc: dict, kernels: set[str]) -> None:
    projected = {p["kernel"] for p in doc["projections"] if p.get("projections")}
    assert kernels <= projected, doc["projections"]
    for p in doc["projections"]:
        assert p["recommended"] in {q["device"] for q in p["projections"]}
        assert all(q["time_s"] > 0 and q["bound"] in "CGLD" for q in p["projections"])


def test_pyopencl_app_under_project_mode(tmp_path):
    doc = run_project(
        [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "reduction", "--size", "small"],
        tmp_path,
    )
    check_projections(doc, {"vecadd", "reduce_sum"})
    # One record per distinct signature: reduction's two stages differ in NDRange.
    assert len([p for p in doc["projections"] if p["kernel"] == "reduce_sum"]) == 2
    # The second run of the same app is answered from the per-signature cache.
    again = run_project(
        [sys.executable, "-m", "clproj.benchmarks.apps", "vecadd", "--size", "small"], tmp_path
    )
    assert all(p["cached"] for p in again["projections"])


def test_project_mode_recommends_by_energy(tmp_path):
    """``--objective energy``: each kernel's recommendation is the device of least
    projected energy; the device without a power projection (the CPU) is never it."""
    devices = "h100-sxm-spec,v100-pcie-spec,pocl-pthread-amd-epyc"
    doc = run_project(
        [
            sys.executable,
            "-m",
            "clproj.benchmarks.apps",
            "vecadd",
            "heavy_gather",
            "--size",
            "small",
        ],
        tmp_path,
        options=("--devices", devices, "--objective", "energy"),
    )
    check_projections(doc, {"vecadd", "heavy_gather"})
    for p in doc["projections"]:
        assert p["objective"] == "energy"
        energies = {q["device"]: q["energy_j"] for q in p["projections"]}
        assert energies["pocl-pthread-amd-epyc"] is None
        assert all(energies[k] > 0 for k in ("h100-sxm-spec", "v100-pcie-spec"))
        best = min((e, k) for k, e in energies.items() if e is not None)[1]
        assert p["recommended"] == best == p["recommended_by"]["energy"]
        fastest = min(p["projections"], key=lambda q: q["time_s"])["device"]
        assert p["recommended_by"]["time"] == fastest


@pytest.mark.skipif(
    not os.path.exists(os.path.join(REPO, "benchmarks/apps/bin/matmul_lmem")),
    reason="C hosts not built",
)
def test_unmodified_c_binary_under_project_mode(tmp_path):
    doc = run_project([os.path.join(REPO, "benchmarks/apps/bin/matmul_lmem"), "64"], tmp_path)
    check_projections(doc, {"matmul_lmem"})
    assert doc["exit_code"] == 0


@pytest.mark.skipif(
    not os.path.exists(os.path.join(REPO, "benchmarks/apps/bin/reduction")),
    reason="C hosts not built",
)
def test_a_local_argument_of_pointer_size_is_projected(tmp_path):
    """A C reduction of 2,048 values ends with a stage of two work-items, whose ``__local``
    argument is ``clSetKernelArg(k, 2, 8, NULL)``: to a shim without argument information
    (PoCL builds without -cl-kernel-arg-info) that is also a NULL buffer. The record keeps
    the NULL with its size, and the emulation sets it as 8 bytes of local memory: every
    stage is projected (not refused as "args[2] is null, but argument 2 of reduce_sum
    is a __local pointer")."""
    from clproj.intercept.record import load

    doc = run_project([os.path.join(REPO, "benchmarks/apps/bin/reduction"), "2048"], tmp_path)
    stages = [p for p in doc["projections"] if p["kernel"] == "reduce_sum"]
    assert sorted(p["global_size"] for p in stages) == [[2], [1024]]
    assert all(p.get("projections") and not p.get("error") for p in stages), stages
    last = [load(str(f)) for f in (tmp_path / "rec" / "records").glob("*.clrec")]
    local = [r.args[2] for r in last if r.global_size == [2]]
    assert [(a.kind, a.size) for a in local] == [("null", 8)]


@pytest.mark.skipif(
    not os.path.exists(os.path.join(REPO, "benchmarks/apps/bin/matmul_lmem")),
    reason="C hosts not built",
)
def test_c_binary_recorded_whatever_python3_is_on_path(tmp_path):
    """The interpreter the shim embeds in a C app must be the one it was built for, not the
    `python3` PATH finds (with pyenv/conda beside /usr/bin/python3 the app ran unrecorded:
    "No module named 'math'")."""
    doc = run_project(
        [os.path.join(REPO, "benchmarks/apps/bin/matmul_lmem"), "64"],
        tmp_path,
        path="/usr/bin:/bin",
    )
    check_projections(doc, {"matmul_lmem"})


def test_projection_cache_key_follows_the_model_and_the_profiles(tmp_path, monkeypatch):
    """A cached projection is served only for the same model code and the same numbers."""
    from clproj.devices.profile import DeviceProfile, load_profile
    from clproj.runtime.projection import live as live_projection

    prof = load_profile("pocl-pthread-amd-epyc")
    base = live_projection.devices_id([prof])
    data = prof.to_dict()
    data["throughput"]["fp32_fma"] *= 2  # re-measured, same key and date
    assert live_projection.devices_id([DeviceProfile(data)]) != base
    # every module of the model and the emulation counts, one added later too
    sources = {os.path.relpath(f, REPO) for f in live_projection.model_sources()}
    for module in ("model.py", "memory_units.py", "latency.py", "live.py"):
        assert os.path.join("runtime", "projection", module) in sources
    assert os.path.join("miniemu", "bounded.py") in sources
    code = tmp_path / "model.py"
    versions = []
    for text in ("def t(): return 1\n", "def t(): return 2\n"):
        code.write_text(text)
        monkeypatch.setattr(live_projection, "_model_version", None)
        monkeypatch.setattr(live_projection, "model_sources", lambda: [str(code)])
        versions.append(live_projection.model_version())
    assert versions[0] != versions[1]
    # a rebuilt plugin (new statistics) also retires cached projections
    fake = tmp_path / "libclproj_oclgrind.so"
    fake.write_bytes(b"another build")
    before = live_projection.model_version()
    monkeypatch.setattr(live_projection, "_model_version", None)
    monkeypatch.setattr(live_projection.native, "oclgrind_plugin", lambda: str(fake))
    assert live_projection.model_version() != before


def test_a_launch_waiting_for_a_user_event_does_not_hang(tmp_path, monkeypatch):
    """The app completes the user event only after the launch call returns; project mode
    must not read the launch's inputs or wait for it then (it hung: pyopencl's own
    test_event_set_callback). The next launch of the same signature is the recorded one."""
    app = tmp_path / "app.py"
    app.write_text(
        "\n".join(
            [
                "import numpy as np, pyopencl as cl",
                "ctx = cl.create_some_context(interactive=False)",
                "q = cl.CommandQueue(ctx)",
                "prg = cl.Program(ctx, '__kernel void k(__global int *a)"
                " { a[get_global_id(0)] += 1; }').build()",
                "buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256 * 4)",
                "cl.enqueue_fill_buffer(q, buf, np.int32(0), 0, 256 * 4)",
                "k = prg.k",
                "for gated in (True, False):",
                "    user = cl.UserEvent(ctx)",
                "    k(q, (256,), None, buf, wait_for=[user] if gated else None)",
                "    user.set_status(cl.command_execution_status.COMPLETE)",
                "    q.finish()",
                "out = np.empty(256, np.int32)",
                "cl.enqueue_copy(q, out, buf)",
                "assert (out == 2).all(), out[:4]",
                "print('PASS')",
            ]
        )
    )
    # PoCL's one-thread `basic` driver never runs a user-event-gated command (plainly too)
    monkeypatch.setenv("POCL_DEVICES", "pthread")
    doc = run_project([sys.executable, str(app)], tmp_path)
    assert doc["exit_code"] == 0
    check_projections(doc, {"k"})
