"""``clproj validate``: matching projections to truth rows, the metrics, and one real run.

The unit tests feed hand-made truth rows and launch-projection docs with hand-computed
expectations; the end-to-end test builds a tiny suite of our own (a C OpenCL app that opens
its .cl from the working directory, an app that crashes, one that does not compile) and
checks the command against an independent computation from ``clproj run``'s own output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from clproj.errors import ClprojError
from clproj.intercept import identity
from clproj.runtime.evaluation import validate as v
from clproj.runtime.evaluation import validate_match as vmatch
from clproj.runtime.evaluation import validate_models as vmodels
from clproj.runtime.evaluation import validate_scores as vscores
from clproj.runtime.evaluation import validate_suite as vsuite
from clproj.runtime.evaluation import validate_truth as vtruth

H100 = "NVIDIA H100 80GB HBM3"
EPYC = "pthread-skylake-avx512-AMD EPYC"
A100 = "NVIDIA A100 80GB PCIe"  # no measured profile: judged on its spec sheet
A100_SPEC = "a100-pcie-80gb-spec"
HEADER = "app\tdevice\tkernel\twork_dim\tglobal\tlocal\tlaunches\tmean_ns\tmedian_ns\tmin_ns\n"


def truth_file(path, device: str, rows: list[tuple]) -> str:
    """rows: (app, kernel, global, local, launches, mean_ns)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(HEADER)
        for app, kernel, glob, local, launches, mean in rows:
            dim = len(glob.rstrip(",1").split(","))  # informative only: matching pads
            fh.write(
                f"{app}\t{device}\t{kernel}\t{dim}\t{glob}\t{local}\t{launches}\t{mean}\t{mean}\t{mean}\n"
            )
    return str(path)


def key(name: str) -> str:
    """The profile key :func:`doc` gives a device name."""
    return name.lower().replace(" ", "-")


def doc(kernel: str, glob: list[int], local: list[int] | None, times: dict[str, float], **extra):
    """A launch-projection doc as ``clproj run --mode project --json`` prints it; ``times``
    by device name (the profile key made from it) or by ``(key, name)``."""
    named = [(k, k) if isinstance(k, str) else k for k in times]
    return {
        "kernel": kernel,
        "global_size": glob,
        "local_size": local,
        "emulation": {"method": extra.pop("method", "full-group"), "confidence": "high"},
        "projections": [
            {"device": key(n) if k == n else k, "name": n, "time_s": t, "bound": "G"}
            for (k, n), t in zip(named, times.values(), strict=True)
        ],
        **extra,
    }


# --- shapes ---------------------------------------------------------------------------


def test_padding_makes_truth_strings_and_projection_lists_equal():
    assert vtruth.pad_dims("2048,2048,1") == vtruth.pad_dims([2048, 2048]) == (2048, 2048, 1)
    assert vtruth.pad_dims([8192]) == vtruth.pad_dims("8192,1,1") == (8192, 1, 1)
    assert (
        vtruth.pad_dims(None) is None
        and vtruth.pad_dims("0,0,0") is None
        and vtruth.pad_dims([]) is None
    )
    assert identity.shape_key("k", [64, 64], [16, 4]) == ("k", (64, 64, 1), (16, 4, 1))
    assert identity.shape_key("k", [64], [16]) != identity.shape_key("k", [64], [32])


def test_truth_file_rows_merge_launch_weighted(tmp_path):
    path = truth_file(
        tmp_path / "h100.tsv",
        H100,
        [("a", "k", "64,1,1", "16,1,1", 1, 100), ("a", "k", "64,1,1", "16,1,1", 3, 300)],
    )
    dev = vtruth.read_truth_file(path)
    assert dev.label == "h100" and dev.name == H100
    (row,) = dev.app_rows("a").values()
    assert row.launches == 4 and row.mean_ns == pytest.approx((100 + 900) / 4)
    assert row.total_s == pytest.approx(1000e-9)


def test_truth_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "x.tsv"
    bad.write_text("app\tdevice\tkernel\n")
    with pytest.raises(ClprojError, match="lacks column"):
        vtruth.read_truth_file(str(bad))
    with pytest.raises(ClprojError, match="does not exist"):
        vtruth.load_truth(str(tmp_path / "nowhere"))
    # A FIFO is refused at once (opening it to read would wait for a writer forever), and
    # bytes that are not UTF-8 are named, not a traceback.
    os.mkfifo(tmp_path / "pipe.tsv")
    with pytest.raises(ClprojError, match="is a FIFO, not a regular file"):
        vtruth.read_truth_file(str(tmp_path / "pipe.tsv"))
    (tmp_path / "latin1.tsv").write_bytes(b"app\tdevice\n2mm\t\xe9\n")
    with pytest.raises(ClprojError, match="is not UTF-8 text"):
        vtruth.read_truth_file(str(tmp_path / "latin1.tsv"))


GOOD = {
    "app": "a", "device": H100, "kernel": "k", "work_dim": "1", "global": "64,1,1",
    "local": "16,1,1", "launches": "2", "mean_ns": "100", "median_ns": "90", "min_ns": "80",
}  # fmt: skip


