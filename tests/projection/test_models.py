"""clproj.runtime.projection.models: the interface, MWP-CWP's three cases on hand-computed inputs, and the
learned model's leave-one-app-out training and determinism (on the committed ground truth)."""

from __future__ import annotations

import pytest

from clproj.devices.profile import load_profile
from clproj.errors import ClprojError
from clproj.runtime.evaluation.app_profiles import load_cached
from clproj.runtime.evaluation.evaluate import default_results, evaluate
from clproj.runtime.projection.model import project
from clproj.runtime.projection.models import MODEL_NAMES, Model, ModelPrediction, get_model
from clproj.runtime.projection.models.base import training_rows
from clproj.runtime.projection.models.learned import LearnedModel
from clproj.runtime.projection.models.mwp_cwp import latency_params, mwp_cwp_time

APPS = ["vecadd", "nbody", "reduction", "transpose_naive"]


@pytest.fixture(scope="module")
def nbody() -> dict:
    doc = load_cached("nbody", "paper", "single")
    assert doc is not None
    return doc["groups"][0]["variants"][0]["profile"]


@pytest.fixture(scope="module")
def rows() -> list:
    from clproj.benchmarks.harness import load_results

    measured = {}
    for path in default_results():
        res = load_results(path)
        measured[res["device"]["key"]] = res
    docs = {a: load_cached(a, "paper", "single") for a in APPS}
    return training_rows(measured, APPS, docs)


def test_every_model_speaks_the_interface(nbody) -> None:
    dev = load_profile("nvidia-h100-80gb-hbm3-nvidia")
    for name in MODEL_NAMES:
        m = get_model(name)
        assert isinstance(m, Model) and m.name == name
    for name in ("bound", "mwp-cwp", "paper", "roofline"):
        p = get_model(name).predict(nbody, dev, 2 << 20)
        assert isinstance(p, ModelPrediction) and p.time_s > 0 and p.breakdown
    # the bound model is the projection, unchanged
    assert get_model("bound").predict(nbody, dev).time_s == project(nbody, dev).time_s
    with pytest.raises(ClprojError, match="unknown model"):
        get_model("nosuch")


