"""Spec-sheet device profiles: the rules that turn sheet numbers into curves.

Microbenchmarks cannot run on devices we do not have (the paper's HD5870, HD7970, C1060,
C2050; MI250X, MI300X; the devices published results name), so their profiles are built
from vendor sheets (:mod:`devices.spec_sheets`, and Panwar et al.'s Table I). Everything a
sheet does not give — throughput-vs-occupancy curves, strided reads, bank conflicts,
launch overhead, PCIe bandwidth — is derived with the rules below, each recorded in the
profile's ``provenance`` as ``derived: <rule>`` and explained in ``docs/devices.md``.

``python -m clproj.devices.specs`` rewrites ``devices/profiles/spec/*.json``. The same tables
give measured GPU profiles the occupancy limits OpenCL cannot report (:func:`spec_for`).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

from clproj.devices.profile import FORMAT, PROFILES_DIR, VERSION, load_profile
from clproj.devices.profile_check import SPEC_POWER_VERSION, validate
from clproj.devices.spec_memory import dram_latency_s, hierarchy
from clproj.devices.spec_sheets import SPECS, Spec

# Measured GPU profiles that also have a sheet here: their sustained bandwidth over the
# sheet's is the efficiency every sheet-built profile gets (measured_efficiency).
EFFICIENCY_FROM: tuple[tuple[str, str], ...] = (
    ("nvidia-h100-opencl.json", "h100-sxm-spec"),
    ("nvidia-h200-opencl.json", "h200-spec"),
)
STREAM_CURVES = ("global_read", "global_write", "global_copy")
LOCAL_EFF = 0.90
# Independent bytes in flight per work-item assumed by the Little's-law saturation rule
# (one 16-byte vector load, or four independent 4-byte loads).
BYTES_IN_FLIGHT_PER_ITEM = 16
LOCAL_LATENCY_CYCLES = 32
LOCAL_ILP = 4
PCIE_EFF = 0.75  # pageable-memory copies reach ~3/4 of the link rate
PCIE_GBS = {2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0}  # x16, per direction


@functools.cache
def measured_efficiency(
    sources: tuple[tuple[str, str], ...] = EFFICIENCY_FROM,
) -> tuple[dict[str, float], str]:
    """Sustained / sheet bandwidth per streaming curve, and the evidence, as a text.

    Why measured: a constant efficiency is a guess that nothing checks; the peaks of our
    own measured curves over the same devices' sheet bandwidth are evidence, and adding a
    measured device with a sheet (``EFFICIENCY_FROM``) refines every spec profile. The
    rule is the mean, over those devices, of each curve's highest point / the sheet
    bandwidth. Units agree: ``global_copy`` counts bytes read plus bytes written
    (docs/formats.md), and so does a sheet's bandwidth (every byte that crosses the
    memory interface), so copy is divided by the same sheet number, not by half of it.
    """
    ratios: dict[str, list[float]] = {name: [] for name in STREAM_CURVES}
    parts = []
    for filename, key in sources:
        prof = load_profile(str(PROFILES_DIR / "measured" / filename))
        sheet_bw = next(s for s in SPECS if s.key == key).bandwidth_gbs * 1e9
        mine = {name: prof.peak(name) / sheet_bw for name in STREAM_CURVES}
        for name, r in mine.items():
            ratios[name].append(r)
        parts.append(f"{filename} / {key} " + " ".join(f"{n[7:]} {r:.3f}" for n, r in mine.items()))
    eff = {name: sum(rs) / len(rs) for name, rs in ratios.items()}
    return eff, "derived from measured: " + "; ".join(parts)


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
    spec: Spec, clock_hz: float, sources: tuple[tuple[str, str], ...] = EFFICIENCY_FROM
) -> tuple[dict[str, list[list[float]]], dict[str, str]]:
    """Curves from sheet numbers; returns (curves, provenance entries)."""
    peak_bw = spec.bandwidth_gbs * 1e9
    xs = occupancy_points(spec.max_items_per_cu, spec.warp)
    x_sat = peak_bw / spec.cus * dram_latency_s(spec, sources) / BYTES_IN_FLIGHT_PER_ITEM
    eff, evidence = measured_efficiency(sources)
    curves = {name: littles_law_curve(peak_bw * eff[name], x_sat, xs) for name in STREAM_CURVES}
    # Banked local memory serves one 4-byte word per bank a clock; unbanked (a cache, on
    # CPU-like devices) one load of the fp32 vector width a clock.
    width = spec.banks * 4 if spec.banks else spec.per_cu["fp32_fma"] * 4
    local_peak = spec.cus * clock_hz * width * LOCAL_EFF
    local_sat = spec.warp * LOCAL_LATENCY_CYCLES / LOCAL_ILP
    curves["local"] = littles_law_curve(local_peak, local_sat, xs)
    read_peak = peak_bw * eff["global_read"]
    min_segment = min(spec.segments)
    curves["strided_read"] = [
        [float(s), read_peak / min(s, max(1, min_segment // 4))] for s in range(1, 33)
    ]
    if spec.banks:
        curves["local_conflict"] = [
            [float(w), local_peak / w] for w in (1, 2, 4, 8, 16, 32) if w <= spec.banks
        ]
    effs = ", ".join(f"{n[7:]} {eff[n]:.3f}" for n in STREAM_CURVES)
    rule_g = (
        f"little's law: eff x sheet bandwidth x min(1, x / x_sat), x_sat = bw/CU x latency / "
        f"{BYTES_IN_FLIGHT_PER_ITEM} B per work-item; eff {effs} = mean of measured curve "
        f"peak / sheet bandwidth, {evidence}"
    )
    prov = {f"curves.{n}": f"derived: {rule_g}" for n in STREAM_CURVES}
    local_width = "banks x 4 B" if spec.banks else "fp32 lanes x 4 B (unbanked)"
    prov["curves.local"] = (
        f"derived: {LOCAL_EFF} x CUs x clock x {local_width}, saturating at "
        f"warp x {LOCAL_LATENCY_CYCLES} cycles / ILP {LOCAL_ILP} work-items per CU"
    )
    prov["curves.strided_read"] = "derived: read peak / min(stride, smallest segment / 4 B)"
    if spec.banks:
        prov["curves.local_conflict"] = "derived: local peak / ways"
    return curves, prov


def build(spec: Spec, sources: tuple[tuple[str, str], ...] = EFFICIENCY_FROM) -> dict[str, Any]:
    """The device-profile document of one spec-sheet device; ``sources``: the measured
    GPUs the rules take what no sheet gives from (``benchmarks/spec_vs_measured.py``
    leaves the judged device out)."""
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
    curves, cprov = derived_memory_curves(spec, clock_hz, sources)
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
            "kind": spec.kind,
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
    if spec.tdp_w:
        doc["power"] = spec_power(spec.tdp_w, f"spec: {spec.key} sheet")
    extra, hprov = hierarchy(spec, sources)
    if extra:
        doc["memory"].update(extra["memory"])
        doc["detail"] = {"cache": extra["cache"], "latency": extra["latency"]}
        prov.update(hprov)
    validate(doc)
    return doc


# Idle power as a share of board power for devices without power microbenchmarks. An
# assumption of the rule, not a measurement: published nvidia-smi idle readings of HBM
# data-centre GPUs lie near 10-15% of TDP (an H200 about 80 W of 700 W); the idle samples
# of scripts/gpu/energy.sh (``idle_power_w``) replace it where a device is measured.
IDLE_FRACTION = 0.10


def spec_power(tdp_w: float, tdp_source: str) -> dict[str, Any]:
    """The ``power`` section of a device known only by its board power (docs/formats.md
    section 3): idle = :data:`IDLE_FRACTION` x TDP, no per-operation energies (the
    projection then scales the dynamic budget, TDP - idle, by the projected utilisation),
    always ``confidence: low``. Used by spec profiles, sheets with ``tdp_w``, and the
    projection for a measured profile without a power section whose device has a sheet."""
    idle = IDLE_FRACTION * tdp_w
    return {
        "version": SPEC_POWER_VERSION,
        "rule": "spec",
        "confidence": "low",
        "tdp_w": tdp_w,
        "idle_w": idle,
        "static_active_w": idle,
        "provenance": {
            "tdp_w": tdp_source,
            "idle_w": f"derived: {IDLE_FRACTION} x tdp_w (assumed share, docs/projection.md)",
            "static_active_w": "derived: idle_w (no measurement of a busy device's floor)",
        },
    }


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


# (words of the lower-cased OpenCL device or board name, spec key), first match wins:
# a longer name comes before a name it contains ("980 ti" before "980"), a board name
# before its chip's codename (AMD's OpenCL names a device by codename: every Hawaii board
# is "Hawaii", which then means the consumer R9 290X).
SPEC_PROBES: tuple[tuple[str, str], ...] = (
    ("gh200 144g", "gh200-144g-spec"),
    ("gh200", "gh200-spec"),
    ("h200", "h200-spec"),
    ("h100 pcie", "h100-pcie-spec"),
    ("h100 nvl", "h100-nvl-spec"),
    ("h100", "h100-sxm-spec"),
    ("a100 sxm4 40gb", "a100-sxm4-40gb-spec"),
    ("a100 pcie 40gb", "a100-pcie-40gb-spec"),
    ("a100 80gb pcie", "a100-pcie-80gb-spec"),
    ("a100 pcie 80gb", "a100-pcie-80gb-spec"),
    ("a100 40gb", "a100-sxm4-40gb-spec"),
    ("a100", "a100-sxm-spec"),
    ("v100s", "v100s-pcie-spec"),
    ("v100 sxm2", "v100-sxm2-spec"),
    ("v100", "v100-pcie-spec"),
    ("p100 pcie 12gb", "p100-pcie-12gb-spec"),
    ("p100 sxm2", "p100-sxm2-spec"),
    ("p100", "p100-pcie-spec"),
    ("mi300a", "mi300a-spec"),
    ("mi300", "mi300x-spec"),
    ("mi210", "mi210-spec"),
    ("mi250", "mi250x-gcd-spec"),
    ("mi100", "mi100-spec"),
    ("mi60", "mi60-spec"),
    ("mi25", "mi25-spec"),
    ("radeon vii", "radeon-vii-spec"),
    ("vega 64", "rx-vega-64-spec"),
    ("mi50", "mi50-spec"),
    ("gfx90a", "mi250x-gcd-spec"),
    ("gfx942", "mi300x-spec"),
    ("gfx908", "mi100-spec"),
    ("k80", "k80-spec"),
    ("k40", "k40c-spec"),
    ("k20x", "k20x-spec"),
    ("k20", "k20c-spec"),
    ("titan xp", "titan-xp-spec"),
    ("titan x pascal", "titan-x-pascal-spec"),
    ("gtx titan x", "gtx-titan-x-spec"),
    ("gtx 1080 ti", "gtx-1080-ti-spec"),
    ("gtx 1080", "gtx-1080-spec"),
    ("gtx 980 ti", "gtx-980-ti-spec"),
    ("gtx 980", "gtx-980-spec"),
    ("gtx 780 ti", "gtx-780-ti-spec"),
    ("gtx 580", "gtx-580-spec"),
    ("c2050", "c2050-spec"),
    ("c1060", "c1060-spec"),
    ("s10000", "firepro-s10000-spec"),
    ("s9150", "firepro-s9150-spec"),
    ("295x2", "r9-295x2-spec"),
    ("290x", "r9-290x-spec"),
    ("hawaii", "r9-290x-spec"),
    # Fiji boards before the chip's own name (AMD's runtimes call every one "Fiji")
    ("fury nano", "r9-nano-spec"),
    ("r9 nano", "r9-nano-spec"),
    ("fiji nano", "r9-nano-spec"),
    ("s9300", "firepro-s9300-x2-spec"),
    ("fury", "r9-fury-x-spec"),
    ("fiji", "r9-fury-x-spec"),
    ("7850k", "a10-7850k-gpu-spec"),
    ("spectre", "a10-7850k-gpu-spec"),
    ("kaveri", "a10-7850k-gpu-spec"),
    ("7970", "hd7970-spec"),
    ("tahiti", "hd7970-spec"),
    ("5870", "hd5870-spec"),
    ("cypress", "hd5870-spec"),
    ("se10p", "xeon-phi-se10p-spec"),
    ("many integrated core", "xeon-phi-se10p-spec"),
)


def _sheet(key: str) -> Spec:
    return next(s for s in SPECS if s.key == key)


def spec_for(device_name: str) -> Spec | None:
    """The sheet of an OpenCL device by name (e.g. 'NVIDIA H100 80GB HBM3' -> h100).

    The name is read as its words (letters and digits) joined by spaces, as the probes are
    written: 'NVIDIA A100-PCIE-40GB' is 'nvidia a100 pcie 40gb'.
    """
    n = " ".join(re.findall(r"[a-z0-9]+", device_name.lower()))
    for probe, key in SPEC_PROBES:
        if probe in n:
            return _sheet(key)
    return None


def spec_for_file_name(name: str) -> Spec | None:
    """The sheet a results file's name (or folder path) names, e.g. ``k20x/ocl`` or
    ``nvidia-gtx980ti``.

    Why apart from :func:`spec_for`: people name files in words joined by ``-``, ``_``,
    ``/`` or nothing at all, while devices name themselves in words joined by spaces. Each
    probe, in the table's order (a board before its chip), is looked for in two readings
    of the name: its words joined by spaces (as :func:`spec_for` reads a device name), and
    its words run together against the probe with its spaces removed, where a match must
    lie inside one word of the name or begin and end on its word boundaries. So
    ``gtx980ti`` finds "gtx 980 ti", ``titan-xp`` "titan xp" and ``furynano`` "fury nano"
    (before "fury"), while ``titan-x-pascal`` is not read as "titan xp" + "ascal".
    """
    words = re.findall(r"[a-z0-9]+", name.lower())
    spaced, compact = " ".join(words), "".join(words)
    bounds = set(itertools.accumulate((len(w) for w in words), initial=0))

    def run_together(probe: str) -> bool:
        tight = probe.replace(" ", "")
        start = compact.find(tight)
        while start >= 0:
            end = start + len(tight)
            inside = {b for b in bounds if start < b < end}
            if not inside or {start, end} <= bounds:
                return True
            start = compact.find(tight, start + 1)
        return False

    for probe, key in SPEC_PROBES:
        if probe in spaced or run_together(probe):
            return _sheet(key)
    return None


# A published log's compute units and warp width must equal the sheet's, and its clock
# be within this fraction of the sheet's (logs print the clock the runtime reports, which
# may be a boost or base clock rounded to the MHz).
SHAPE_CLOCK_TOLERANCE = 0.02


def spec_by_shape(cus: int, clock_mhz: float, warp: int = 0) -> Spec | None:
    """The one sheet with these compute units, warp width (0: not known, not compared) and
    clock (None: none or several).

    Why: some runtimes report no device name (HIP on several ROCm releases prints an empty
    one), but a benchmark's header still gives the device's shape; a shape that more than
    one sheet has identifies nothing.
    """
    found = [
        s
        for s in SPECS
        if s.cus == cus
        and warp in (0, s.warp)
        and abs(s.clock_mhz - clock_mhz) <= SHAPE_CLOCK_TOLERANCE * s.clock_mhz
    ]
    return found[0] if len(found) == 1 else None


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
