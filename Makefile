# Entry points. Every target that needs the controller environment depends on `setup`, which builds
# .venv/ from the pinned requirements.txt once and is a no-op while requirements.txt is unchanged.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.requirements-installed
INVENTORY ?= inventory/local
PLAYBOOKS := $(wildcard playbooks/*.yml)
PYTEST_ARGS ?=
# make test runs pytest twice: the unit and integration tests on PYTEST_WORKERS xdist workers (a module's
# tests on one worker: module fixtures are built once), then the fleet tests (tests/integration/fleet/) on
# FLEET_WORKERS: with 2, in two lanes side by side (tests/conftest.py: the rollout module and the small
# harness modules on one worker, everything else in order on the other); with 1, all in order. Both runs
# always run; either failing fails make test. PYTEST_ARGS goes to both (options: -x, -k, --lf; a path
# would run in both).
# 3 workers: the stage is CPU-bound, but its tests also wait (2026-12-05, one run each: 2 workers 586 s,
# 3 workers 534 s and 520 s inside a whole .ci/run, 4 workers 549 s).
PYTEST_WORKERS ?= 3
FLEET_WORKERS ?= 2
FLEET_TESTS := tests/integration/fleet

export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help setup site lock bundle test lint ruff ansible-lint syntax pytest unit integration mutation fleet-up fleet-down clean

help:
	@echo "make site        provision the hosts of INVENTORY (default: this machine, inventory/local)"
	@echo "make lock        (re)write profiles/pylock.PROFILE.toml (PROFILE=stable), the profile's full hashed lock"
	@echo "make bundle      bundles/PROFILE: the lock and its wheels, for installs with no index (PLATFORMS=...)"
	@echo "make test        ruff, ansible-lint (production), syntax-check of every playbook, pytest (what CI runs)"
	@echo "make setup       create .venv/ from requirements.txt (no-op when up to date)"
	@echo "make unit        unit tests only (fast, no fleet, no nvcc)"
	@echo "make mutation    mutation score of every module_utils/ file against the unit suite (slow; not in test)"
	@echo "make fleet-up    start three disposable systemd hosts and write their inventory"
	@echo "make fleet-down  stop them and remove everything they left"

setup: $(STAMP)

$(STAMP): requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required for ansible-core 2.19 (found " + sys.version.split()[0] + ")")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --requirement requirements.txt
	$(BIN)/python -m pip check
	@touch $@

site: setup
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/site.yml

# (Re)write profiles/pylock.$(PROFILE).toml with the profile's pinned uv; commit the result.
PROFILE ?= stable
lock: setup
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/lock.yml -e stack_profile=$(PROFILE) $(LOCK_ARGS)

# One directory (bundles/$(PROFILE) unless BUNDLE_DIR) that site.yml installs the locked stack from offline.
PLATFORMS ?= x86_64 aarch64
BUNDLE_DIR ?=
bundle: setup
	$(BIN)/ansible-playbook -i $(INVENTORY) playbooks/bundle.yml -e stack_profile=$(PROFILE) \
	  -e "stack_bundle_platforms='$(PLATFORMS)'" -e "stack_bundle_dir='$(BUNDLE_DIR)'" $(BUNDLE_ARGS)

# Each stage runs timed (bench/ci_timing.py time); each pytest run also writes each test's seconds. The
# summary (seconds per stage, the ten slowest tests) is printed at the end, also when a stage failed; the
# recipe then exits non-zero, so `make test` still fails. lint and syntax stop it at their failure; the
# two pytest runs both run.
TIMING_DIR := .cache/ci-timing
TIMED := $(BIN)/python bench/ci_timing.py time --dir $(TIMING_DIR)
# Not $(MAKE) in test's recipe: GNU make runs a recipe line that names $(MAKE) even under `make -n`, and
# that line runs the whole suite (`make -n test` ran every test until 2026-12-07).
SUBMAKE = $(MAKE) --no-print-directory
test: setup
	@rm -rf $(TIMING_DIR)
	@$(TIMED) lint -- $(SUBMAKE) lint \
	  && $(TIMED) syntax -- $(SUBMAKE) syntax \
	  && { $(TIMED) pytest -- $(BIN)/python -m pytest --timing-json=$(TIMING_DIR)/pytest-report.json \
	         --ignore=$(FLEET_TESTS) $(if $(filter-out 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS); \
	       rest=$$?; \
	       $(TIMED) pytest-fleet -- $(BIN)/python -m pytest --timing-json=$(TIMING_DIR)/pytest-fleet-report.json \
	         $(if $(filter-out 1,$(FLEET_WORKERS)),-n $(FLEET_WORKERS) --dist loadgroup) $(FLEET_TESTS) $(PYTEST_ARGS); \
	       fleet=$$?; test $$rest = 0 && test $$fleet = 0; }; \
	  status=$$?; echo; $(BIN)/python bench/ci_timing.py summary $(TIMING_DIR); exit $$status

lint: ruff ansible-lint

ruff: setup
	$(BIN)/ruff check .

ansible-lint: setup
	$(BIN)/ansible-lint --offline --profile production --strict

# Every playbook in one ansible-playbook run per inventory (an error names its file): 24 runs took 16 s,
# mostly ansible-core's start-up, these two 3 s (2026-12-07).
syntax: setup
	@for i in inventory/example inventory/kimi-k2.5; do \
	  echo "syntax-check $(PLAYBOOKS) ($$i)"; \
	  $(BIN)/ansible-playbook -i $$i --syntax-check $(PLAYBOOKS) || exit 1; \
	done

pytest: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# No unit test uses hypothesis, whose pytest plugin imports it at the end of every run (~0.9 s of CPU).
# Most of the suite's wall time is bounded waits (timeouts that must really expire: bounded_run, the
# readiness poll, hung nvidia-smi), not CPU, so 4 xdist workers overlap them even on 2 cores.
UNIT_WORKERS ?= 4
unit: setup
	$(BIN)/python -m pytest tests/unit -p no:hypothesispytest -n $(UNIT_WORKERS) $(PYTEST_ARGS)

integration: setup
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

# mutmut over module_utils/, one file at a time (MUTATION_FILES=cuda_arch nvidia_smi for some); fails when
# a file kills < 90%. Minutes per file on 2 cores, so not part of `make test`.
mutation: setup
	$(BIN)/python bench/mutation_score.py run $(MUTATION_FILES)

fleet-up: setup
	$(BIN)/python tests/fleet up --name dev --hosts 3 --replace

fleet-down: setup
	$(BIN)/python tests/fleet down --name dev

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