def truth_lines(path, *rows: dict[str, str]) -> str:
    """A truth file of ``HEADER`` and rows of ``GOOD`` with some fields replaced."""
    cols = HEADER.rstrip("\n").split("\t")
    path.write_text(HEADER + "".join("\t".join(r[c] for c in cols) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("mean_ns", "nan", "a time in ns"),
        ("mean_ns", "inf", "a time in ns"),
        ("mean_ns", "-5", "a time in ns"),
        ("mean_ns", "0", "a time in ns"),
        ("mean_ns", "5e-324", "a time in ns"),  # x 1e-9 is 0.0: a ratio's division by zero
        ("mean_ns", "1e300", "a time in ns"),
        ("mean_ns", "", "a time in ns"),
        ("median_ns", "nan", "a time in ns"),
        ("median_ns", "-inf", "a time in ns"),
        ("median_ns", "-1", "a time in ns"),
        ("min_ns", "NaN", "a time in ns"),
        ("launches", "0", "a launch count"),
        ("launches", "-3", "a launch count"),
        ("launches", "2.5", "a launch count"),
        ("launches", "1_000", "a launch count"),
        ("launches", "18446744073709551616", "a launch count"),  # 2^64
        ("global", "-1", "a global size"),
        ("global", "0", "a global size"),
        ("global", "0,0,0", "a global size"),
        ("global", "", "a global size"),
        ("global", "NULL", "a global size"),
        ("global", "99999999999999999999999", "a global size"),  # beyond 2^64
        ("global", "18446744073709551616,1,1", "a global size"),  # 2^64 exactly
        ("global", "64,,1", "a global size"),  # pad_dims would read (64, 1, 1)
        ("global", "64,1,1,1", "a global size"),
        ("global", "+64", "a global size"),
        ("local", "-1", "a local size"),
        ("local", "0,16,1", "a local size"),
        ("local", "16,x", "a local size"),
        ("work_dim", "9", "a work_dim"),
        ("work_dim", "0", "a work_dim"),
        ("work_dim", "two", "a work_dim"),
        ("kernel", "", "a name"),
        ("kernel", "k\x1b[2J", "a name"),  # an escape code would reach the terminal
        ("app", "   ", "a name"),
    ],
)
def test_truth_file_impossible_values_are_refused_naming_line_and_field(
    tmp_path, column: str, value: str, why: str
):
    """A truth file is a third party's: every value a launch cannot have stops the read (so
    ``clproj validate`` before anything is built) as one error with file, line and field."""
    path = truth_lines(tmp_path / "h100.tsv", GOOD, GOOD, {**GOOD, column: value}, GOOD)
    with pytest.raises(ClprojError) as err:
        vtruth.read_truth_file(path)
    assert err.value.cause.startswith(f"{path}:4: {column} is {value.strip()!r}, not {why}")
    assert err.value.fix and "remove that line" in err.value.fix
    assert "\n" not in err.value.cause and "\x1b" not in err.value.cause


def test_truth_file_extremes_that_are_possible_are_read(tmp_path):
    """The bounds themselves, zeros where the format means "none", and empty optional
    columns are a truth file's, and read as such."""
    top = str(2**64 - 1)
    path = truth_lines(
        tmp_path / "h100.tsv",
        {**GOOD, "global": f"{top},1,1", "launches": top, "mean_ns": "0.5", "min_ns": "0"},
        {**GOOD, "kernel": "j", "local": "0,0,0", "work_dim": "", "median_ns": ""},
        {**GOOD, "kernel": "i", "global": " 8, 8 ", "local": "NULL", "work_dim": "3"},
    )
    rows = vtruth.read_truth_file(path).app_rows("a")
    assert rows[("k", (2**64 - 1, 1, 1), (16, 1, 1))].launches == 2**64 - 1
    assert rows[("j", (64, 1, 1), None)].mean_ns == 100
    assert ("i", (8, 8, 1), None) in rows


def test_truth_file_huge_or_broken_lines_are_one_line_errors(tmp_path):
    """A 20 MB field was the csv module's traceback (field larger than field limit); a
    field over a truth file's sane length, a short line and a stray quote that swallows
    the lines after it are one error naming the line, too."""
    path = tmp_path / "h100.tsv"
    truth_lines(path, GOOD, GOOD)
    path.write_text(path.read_text() + f"a\t{H100}\t{'k' * 20_000_000}\n")
    with pytest.raises(
        ClprojError, match=r"h100\.tsv:4: not a line of a truth file \(field larger"
    ):
        vtruth.read_truth_file(str(path))
    truth_lines(path, GOOD, {**GOOD, "kernel": "k" * 10_000})
    with pytest.raises(ClprojError, match=r"h100\.tsv:3: kernel has 10000 characters, more than"):
        vtruth.read_truth_file(str(path))
    truth_lines(path, GOOD)
    path.write_text(path.read_text() + "\na\tdev\tk\t1\n")  # line 3 blank
    with pytest.raises(
        ClprojError, match=r"h100\.tsv:4: global is missing \(the line has 4 fields"
    ):
        vtruth.read_truth_file(str(path))
    truth_lines(path, GOOD, {**GOOD, "kernel": '"k'}, GOOD, GOOD)
    with pytest.raises(
        ClprojError, match=r"h100\.tsv:3: a quote opens a field that runs to line 5"
    ):
        vtruth.read_truth_file(str(path))
    path.write_text("")
    with pytest.raises(ClprojError, match="is empty"):
        vtruth.read_truth_file(str(path))


