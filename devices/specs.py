"""Spec-sheet device profiles: the sheet numbers, and the rules that turn them into curves.

Microbenchmarks cannot run on GPUs we do not have (the paper's HD5870, HD7970, C1060,
C2050; MI250X, MI300X), so their profiles are built from vendor sheets (and Panwar et
al.'s Table I). Everything a sheet does not give — throughput-vs-occupancy curves,
strided reads, bank conflicts, launch overhead, PCIe bandwidth — is derived with the
rules below, each recorded in the profile's ``provenance`` as ``derived: <rule>`` and
explained in ``docs/devices.md``.

``python -m devices.specs`` rewrites ``devices/profiles/spec/*.json``. The same tables
give measured GPU profiles the occupancy limits OpenCL cannot report (:func:`spec_for`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devices.profile import FORMAT, PROFILES_DIR, VERSION, validate

# Efficiency of sustained vs. sheet bandwidth (STREAM-like kernels reach 80-92% on GPUs;
# H100 copy measured here: 2.86 of 3.35 TB/s = 0.85).
READ_EFF, WRITE_EFF, COPY_EFF, LOCAL_EFF = 0.90, 0.88, 0.85, 0.90
# Independent bytes in flight per work-item assumed by the Little's-law saturation rule
# (one 16-byte vector load, or four independent 4-byte loads).
BYTES_IN_FLIGHT_PER_ITEM = 16
LOCAL_LATENCY_CYCLES = 32
LOCAL_ILP = 4
PCIE_EFF = 0.75  # pageable-memory copies reach ~3/4 of the link rate
PCIE_GBS = {2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0}  # x16, per direction


@dataclass(frozen=True)
class Spec:
    """One GPU's sheet numbers. ``per_cu`` = instruction results per clock per compute unit."""

    key: str
    name: str
    vendor: str
    arch: str
    cus: int
    clock_mhz: int
    warp: int
    global_gb: float
    bandwidth_gbs: float
    segments: tuple[int, ...]
    banks: int
    local_kib_per_cu: int
    local_kib_per_group: int
    max_items_per_cu: int
    max_groups_per_cu: int
    regs_per_cu: int
    max_wg: int
    cache_line: int
    mem_latency_ns: float
    pcie_gen: int
    launch_s: float
    per_cu: dict[str, float] = field(default_factory=dict)
    l2_bytes: int = 0  # last-level (L2) cache; 0 = not listed
    notes: str = ""
    sources: tuple[str, ...] = ()


def _nv(fp32: int, fp64: int, intadd: int, intmul: int, sfu: int, cvt: int) -> dict[str, float]:
    return {
        "fp32_add": fp32,
        "fp32_mul": fp32,
        "fp32_fma": fp32,
        "fp64_fma": fp64,
        "fp64_add": fp64,
        "fp64_mul": fp64,
        "int_add": intadd,
        "int_mul": intmul,
        "special": sfu,
        "conversion": cvt,
    }


