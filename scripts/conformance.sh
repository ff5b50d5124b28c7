#!/usr/bin/env bash
# Third-party conformance: pyopencl's own tests plainly and under each clproj mode.
#
# Runs each test file plainly (no clproj) and under `clproj run --mode MODE`, writes
# pytest's JUnit XML and -v log per run, and prints (scripts/conformance_report.py) the
# passed/failed/skipped/xfailed counts per file and mode, the wall time and its ratio to
# the plain run, and every test id whose outcome differs from the plain run. Exits 1 when
# a test that passes plainly fails, errors or goes missing (a crash) under a mode.
#
#   scripts/conformance.sh [--modes "plain observe route"] [--files "test_wrapper.py ..."]
#                          [-k EXPR] [--array-k EXPR] [--out DIR] [--suite DIR]
#                          [--timeout S] [--warm] [-- extra pytest args]
#
#   --files    test files in the suite (default: all seven: test_wrapper.py test_array.py
#              test_algorithm.py test_enqueue_copy.py test_arrays_in_structs.py
#              test_clmath.py test_clrandom.py)
#   -k EXPR    pytest -k for every file
#   --array-k  pytest -k for test_array.py only (it takes ~90+ s plainly), e.g.
#              --array-k "not random and not sort and not scan"
#   --out      where the XML/logs go (default: a new directory under /tmp)
#   --timeout  per run, seconds (default 1800)
#   --warm     run each file once per mode before the measured run (untimed): compile
#              caches (PoCL's, pyopencl's) are then warm in every mode, so the time
#              ratios compare the modes, not a cold run with a warm one
# Environment: POCL_DEVICES (default pthread), PYTHON (default .venv/bin/python),
# CLPROJ (default .venv/bin/clproj).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODES="plain observe route"
FILES="test_wrapper.py test_array.py test_algorithm.py test_enqueue_copy.py test_arrays_in_structs.py test_clmath.py test_clrandom.py"
SUITE="$ROOT/../shared/validation/pyopencl/test"
KEXPR=""
ARRAYK=""
OUT=""
TIMEOUT=1800
EXTRA=()
WARM=0
while [ $# -gt 0 ]; do
    case "$1" in
        --modes) MODES="$2"; shift 2 ;;
        --files) FILES="$2"; shift 2 ;;
        -k) KEXPR="$2"; shift 2 ;;
        --array-k) ARRAYK="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --suite) SUITE="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --warm) WARM=1; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) echo "conformance.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-$ROOT/.venv/bin/python}
CLPROJ=${CLPROJ:-$ROOT/.venv/bin/clproj}
export POCL_DEVICES=${POCL_DEVICES:-pthread}
[ -d "$SUITE" ] || { echo "conformance.sh: no test suite at $SUITE" >&2; exit 2; }
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/clproj-conformance-XXXXXX)
mkdir -p "$OUT"
echo "conformance: results in $OUT (POCL_DEVICES=$POCL_DEVICES)"

for f in $FILES; do
    stem=${f%.py}
    k=$KEXPR
    if [ "$f" = test_array.py ] && [ -n "$ARRAYK" ]; then
        k=${k:+($k) and }$ARRAYK
    fi
    for mode in $MODES; do
        args=(-m pytest -v -p no:cacheprovider "$SUITE/$f" --junitxml="$OUT/$mode-$stem.xml")
        [ -n "$k" ] && args+=(-k "$k")
        args+=("${EXTRA[@]}")
        rm -f "$OUT/$mode-$stem.xml"
        if [ "$WARM" = 1 ]; then
            if [ "$mode" = plain ]; then
                timeout "$TIMEOUT" "$PY" "${args[@]}" >"$OUT/$mode-$stem.warm.log" 2>&1
            else
                timeout "$TIMEOUT" "$CLPROJ" run --mode "$mode" -- "$PY" "${args[@]}" \
                    >"$OUT/$mode-$stem.warm.log" 2>&1
            fi
            rm -f "$OUT/$mode-$stem.xml"
        fi
        t0=$(date +%s.%N)
        if [ "$mode" = plain ]; then
            timeout "$TIMEOUT" "$PY" "${args[@]}" >"$OUT/$mode-$stem.log" 2>&1
        else
            timeout "$TIMEOUT" "$CLPROJ" run --mode "$mode" -- "$PY" "${args[@]}" \
                >"$OUT/$mode-$stem.log" 2>&1
        fi
        rc=$?
        t1=$(date +%s.%N)
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
        echo "$rc $secs" >"$OUT/$mode-$stem.rc"
        printf '  %-22s %-8s exit %-3s %8ss\n' "$f" "$mode" "$rc" "$secs"
    done
done
modes_csv=$(echo "$MODES" | tr ' ' ',')
exec "$PY" "$ROOT/scripts/conformance_report.py" "$OUT" $FILES --modes "$modes_csv"
