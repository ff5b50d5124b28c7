"""Published results under names nobody here chose: found in a folder tree and matched to
a spec profile by what each file says (its name, its device's name, its device's shape).

The files are the real published ones (``../shared/validation``, skipped where absent)
renamed or moved, plus results written here in the formats BabelStream's later versions
print (``Version: 2.0`` decimal megabytes, ``Number of elements``, ``--csv``).
"""

from __future__ import annotations

import os
import shutil

import pytest

from clproj.devices import specs
from clproj.errors import ClprojError
from clproj.runtime.evaluation import published_babelstream as pbs
from clproj.runtime.evaluation import published_mixbench as pmb
from clproj.runtime.evaluation.published_files import identify, truth_files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(REPO, "..", "shared", "validation")
BABEL_RESULTS = os.path.join(SHARED, "babelstream", "results", "v1.0", "opencl")
MIX_TRUTH = os.path.join(SHARED, "mixbench", "truth")

needs_shared = pytest.mark.skipif(
    not os.path.isdir(SHARED),
    reason="the third-party validation suites (../shared/validation) are not on this machine",
)

V2_HEADER = """GPU-STREAM
Version: 2.0
Implementation: {impl}
Running kernels 100 times
Precision: double
Array size: 268.4 MB (=0.3 GB)
Total size: 805.3 MB (=0.8 GB)
Using OpenCL device {device}
Function    MBytes/sec  Min (sec)   Max         Average
Copy        182194.259  0.00295     0.00298     0.00296
Mul         182081.736  0.00295     0.00296     0.00296
Add         182723.055  0.00441     0.00443     0.00442
Triad       182719.573  0.00441     0.00443     0.00442
"""


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("k20x/ocl", "k20x-spec"),  # a folder names the device
        ("nvidia-k20c-new-driver", "k20c-spec"),  # "k20x" is tried before "k20"
        ("gtx980ti", "gtx-980-ti-spec"),  # words run together
        ("nvidiagtx980ti", "gtx-980-ti-spec"),
        ("v3.3/titanxp/ocl", "titan-xp-spec"),
        ("s9150_ecc_on", "firepro-s9150-spec"),
        ("setonix-mi250x-gcd0", "mi250x-gcd-spec"),
        ("titan-x-pascal", "titan-x-pascal-spec"),  # "titan xp" would end inside "pascal"
        ("v2.0/furynano/hip", "r9-nano-spec"),  # a Fiji board by its name, not "fury"
        ("v1.0/hip/amd-fiji-nano", "r9-nano-spec"),
        ("v2.0/s9300x2/hip", "firepro-s9300-x2-spec"),
        ("v2.0/furyx/ocl", "r9-fury-x-spec"),
        ("haswell/ocl", None),
        ("results", None),
    ],
)
def test_a_file_name_names_its_device(name: str, key: str | None) -> None:
    sheet = specs.spec_for_file_name(name)
    assert (sheet.key if sheet else None) == key