SPECS: tuple[Spec, ...] = (
    Spec(
        key="hd5870-spec",
        name="ATI Radeon HD 5870",
        l2_bytes=524288,
        vendor="AMD",
        arch="Evergreen (VLIW5)",
        cus=20,
        clock_mhz=850,
        warp=64,
        global_gb=1,
        bandwidth_gbs=153.6,
        segments=(64,),
        banks=32,
        local_kib_per_cu=32,
        local_kib_per_group=32,
        max_items_per_cu=1536,
        max_groups_per_cu=8,
        regs_per_cu=65536,
        max_wg=256,
        cache_line=64,
        mem_latency_ns=500,
        pcie_gen=2,
        launch_s=10e-6,
        per_cu=_nv(fp32=80, fp64=16, intadd=80, intmul=16, sfu=16, cvt=16),
        notes="Table I prints 264 GB/s; the AMD sheet gives 153.6 GB/s (values swapped with HD7970)",
        sources=("Panwar et al. Table I", "AMD Radeon HD 5870 product sheet"),
    ),
    Spec(
        key="hd7970-spec",
        name="AMD Radeon HD 7970",
        l2_bytes=786432,
        vendor="AMD",
        arch="Southern Islands (GCN1)",
        cus=32,
        clock_mhz=925,
        warp=64,
        global_gb=3,
        bandwidth_gbs=264.0,
        segments=(64,),
        banks=32,
        local_kib_per_cu=64,
        local_kib_per_group=32,
        max_items_per_cu=2560,
        max_groups_per_cu=16,
        regs_per_cu=65536,
        max_wg=256,
        cache_line=64,
        mem_latency_ns=500,
        pcie_gen=3,
        launch_s=10e-6,
        per_cu=_nv(fp32=64, fp64=16, intadd=64, intmul=16, sfu=16, cvt=16),
        notes="Table I prints 154 GB/s; the AMD sheet gives 264 GB/s (values swapped with HD5870)",
        sources=("Panwar et al. Table I", "AMD Radeon HD 7970 product sheet"),
    ),
    Spec(
        key="c1060-spec",
        name="Tesla C1060",
        vendor="NVIDIA",
        arch="Tesla (GT200, sm_13)",
        cus=30,
        clock_mhz=1296,
        warp=32,
        global_gb=4,
        bandwidth_gbs=102.0,
        segments=(32, 64, 128),
        banks=16,
        local_kib_per_cu=16,
        local_kib_per_group=16,
        max_items_per_cu=1024,
        max_groups_per_cu=8,
        regs_per_cu=16384,
        max_wg=512,
        cache_line=128,
        mem_latency_ns=450,
        pcie_gen=2,
        launch_s=7e-6,
        per_cu=_nv(fp32=8, fp64=1, intadd=8, intmul=2, sfu=2, cvt=8),
        notes="933 GFLOPS on the sheet counts the dual-issued SFU mul (3 flops/clk/SP); fma rate is 8/clk/SM",
        sources=("Panwar et al. Table I", "NVIDIA Tesla C1060 board spec", "CUDA guide, cc 1.3"),
    ),
    Spec(
        key="c2050-spec",
        name="Tesla C2050",
        l2_bytes=786432,
        vendor="NVIDIA",
        arch="Fermi (GF100, sm_20)",
        cus=14,
        clock_mhz=1150,
        warp=32,
        global_gb=3,
        bandwidth_gbs=144.0,
        segments=(128,),
        banks=32,
        local_kib_per_cu=48,
        local_kib_per_group=48,
        max_items_per_cu=1536,
        max_groups_per_cu=8,
        regs_per_cu=32768,
        max_wg=1024,
        cache_line=128,
        mem_latency_ns=450,
        pcie_gen=2,
        launch_s=7e-6,
        per_cu=_nv(fp32=32, fp64=16, intadd=32, intmul=16, sfu=4, cvt=16),
        sources=("Panwar et al. Table I", "NVIDIA Tesla C2050 board spec", "CUDA guide, cc 2.0"),
    ),
    Spec(
        key="a100-sxm-spec",
        name="NVIDIA A100-SXM4-80GB",
        l2_bytes=41943040,
        vendor="NVIDIA",
        arch="Ampere (GA100, sm_80)",
        cus=108,
        clock_mhz=1410,
        warp=32,
        global_gb=80,
        bandwidth_gbs=2039.0,
        segments=(32, 64, 128),
        banks=32,
        local_kib_per_cu=164,
        local_kib_per_group=48,
        max_items_per_cu=2048,
        max_groups_per_cu=32,
        regs_per_cu=65536,
        max_wg=1024,
        cache_line=128,
        mem_latency_ns=550,
        pcie_gen=4,
        launch_s=5e-6,
        per_cu=_nv(fp32=64, fp64=32, intadd=64, intmul=64, sfu=16, cvt=16),
        sources=("NVIDIA A100 datasheet", "CUDA guide, cc 8.0 throughput table"),
    ),
    Spec(
        key="h100-sxm-spec",
        name="NVIDIA H100 80GB HBM3",
        l2_bytes=52428800,
        vendor="NVIDIA",
        arch="Hopper (GH100, sm_90)",
        cus=132,
        clock_mhz=1980,
        warp=32,
        global_gb=80,
        bandwidth_gbs=3350.0,
        segments=(32, 64, 128),
        banks=32,
        local_kib_per_cu=228,
        local_kib_per_group=48,
        max_items_per_cu=2048,
        max_groups_per_cu=32,
        regs_per_cu=65536,
        max_wg=1024,
        cache_line=128,
        mem_latency_ns=600,
        pcie_gen=5,
        launch_s=5e-6,
        per_cu=_nv(fp32=128, fp64=64, intadd=64, intmul=64, sfu=16, cvt=16),
        notes="OpenCL reports 132 CUs at 1980 MHz and 48 KiB local memory per group",
        sources=("NVIDIA H100 datasheet (SXM5)", "CUDA guide, cc 9.0 throughput table"),
    ),
    Spec(
        key="h200-spec",
        name="NVIDIA H200",
        l2_bytes=62914560,
        vendor="NVIDIA",
        arch="Hopper (GH100, sm_90)",
        cus=132,
        clock_mhz=1980,
        warp=32,
        global_gb=141,
        bandwidth_gbs=4800.0,
        segments=(32, 64, 128),
        banks=32,
        local_kib_per_cu=228,
        local_kib_per_group=48,
        max_items_per_cu=2048,
        max_groups_per_cu=32,
        regs_per_cu=65536,
        max_wg=1024,
        cache_line=128,
        mem_latency_ns=600,
        pcie_gen=5,
        launch_s=5e-6,
        per_cu=_nv(fp32=128, fp64=64, intadd=64, intmul=64, sfu=16, cvt=16),
        sources=("NVIDIA H200 datasheet (SXM)", "CUDA guide, cc 9.0 throughput table"),
    ),
    Spec(
        key="mi250x-gcd-spec",
        name="AMD Instinct MI250X (one GCD)",
        l2_bytes=8388608,
        vendor="AMD",
        arch="CDNA2 (gfx90a)",
        cus=110,
        clock_mhz=1700,
        warp=64,
        global_gb=64,
        bandwidth_gbs=1638.4,
        segments=(64, 128),
        banks=32,
        local_kib_per_cu=64,
        local_kib_per_group=64,
        max_items_per_cu=2048,
        max_groups_per_cu=32,
        regs_per_cu=131072,
        max_wg=256,
        cache_line=128,
        mem_latency_ns=700,
        pcie_gen=4,
        launch_s=8e-6,
        per_cu=_nv(fp32=64, fp64=64, intadd=64, intmul=16, sfu=16, cvt=16),
        notes="OpenCL exposes each of the two GCDs as one device: half the sheet's 220 CUs / 3.2 TB/s; "
        "scalar OpenCL code does not use packed fp32, so fp32 = 64/clk/CU",
        sources=("AMD Instinct MI250X datasheet", "CDNA2 ISA guide"),
    ),
    Spec(
        key="mi300x-spec",
        name="AMD Instinct MI300X",
        vendor="AMD",
        arch="CDNA3 (gfx942)",
        cus=304,
        clock_mhz=2100,
        warp=64,
        global_gb=192,
        bandwidth_gbs=5300.0,
        segments=(64, 128),
        banks=32,
        local_kib_per_cu=64,
        local_kib_per_group=64,
        max_items_per_cu=2048,
        max_groups_per_cu=32,
        regs_per_cu=131072,
        max_wg=256,
        cache_line=128,
        mem_latency_ns=750,
        pcie_gen=5,
        launch_s=8e-6,
        per_cu=_nv(fp32=64, fp64=64, intadd=64, intmul=16, sfu=16, cvt=16),
        notes="scalar OpenCL code does not use packed fp32: fp32 = 64/clk/CU (81.7 TFLOPS vector)",
        sources=("AMD Instinct MI300X datasheet", "CDNA3 ISA guide"),
    ),
)


