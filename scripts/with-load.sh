#!/usr/bin/env bash
# Run a command with N CPU-bound processes beside it (a loaded machine), and end them with it.
# Usage: scripts/with-load.sh N CMD ARGS...   Exit status: the command's.
set -uo pipefail
n=${1:?usage: scripts/with-load.sh N CMD ARGS...}
shift
pids=()
cleanup() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
for _ in $(seq 1 "$n"); do
    (trap - EXIT INT TERM; exec sh -c 'while :; do :; done') &
    pids+=($!)
done
echo "clproj: $n CPU-bound processes beside: $*" >&2
"$@"