def test_signatures_of_one_shape_are_averaged_errors_counted():
    docs = [
        doc("k", [64], [16], {H100: 1.0}),
        doc("k", [64, 1], [16, 1], {H100: 3.0}, method="reused"),
        doc("k", [128], [16], {H100: 5.0}),
        {"kernel": "k", "global_size": [256], "local_size": [16], "error": "not emulatable"},
    ]
    shapes, errors = vmatch.project_shapes(docs)
    assert errors == {"k: not emulatable": 1}
    s = shapes[("k", (64, 1, 1), (16, 1, 1))]
    assert s.time_s[key(H100)] == pytest.approx(2.0) and s.signatures == 2
    assert dict(s.methods) == {"full-group": 1, "reused": 1}


def test_profiles_of_one_device_name_are_kept_apart(tmp_path):
    """A measured and a spec-sheet profile of the same device (``--devices all``) are two
    projections, not one averaged: each truth device is judged on the profile it was
    assigned, and an unassigned one on the first profile of its name the run used."""
    docs = [doc("k", [64], [16], {("h100-measured", H100): 1.0, ("h100-spec", H100): 9.0})]
    shapes, _ = vmatch.project_shapes(docs)
    assert shapes[("k", (64, 1, 1), (16, 1, 1))].time_s == {"h100-measured": 1.0, "h100-spec": 9.0}
    rows = [("app", "k", "64,1,1", "16,1,1", 1, 2000)]
    h100 = vtruth.read_truth_file(truth_file(tmp_path / "h100.tsv", H100, rows))
    run = {"kernels": [{"kernel": "k", "launches": 1}], "projections": docs}
    (k,), _ = vmatch.judge_app("app", run, [h100])
    assert k.projected_s["h100"] == pytest.approx(1.0)
    (k,), _ = vmatch.judge_app("app", run, [dataclasses.replace(h100, profile="h100-spec")])
    assert k.projected_s["h100"] == pytest.approx(9.0)


def test_each_truth_device_gets_a_profile_chosen_first_then_measured_then_its_sheet(tmp_path):
    from clproj.devices.profile import known_profiles, load_profile
    from clproj.runtime.evaluation import validate_devices as vdev

    def dev(label: str, name: str) -> vtruth.TruthDevice:
        return vtruth.read_truth_file(
            truth_file(tmp_path / f"{label}.tsv", name, [("a", "k", "64,1,1", "64,1,1", 1, 9)])
        )

    shipped = known_profiles()
    truth = [
        dev("h100", H100),
        dev("h200", "nvidia  H200"),  # another tool's spelling: case and blanks ignored
        dev("a100", A100),
        dev("cpu", "Some CPU nobody measured"),
    ]
    spec_h100 = load_profile("h100-sxm-spec")
    assert spec_h100.name == H100  # the sheet names the measured device too
    got, why = vdev.assign(
        truth, [spec_h100, load_profile("nvidia-h100-80gb-hbm3-nvidia")], shipped
    )
    assert (got["h100"].profile, got["h100"].source) == (
        "nvidia-h100-80gb-hbm3-nvidia",
        vdev.CHOSEN,
    )
    assert (got["h200"].profile, got["h200"].source) == ("nvidia-h200-nvidia", vdev.MEASURED)
    assert (got["a100"].profile, got["a100"].source) == (A100_SPEC, vdev.SPEC)
    assert set(got) == {"h100", "h200", "a100"} and "no spec sheet" in why["cpu"]
    assert "\n" not in why["cpu"] and "--devices" in why["cpu"]
    assert vdev.run_devices("local", got) == f"local,nvidia-h200-nvidia,{A100_SPEC}"
    # Chosen with --devices, a spec sheet stands for its device when nothing measured does.
    got, _ = vdev.assign(truth[:1], [spec_h100], shipped)
    assert (got["h100"].profile, got["h100"].source) == ("h100-sxm-spec", vdev.CHOSEN)
    assert vdev.run_devices("h100-sxm-spec", got) == "h100-sxm-spec"


# --- metrics --------------------------------------------------------------------------


def kernel(measured: dict[str, float], projected: dict[str, float], name: str = "k"):
    return vmatch.KernelResult(
        app="a",
        kernel=name,
        measured_s=measured,
        projected_s=projected,
        bound={},
        launches_truth=1,
        launches_matched=1,
        shapes_truth=1,
        shapes_matched=1,
    )


def test_relative_error_is_zero_for_identical_and_scaled_vectors():
    assert kernel({"a": 1, "b": 2}, {"a": 1, "b": 2}).relative_error == pytest.approx(0.0)
    # a common scale factor is not an error of *relative* performance
    assert kernel({"a": 1, "b": 2}, {"a": 10, "b": 20}).relative_error == pytest.approx(0.0)


def test_relative_error_known_value():
    # unit vectors (1,1)/sqrt2 and (1,3)/sqrt10: |a-p|^2 = 2 - 2*4/sqrt20, divided by sqrt 2
    k = kernel({"a": 1, "b": 1}, {"a": 1, "b": 3})
    assert k.relative_error == pytest.approx(math.sqrt(1 - 2 / math.sqrt(5)))


