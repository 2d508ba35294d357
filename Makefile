# takoform-operator — developer entry points. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# `make test` runs pytest in this many workers, each with its own control plane and host: the
# suite mostly waits on processes, so more workers than cores (2 here) pay, but each idle control
# plane costs ~6 % of a core and six workers ran the machine at load 17, where timing-bound
# waits failed; the node tests share one worker.
TEST_WORKERS ?= 4
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-16)

.PHONY: check fresh-check image dist lock crds-upgrade bench bench-host bench-reconcile check-model mutations conformance help host venv lint typecheck generate check-generated tools cluster-up cluster-down test unit run clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 18

$(STAMP): pyproject.toml
	@echo "==> creating virtual environment in $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

venv: $(STAMP) ## create the virtual environment and install the project

lint: venv ## ruff lint + format check; no test sleeps where it should await an event
	$(BIN)/ruff check operator tests hack
	$(BIN)/ruff format --check operator tests hack
	$(BIN)/python hack/check_test_sleeps.py

typecheck: venv ## mypy (strict on the pure core)
	$(BIN)/mypy

generate: venv ## regenerate registry data, CRDs and reference docs from the Form catalog
	$(BIN)/takoform-operator generate

check-generated: venv ## fail if regenerating would change a committed file
	$(BIN)/takoform-operator generate --check

tools: ## build (or reuse cached) kube-apiserver, etcd, kubectl, helm; install prometheus
	hack/tools.sh

fresh-check: ## the README's path on empty caches (fresh clone, HOME/Go/pip/tool caches in a temp dir): make test, then make run; times each phase
	hack/fresh_check.sh

image: ## build the operator image (Docker, else buildah) as an OCI archive in build/image/
	hack/image.sh

DIST_DIR ?= build/dist

dist: tools venv ## release artifacts in $(DIST_DIR): chart package, wheel, sdist, the image archive `make image` built, notes, SHA256SUMS
	$(BIN)/python hack/dist.py --out $(DIST_DIR)

lock: venv ## re-resolve requirements.lock and requirements-build.lock (hashed) from pyproject.toml
	hack/lock.sh

NODE ?=
crds-upgrade: ## apply the chart's CRDs to the current cluster (before `helm upgrade`; helm never upgrades them)
	hack/crds.sh

cluster-up: tools venv ## start a local control plane; NODE=1 adds a node (NODES=2: two) and loads `make image`'s image
	$(BIN)/python hack/localcluster.py up $(if $(NODE)$(NODES),--node $(if $(NODES),--nodes $(NODES)) $(foreach a,$(wildcard build/image/*.oci.tar),--image $(a)))

cluster-down: venv ## stop the local control plane
	$(BIN)/python hack/localcluster.py down

unit: venv ## fast unit tests of the pure core only
	$(BIN)/pytest -q tests/unit

test: lint typecheck check-generated tools ## everything CI runs: lint, types, generated files, all tests
	$(BIN)/pytest -q --durations=25 -n $(TEST_WORKERS)

check: lint typecheck check-generated tools ## the edit-test loop: make test without the slow tests and the Kubernetes ones
	$(BIN)/pytest -q -m "not slow and not kube" -n $(TEST_WORKERS)

MODEL_EXAMPLES ?= 10000
MODEL_SEED ?= $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')

mutations: venv ## the fixed set of rule mutations (hack/mutations.py) against the fast tests: which ones bite
	$(BIN)/python hack/mutations.py

check-model: venv ## long run of the ownership model checker (>= 10,000 sequences; MODEL_SEED=N replays)
	@echo "==> model checker: profile=long examples=$(MODEL_EXAMPLES) seed=$(MODEL_SEED)"
	@echo "    replay: make check-model MODEL_SEED=$(MODEL_SEED) MODEL_EXAMPLES=$(MODEL_EXAMPLES)"
	TAKOFORM_MODEL_PROFILE=long TAKOFORM_MODEL_EXAMPLES=$(MODEL_EXAMPLES) \
	  $(BIN)/pytest -q -s -p no:cacheprovider tests/model/test_model.py --hypothesis-seed=$(MODEL_SEED)

BENCH_SIZES ?= 100,1000,5000

bench: tools venv ## benchmark the operator process end to end (BENCH_SIZES=100,1000,5000; docs/performance.md)
	$(BIN)/python hack/bench_operator.py --sizes $(BENCH_SIZES)

bench-host: venv ## benchmark the reference host (throughput, p50/p99 latency on loopback)
	$(BIN)/python hack/bench_host.py

bench-reconcile: venv ## benchmark the reconcile against the host alone (resources/s, requests each)
	$(BIN)/python hack/bench_reconcile.py

HOST_LISTEN ?= 127.0.0.1:8787
HOST_DB ?= .host/takoform-host.db

run: venv ## run the operator: local control plane (builds the tools) + CRDs + reference host + operator (docs/operator.md)
	hack/run.sh

host: venv ## run the reference host on $(HOST_LISTEN), space team-a of docs/examples (token: dev-token, admin token: dev-admin)
	@mkdir -p $(dir $(HOST_DB))
	TAKOFORM_HOST_TOKENS=dev-token TAKOFORM_HOST_ADMIN_TOKEN=dev-admin \
	  $(BIN)/takoform-host serve --db $(HOST_DB) --listen $(HOST_LISTEN) --space team-a

# accepted-mutation-durable (H-35) is always skipped over the wire: --allow-skips accepts that
# (the report still names it); CONFORMANCE_FLAGS= makes any skipped required check fail the run.
CONFORMANCE_FLAGS ?= --allow-skips

conformance: venv ## run the conformance suite against HOST_URL (default: a `make host` on this machine)
	$(BIN)/takoform-conformance --host $${HOST_URL:-http://$(HOST_LISTEN)} \
	  --token $${HOST_TOKEN:-dev-token} --admin-token $${HOST_ADMIN_TOKEN:-dev-admin} \
	  $(CONFORMANCE_FLAGS)

# The chaos soak (docs/soak.md): SOAK_SEED replays a seed; by default three replicas that are
# active shards, each kill a random replica's (SOAK_FLAGS= runs one process, `--replicas 2` two
# electing a leader); `--ci` is the short variant `make test` runs (tests/soak/test_soak.py).
SOAK_FLAGS ?= --replicas 3 --sharded
SOAK_SEED ?=
.PHONY: soak
soak: tools venv ## chaos soak: >= 200 SIGKILLs of three sharded replicas under host faults, then the invariant checker
	$(BIN)/python hack/soak.py $(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(SOAK_FLAGS)

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