@pytest.mark.parametrize(
    ("name", "key"),
    [  # the names NVIDIA's OpenCL gives each board of one chip (its CUDA device name)
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-spec"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb-spec"),  # 1555 GB/s, not 2039
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb-spec"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb-spec"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm-spec"),
        ("NVIDIA H100 PCIe", "h100-pcie-spec"),  # 114 SMs at 2 TB/s, not 132 at 3.35
        ("Tesla V100-PCIE-16GB", "v100-pcie-spec"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-spec"),
        ("Tesla V100S-PCIE-32GB", "v100s-pcie-spec"),
        ("NVIDIA GH200 480GB", "gh200-spec"),  # 4 TB/s: not the H200's 4.8 ("gh200" has "h200")
        ("NVIDIA H200", "h200-spec"),
        ("AMD Instinct MI300A", "mi300a-spec"),
        ("Tesla P100-PCIE-12GB", "p100-pcie-12gb-spec"),  # three HBM2 stacks: 549 GB/s
        ("Tesla P100-SXM2-16GB", "p100-sxm2-spec"),
        ("AMD Radeon Instinct MI50", "mi50-spec"),
        ("gfx906:sramecc+:xnack-", None),  # MI50, MI60 and Radeon VII alike
        ("Tesla K20X", "k20x-spec"),
        ("Tesla K20c", "k20c-spec"),
        ("TITAN Xp", "titan-xp-spec"),
        ("NVIDIA TITAN X (Pascal)", "titan-x-pascal-spec"),  # not the TITAN Xp
        ("GeForce GTX TITAN X", "gtx-titan-x-spec"),  # Maxwell
        ("NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti-spec"),
        ("AMD Radeon VII", "radeon-vii-spec"),  # fp64 1/4, where the MI50 has 1/2
        ("AMD Radeon R9 Nano", "r9-nano-spec"),
        ("AMD FirePro S9300 x2", "firepro-s9300-x2-spec"),
        ("AMD Radeon R9 Fury X", "r9-fury-x-spec"),
        ("Radeon Instinct MI25", "mi25-spec"),
        ("AMD Instinct MI250", "mi250x-gcd-spec"),  # "mi25" comes after "mi250"
        ("AMD Instinct MI210", "mi210-spec"),
        ("gfx90a:sramecc+:xnack-", "mi250x-gcd-spec"),
        ("Intel(R) Xeon Phi(TM) CPU 7210 @ 1.30GHz", None),  # no sheet: not the SE10P's
    ],
)
def test_a_device_name_finds_its_own_board(name: str, key: str | None) -> None:
    sheet = specs.spec_for(name)
    assert (sheet.key if sheet else None) == key


def test_a_board_variant_changes_only_what_its_sheet_prints() -> None:
    by = {s.key: s for s in specs.SPECS}
    sxm, pcie = by["a100-sxm-spec"], by["a100-pcie-40gb-spec"]
    assert (pcie.bandwidth_gbs, pcie.global_gb, pcie.tdp_w) == (1555.0, 40, 250)
    assert (pcie.cus, pcie.clock_mhz, pcie.per_cu, pcie.arch) == (
        sxm.cus, sxm.clock_mhz, sxm.per_cu, sxm.arch,
    )  # fmt: skip


def test_a_device_shape_identifies_one_sheet_or_none() -> None:
    assert specs.spec_by_shape(110, 1700, 64).key == "mi250x-gcd-spec"
    assert specs.spec_by_shape(104, 1700.0, 64).key == "mi210-spec"
    assert specs.spec_by_shape(120, 1502, 64).key == "mi100-spec"
    assert specs.spec_by_shape(100, 1700, 64) is None  # no sheet has it
    assert specs.spec_by_shape(110, 1700, 32) is None  # the warp must agree too
    assert specs.spec_by_shape(110, 1500, 64) is None  # and the clock, within 2 %
    # A shape two sheets share identifies neither (R9 290X 1000 MHz, S9150 900 MHz, R9
    # 295X2 1018 MHz: 44 CUs each; 1010 MHz is within 2 % of two of them).
    assert specs.spec_by_shape(44, 1010, 64) is None


def test_identify_order_table_then_file_name_then_device_name_then_shape() -> None:
    table = {"amd-radeon-r9-290x": ("r9-290x-spec", "AMD")}
    assert identify("amd-radeon-r9-290x", table, "Hawaii").matched_by == "file table"
    # The same file in a tree (BabelStream's results/ passed whole): its name ends the label.
    assert identify("v1.0-opencl-amd-radeon-r9-290x", table).key == "r9-290x-spec"
    assert identify("v1.0-opencl-amd-radeon-r9-290x", table).matched_by == "file table"
    # AMD names every Hawaii board "Hawaii": the file's name is the better witness.
    s9150 = identify("s9150-ocl", table, "Hawaii")
    assert (s9150.key, s9150.vendor, s9150.matched_by) == ("firepro-s9150-spec", "AMD", "file name")
    by_name = identify("run-3", table, "Tesla K20X")
    assert (by_name.key, by_name.matched_by) == ("k20x-spec", "device name")
    by_shape = identify("mixbench-log", table, "", (110, 1700.0, 64))
    assert (by_shape.key, by_shape.matched_by) == ("mi250x-gcd-spec", "device shape")
    cpu = identify("haswell-ocl", table, "Intel(R) Xeon(R) CPU E5-2698 v3 @ 2.30GHz",
                   vendor_hint=pbs.vendor_hint)  # fmt: skip
    assert (cpu.key, cpu.vendor, cpu.matched_by) == (None, "Intel", "")