def test_best_device_and_penalty():
    k = kernel({"gpu": 1.0, "cpu": 2.0}, {"gpu": 3.0, "cpu": 1.0})
    assert k.best_measured == "gpu" and k.best_projected == "cpu"
    assert k.penalty == pytest.approx(1.0)  # t[cpu] / t[gpu] - 1
    assert kernel({"gpu": 1.0, "cpu": 2.0}, {"gpu": 1.0, "cpu": 9.0}).penalty == 0.0
    assert kernel({"gpu": 1.0}, {"gpu": 1.0}).penalty is None  # one device: no choice


def test_device_metrics_hand_computed():
    ks = [
        kernel({"d": 1.0}, {"d": 2.0}, "k1"),  # ratio 2, APE 1
        kernel({"d": 2.0}, {"d": 1.0}, "k2"),  # ratio 0.5, APE 0.5
        kernel({"d": 4.0}, {"d": 4.0}, "k3"),  # ratio 1, APE 0
        kernel({"d": 10.0}, {"d": 11.0}, "k4"),  # ratio 1.1, APE 0.1
    ]
    m = vscores.device_metrics(ks, "d")
    assert m["kernels"] == 4
    assert m["median_ratio"] == pytest.approx(1.05)
    assert m["within_25"] == 2 and m["within_25_share"] == pytest.approx(0.5)
    assert m["within_2x"] == 4  # both band edges count
    assert m["mape"] == pytest.approx((1 + 0.5 + 0 + 0.1) / 4)
    assert m["max_off_factor"] == pytest.approx(2.0)
    assert m["worst_kernel"] in ("k1", "k2")


def test_pair_order_and_summary_use_only_fully_judged_kernels():
    ks = [
        kernel({"h100": 2, "h200": 1}, {"h100": 4, "h200": 3}, "right"),
        kernel({"h100": 1, "h200": 2}, {"h100": 4, "h200": 3}, "wrong"),
        kernel({"h100": 1}, {"h100": 1}, "partial"),
    ]
    p = vscores.pair_order(ks, "h100", "h200")
    assert (p["kernels"], p["agree"], p["hard"]) == (2, 1, True)
    s = vscores.summarize(ks, ["h100", "h200"])
    assert s["kernels"] == 2 and s["best_chosen"] == 1
    assert s["mean_penalty"] == pytest.approx(0.5)  # 0 and 2/1 - 1 = 1
    assert s["per_device"]["h100"]["kernels"] == 3  # per device: every kernel it has


def test_judge_app_matches_by_shape_and_sums_launches(tmp_path):
    h100 = vtruth.read_truth_file(
        truth_file(
            tmp_path / "h100.tsv",
            H100,
            [
                ("app", "k", "64,64,1", "16,4,1", 3, 1000),  # 3 launches of 1 us
                ("app", "k", "32,64,1", "16,4,1", 2, 500),
                ("app", "gone", "64,1,1", "64,1,1", 1, 100),
                ("other", "k", "64,64,1", "16,4,1", 9, 9),
            ],
        )
    )
    epyc = vtruth.read_truth_file(
        truth_file(
            tmp_path / "epyc2.tsv",
            EPYC,
            [
                ("app", "k", "64,64,1", "16,4,1", 3, 4000),
                ("app", "k", "32,64,1", "16,4,1", 2, 1000),
            ],
        )
    )
    run = {
        "kernels": [{"kernel": "k", "launches": 5, "total_ns": 7000}],
        "projections": [
            # two signatures of the first shape (a changing scalar): averaged
            doc("k", [64, 64], [16, 4], {H100: 1e-6, EPYC: 2e-6}),
            doc("k", [64, 64], [16, 4], {H100: 3e-6, EPYC: 2e-6}),
            doc("k", [32, 64], [16, 4], {H100: 1e-6, EPYC: 1e-6}),
            doc("k", [8, 8], [8, 8], {H100: 1.0, EPYC: 1.0}),  # no truth row
            doc("k", [16], [8], {H100: 1.0}, note="shaped by this machine's device's answers"),
        ],
    }
    results, notes = vmatch.judge_app("app", run, [epyc, h100])
    k = next(r for r in results if r.kernel == "k")
    assert k.measured_s["h100"] == pytest.approx(3 * 1000e-9 + 2 * 500e-9)
    assert k.projected_s["h100"] == pytest.approx(3 * 2e-6 + 2 * 1e-6)
    assert k.measured_s["epyc2"] == pytest.approx(3 * 4000e-9 + 2 * 1000e-9)
    assert k.projected_s["epyc2"] == pytest.approx(3 * 2e-6 + 2 * 1e-6)
    assert (k.launches_truth, k.launches_matched, k.shapes_matched, k.signatures) == (5, 5, 2, 3)
    assert k.ratio("h100") == pytest.approx(8e-6 / 4e-6)
    gone = next(r for r in results if r.kernel == "gone")
    assert gone.devices == [] and gone.launches_matched == 0
    assert any("gone" in n and "never launched" in n for n in notes)
    assert any("without a truth row" in n for n in notes)
    assert notes.count("k: shaped by this machine's device's answers") == 1


def kprofile(kernel: str, glob: list[int], local: list[int], fma: int) -> dict:
    """A minimal kernel profile (miniemu.profile format) with ``fma`` FMAs in all."""
    items = math.prod(glob)
    return {
        "format": "clproj.kernel-profile",
        "version": 1,
        "kernel": kernel,
        "signature": f"{kernel}-{items}",
        "launch": {"global_size": glob, "local_size": local, "work_items": items},
        "emulation": {"method": "full-group", "confidence": "high", "flags": []},
        "per_group": {},
        "total": {"work_items": items, "instructions": {"fp32_fma": fma}},
    }


