# Two commands (see README): `make demo` runs the main job, `make test` runs the tests.
# Both set up what they need first (Debian packages, a virtual environment), idempotently.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SLINKYML := $(VENV)/bin/slinkyml
APT_PACKAGES := slurm-wlm slurm-wlm-jwt-plugin slurmdbd slurmrestd munge mariadb-server mariadb-client \
                libslurm-dev iproute2 util-linux shellcheck chromium debootstrap time \
                containerd runc containernetworking-plugins busybox-static iptables procps docker.io
PYTEST_ARGS ?=
WHEELHOUSE := /var/lib/slinkyml/wheels/torch-$(shell sha256sum constraints.txt | cut -c1-12)
# a long step prints a line every 30 s (the machine's python3: it runs before the venv exists)
TICK := python3 slinkyml/dev/slurm/progress.py
# Go where its official archive installs it, for shells whose PATH lacks it (make kube, the tests' `go` calls)
export PATH := $(PATH):/usr/local/go/bin
# `make demo SLURM_VERSION=26.05`: the demo on the Slurm 26.05 cluster (README: Slurm 26.05 beside the
# machine's Slurm), which has its own state dir, names and ports; `make test` runs its smoke suite too.
SLURM_VERSION ?= system
SLURM2605 := SLINKYML_STATE_DIR=/var/lib/slinkyml/dev-26.05 SLINKYML_DEV_SLURM_VERSION=26.05 \
             SLINKYML_DEV_BRIDGE=slkml26 SLINKYML_DEV_NODE_PREFIX=u SLINKYML_DEV_SUBNET=10.226.0.0/24 \
             SLINKYML_DEV_PORT_BASE=8817 SLINKYML_DEV_MARIADB_PORT=15306
ON_CLUSTER = $(if $(filter 26.05,$(1)),export $(SLURM2605) && $(SLINKYML) dev up && eval "$$($(SLINKYML) dev env)" &&,)

.PHONY: setup apt venv bytecode kube demo demo-kube test check lint schema bench down

setup: apt venv bytecode

# Byte-compile the (editable) package as a wheel install would: with PYTHONDONTWRITEBYTECODE set,
# every `slinkyml` command and test subprocess would otherwise recompile what changed (~20 ms).
bytecode: venv
	@$(PY) -m compileall -q slinkyml

# pytest keeps the test modules it rewrites (their asserts) as bytecode only where Python may write it:
# with PYTHONDONTWRITEBYTECODE set it rewrites all of them in every worker of every run (~5 s of CPU each)
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

# Debian packages: installed only when one is missing (needs root, as the local cluster does).
apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	        $$missing >/dev/null; \
	fi

# The venv: torch==2.13.0 exactly (constraints.txt: PyPI's default CUDA build, which runs on the CPU;
# setup.cfg's train extra only asks for a range; pip's cache is kept, never --no-cache-dir). torch and its
# CUDA wheels (~4 GB) come from a wheelhouse named by constraints.txt, downloaded once per machine: pip's
# HTTP cache stores nothing from this registry, which answers without Cache-Control, ETag or Last-Modified.
# DeepSpeed without build isolation (its build imports torch; no ops are built at install: CPU runs use a
# torch optimizer), then slinkyml itself with its extras, then the one op DeepSpeed needs on CPU.
venv: $(VENV)/.installed $(VENV)/.compat
# slinkyml again in setuptools' compat editable mode (after every install above, and once in a venv made
# before this step): a .pth line naming this folder instead of the editable finder, whose import (pathlib,
# urllib, ipaddress, importlib.util) cost every Python start ~24 ms of CPU on this 2-core machine, i.e. every
# slinkyml command and every rank of a job (python -c pass: 18.5 vs 42.5 ms CPU, 16 ABBA pairs, load 10;
# docs/performance.md). setuptools calls the mode transitional; the extras are installed above.
$(VENV)/.compat: $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
	    --config-settings editable_mode=compat -e .
	touch $@