def _fma_and_bytes(fma: float, load_bytes: float, items: int = 1 << 20) -> dict:
    total = {
        "work_items": items,
        "instructions": {"fp32_fma": fma},
        "global": {"load_bytes": load_bytes, "store_bytes": 0, "transactions": {}},
        "local": {"load_bytes": 0, "store_bytes": 0, "bank": {}},
    }
    per_group = {"local": {"bytes_per_group": 0}, "private_bytes_per_work_item": 0}
    return {
        "launch": {"num_groups": max(1, items // 256), "group_size": min(items, 256)},
        "per_group": per_group,
        "total": total,
    }


def test_roofline_is_the_spec_sheet_peaks() -> None:
    from clproj.devices.specs import spec_for

    dev = load_profile("nvidia-h100-80gb-hbm3-nvidia")
    spec = spec_for(dev.name)
    assert spec is not None
    peak = 2 * spec.per_cu["fp32_fma"] * spec.cus * spec.clock_mhz * 1e6
    m = get_model("roofline")
    flops = m.predict(_fma_and_bytes(1e12, 0), dev)
    assert flops.bound == "C" and flops.time_s == pytest.approx(2e12 / peak)
    mem = m.predict(_fma_and_bytes(0, 1e10), dev)
    assert mem.bound == "G" and mem.time_s == pytest.approx(1e10 / (spec.bandwidth_gbs * 1e9))


def test_paper_model_leaves_out_the_additions(nbody) -> None:
    dev = load_profile("nvidia-h100-80gb-hbm3-nvidia")
    paper = get_model("paper").predict(nbody, dev, 2 << 20)
    # no launch floor, no latency term: a compute-bound kernel is its compute term x tail
    assert paper.time_s == pytest.approx(
        max(paper.breakdown[k] for k in ("t_compute", "t_global", "t_local"))
        * paper.breakdown["tail_factor"]
    )
    tiny = get_model("paper").predict(_fma_and_bytes(256, 0, items=256), dev)
    assert tiny.time_s < 1e-8  # a launch floor would be microseconds


def test_mwp_cwp_case_1_too_few_warps() -> None:
    # N=2: MWP = min(100/10, 100, 2) = 2 = N; CWP = min((200+50)/50, 2) = 2 = N
    t, d = mwp_cwp_time(2, 1, 100, 10, mem_insts=2, mem_s=200, comp_s=50, mwp_peak_bw=100)
    assert d["case"] == "1-few-warps"
    assert t == pytest.approx(200 + 50 + 50 / 2 * (2 - 1))


def test_mwp_cwp_case_2_memory_bound() -> None:
    # N=16: MWP = 10; CWP = min(220/20, 16) = 11 >= MWP -> Mem*N/MWP + Comp/#mem*(MWP-1)
    t, d = mwp_cwp_time(16, 2, 100, 10, mem_insts=2, mem_s=200, comp_s=20, mwp_peak_bw=100)
    assert d["case"] == "2-memory-bound" and d["mwp"] == 10 and d["cwp"] == 11
    assert t == pytest.approx((200 * 16 / 10 + 20 / 2 * 9) * 2)
    # the bandwidth limit caps MWP
    t, d = mwp_cwp_time(16, 1, 100, 10, mem_insts=2, mem_s=200, comp_s=20, mwp_peak_bw=4)
    assert d["mwp"] == 4 and t == pytest.approx(200 * 16 / 4 + 20 / 2 * 3)


def test_mwp_cwp_case_3_compute_bound_with_synchronisation() -> None:
    # N=16: MWP = 10 > CWP = 250/50 = 5, Comp < Mem -> Mem_L + Comp*N, plus
    # synch = departure * (MWP-1) * #synch * blocks/CU * #Rep = 10*9*3*2*2
    t, d = mwp_cwp_time(
        16, 2, 100, 10, mem_insts=2, mem_s=200, comp_s=50, mwp_peak_bw=100,
        synch_insts=3, blocks_per_cu=2,
    )  # fmt: skip
    assert d["case"] == "3-compute-bound"
    assert t == pytest.approx((100 + 50 * 16) * 2 + 10 * 9 * 3 * 2 * 2)


def test_mwp_cwp_latency_comes_from_the_profile_or_a_default() -> None:
    cpu = load_profile("pocl-pthread-amd-epyc")
    lat = cpu.data["detail"]["latency"]
    got = latency_params(cpu)
    assert got["source"] == "measured" and got["mem_latency_s"] == lat["global_latency_s"]
    gpu = load_profile("nvidia-h100-80gb-hbm3-nvidia")
    if "latency" not in gpu.data.get("detail", {}):
        assert latency_params(gpu)["source"] == "default"


def test_training_rows_carry_the_measured_per_launch_time(rows) -> None:
    assert {r.app for r in rows} == set(APPS)
    vec = [r for r in rows if r.app == "vecadd" and r.device_key == "nvidia-h100"]
    from clproj.benchmarks.harness import load_results

    res = next(
        load_results(p)
        for p in default_results()
        if load_results(p)["device"]["key"] == "nvidia-h100"
    )
    assert len(vec) == 1
    assert vec[0].time_s == res["apps"]["vecadd"]["kernels"][0]["median_ns"] * 1e-9


class _Spy:
    """A trainable model that records what it was trained on when it predicts."""

    name = "spy"

    def __init__(self) -> None:
        self.trained: set[str] = set()
        self.seen: list[tuple[str, frozenset[str]]] = []

    def fit(self, rows: list) -> _Spy:
        self.trained = {r.app for r in rows}
        return self

    def predict(self, profile, device, footprint_bytes=None) -> ModelPrediction:
        self.seen.append((profile["signature"], frozenset(self.trained)))
        return ModelPrediction(1e-3)


def test_leave_one_app_out_never_trains_on_the_predicted_app() -> None:
    spy = _Spy()
    ev = evaluate(apps=APPS, model=spy)
    assert {a.app for a in ev.apps} == set(APPS)
    app_of = {}
    for a in APPS:
        for g in load_cached(a, "paper", "single")["groups"]:
            for v in g["variants"]:
                app_of[v["profile"]["signature"]] = a
    assert spy.seen
    for sig, trained in spy.seen:
        assert app_of[sig] not in trained
        assert len(trained) >= 20  # every other measured app is in the training set


def test_learned_model_is_deterministic_and_order_independent(rows, nbody) -> None:
    small = {"n_estimators": 8, "grid": ({"max_features": 1.0, "min_samples_leaf": 1},)}
    train = [r for r in rows if r.app != "nbody"]
    a = LearnedModel(seed=3, **small).fit(train)
    b = LearnedModel(seed=3, **small).fit(list(reversed(train)))
    dev = load_profile("nvidia-h100-80gb-hbm3-nvidia")
    a.models[dev.key] = a.models.pop("nvidia-h100")  # rows here carry the bench key
    b.models[dev.key] = b.models.pop("nvidia-h100")
    assert a.predict(nbody, dev).time_s == b.predict(nbody, dev).time_s
    assert a.trained_apps == set(APPS) - {"nbody"}
    assert a.predict_s  # prediction latency is recorded
    with pytest.raises(ClprojError, match="no training data"):
        a.predict(nbody, load_profile("pocl-basic-amd-epyc"))
    # Many launches in one pass give exactly the one-by-one numbers, in order.
    variants = [v for r in rows for _, v in r.variants][:12]
    fps = [float(1 << (10 + i)) for i in range(len(variants))]
    batch = a.predict_many(variants, dev, fps)
    assert [p.time_s for p in batch] == [
        a.predict(v, dev, f).time_s for v, f in zip(variants, fps, strict=True)
    ]
    assert a.predict_many([], dev) == []
    with pytest.raises(ClprojError, match="no training data"):
        a.predict_many([nbody], load_profile("pocl-basic-amd-epyc"))


def test_learned_model_selects_hyper_parameters_by_grouped_cv(rows) -> None:
    m = LearnedModel(seed=0, n_estimators=8).fit(rows)
    chosen = m.chosen["pocl-pthread-epyc2"]
    assert chosen["apps"] == len(APPS) and chosen["max_features"] in (0.5, 1.0)