class FmaModel:
    """A fake model: seconds = FMAs x the device's cost per FMA."""

    name = "fma"

    def predict(self, profile, device, footprint_bytes=None):
        from clproj.runtime.projection.models import ModelPrediction

        fma = profile["total"]["instructions"]["fp32_fma"]
        return ModelPrediction(time_s=fma * device.cost, bound="C")


def test_models_side_by_side_reproject_profiles_and_scale_reused_launches(tmp_path):
    from types import SimpleNamespace

    h100 = vtruth.read_truth_file(
        truth_file(
            tmp_path / "h100.tsv",
            H100,
            [("app", "k", "64,1,1", "16,1,1", 1, 1000), ("app", "k", "128,1,1", "16,1,1", 2, 1000)],
        )
    )
    epyc = vtruth.read_truth_file(
        truth_file(
            tmp_path / "epyc2.tsv",
            EPYC,
            [("app", "k", "64,1,1", "16,1,1", 1, 4000), ("app", "k", "128,1,1", "16,1,1", 2, 8000)],
        )
    )
    emulated = doc("k", [64], [16], {H100: 1e-6, EPYC: 4e-6}, signature="s64")
    emulated["profile"] = kprofile("k", [64], [16], fma=64)
    reused = doc("k", [128], [16], {H100: 1e-6, EPYC: 8e-6}, signature="s128", method="reused")
    reused["emulation"]["reused_from"] = "s64"  # no profile: scaled x2 from s64's
    run = vsuite.AppRun(
        "app",
        ok=True,
        doc={"kernels": [{"kernel": "k", "launches": 3}], "projections": [emulated, reused]},
    )
    devices = [
        SimpleNamespace(key=H100.lower().replace(" ", "-"), name=H100, cost=1e-9),
        SimpleNamespace(key=EPYC.lower().replace(" ", "-"), name=EPYC, cost=1e-8),
    ]
    val = v.judge_runs(
        [run], [epyc, h100], models={"bound": None, "fma": FmaModel()}, device_profiles=devices
    )
    assert list(val.models) == ["bound", "fma"]
    # bound: the run's own projections, the same numbers as the main summary.
    assert val.models["bound"]["mean_relative_error"] == val.summary()["mean_relative_error"]
    bound = val.models["bound"]["per_device"]
    assert bound["h100"]["median_ratio"] == pytest.approx((1e-6 + 2e-6) / 3e-6)  # exact
    # fma: 64 FMAs at 64 work-items, 128 for the reused 128 (scaled), 1 + 2 launches.
    fma = val.models["fma"]
    h = 1 * 64e-9 + 2 * 128e-9  # projected on h100
    e = 1 * 64e-8 + 2 * 128e-8  # on epyc2
    assert fma["per_device"]["h100"]["median_ratio"] == pytest.approx(h / 3e-6)
    assert fma["per_device"]["epyc2"]["median_ratio"] == pytest.approx(e / 20e-6)
    assert fma["per_device"]["h100"]["mape"] == pytest.approx(abs(h / 3e-6 - 1))
    assert fma["best_chosen"] == 1 and fma["kernels"] == 1  # h100 measured and projected best
    assert fma["signatures"] == {"emulated": 1, "scaled": 1}
    from clproj.runtime.evaluation import metrics

    want = metrics.relative_error({"h100": 3e-6, "epyc2": 20e-6}, {"h100": h, "epyc2": e})
    assert fma["mean_relative_error"] == pytest.approx(want)
    out = val.to_dict()
    assert set(out["models"]) == {"bound", "fma"}
    assert v.load_validation(out).models == out["models"]


def test_model_names_checked():
    assert vmodels.check_model_names(["bound", "paper", "bound"]) == ["bound", "paper"]
    assert vmodels.check_model_names(["bound", "learned"]) == ["bound", "learned"]
    with pytest.raises(ClprojError, match="unknown model"):
        vmodels.check_model_names(["nope"])


class PickyModel(FmaModel):
    """A fake trained model that, like the learned one, cannot predict an untrained device."""

    name = "picky"

    def predict(self, profile, device, footprint_bytes=None):
        if device.name == EPYC:
            raise ClprojError("no training data for epyc", "train it")
        assert footprint_bytes == 4096  # the run's recorded footprint reaches the model
        return super().predict(profile, device, footprint_bytes)