$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip setuptools wheel
	$(TICK) "downloading torch into $(WHEELHOUSE) (about 4 GB, once per machine)" -- \
	    bash slinkyml/data/shell/wheelhouse.sh $(PY) $(WHEELHOUSE) constraints.txt torch
	$(TICK) "installing torch from $(WHEELHOUSE)" -- $(PY) -m pip install -q --disable-pip-version-check \
	    --no-index --find-links $(WHEELHOUSE) -c constraints.txt torch
	DS_BUILD_OPS=0 $(TICK) "installing DeepSpeed" -- $(PY) -m pip install -q --disable-pip-version-check \
	    --no-build-isolation -c constraints.txt 'deepspeed>=0.16'
	$(TICK) "installing slinkyml and its extras" -- \
	    $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,train,k8s,plots,docker]'
	@# DeepSpeed's CPU accelerator JIT-builds its shared-memory comm op in every rank's init_distributed;
	@# built here once (~/.cache/torch_extensions), not inside a job's time limit (a cold build took
	@# 6.5 min on 2 loaded cores, and a rank killed mid-build leaves torch's lock file behind).
	@# A lock left by a killed build is removed first (slinkyml/train/deepspeed_op.py); a hung build fails.
	$(TICK) "building DeepSpeed's CPU comm op" -- $(PY) -m slinkyml.train.deepspeed_op
	touch $@

# Kubernetes from Go modules (README: a local Kubernetes control plane): kube-apiserver, -controller-manager,
# -scheduler, kubelet, etcd, the slurm-operator and our pause program, built once per pinned version into
# /var/lib/slinkyml/kube/<key>
# (kube/build.sh; nothing to do when that cache is complete).
kube:
	@bash kube/build.sh >/dev/null

# the demo runs on the local Slurm cluster only: it needs no Kubernetes build
# `make demo DEV=docker`: on the cluster as Docker containers (docs/docker-cluster.md) instead
DEV ?= netns
demo: setup
	$(call ON_CLUSTER,$(SLURM_VERSION)) $(SLINKYML) demo $(if $(filter docker,$(DEV)),--docker,)

# the Kubernetes half: builds its parts from Go modules (a line per part), the control plane with a kubelet
# node, the real slurm-operator reconciling manifests/cpu-small
demo-kube: setup
	$(SLINKYML) demo --kubernetes

# the whole suite, its tiers side by side (tests/run_tiers.py: the Go builds of `make kube` start first and
# overlap the offline and Slurm tiers; the Kubernetes tiers wait for them; the tests marked slurm2605 run on
# a Slurm 26.05 cluster beside the machine's); prints the tests per tier and the 30 slowest
test: setup
	$(SLINKYML) dev up
	$(TEST_ENV) $(PY) tests/run_tiers.py $(PYTEST_ARGS)

# the offline tier (no daemon: tests/tiers.py) on both cores, less its few tests that train or install for
# more than ~30 s each (marked slow; make test runs them), the option fuzzer drawing 30 argument lists per
# command instead of 100 (the first 30 of make test's): a change's answer in about a minute
check: venv bytecode
	$(TEST_ENV) SLINKYML_FUZZ_EXAMPLES=$${SLINKYML_FUZZ_EXAMPLES:-30} $(PY) -m pytest -q -p no:cacheprovider -n 2 -m "offline and not slow" $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check slinkyml tests benchmarks
	$(VENV)/bin/mypy

# the published job schema (slinkyml/data/schemas/job.schema.json), from the param(...) fields of
# slinkyml/jobs/spec.py: after adding or changing a job parameter (tests/test_job_parameters.py says when)
schema: venv
	$(PY) -m slinkyml.jobs.params

bench: setup
	$(SLINKYML) dev up
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

down:
	$(SLINKYML) dev kube down
	$(SLINKYML) dev down
