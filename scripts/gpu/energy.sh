#!/usr/bin/env bash
# Run on the lent GPU machine from the repository root (at most 8 minutes): what the
# driver offers (energy counter, power, clocks), the power microbenchmarks (clproj
# profile-device --power: one class of work each, >= 2 s windows) and their fit into the
# measured profile's power section (--power-fit), then energy per launch of each kernel of
# our apps and of the unmodified C apps of each built suite folder given (NVML counter,
# >= 2 s windows, idle power, clocks and temperature; C apps under the energy-window
# preload), and the host's package energy through powercap where readable.
# Every raw reading is written straight under $OUT as it is taken (a run cut short keeps
# what it measured): commit them under benchmarks/results/energy/.
# Reads clocks and power limits, never sets them.
# Usage: scripts/gpu/energy.sh [--skip-power] [--skip-apps] [--apps LIST] [SUITE_BUILD_DIR ...]
#   (a suite folder, e.g. .carry/polybench: built here with
#   ../shared/validation/polybench/build.sh and carried; --apps: a comma list of our apps,
#   default all; --skip-power: no microbenchmarks, e.g. to finish a cut-short run;
#   --skip-apps: the microbenchmarks and their fit alone)
set -uo pipefail
power=1
skip_apps=0
apps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-power) power=0; shift ;;
    --skip-apps) skip_apps=1; shift ;;
    --apps) apps=(--apps "$2"); shift 2 ;;
    *) break ;;
  esac
done
. scripts/gpu/setup-env.sh || { echo "setup-env.sh failed" >&2; exit 1; }
out=${OUT:-out/energy}
mkdir -p "$out"
facts=$out/facts.txt
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv 2>&1
  python3 - <<'EOF' 2>&1
import pynvml as nv
nv.nvmlInit(); h = nv.nvmlDeviceGetHandleByIndex(0)
for name, fn in [("total_energy_mj", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
                 ("power_mw", lambda: nv.nvmlDeviceGetPowerUsage(h)),
                 ("power_limit_mw", lambda: nv.nvmlDeviceGetPowerManagementLimit(h)),
                 ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))]:
    try: print(name, fn())
    except nv.NVMLError as e: print(name, "unsupported:", e)
EOF
  echo "powercap:"; ls -l /sys/class/powercap/ 2>&1
  for z in /sys/class/powercap/intel-rapl:*; do
    [ -e "$z" ] && echo "$z $(cat "$z/name" 2>&1) $(cat "$z/energy_uj" 2>&1)"
  done
  lscpu 2>&1 | grep -E 'Model name|^CPU\(s\)'
  python3 -m clproj.cli devices 2>&1
} > "$facts"
cat "$facts"
# The preload library carried from the build machine; rebuilt here where it cannot load.
python3 -c "import ctypes; ctypes.CDLL('devices/libclproj_energy_window.so')" 2>>"$facts" || \
  gcc -O2 -fPIC -shared -Inative -I/usr/local/cuda/include native/energy_window/energy_window.c \
    -o devices/libclproj_energy_window.so -L/usr/local/cuda/lib64 -lOpenCL -ldl -lpthread 2>>"$facts"

case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
  *H200*) base=devices/profiles/measured/nvidia-h200-opencl.json ;;
  *H100*) base=devices/profiles/measured/nvidia-h100-opencl.json ;;
  *) base= ;;
esac
# 29 microbenchmarks x ~5.6 s (2.6 s window, 3 s idle samples and settling) + ~10 s set-up:
# ~176 s (the 2026-11-27 run's 20 took 111 s of windows; the 8 width- and working-set-varied
# reads and the sparse fp32 launch added since, ~51 s, docs/energy.md); then our apps and
# the suites, ~4 s per window (idle samples, calibration, a 2.5 s window). With the
# microbenchmarks the apps' budget is 51 s shorter by default, so a whole run stays within
# 8 minutes; apps not reached are
# measured by a second run with --skip-power (the skipped list is in energy-apps.json).
[ $power = 1 ] && timeout 200 python3 -m clproj.cli profile-device --power --device NVIDIA \
  -o "$out/power-microbench.json" > "$out/power.log" 2>&1
[ $power = 1 ] && [ -n "$base" ] && [ -s "$out/power-microbench.json" ] && \
  python3 -m clproj.cli profile-device --power-fit "$out/power-microbench.json" \
    --profile "$base" -o "$out/$(basename "$base")" >> "$out/power.log" 2>&1
[ $power = 1 ] && tail -25 "$out/power.log"

[ $skip_apps = 1 ] && exit 0
# Our apps and the C suites see the GPU alone. pyopencl's bundled loader reads
# OCL_ICD_VENDORS; a C app takes the first platform's device through the system's
# libOpenCL.so.1, which may not, so the ways to hand it NVIDIA's driver alone are tried in
# turn until a suite app names the NVIDIA device: OCL_ICD_FILENAMES, the vendors folder
# holding only NVIDIA's file (restored at the end), pyopencl's loader as libOpenCL.so.1.
mkdir -p /tmp/icd-nvidia /tmp/ocl-loader
cp /tmp/icd/nvidia.icd /tmp/icd-nvidia/
export OCL_ICD_VENDORS=/tmp/icd-nvidia
vendors=/etc/OpenCL/vendors
restore_vendors() {
  [ -d /tmp/vendors-aside ] && { rm -f "$vendors/nvidia.icd"; mv /tmp/vendors-aside/* "$vendors/" 2>/dev/null; rmdir /tmp/vendors-aside; }
}
trap restore_vendors EXIT
if [ $# -gt 0 ]; then
  probe=$1/jacobi-1d-imper
  [ -x "$probe/app" ] || probe=$(ls -d "$1"/*/ | head -1)
  for how in filenames vendors loader; do
    case $how in
      filenames) export OCL_ICD_FILENAMES=/usr/local/nvidia/lib64/libnvidia-opencl.so.1 ;;
      vendors) unset OCL_ICD_FILENAMES; mkdir -p "$vendors" /tmp/vendors-aside
               mv "$vendors"/*.icd /tmp/vendors-aside/ 2>/dev/null; cp /tmp/icd/nvidia.icd "$vendors/" ;;
      loader) restore_vendors
              ln -sf "$(ls /tmp/site/pyopencl/.libs/libOpenCL*.so* | head -1)" /tmp/ocl-loader/libOpenCL.so.1
              export LD_LIBRARY_PATH=/tmp/ocl-loader ;;
    esac
    name=$(cd "$probe" && timeout 30 ./app 2>&1 | grep -a -m1 -i 'device name')
    echo "suite device with $how: $name" | tee -a "$facts"
    case "$name" in *NVIDIA*) break ;; esac
  done
  case "$name" in *NVIDIA*) ;; *) echo "no way found to run the suites on the GPU: skipped" | tee -a "$facts"; set -- ;; esac
fi
suites=()
for s in "$@"; do suites+=(--suite "$s"); done
budget=${ENERGY_BUDGET_S:-$([ $power = 1 ] && echo 199 || echo 250)}
timeout $((${budget%.*} + 50)) python3 -m clproj.benchmarks.energy_run "${apps[@]}" "${suites[@]}" --size paper --window 2.2 --quiet 1.0 --budget "$budget" -o "$out/energy-apps.json" > "$out/energy.log" 2>&1
tail -60 "$out/energy.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >> "$facts" 2>&1
