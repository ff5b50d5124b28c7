"""``clproj validate-published``: the published-results parsers, the crossover, and one run.

The parsers are checked against the real published files (``../shared/validation`` beside
the repository, skipped where that folder is absent) with values read off the files by
hand; the end-to-end test runs the real BabelStream, built from the shared sources, at a
tiny array size through the command onto an existing spec profile and this machine's device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from clproj.intercept.record import VERSION as RECORD_VERSION
from clproj.runtime.evaluation import published_babelstream as pbs
from clproj.runtime.evaluation import published_mixbench as pmb

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(REPO, "..", "shared", "validation")
BABEL = os.path.join(SHARED, "babelstream")
BABEL_RESULTS = os.path.join(BABEL, "results", "v1.0", "opencl")
MIXBENCH = os.path.join(SHARED, "mixbench")

needs_shared = pytest.mark.skipif(
    not os.path.isdir(SHARED),
    reason="the third-party validation suites (../shared/validation beside the repository) "
    "are not on this machine",
)


@needs_shared
def test_babelstream_results_parse_with_their_array_sizes():
    results, errors = pbs.load_results(BABEL_RESULTS)
    assert errors == []
    by = {r.label: r for r in results}
    assert set(by) == set(pbs.PROFILES)  # every published file has its profile key
    hd = by["amd-radeon-7970"]
    assert hd.min_s == {"copy": 0.00397, "mul": 0.00395, "add": 0.00573, "triad": 0.00574}
    assert (hd.elements, hd.elements_from) == (52_428_800, "array size line")  # 400.0 MiB
    phi = by["intel-phi-se10p"]
    assert (phi.elements, phi.elements_from) == (49_999_872, "resize line")
    assert phi.device_name == "Intel(R) Many Integrated Core Acceleration Card"
    gtx = by["nvidia-gtx-580"]  # no array size line: 176151 MB/s x 4.54157 ms / 16 B
    assert (gtx.elements, gtx.elements_from) == (50_000_000, "derived from rates")
    assert gtx.min_s["triad"] == 0.00697684
    ids = {label: pbs.identity(by[label]) for label in by}
    assert (ids["nvidia-k80-ecc-on"].key, ids["nvidia-k80-ecc-on"].vendor) == ("k80-spec", "NVIDIA")
    assert ids["intel-phi-se10p"].key == "xeon-phi-se10p-spec"
    assert {i.matched_by for i in ids.values()} == {"file table"}


def test_babelstream_file_that_does_not_parse_is_one_line_naming_it(tmp_path):
    (tmp_path / "broken.txt").write_text("GPU-STREAM\nFunction MBytes/sec\nnothing here\n")
    (tmp_path / "amd-radeon-7970.txt").write_text(
        "Precision: double\nArray size: 0.5 MB\nFunction    MBytes/sec  Min (sec)   Max\n"
        "Copy        1000.0      0.00010     0.00011\n"
    )
    results, errors = pbs.load_results(str(tmp_path))
    assert [r.label for r in results] == ["amd-radeon-7970"]
    assert results[0].elements == 65536
    assert len(errors) == 1 and "broken.txt" in errors[0] and "\n" not in errors[0]


@needs_shared
def test_mixbench_logs_give_the_published_time_per_level():
    logs, errors = pmb.load_logs(os.path.join(MIXBENCH, "truth"))
    assert errors == []
    by = {log.label: log for log in logs}
    v100 = by["v100-mixbench-cuda"]
    assert v100.device_name == "Tesla V100-PCIE-16GB"
    assert (v100.buffer_mb, v100.elements_per_thread, v100.fusion, v100.block_strided) == (
        256, 8, 4, True,
    )  # fmt: skip
    assert pmb.run_args(v100) == ["-w", "1", "256", "32", "8", "4"]
    assert len(v100.levels) == 33 and set(v100.levels[0]) == {"sp", "dp", "hp", "int"}
    sp0, dp256 = v100.levels[0]["sp"], v100.levels[256]["dp"]
    assert (sp0.flops_per_byte, sp0.ex_time_ms, sp0.gflops, sp0.gbps) == (
        0.25,
        0.17,
        199.65,
        798.61,
    )
    # 32 Mi floats at 798.61 GB/s: 0.16806 ms, which the log prints as 0.17
    assert sp0.time_s == pytest.approx(32 * 2**20 * 4 / 798.61e9)
    assert dp256.ex_time_ms == 2.90 and dp256.time_s == pytest.approx(2.90e-3, abs=6e-6)
    mi100 = by["mi100-mixbench-hip"]
    assert mi100.fusion == 1 and "sp2" in mi100.levels[0]
    assert mi100.levels[9]["dp"].ex_time_ms == 0.25
    curve = [(lvl, p.time_s) for lvl, p in v100.curve("sp")]
    assert pmb.crossover(curve) == 32  # 0.19 ms vs 0.168 ms at level 0; level 28 is 1.05x


def test_crossover_and_level_of_options():
    assert pmb.crossover([(0, 1.0), (1, 1.05), (2, 1.2), (3, 3.0)]) == 2
    assert pmb.crossover([(0, 1.0), (1, 1.05)]) is None
    opts = "-cl-std=CL1.2 -cl-mad-enable -Dclass_T=double -Dblockdim=256 -DCOMPUTE_ITERATIONS=48"
    assert pmb.level_of(opts) == ("dp", 48)
    assert pmb.level_of("-Dclass_T=short -Dblockdim=256 -DCOMPUTE_ITERATIONS=0") is None


def clproj(*args: str) -> subprocess.CompletedProcess[str]:
    # One local device (PoCL pthread, which BabelStream runs on): a device without a profile
    # in the session's cache is measured first, and one costs half as long as two.
    env = dict(os.environ, POCL_DEVICES="pthread")
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


@needs_shared
def test_babelstream_end_to_end_at_a_tiny_size(tmp_path):
    if not shutil.which("g++"):
        pytest.skip("no C++ compiler")
    truth = tmp_path / "truth"
    truth.mkdir()
    with open(os.path.join(BABEL_RESULTS, "amd-radeon-7970.txt"), encoding="utf-8") as fh:
        text = fh.read().replace("Array size: 400.0 MB", "Array size: 0.5 MB")  # 65536 doubles
    (truth / "nvidia-gtx-580.txt").write_text(text)  # a device whose profile may not exist
    # An FP32 result: recorded by a run of its own with the app's --float.
    (truth / "amd-r9-fury-x.txt").write_text(text.replace("Precision: double", "Precision: float"))
    # Dot as later versions print it: its launch on the 7970 is the app's GPU rule (4
    # groups per compute unit of the maximum work-group size: 128 of 256), not the one
    # recorded here on PoCL (one group per core of twice the double vector width).
    text = text.replace("Using OpenCL device", "Reduction kernel config: 128 groups of size 256\n"
                        "Using OpenCL device")  # fmt: skip
    (truth / "amd-radeon-7970.txt").write_text(
        text + "Dot         1000.0      0.00300     0.0031\n"
    )
    # Version 5's CUDA output with Nstream: judged (the same kernels), its time read back
    # from the rate column, recorded by a run of its own with the app's "--only All".
    (truth / "k20x-v5.txt").write_text(
        "BabelStream\nVersion: 5.0\nImplementation: CUDA\nNumber of elements: 65536\n"
        "Precision: double\n"
        'CUDA Device 0: "Tesla K20X" 14 SMs(3,5) Memory: 2600 MHz x 384-bit\n'
        "Function    MBytes/sec  Min (sec)   Max         Average\n"
        "Copy        104857.600  0.00001     0.00002     0.00001\n"
        "Nstream     116508.444  0.00002     0.00004     0.00003\n"
    )
    work, report = tmp_path / "work", tmp_path / "report"
    args = ["validate-published", BABEL, "--truth", str(truth), "--work", str(work)]
    res = clproj(*args, "--devices", "truth,local,h100-sxm-spec", "--json", "--report", str(report))
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["kind"] == "babelstream"
    devs = {d["label"]: d for d in out["devices"]}
    assert devs["amd-radeon-7970"]["status"] == "judged"
    assert devs["amd-radeon-7970"]["config"] == "65536"
    assert devs["nvidia-gtx-580"]["status"] in ("judged", "no profile")
    runs = {r["tag"]: r for r in out["runs"]}
    assert set(runs) == {"s65536", "s131072-float", "s65536-all"}
    assert runs["s65536"]["records"] == 5
    assert runs["s65536-all"]["args"][-2:] == ["--only", "All"]
    assert runs["s65536-all"]["records"] == 6  # the five and Nstream
    assert (devs["k20x-v5"]["status"], devs["k20x-v5"]["config"]) == ("judged", "65536 (CUDA)")
    assert runs["s131072-float"]["args"][-1] == "--float" and runs["s131072-float"]["records"] == 5
    assert devs["amd-r9-fury-x"]["config"] == "131072 float"  # 0.5 MiB of floats
    ks = {k["kernel"]: k for k in out["kernels"]}
    assert set(ks) == {"copy", "mul", "add", "triad", "stream_dot", "nstream"}
    # 2 x 8 bytes x 65536 / 104857.6 MB/s = 10 us: the rate's digits, where Min prints 1
    assert ks["copy"]["measured_s"]["k20x-v5"] == pytest.approx(1e-5, rel=1e-9)
    assert ks["nstream"]["measured_s"]["k20x-v5"] == pytest.approx(4 * 8 * 65536 / 116508.444e6)
    assert ks["nstream"]["projected_s"]["k20x-v5"] > ks["copy"]["projected_s"]["k20x-v5"]
    # Dot reads two arrays as copy does (and writes 128 sums): in the app's GPU launch it
    # is about copy's time; as recorded (a few dozen work-items) it would be 100x more.
    dot = ks["stream_dot"]["projected_s"]["amd-radeon-7970"]
    assert 0.5 < dot / ks["copy"]["projected_s"]["amd-radeon-7970"] < 2
    assert ks["copy"]["measured_s"]["amd-radeon-7970"] == 0.00397
    assert ks["copy"]["projected_s"]["amd-radeon-7970"] > 0
    per = out["summary"]["babelstream"]["per_device"]["amd-radeon-7970"]
    assert per["kernels"] == 5
    ratios = [ks[k]["projected_s"]["amd-radeon-7970"] / ks[k]["measured_s"]["amd-radeon-7970"]
              for k in ks if "amd-radeon-7970" in ks[k]["measured_s"]]  # fmt: skip
    assert per["mape"] == pytest.approx(sum(abs(r - 1) for r in ratios) / 5)
    # A GPU without a results file gets Dot in the app's GPU launch too (528 groups of 1024
    # on the H100's 132 SMs), not the 32 work-items recorded here.
    h100 = {(p["config"], p["kernel"]): p["projected_s"] for p in out["projected_only"]
            if p["device"] == "h100-sxm-spec"}  # fmt: skip
    assert 0.5 < h100[("65536 elements", "stream_dot")] / h100[("65536 elements", "copy")] < 2
    assert {p["kernel"] for p in out["projected_only"]} == {"copy", "mul", "add", "triad",
                                                            "stream_dot", "nstream"}  # fmt: skip
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "amd-radeon-7970" in page and "triad" in page and "scatter_babelstream.png" in page
    assert (report / "scatter_babelstream.png").exists()

    # A rerun reuses the records (cached), and prints the readable tables.
    res = clproj(*args, "--devices", "hd7970-spec")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "run s65536: 5 records (cached)" in res.stderr
    for needle in ("amd-radeon-7970", "hd7970-spec", "within 0.8-1.25x", "MAPE", "triad",
                   "not selected"):  # fmt: skip
        assert needle in res.stdout, needle

    # Truth that judges fewer kernels (no Dot) at the same size reuses the run's records of
    # those kernels instead of recording the size again without Dot.
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    (fewer / "amd-radeon-7970.txt").write_text((truth / "nvidia-gtx-580.txt").read_text())
    res = clproj("validate-published", BABEL, "--truth", str(fewer), "--work", str(work),
                 "--devices", "hd7970-spec", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "run s65536: 4 records (cached)" in res.stderr
    assert {k["kernel"] for k in json.loads(res.stdout)["kernels"]} == {
        "copy",
        "mul",
        "add",
        "triad",
    }

    # Records of another format version (an older clproj's) are recorded again, not
    # refused: the finished run says which version its records are.
    done = work / "runs" / "s65536" / "run.json"
    meta = json.loads(done.read_text())
    assert meta["record_version"] == RECORD_VERSION
    done.write_text(json.dumps(dict(meta, record_version=RECORD_VERSION - 1)))
    res = clproj(*args, "--devices", "hd7970-spec")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "run s65536: 5 records (cached)" not in res.stderr and "5 records" in res.stderr
    assert json.loads(done.read_text())["record_version"] == RECORD_VERSION


def test_not_a_suite_is_a_one_line_error(tmp_path):
    res = clproj("validate-published", str(tmp_path))
    assert res.returncode == 2
    assert "neither a BabelStream folder" in res.stderr and "Traceback" not in res.stderr


def test_table_profiles_that_do_not_exist_are_no_profile_but_named_ones_must_exist():
    from clproj.errors import ClprojError
    from clproj.runtime.evaluation.published import resolve_devices

    profiles, missing = resolve_devices("truth", ["hd7970-spec", "no-such-card-spec"])
    assert [p.key for p in profiles] == ["hd7970-spec"] and missing == {"no-such-card-spec"}
    with pytest.raises(ClprojError):
        resolve_devices("truth,no-such-card-spec", ["hd7970-spec"])


def test_pooled_metrics_over_every_kernel_and_device():
    from clproj.runtime.evaluation.published import pooled_metrics
    from clproj.runtime.evaluation.validate_match import KernelResult

    a = KernelResult("b", "copy", {"x": 1.0, "y": 2.0}, {"x": 1.1, "y": 8.0}, {}, 2, 2, 2, 2)
    b = KernelResult("b", "add", {"x": 1.0}, {"x": 0.5}, {}, 1, 1, 1, 1)
    m = pooled_metrics([a, b])
    assert m["pairs"] == 3 and m["within_25"] == 1
    assert m["median_ratio"] == pytest.approx(1.1)
    assert m["mape"] == pytest.approx((0.1 + 3.0 + 0.5) / 3)