@pytest.mark.parametrize(
    ("line", "config"),
    [
        ("Reduction kernel config: 120 groups of size 1024", (120, 1024)),
        ("Reduction kernel config: 0 groups of size 1024", None),  # no work-item
        ("Reduction kernel config: 4000000 groups of size 1024", None),  # past 2^31
    ],
)
def test_dots_launch_is_taken_from_the_file_only_when_a_device_could_make_it(
    tmp_path, line: str, config: tuple[int, int] | None
) -> None:
    text = (
        V2_HEADER.format(impl="OpenCL", device="TITAN Xp").replace("Function", line + "\nFunction")
        + "Dot         431076.539  0.00125     0.00127     0.00126\n"
    )
    write(str(tmp_path / "titanxp.txt"), text)
    (result,) = pbs.load_results(str(tmp_path))[0]
    assert result.dot_config == config and result.min_s["stream_dot"] == 0.00125


def test_truth_files_walk_a_tree_and_label_by_path(tmp_path) -> None:
    for rel in ("a.txt", "k20x/ocl.txt", "k20x/cuda.txt", ".hidden/x.txt", "notes.md"):
        write(str(tmp_path / rel), "x")
    assert [label for label, _ in truth_files(str(tmp_path), "fix")] == [
        "a", "k20x-cuda", "k20x-ocl",
    ]  # fmt: skip
    (tmp_path / "empty").mkdir()
    for path, why in ((tmp_path / "empty", r"holds no \*\.txt file"),
                      (tmp_path / "a.txt", "is a file, not a folder"),
                      (tmp_path / "nowhere", "no such folder")):  # fmt: skip
        with pytest.raises(ClprojError, match=why) as err:
            pbs.load_results(str(path))
        assert "BabelStream's folder" in str(err.value.fix)


def test_babelstream_tree_of_later_versions(tmp_path) -> None:
    root = str(tmp_path)
    write(f"{root}/v2.0/k20x/ocl.txt", V2_HEADER.format(impl="OpenCL", device="Tesla K20X"))
    write(f"{root}/v2.0/k20x/cuda.txt", V2_HEADER.format(impl="CUDA", device="Tesla K20X"))
    write(f"{root}/v2.0/k20x/kokkos.txt", V2_HEADER.format(impl="KOKKOS", device="Tesla K20X"))
    write(
        f"{root}/v5/mystery.txt",
        "BabelStream\nVersion: 5.0\nImplementation: OpenCL\nNumber of elements: 33554432\n"
        "Precision: double\nArray size: 268.4 MB\nUsing OpenCL device NVIDIA TITAN Xp\n"
        "Function    MB/s        Min (sec)   Max         Average\n"
        "Copy        433585.615  0.00124     0.00131     0.00125\n",
    )
    write(
        f"{root}/v5/csv-run.txt",
        "Using OpenCL device Tesla K20X\n"
        "function,num_times,n_elements,sizeof,max_mbytes_per_sec,min_runtime,max_runtime,"
        "avg_runtime\nCopy,100,16777216,4,153090.1,0.000876,0.00091,0.00089\n"
        "Triad,100,16777216,4,153600.5,0.001311,0.00135,0.00133\n",
    )
    results, errors = pbs.load_results(root)
    by = {r.label: r for r in results}
    # CUDA runs the same kernels (judged); Kokkos is another code generator (left out)
    assert sorted(by) == ["v2.0-k20x-cuda", "v2.0-k20x-ocl", "v5-csv-run", "v5-mystery"]
    assert len(errors) == 1 and "left out 1 results of other implementations" in errors[0]
    assert "(1 KOKKOS)" in errors[0] and "\n" not in errors[0]
    assert by["v2.0-k20x-cuda"].device_name == "Tesla K20X"
    k20x = by["v2.0-k20x-ocl"]
    # From version 2.0 GPU-STREAM's MB is 10^6 bytes: 268.4 MB of doubles, not 2^20-byte MB.
    assert (k20x.elements, k20x.elements_from) == (33_550_000, "array size line")
    assert pbs.identity(k20x).key == "k20x-spec"
    mystery = by["v5-mystery"]
    assert (mystery.elements, mystery.elements_from) == (33_554_432, "element count line")
    assert pbs.identity(mystery).matched_by == "device name"
    assert pbs.identity(mystery).key == "titan-xp-spec"
    assert mystery.dot_config is None  # the file prints none
    # the time read back from the rate: 2 arrays x 8 bytes x 33554432 / 433585.615 MB/s
    assert mystery.min_s["copy"] == 0.00124 and mystery.from_rate == ("copy",)
    assert mystery.time_s["copy"] == pytest.approx(16 * 33_554_432 / 433585.615e6, rel=1e-9)
    csv = by["v5-csv-run"]
    assert (csv.elements, csv.elements_from, csv.precision) == (16_777_216, "csv rows", "float")
    assert csv.min_s == {"copy": 0.000876, "triad": 0.001311}