def test_a_model_without_training_data_for_a_device_leaves_that_device_out(tmp_path):
    from types import SimpleNamespace

    h100 = vtruth.read_truth_file(
        truth_file(tmp_path / "h100.tsv", H100, [("app", "k", "64,1,1", "16,1,1", 1, 1000)])
    )
    epyc = vtruth.read_truth_file(
        truth_file(tmp_path / "epyc2.tsv", EPYC, [("app", "k", "64,1,1", "16,1,1", 1, 4000)])
    )
    emulated = doc("k", [64], [16], {H100: 1e-6, EPYC: 4e-6}, signature="s64")
    emulated["profile"] = kprofile("k", [64], [16], fma=64)
    emulated["footprint_bytes"] = 4096
    run = vsuite.AppRun(
        "app", ok=True, doc={"kernels": [{"kernel": "k", "launches": 1}], "projections": [emulated]}
    )
    devices = [
        SimpleNamespace(key=H100.lower().replace(" ", "-"), name=H100, cost=1e-9),
        SimpleNamespace(key=EPYC.lower().replace(" ", "-"), name=EPYC, cost=1e-8),
    ]
    val = v.judge_runs([run], [epyc, h100], models={"picky": PickyModel()}, device_profiles=devices)
    epyc_key = devices[1].key
    picky = val.models["picky"]
    assert picky["per_device"]["epyc2"]["kernels"] == 0  # left out, not a crash
    assert picky["per_device"]["h100"]["kernels"] == 1
    assert picky["per_device"]["h100"]["median_ratio"] == pytest.approx(64e-9 / 1e-6)
    assert picky["per_device"]["h100"]["within_25"] == 0
    assert picky["per_device"]["h100"]["max_off_factor"] == pytest.approx(1e-6 / 64e-9)
    assert picky["signatures"] == {"emulated": 1, f"no training data for {epyc_key}": 1}
    from clproj.runtime.evaluation.validate_tables import model_rows

    _, rows, lines = model_rows(val)
    assert rows[0][0] == "picky"
    assert lines == [f"picky: 1 prediction(s) left out, no training data for {epyc_key}"]


def test_learned_model_trains_on_our_apps_only(tmp_path):
    """The learned model of validate trains on every committed app of ours, per device
    profile key, and predicts a launch on each of those devices; results whose device has
    no measured profile give no rows, which is a one-line error, not an untrained model."""
    from clproj.devices.profile import load_profile
    from clproj.runtime.evaluation.evaluate import default_results
    from clproj.runtime.projection.models.learned import LearnedModel

    model = LearnedModel(n_estimators=8, grid=({"max_features": 1.0, "min_samples_leaf": 3},))
    what = vmodels.fit_on_our_apps(model)
    committed = default_results()
    assert what["apps"] >= 30 and len(what["rows"]) == len(committed)
    assert set(model.models) == set(what["rows"])
    profile = kprofile("k", [4096], [64], fma=4096 * 64)
    times = {}
    for key in what["rows"]:
        path = os.path.join("devices", "profiles", "measured")
        match = [f for f in os.listdir(path) if load_profile(os.path.join(path, f)).key == key]
        assert match, key
        dev = load_profile(os.path.join(path, match[0]))
        times[key] = model.predict(profile, dev, 1 << 20).time_s
    assert all(1e-7 < t < 10.0 for t in times.values()), times

    with open(committed[0], encoding="utf-8") as fh:
        res = json.load(fh)
    res["device"]["name"] = "Imaginary CPU 9000"  # no measured profile of that name
    res["device"]["platform"] = "Nowhere"
    fake = tmp_path / "bench-imaginary-paper.json"
    fake.write_text(json.dumps(res), encoding="utf-8")
    with pytest.raises(ClprojError, match="no training rows"):
        vmodels.fit_on_our_apps(LearnedModel(n_estimators=2), [str(fake)])


def test_parse_run_output_skips_app_output_with_braces():
    out = 'app says {hello}\n{"not": "a line of its own"}\n{\n  "exit_code": 0\n}\n'
    assert vsuite.parse_run_output(out) == {"exit_code": 0}
    with pytest.raises(ValueError):
        vsuite.parse_run_output("no document here {\n")


def test_build_once_then_up_to_date_then_given(tmp_path):
    suite = tmp_path / "suite"
    (suite / "src").mkdir(parents=True)
    (suite / "src" / "x.txt").write_text("1")
    (suite / "build.sh").write_text(
        'set -eu\nmkdir -p "$1/one"\nprintf "#!/bin/sh\\nexit 0\\n" > "$1/one/app"\n'
        'chmod +x "$1/one/app"\necho built >> "$1/count"\n'
    )
    out = str(tmp_path / "out")
    assert vsuite.ensure_built(str(suite), out) == (out, "built")
    # an explicit folder that holds built apps is the user's: used as is
    assert vsuite.ensure_built(str(suite), out) == (out, "given")
    where, how = vsuite.ensure_built(str(suite), None)
    assert how == "built" and vsuite.app_dirs(where) == ["one"]
    assert vsuite.ensure_built(str(suite), None) == (where, "up to date")
    os.utime(suite / "src" / "x.txt", ns=(1, 1))  # a changed source rebuilds
    assert vsuite.ensure_built(str(suite), None) == (where, "built")
    with pytest.raises(ClprojError, match=r"no build\.sh"):
        vsuite.ensure_built(str(tmp_path / "nothing"), str(tmp_path / "o2"))


# --- end to end -------------------------------------------------------------------------

TINY_CL = """
__kernel void scale(__global float *a, const float f, const int n)
{
    int i = get_global_id(0);
    if (i < n)
        a[i] = a[i] * f + 1.0f;
}

__kernel void add2d(__global const float *a, __global const float *b, __global float *c,
                    const int w)
{
    int x = get_global_id(0), y = get_global_id(1);
    c[y * w + x] = a[y * w + x] + b[y * w + x];
}
"""

