#!/usr/bin/env bash
# Run on the lent GPU machine from the repository root: device profiles and paper-size
# benchmark timings for every OpenCL device there (H100 via NVIDIA OpenCL, the Xeon via
# PoCL). Everything lands in $OUT/gt.tar.gz; unpack it in the repo and commit.
# Usage: scripts/gpu/ground-truth.sh [profile|bench|all]
set -uo pipefail
. scripts/gpu/setup-env.sh
what=${1:-all}
mkdir -p gt/devices/profiles/measured gt/benchmarks/results
python3 -m clproj.cli devices | tee gt/devices.txt
python3 -m clproj.cli devices --json > gt/devices.json
n=$(python3 -c "import json;print(len(json.load(open('gt/devices.json'))['devices']))")
for i in $(seq 0 $((n-1))); do
  if [ "$what" = profile ] || [ "$what" = all ]; then
    timeout 420 python3 -m clproj.cli profile-device --device "$i" -o "gt/devices/profiles/measured/dev$i.json" 2>&1 | tail -30
  fi
  if [ "$what" = bench ] || [ "$what" = all ]; then
    timeout 420 python3 -m clproj.cli bench --devices "$i" --size paper --repeat 5 -o "gt/benchmarks/results/" 2>&1 | tail -30
  fi
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv > gt/nvidia-smi.csv 2>&1
tar czf "$OUT/gt.tar.gz" gt