@needs_shared
def test_shipped_babelstream_files_renamed_are_still_judged_by_their_device(tmp_path) -> None:
    shutil.copy(os.path.join(BABEL_RESULTS, "nvidia-gtx-980.txt"), tmp_path / "card-a.txt")
    shutil.copy(os.path.join(BABEL_RESULTS, "amd-radeon-7970.txt"), tmp_path / "card-b.txt")
    results, errors = pbs.load_results(str(tmp_path))
    assert errors == []
    ids = {r.label: pbs.identity(r) for r in results}
    assert (ids["card-a"].key, ids["card-a"].matched_by) == ("gtx-980-spec", "device name")
    # The 7970's file names no device (an empty "Using OpenCL device" line): unidentified.
    assert (ids["card-b"].key, ids["card-b"].matched_by) == (None, "")


@needs_shared
def test_mixbench_logs_without_a_device_name_are_identified_by_their_shape(tmp_path) -> None:
    with open(os.path.join(MIX_TRUTH, "mi100-mixbench-hip.txt"), encoding="utf-8") as fh:
        text = fh.read()
    write(str(tmp_path / "mulan" / "2023-03-17" / "mixbench-log.txt"), text)
    other = text.replace("(120 MPs x 64 SPs/MP)", "(100 MPs x 64 SPs/MP)")
    write(str(tmp_path / "unknown-gpu.txt"), other)
    logs, errors = pmb.load_logs(str(tmp_path))
    assert errors == []
    by = {log.label: log for log in logs}
    mulan = by["mulan-2023-03-17-mixbench-log"]
    assert mulan.device_name == "" and mulan.shape == (120, 1502.0, 64)
    ident = pmb.identity(mulan)
    assert (ident.key, ident.vendor, ident.matched_by) == ("mi100-spec", "AMD", "device shape")
    assert pmb.identity(by["unknown-gpu"]).key is None


OCL_HEADER = """mixbench-ocl (v0.03-2-gbccfd71)
------------------------ Device specifications ------------------------
Platform:            AMD Accelerated Parallel Processing
Device:              gfx90a:sramecc+:xnack-/Advanced Micro Devices, Inc.
Driver version:      3513.0 (HSA1.1,LC)
Address bits:        64
GPU clock rate:      1700 MHz
Total global mem:    65520 MB
Max allowed buffer:  55692 MB
OpenCL version:      OpenCL 2.0
Total CUs:           {cus}
-----------------------------------------------------------------------
Buffer size:            256MB
Workgroup size:         128
Elements per workitem:  8
Workitem fusion degree: 2
Workitem stride:        Workgroup
Buffer allocation:      Device allocated
Timer:                  CL event based
"""