# An ordinary OpenCL host: opens tiny.cl from the working directory (like PolyBench), runs
# scale 3 times at 4096 and twice at 1024 work-items, add2d once at 64x64, prints, exits 0.
TINY_C = r"""
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#define CHECK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { \
    fprintf(stderr, "%s: %d\n", #x, e_); return 2; } } while (0)
int main(void)
{
    FILE *f = fopen("tiny.cl", "rb");
    if (!f) { perror("tiny.cl"); return 2; }
    static char src[1 << 14];
    size_t len = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[len] = 0;
    cl_platform_id plat; cl_device_id dev; cl_int err;
    CHECK(clGetPlatformIDs(1, &plat, NULL));
    CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err); CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err); CHECK(err);
    const char *s = src;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &s, &len, &err); CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    cl_kernel scale = clCreateKernel(prog, "scale", &err); CHECK(err);
    cl_kernel add2d = clCreateKernel(prog, "add2d", &err); CHECK(err);
    const int n = 4096, w = 64;
    float *h = calloc(n, sizeof *h);
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *h, h, &err); CHECK(err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *h, h, &err); CHECK(err);
    cl_mem c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n * sizeof *h, NULL, &err); CHECK(err);
    float fac = 0.5f;
    CHECK(clSetKernelArg(scale, 0, sizeof a, &a));
    CHECK(clSetKernelArg(scale, 1, sizeof fac, &fac));
    CHECK(clSetKernelArg(scale, 2, sizeof n, &n));
    size_t g1 = 4096, l1 = 64, g2 = 1024;
    for (int i = 0; i < 3; ++i) CHECK(clEnqueueNDRangeKernel(q, scale, 1, NULL, &g1, &l1, 0, NULL, NULL));
    for (int i = 0; i < 2; ++i) CHECK(clEnqueueNDRangeKernel(q, scale, 1, NULL, &g2, &l1, 0, NULL, NULL));
    CHECK(clSetKernelArg(add2d, 0, sizeof a, &a));
    CHECK(clSetKernelArg(add2d, 1, sizeof b, &b));
    CHECK(clSetKernelArg(add2d, 2, sizeof c, &c));
    CHECK(clSetKernelArg(add2d, 3, sizeof w, &w));
    size_t g3[2] = {64, 64}, l3[2] = {16, 4};
    CHECK(clEnqueueNDRangeKernel(q, add2d, 2, NULL, g3, l3, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, n * sizeof *h, h, 0, NULL, NULL));
    printf("tiny: c[0] = %g {done}\n", h[0]);
    return h[0] == 1.9375f ? 0 : 1;
}
"""

BUILD_SH = r"""#!/bin/bash
# build.sh OUTDIR: every src/<app>/ with main.c -> OUTDIR/<app>/app beside its .cl;
# a src/<app>/app.sh is installed as the app itself. A failed build is reported, not fatal.
set -u
src="$(cd "$(dirname "$0")" && pwd)/src"; out=$1; mkdir -p "$out"
for d in "$src"/*/; do
  name=$(basename "$d"); mkdir -p "$out/$name"
  cp "$d"/*.cl "$out/$name/" 2>/dev/null
  if [ -f "$d/app.sh" ]; then install -m 755 "$d/app.sh" "$out/$name/app"; continue; fi
  cc -O1 -w "$d/main.c" -o "$out/$name/app" -lOpenCL || echo "build failed: $name" >&2
done
"""


