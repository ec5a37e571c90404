# Kuberhealthy (Python). `make demo` and `make test` do all set-up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: help venv testbed demo test test-unit e2e test-slow lint bench scale faults image image-test image-tools screenshots attack demo-node node-start node-stop node-status clean checkclient-sync release-test release-build release-push

help:
	@echo "make demo    - local API server + sample checks + simulated kubelet + the daemon"
	@echo "make demo-node - the demo on a real single node (root): the image, the chart, real checker pods"
	@echo "make test    - make lint, the unit + integration + contract + browser + image tests against a real API server, then make e2e"
	@echo "make test-unit - the unit tests alone (no test bed, ~20 s)"
	@echo "make e2e     - the chart on a real single-node Kubernetes (root): images, helm install, real pods"
	@echo "make test-slow - the long tests kept out of make test (the soak)"
	@echo "make lint    - ruff, mypy (strict) and import-linter (the layers), at pinned versions"
	@echo "make release-test - the release rehearsed: wheels, sdist, image, chart; a registry on 127.0.0.1; helm install from it; pip install --no-index (part of make test)"
	@echo "make checkclient-sync - copy the checker client's source (clients/python) to kuberhealthy/checkclient.py"
	@echo "make bench   - performance figures (run overhead, API calls per run, HTTP throughput, dashboard)"
	@echo "make screenshots - the dashboard (light, dark, phone) from the demo, into docs/"
	@echo "make image   - build the daemon image (docker, podman or buildah; BASE_IMAGE=debian: no registry)"
	@echo "make image-test - build the image on a Debian-made base and smoke-test it (part of make test)"
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

# Lint first: a layer broken or a type error fails in seconds, before the ~10 min of tests. Then the
# end-to-end tests on the real node, as their own pytest run (the same as `make e2e`, below).
test: lint testbed image-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests -m "not slow" --ignore=tests/e2e
	$(BIN)/python -m pytest -q -p no:cacheprovider -rs $(PYTEST_ARGS) tests/e2e

# The end-to-end tests (tests/e2e/README.md): a real single-node Kubernetes (hack/node/node.sh, as root),
# the images built here with podman, the chart installed with helm. Skips with the reason where no real
# node can start, except under CI=true, where that fails. Prints a time budget per part.
e2e: venv testbed image-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -rs $(PYTEST_ARGS) tests/e2e

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

test-slow: venv testbed
	$(BIN)/python -m pytest -q tests -m slow

lint: venv
	$(BIN)/ruff check kuberhealthy tests bench examples testbed clients release
	$(BIN)/mypy
	$(BIN)/mypy clients/python/src/kuberhealthy_checkclient
	$(BIN)/lint-imports --no-cache

bench: venv testbed
	$(BIN)/python -m bench

# The dashboard in headless chromium (Debian's, installed by hack/tools.sh) from the demo: docs/*.png.
screenshots: venv testbed
	$(BIN)/python -m testbed.demo.screenshots

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

# The checker client's source is clients/python/src/kuberhealthy_checkclient/__init__.py; kuberhealthy/checkclient.py
# is its byte-identical copy (tests/unit/test_checkclient_copy.py fails when they differ).
checkclient-sync:
	cp clients/python/src/kuberhealthy_checkclient/__init__.py kuberhealthy/checkclient.py

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
