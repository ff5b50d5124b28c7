#!/usr/bin/env bash
# Run on the lent GPU machine from the repository root (at most 8 minutes): the power
# microbenchmarks (clproj profile-device --power: one class of work each, >= 2 s windows)
# and their fit into the measured profile's power section (--power-fit), then energy per
# launch of each kernel of a few benchmark apps on the GPU (NVML total-energy counter,
# >= 2 s windows, idle power, clocks and temperature), the host's package energy through
# powercap where readable, and what nvidia-smi and powercap show. Every raw reading lands
# in $OUT/energy.tar.gz; unpack it in the repo and commit (benchmarks/results/energy/,
# and the fitted profile over devices/profiles/measured/ once checked).
# Reads clocks and power limits, never sets them.
# Usage: scripts/gpu/energy.sh [APPS] [SIZE]   (defaults: benchmarks/energy_run.py's, paper)
set -uo pipefail
. scripts/gpu/setup-env.sh || { echo "setup-env.sh failed" >&2; exit 1; }
apps=()
[ -n "${1:-}" ] && apps=(--apps "$1")
size=${2:-paper}
dest=energy/benchmarks/results/energy
mkdir -p "$dest"
date -u +%FT%TZ > "$dest/started.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv > "$dest/nvidia-smi-before.csv" 2>&1
ls -l /sys/class/powercap/ > "$dest/powercap.txt" 2>&1
for z in /sys/class/powercap/intel-rapl:*; do
  [ -e "$z" ] && { echo "$z $(cat "$z/name" 2>&1) $(cat "$z/energy_uj" 2>&1) $(cat "$z/max_energy_range_uj" 2>&1)"; }
done >> "$dest/powercap.txt" 2>&1
day=$(date -u +%Y%m%d)
# ~20 microbenchmarks x ~6 s (idle samples, calibration, a 2.5 s window)
timeout 170 python3 -m clproj.cli profile-device --power --device NVIDIA \
  -o "$dest/power-microbench-$day.json" 2>&1 | tee "$dest/power.log" | tail -30
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
  *H200*) base=devices/profiles/measured/nvidia-h200-opencl.json ;;
  *H100*) base=devices/profiles/measured/nvidia-h100-opencl.json ;;
  *) base= ;;
esac
[ -n "$base" ] && [ -s "$dest/power-microbench-$day.json" ] && \
  python3 -m clproj.cli profile-device --power-fit "$dest/power-microbench-$day.json" \
    --profile "$base" -o "$dest/$(basename "$base")" 2>&1 | tee "$dest/power-fit.log" | tail -30
timeout 280 python3 -m clproj.benchmarks.energy_run "${apps[@]}" --size "$size" --budget 210 \
  -o "$dest/energy-$day.json" 2>&1 | tee "$dest/run.log" | tail -40
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$dest/nvidia-smi-after.csv" 2>&1
tar czf "$OUT/energy.tar.gz" energy