def occupancy_points(max_items: int, warp: int) -> list[int]:
    """x values of derived curves: one warp, doubling, up to the per-CU limit."""
    xs, x = [], warp
    while x < max_items:
        xs.append(x)
        x *= 2
    xs.append(max_items)
    return xs


def littles_law_curve(peak: float, x_sat: float, xs: list[int]) -> list[list[float]]:
    """Throughput grows linearly with work-items in flight until ``x_sat``, then stays at peak."""
    return [[float(x), peak * min(1.0, x / x_sat)] for x in xs]


def derived_memory_curves(
    peak_bw: float,
    cus: int,
    latency_s: float,
    warp: int,
    max_items: int,
    min_segment: int,
    clock_hz: float,
    banks: int,
    bank_width: int,
) -> tuple[dict[str, list[list[float]]], dict[str, str]]:
    """Curves from sheet numbers; returns (curves, provenance entries)."""
    xs = occupancy_points(max_items, warp)
    x_sat = peak_bw / cus * latency_s / BYTES_IN_FLIGHT_PER_ITEM
    curves = {
        "global_read": littles_law_curve(peak_bw * READ_EFF, x_sat, xs),
        "global_write": littles_law_curve(peak_bw * WRITE_EFF, x_sat, xs),
        "global_copy": littles_law_curve(peak_bw * COPY_EFF, x_sat, xs),
    }
    local_peak = cus * clock_hz * banks * bank_width * LOCAL_EFF
    local_sat = warp * LOCAL_LATENCY_CYCLES / LOCAL_ILP
    curves["local"] = littles_law_curve(local_peak, local_sat, xs)
    read_peak = peak_bw * READ_EFF
    curves["strided_read"] = [
        [float(s), read_peak / min(s, max(1, min_segment // 4))] for s in range(1, 33)
    ]
    curves["local_conflict"] = [
        [float(w), local_peak / w] for w in (1, 2, 4, 8, 16, 32) if w <= banks
    ]
    rule_g = (
        f"little's law: eff x sheet bandwidth x min(1, x / x_sat), x_sat = bw/CU x latency / "
        f"{BYTES_IN_FLIGHT_PER_ITEM} B per work-item; eff read {READ_EFF}, write {WRITE_EFF}, copy {COPY_EFF}"
    )
    prov = {
        f"curves.{n}": f"derived: {rule_g}" for n in ("global_read", "global_write", "global_copy")
    }
    prov["curves.local"] = (
        f"derived: {LOCAL_EFF} x CUs x clock x banks x bank width, saturating at "
        f"warp x {LOCAL_LATENCY_CYCLES} cycles / ILP {LOCAL_ILP} work-items per CU"
    )
    prov["curves.strided_read"] = "derived: read peak / min(stride, smallest segment / 4 B)"
    prov["curves.local_conflict"] = "derived: local peak / ways"
    return curves, prov


def build(spec: Spec) -> dict[str, Any]:
    """The device-profile document of one spec-sheet GPU."""
    clock_hz = spec.clock_mhz * 1e6
    throughput = {cls: rate * spec.cus * clock_hz for cls, rate in spec.per_cu.items()}
    prov: dict[str, str] = {
        "identity": "spec",
        "compute_units": "spec",
        "clock_mhz": "spec",
        "warp_width": "spec",
        "memory": "spec",
        "occupancy": "spec",
    }
    for cls in throughput:
        prov[f"throughput.{cls}"] = "spec"
    prov["throughput.int_div"] = "derived: int_mul / 20 (no hardware divider)"
    throughput["int_div"] = throughput["int_mul"] / 20
    prov["throughput.fp32_div"] = "derived: special / 2"
    throughput["fp32_div"] = throughput["special"] / 2
    curves, cprov = derived_memory_curves(
        spec.bandwidth_gbs * 1e9,
        spec.cus,
        spec.mem_latency_ns * 1e-9,
        spec.warp,
        spec.max_items_per_cu,
        min(spec.segments),
        clock_hz,
        spec.banks,
        4,
    )
    prov.update(cprov)
    pcie = PCIE_GBS[spec.pcie_gen] * 1e9 * PCIE_EFF
    prov["transfer"] = f"derived: {PCIE_EFF} x PCIe gen{spec.pcie_gen} x16 rate"
    prov["launch_overhead_s"] = "derived: typical driver value for this vendor/generation"
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "key": spec.key,
        "identity": {
            "name": spec.name,
            "vendor": spec.vendor,
            "kind": "GPU",
            "arch": spec.arch,
            "driver": None,
            "platform": None,
        },
        "source": {
            "kind": "spec",
            "host": None,
            "date": None,
            "tool": "devices/specs.py",
            "sheets": list(spec.sources),
            "notes": spec.notes,
        },
        "compute_units": spec.cus,
        "clock_mhz": spec.clock_mhz,
        "warp_width": spec.warp,
        "memory": {
            "global_bytes": int(spec.global_gb * 2**30),
            "local_bytes_per_group": spec.local_kib_per_group * 1024,
            "local_bytes_per_cu": spec.local_kib_per_cu * 1024,
            "segment_bytes": list(spec.segments),
            "local_banks": spec.banks,
            "bank_width_bytes": 4,
            "peak_bandwidth_gbs": spec.bandwidth_gbs,
            "cache_line_bytes": spec.cache_line,
        },
        "occupancy": {
            "max_work_items_per_cu": spec.max_items_per_cu,
            "max_groups_per_cu": spec.max_groups_per_cu,
            "local_bytes_per_cu": spec.local_kib_per_cu * 1024,
            "registers_per_cu": spec.regs_per_cu,
            "max_work_group_size": spec.max_wg,
        },
        "throughput": throughput,
        "curves": curves,
        "launch_overhead_s": spec.launch_s,
        "transfer": {"h2d_bytes_per_s": pcie, "d2h_bytes_per_s": pcie},
        "provenance": prov,
        "nvml": None,
    }
    validate(doc)
    return doc


# Published latencies, in cycles, of a dependent fused multiply-add, a floating-point add
# and a store forwarded to a load of the same address (a vector register's value), on a
# CPU core, by (CPUID vendor, the LLVM target PoCL compiles for, which PoCL puts in the
# device name: "cpu-skylake-avx512-Intel(R) Xeon(R) Processor"). Skylake server: FMA and
# ADD 4 cycles (Intel 64 and IA-32 Architectures Optimization Reference Manual); store
# forwarding 5 cycles for a vector register (A. Fog, "The microarchitecture of Intel, AMD
# and VIA CPUs", Skylake: 4 cycles general-purpose, one more from a vector register).
# The target alone does not name the core (the EPYC's PoCL build also targets
# skylake-avx512), hence the vendor. Used only where the rounds cannot be measured
# (``scripts/profile_curves.py spec-rounds``): a measured ``detail.raw_loop`` replaces them.
CPU_FP_LATENCY_CYCLES: dict[tuple[str, str], tuple[int, int, int]] = {
    ("GenuineIntel", "skylake-avx512"): (4, 4, 5),
}


def cpu_rounds_from_spec(doc: dict[str, Any]) -> tuple[dict[str, float], str] | None:
    """``detail.raw_loop`` of a CPU profile from its core's published latencies and clock.

    A loop-carried multiply-add costs the FMA latency per trip, a plain add the add
    latency; a link through a stored and reloaded word is priced as the FMA while the
    compiler keeps the accumulator in a register (``raw``, measured on the EPYC: 1.19 ns
    through memory, 1.16 ns in a register), and as store forwarding plus the FMA where it
    must reload it (``reload``, EPYC: 3.66 ns). None when the core is not in the table.
    """
    ident = doc.get("identity", {})
    name, vendor = str(ident.get("name", "")), str(ident.get("vendor", ""))
    clock = float(doc.get("clock_mhz") or 0) * 1e6
    if clock <= 0:
        return None
    for (v, target), (fma, add, forward) in CPU_FP_LATENCY_CYCLES.items():
        if v == vendor and f"-{target}-" in f"-{name}-":
            rounds = {
                "raw_round_s": fma / clock,
                "fma_round_s": fma / clock,
                "add_round_s": add / clock,
                "reload_round_s": (forward + fma) / clock,
            }
            how = (
                f"derived: published latencies of the core PoCL targets ({target}, {vendor}: "
                f"FMA {fma}, FP add {add}, store forwarding {forward} cycles) at clock_mhz "
                f"{clock / 1e6:.0f}; a read-after-write link priced as the FMA (a reloaded "
                "accumulator stays in a register), a reload after another store as "
                "forwarding + FMA; re-measure with `clproj profile-device` on the device"
            )
            return rounds, how
    return None


def spec_for(device_name: str) -> Spec | None:
    """The sheet of an OpenCL device by name (e.g. 'NVIDIA H100 80GB HBM3' -> h100)."""
    n = device_name.lower()
    probes = (
        ("h200", "h200-spec"),
        ("h100", "h100-sxm-spec"),
        ("a100", "a100-sxm-spec"),
        ("mi300", "mi300x-spec"),
        ("mi250", "mi250x-gcd-spec"),
        ("gfx90a", "mi250x-gcd-spec"),
        ("gfx942", "mi300x-spec"),
        ("c2050", "c2050-spec"),
        ("c1060", "c1060-spec"),
        ("7970", "hd7970-spec"),
        ("tahiti", "hd7970-spec"),
        ("5870", "hd5870-spec"),
        ("cypress", "hd5870-spec"),
    )
    for probe, key in probes:
        if probe in n:
            return next(s for s in SPECS if s.key == key)
    return None


def write_all(out_dir: Path = PROFILES_DIR / "spec") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in SPECS:
        p = out_dir / f"{spec.key}.json"
        p.write_text(json.dumps(build(spec), indent=1) + "\n")
        paths.append(p)
    return paths


if __name__ == "__main__":
    for path in write_all():
        sys.stdout.write(f"{path}\n")