@needs_shared
@pytest.mark.parametrize(("cus", "key"), [(104, "mi210-spec"), (110, "mi250x-gcd-spec")])
def test_a_mixbench_ocl_log_is_read_and_its_printed_shape_outranks_a_codename(
    tmp_path, cus: int, key: str
) -> None:
    with open(os.path.join(MIX_TRUTH, "v100-mixbench-cuda.txt"), encoding="utf-8") as fh:
        text = fh.read()
    csv = text[text.index("----------------------------------------------------------------"
                          "------------- CSV data"):]  # fmt: skip
    write(str(tmp_path / "gpu.txt"), OCL_HEADER.format(cus=cus) + csv)
    logs, errors = pmb.load_logs(str(tmp_path))
    assert errors == []
    log = logs[0]
    assert (log.elements_per_thread, log.fusion, log.block_strided, log.workgroup) == (
        8, 2, True, 128,
    )  # fmt: skip
    assert log.shape == (cus, 1700.0, 0)  # mixbench-ocl prints no warp width
    assert pmb.run_args(log) == ["-w", "1", "128", "32", "8", "2"]
    assert len(log.levels) == 33
    # "gfx90a" names the MI250X GCD's sheet (110 CUs); 104 printed compute units are an
    # MI210 (or an MI250 GCD: the same figures), found by the shape instead.
    ident = pmb.identity(log)
    assert ident.key == key
    assert ident.matched_by == ("device name" if cus == 110 else "device shape")


def test_a_truth_tree_with_a_fifo_or_binary_bytes_is_read_around_them(tmp_path) -> None:
    write(str(tmp_path / "k20x" / "ocl.txt"), V2_HEADER.format(impl="OpenCL", device="Tesla K20X"))
    os.mkfifo(tmp_path / "pipe.txt")  # opening it to read would wait for a writer forever
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 64)
    results, errors = pbs.load_results(str(tmp_path))
    assert [r.label for r in results] == ["k20x-ocl"]
    assert len(errors) == 2 and all("\n" not in e for e in errors)
    assert any("pipe.txt is a FIFO, not a regular file" in e for e in errors)
    assert any("binary.txt: not a BabelStream results file" in e for e in errors)
    logs, errors = pmb.load_logs(str(tmp_path))
    assert logs == [] and any("pipe.txt is a FIFO" in e for e in errors)


def test_report_figures_of_labels_from_any_path_get_distinct_short_names(tmp_path) -> None:
    """Labels come from --truth paths: two may differ only in punctuation, one may be
    longer than a file name can be. Each still gets its own figure."""
    from clproj.runtime.evaluation.published import PublishedDevice, PublishedValidation
    from clproj.runtime.evaluation.published_html import write_report

    labels = ["mi100-mixbench-hip", "mi100_mixbench_hip", "deep-" * 80 + "log"]
    point = {"level": 0, "flops_per_byte": 0.25, "published_s": 1e-4, "ex_time_ms": 0.1,
             "projected_s": 1.1e-4, "bound": "G"}  # fmt: skip
    val = PublishedValidation(
        "mixbench", "suite", "truth", "work",
        [PublishedDevice(label, "AMD", "mi100-spec", "judged") for label in labels],
        [], [], [], [],
        curves={label: {"sp": [point]} for label in labels},
    )  # fmt: skip
    write_report(val, str(tmp_path))
    curves = sorted(p.name for p in tmp_path.glob("curve_*.png"))
    assert len(curves) == 3 and all(len(name) < 255 for name in curves)
    assert "curve_mi100_mixbench_hip.png" in curves  # a short label keeps its plain name
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert all(name in page for name in curves)


@needs_shared
@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("Elements per thread:  8", "Elements per thread:  eight"),
        ("Thread fusion degree: 4", "Thread fusion degree: four"),
        ("Thread fusion degree: 4", "Thread fusion degree: 0"),
        ("GPU clock rate:      1380 MHz", "GPU clock rate:      1.3.8 MHz"),
    ],
)
def test_a_mixbench_log_with_an_unreadable_count_is_one_error_line(
    tmp_path, line: str, bad: str
) -> None:
    with open(os.path.join(MIX_TRUTH, "v100-mixbench-cuda.txt"), encoding="utf-8") as fh:
        text = fh.read()
    assert line in text
    write(str(tmp_path / "v100.txt"), text.replace(line, bad))
    logs, errors = pmb.load_logs(str(tmp_path))
    if "clock" in line:  # a clock is not needed to run the log: the log reads, shapeless
        assert errors == [] and logs[0].shape is None
        return
    assert logs == [] and len(errors) == 1 and "unreadable" in errors[0]