def clproj(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clproj.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp("suite")
    (root / "src" / "tiny").mkdir(parents=True)
    (root / "src" / "tiny" / "main.c").write_text(TINY_C)
    (root / "src" / "tiny" / "tiny.cl").write_text(TINY_CL)
    (root / "src" / "broken").mkdir()
    (root / "src" / "broken" / "main.c").write_text("int main(void) { return syntax error; }\n")
    (root / "src" / "crash").mkdir()
    (root / "src" / "crash" / "app.sh").write_text("#!/bin/sh\necho crashing >&2\nexit 3\n")
    (root / "build.sh").write_text(BUILD_SH)
    truth = root / "truth"
    truth.mkdir()
    rows = [
        ("tiny", "scale", "4096,1,1", "64,1,1", 3, 2000),
        ("tiny", "scale", "1024,1,1", "64,1,1", 2, 1000),
        ("tiny", "add2d", "64,64,1", "16,4,1", 1, 3000),
        ("crash", "never", "64,1,1", "64,1,1", 1, 3000),
        ("broken", "never", "64,1,1", "64,1,1", 1, 3000),
    ]
    truth_file(truth / "h100.tsv", H100, rows)
    truth_file(truth / "epyc2.tsv", EPYC, [(*r[:5], r[5] * 10) for r in rows])
    truth_file(truth / "ghost.tsv", "a device nobody has a profile of", rows)
    truth_file(truth / "a100.tsv", A100, [(*r[:5], r[5] // 2) for r in rows])
    return root


def test_end_to_end_on_a_tiny_suite(tiny_suite, tmp_path):
    build = tmp_path / "build"
    report = tmp_path / "report"
    res = clproj(
        "validate", str(tiny_suite), "--truth", str(tiny_suite / "truth"), "--build-dir",
        str(build), "--json", "--report", str(report),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    apps = {a["app"]: a for a in out["apps"]}
    assert apps["tiny"]["ok"], apps["tiny"]
    assert not apps["broken"]["ok"] and "build failed" in apps["broken"]["error"]
    assert not apps["crash"]["ok"] and "exit code 3" in apps["crash"]["error"]
    assert [d["label"] for d in out["devices"]] == ["a100", "epyc2", "h100"]
    # No measured profile is named as the A100 truth file's device: its spec sheet stands in.
    a100 = out["devices"][0]
    assert (a100["profile"], a100["stand_in"]) == (A100_SPEC, "spec sheet")
    assert out["devices"][2]["stand_in"] is None
    assert "models" not in out  # without --models: the bound model only, as before
    assert "ghost" in out["skipped_devices"] and "pocl-basic-amd-epyc" in out["skipped_devices"]
    assert "no spec sheet" in out["skipped_devices"]["ghost"]

    ks = {k["kernel"]: k for k in out["kernels"]}
    assert set(ks) == {"scale", "add2d"}  # the crashed app's kernel is not judged
    scale = ks["scale"]
    assert (scale["launches_truth"], scale["launches_matched"], scale["launches_run"]) == (5, 5, 5)
    assert scale["shapes_matched"] == 2
    assert scale["measured_s"]["h100"] == pytest.approx((3 * 2000 + 2 * 1000) * 1e-9)
    assert scale["measured_s"]["epyc2"] == pytest.approx((3 * 20000 + 2 * 10000) * 1e-9)

    # Independently: the projections of the same app, straight from `clproj run`.
    run = clproj(
        "run", "--mode", "project", "--devices", f"measured,{A100_SPEC}", "--json", "--", "./app",
        cwd=str(build / "tiny"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    raw = vsuite.parse_run_output(run.stdout)
    per_launch = {
        (d["kernel"], d["global_size"][0]): {p["name"]: p["time_s"] for p in d["projections"]}
        for d in raw["projections"]
    }
    for label, name in (("h100", H100), ("epyc2", EPYC), ("a100", A100)):
        want = 3 * per_launch[("scale", 4096)][name] + 2 * per_launch[("scale", 1024)][name]
        assert scale["projected_s"][label] == pytest.approx(want, rel=1e-9)
        assert scale["ratio"][label] == pytest.approx(want / scale["measured_s"][label])

    s = out["summary"]
    assert s["kernels"] == 2
    per = s["per_device"]
    for label in ("h100", "epyc2"):
        k_ratios = [ks[k]["ratio"][label] for k in ks]
        assert per[label]["median_ratio"] == pytest.approx(
            sorted(k_ratios)[0] / 2 + sorted(k_ratios)[1] / 2
        )
        want_mape = sum(abs(r - 1) for r in k_ratios) / len(k_ratios)
        assert per[label]["mape"] == pytest.approx(want_mape)
    assert 0 <= s["mean_relative_error"] <= 1
    assert s["best_chosen"] == sum(ks[k]["best_measured"] == ks[k]["best_projected"] for k in ks)
    again = v.load_validation(out).to_dict()  # a saved run re-prints the same numbers
    assert again["summary"] == out["summary"] and again["kernels"] == out["kernels"]
    assert os.path.exists(report / "index.html")
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "Devices not judged" in page and "<td>ghost</td>" in page
    assert "a100 (spec sheet)" in page
    assert {"scatter_h100.png", "scatter_epyc2.png"} <= set(os.listdir(report))

    # The readable tables, on the same (now given) build folder, one app.
    res = clproj(
        "validate", str(tiny_suite), "--truth", str(tiny_suite / "truth"), "--build-dir",
        str(build), "--apps", "tiny", "--models", "bound,roofline,paper,learned",
        "--report", str(tmp_path / "report-models"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    page = (tmp_path / "report-models" / "index.html").read_text(encoding="utf-8")
    assert "Models side by side" in page and "learned: trained on" in page
    text = res.stdout
    for needle in ("judged on a stand-in: a100", "a100 (spec sheet)", "models side by side", "roofline", "paper", "learned: trained on", "h100: median · in 25% · MAPE · worst", "per device", "MAPE", "within 0.8-1.25x", "best device chosen", "worst kernels",
                   "epyc2 vs h100", "scale", "add2d"):  # fmt: skip
        assert needle in text, needle


def test_unknown_app_is_a_one_line_error(tiny_suite, tmp_path):
    res = clproj(
        "validate", str(tiny_suite), "--truth", str(tiny_suite / "truth"), "--apps", "nope",
        "--build-dir", str(tmp_path / "b"),
    )  # fmt: skip
    assert res.returncode == 2
    assert "no app nope" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_validate_leaves_no_app_running(tmp_path, how):
    """The app being judged runs in a session of its own (so that a time-out ends its
    helpers with it); a Ctrl-C (the whole foreground group) or a SIGTERM to ``clproj
    validate`` alone must end it too, not leave it running on, orphaned."""
    import signal
    import time

    root = tmp_path / "suite"
    (root / "src" / "sleeper").mkdir(parents=True)
    pid_file = tmp_path / "app.pid"
    (root / "src" / "sleeper" / "app.sh").write_text(
        f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n"
    )
    (root / "build.sh").write_text(BUILD_SH)
    (root / "truth").mkdir()
    truth_file(root / "truth" / "h100.tsv", H100, [("sleeper", "k", "64,1,1", "64,1,1", 1, 1)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "clproj.cli", "validate", str(root), "--truth",
         str(root / "truth"), "--build-dir", str(tmp_path / "build")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    app = int(pid_file.read_text())
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -(signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)

    def running() -> bool:
        try:
            with open(f"/proc/{app}/stat") as fh:
                return fh.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 15
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(), f"the app {app} still runs"
