#!/usr/bin/env bash
# The test suite as `make test` runs it: two pytest workers (pytest-xdist), then the tests
# marked `serial` alone.
# Usage: scripts/run-suite.sh PYTHON [PYTEST ARGS...]   (PYTHON: the venv's, from the
# Makefile; the other arguments go to both pytest runs)
#
# Why two workers: the suite is mostly CPU-bound Python, emulators and PoCL, and one
# pytest process keeps about one core busy; the second core was idle half the time on a
# quiet machine, and beside other CPU-bound work the scheduler shares the cores per
# process, so one process got a third of the machine. `--dist loadfile` keeps each test
# file (and its module fixtures) in one worker. A `serial` test needs the machine to
# itself (it checks what a quiet machine does), so it runs after the rest, alone.
# Exit status: the first failing run's (pytest's 5, "no tests ran", included).
set -uo pipefail
py=${1:?usage: scripts/run-suite.sh PYTHON [PYTEST ARGS...]}
shift
cd "$(dirname "$0")/.."
"$py" -m pytest -q -n 2 --dist loadfile -m "not serial" "$@" || exit $?
exec "$py" -m pytest -q -m serial "$@"