def test_babelstream_numbers_that_do_not_parse_are_no_traceback(tmp_path) -> None:
    """The row patterns admit "1.2.3": such a number is unread, never a ValueError."""
    write(
        str(tmp_path / "a.txt"),
        "Array size: 1.2.3 MB\nCopy        1000.0      0.00010     0.0001\n",
    )
    write(
        str(tmp_path / "b.txt"),
        "function,num_times,n_elements,sizeof,max_mbytes_per_sec,min_runtime,max_runtime\n"
        "Copy,100,16,8,1.2.3,0.001,0.002,0.0015\n",
    )
    results, errors = pbs.load_results(str(tmp_path))
    assert [(r.label, r.elements_from) for r in results] == [("a", "derived from rates")]
    assert len(errors) == 1 and "b.txt: not a BabelStream results file" in errors[0]


V5_CUDA = (
    "BabelStream\nVersion: 5.0\nImplementation: CUDA\nRunning kernels 100 times\n"
    "Precision: double\nArray size: 268.4 MB (=0.3 GB)\nTotal size: 805.3 MB (=0.8 GB)\n"
    'CUDA Device 0: "NVIDIA H100 80GB HBM3" 132 SMs(9,0) Memory: 2619 MHz x 5120-bit\n'
    "Memory Allocation: {memory}\n"
    "Reduction kernel config: 528 groups of (fixed) size 1024\n"
    "Function    MBytes/sec  Min (sec)   Max         Average\n"
    "Copy        3055593.947 0.00018     0.00018     0.00018\n"
    "Triad       3303793.889 0.00024     0.00025     0.00024\n"
    "Nstream     3000000.000 0.00036     0.00037     0.00036\n"
)


def test_babelstream_version_5_cuda_output(tmp_path) -> None:
    """Version 5's CUDA names its device in quotes, fixes Dot's group size and runs Nstream;
    its runs on managed memory are left out (page migration in the time)."""
    write(str(tmp_path / "h100.txt"), V5_CUDA.format(memory="DEFAULT"))
    write(str(tmp_path / "h100-managed.txt"), V5_CUDA.format(memory="MANAGED"))
    results, errors = pbs.load_results(str(tmp_path))
    (h100,) = results
    assert len(errors) == 1 and "left out 1 results on managed" in errors[0]
    assert (h100.device_name, h100.implementation) == ("NVIDIA H100 80GB HBM3", "CUDA")
    assert pbs.identity(h100).key == "h100-sxm-spec"
    assert h100.dot_config == (528, 1024)
    assert h100.elements == 33_550_000 and set(h100.min_s) == {"copy", "triad", "nstream"}
    # 0.00018 s printed is 2 digits: the rate gives the time to 7 (and rounds to the Min)
    assert h100.time_s["copy"] == pytest.approx(16 * 33_550_000 / 3055593.947e6, rel=1e-9)
    assert h100.time_s["nstream"] == pytest.approx(32 * 33_550_000 / 3e12, rel=1e-9)
    assert set(h100.from_rate) == {"copy", "triad", "nstream"}


def test_a_rate_that_does_not_round_to_the_printed_min_is_not_used(tmp_path) -> None:
    """A rate column in another unit than its header says (here MiB/s printed as MB/s)
    gives a time off the printed Min: the Min stays the truth."""
    mib = 16 * 33_550_000 / 0.00124 / 2**20  # the copy's rate in MiB/s
    text = V5_CUDA.format(memory="DEFAULT").replace("3055593.947 0.00018", f"{mib:.3f}  0.00124")
    write(str(tmp_path / "odd.txt"), text)
    (odd,) = pbs.load_results(str(tmp_path))[0]
    assert odd.time_s["copy"] == odd.min_s["copy"] == 0.00124
    assert "copy" not in odd.from_rate


@pytest.mark.parametrize(
    ("text", "half"), [("0.00124", 5e-6), ("0.1", 0.05), ("12", 0.5), ("1.24e-05", 5e-8)]
)
def test_printed_half_step(text: str, half: float) -> None:
    assert pbs.printed_half_step(text) == pytest.approx(half)
