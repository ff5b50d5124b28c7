# clproj: the two commands are `make demo` and `make test`; each sets everything up first.
# Set-up is idempotent and quick once done: system packages are checked with one dpkg
# query, the venv is rebuilt only when setup.py changes, native parts only when their
# sources change.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .stamps
NATIVE_SOURCES := $(wildcard native/*.py native/*.h native/shim/*.c native/shim/*.h native/energy_window/*.c native/live_pages/*.c native/live_pages/*.h native/nodelink/*.c native/nodelink/*.h native/oclgrind_plugin/*.cpp native/oclgrind_plugin/*.h) setup.py intercept/shim_runtime.py
# Two PoCL drivers (one thread vs all cores) form a genuinely heterogeneous local pair.
export POCL_DEVICES ?= pthread basic

.PHONY: setup system venv build bytecode demo test test-load lint bench conformance settings clean

setup: system venv build bytecode

system:
	@scripts/ensure-system-deps.sh

venv: $(STAMPS)/venv

$(STAMPS)/venv: setup.py pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel cffi
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@ $(STAMPS)/build

build: $(STAMPS)/build

$(STAMPS)/build: $(STAMPS)/venv $(NATIVE_SOURCES)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

# Every clproj process (the CLI, the shim inside an app, each emulator) imports about 100
# of our modules. Where PYTHONDONTWRITEBYTECODE is set (container images, CI) none of them
# ever gets a .pyc, and each process compiles them again: 0.3 s a process on the 2-core
# VM, half of `clproj run --mode project -- /bin/true`. Compiled here, they are read by
# every process; only files changed since are compiled again (a second when none is).
bytecode: build
	@$(BIN)/python -m compileall -q -j 0 -x '/\.' .

demo: setup
	$(BIN)/clproj devices
	$(BIN)/clproj run --mode project -- $(BIN)/python -m clproj.benchmarks.apps matmul_lmem nbody atomic_contention reduction --size small
	@cat scripts/demo-explained.txt

# The suite runs as on this machine, then, where a local device matches a committed
# profile, again as on a machine whose devices match none (CLPROJ_FOREIGN_MACHINE=1: every
# local device takes the cold-start path). Where none matches, the first run already was.
test: setup
	scripts/run-suite.sh $(BIN)/python
	@if $(BIN)/python -m clproj.devices.local --committed-here; then \
		echo "clproj: the suite again, as on a machine nobody profiled (CLPROJ_FOREIGN_MACHINE=1)"; \
		CLPROJ_FOREIGN_MACHINE=1 scripts/run-suite.sh $(BIN)/python --ignore=tests/test_foreign_machine.py; \
	else \
		echo "clproj: no committed profile matches a device here: that run was as on a machine nobody profiled"; \
	fi

# The suite on a loaded machine: two CPU-bound processes beside it, ended with it (not in
# CI: on 2 cores it took 12-14 minutes, against about 7 for `make test`).
test-load: setup
	scripts/with-load.sh 2 scripts/run-suite.sh $(BIN)/python

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Accuracy, measured: our 32 apps against the committed device times, then the
# third-party PolyBench/GPU apps (../shared/validation) against their real-device truth.
VALIDATION := ../shared/validation/polybench
PUBLISHED := ../shared/validation
ENERGY := benchmarks/results/energy/h200-20261127
bench: setup
	$(BIN)/clproj evaluate
	POCL_DEVICES=pthread $(BIN)/clproj validate $(VALIDATION) --truth $(VALIDATION)/truth \
		--models bound,paper,roofline,mwp-cwp,learned --report benchmarks/results/validation-polybench
	# Power and energy against the measured H200 windows: the spec rule and two microbenchmark
	# fits side by side on our apps (the PolyBench windows: clproj validate ... --energy)
	$(BIN)/python -m clproj.benchmarks.energy_accuracy --windows $(ENERGY)/energy-apps-run1.json \
		$(ENERGY)/energy-apps-run2.json --fits $(ENERGY)/power-microbench-settling.json \
		$(ENERGY)/power-microbench.json --out benchmarks/results/energy_fits.md
	# The fitted power beside Braun et al.'s learned power (our apps leave-one-app-out, PolyBench held out)
	$(BIN)/python -m clproj.benchmarks.power_models --windows $(ENERGY)/energy-apps-run1.json \
		$(ENERGY)/energy-apps-run2.json --suite $(VALIDATION) --truth $(VALIDATION)/truth \
		--out benchmarks/results/power_models.md
	# Time from each kernel's first launch to its projection, live and post-app side by side
	POCL_DEVICES=pthread $(BIN)/python -m clproj.benchmarks.first_projection --out benchmarks/results/first_projection.md
	# Project mode's wall time over the plain run's, in mirrored rounds (BabelStream 400 MiB)
	POCL_DEVICES=pthread $(BIN)/python -m clproj.benchmarks.project_overhead --out benchmarks/results/project_overhead.md
	# Launches the reuse cache answers after the app: one process and one per core; the table
	$(BIN)/python -m clproj.benchmarks.reused_projection --out benchmarks/results/reused_projection.md
	# A changed snapshot's copy into its file, through a mapping and with pwrite (the shim's)
	$(BIN)/python -m clproj.benchmarks.snapshot_copy --out benchmarks/results/snapshot_copy.md
	# BabelStream and mixbench (../shared/validation) against their authors' published times,
	# projected onto spec profiles (docs/validation.md); the records are cached, a rerun only projects.
	for s in babelstream mixbench; do \
		$(BIN)/clproj validate-published $(PUBLISHED)/$$s --json \
			--report benchmarks/results/published-$$s > benchmarks/results/published-$$s/results.json; \
	done

# pyopencl's own test suite plainly and under each mode, every test id compared
# (scripts/conformance.sh --help; a few minutes; CONFORMANCE_ARGS="--files test_wrapper.py").
conformance: setup
	scripts/conformance.sh $(CONFORMANCE_ARGS)

# The settings table (clproj/settings.py) makes docs/settings.md and the C/C++ accessors of
# native/clproj_settings.h; tests check both are current. Run after editing the table.
settings:
	$(BIN)/python -m clproj.settings > docs/settings.md
	$(BIN)/python -m clproj.settings --c-header > native/clproj_settings.h
	$(BIN)/python -m clproj.stats_table --c-header > native/oclgrind_plugin/stats_fields.h

clean:
	rm -rf $(VENV) $(STAMPS) build *.egg-info intercept/*.so miniemu/*.so runtime/cluster/node/*.so
