# Two commands do everything on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
REQS := requirements-dev.txt functions/requirements.txt training_image/requirements.txt constraints.txt \
        pyproject.toml package-lock.json
# The stamp is keyed on the requirement files: a second `make` skips the install unless one changed.
STAMP := $(VENV)/.stamp-$(shell cat $(REQS) | sha256sum | cut -c1-16)
# The Lambda runtime named in template.yaml's Globals, e.g. python3.13 -> 3.13.
LAMBDA_PYTHON := $(shell sed -n 's/^ *Runtime: *python\([0-9.]*\).*/\1/p' template.yaml 2>/dev/null | head -1)
export SAM_CLI_TELEMETRY := 0
export AWS_DEFAULT_REGION ?= us-east-1

.PHONY: help setup test checks lint validate package-check image-check docs docs-check pytest demo bench clean lock image push

help:
	@echo "make demo   - run the whole retraining flow on the embedded AWS emulation"
	@echo "make test   - every test and gate (ruff, mypy, pytest, sam/cfn-lint, IAM check, asl-validator, packaging, docs)"
	@echo "make docs   - serve the user guide (docs/, mkdocs.yml) at http://127.0.0.1:8000"
	@echo "make lint | validate | image-check | docs-check | bench | image | push | lock | clean"

setup: $(STAMP)

# pip installs uv, uv the rest from pip's configured indexes (retrain/dev/uv_install.py): pip took 70 s of a
# fresh clone's setup on one core, uv 5-19 s. uv compiles the bytecode at install, as pip does by default
# (and the training image's pip install): where PYTHONDONTWRITEBYTECODE is set (this project's development
# machines, the image's ENV) no process writes it, and each of the suite's jobs and workers compiled all it
# imported again: `import torch` 7.0 s of CPU, 3.1 s compiled; test_training_resume.py 481 core-s, 220.
UV := $(shell sed -n 's/^uv==//p' constraints.txt)
$(STAMP): $(REQS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --disable-pip-version-check uv==$(UV)
	$(BIN)/python retrain/dev/uv_install.py -q --compile-bytecode -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install -qq --disable-pip-version-check --no-deps --no-build-isolation -e .
	npm ci --no-audit --no-fund --silent
	rm -f $(VENV)/.stamp-*
	touch $@

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict functions/controller contract/retrain_contract retrain
	$(BIN)/mypy training_image bench

validate: setup package-check
	@if [ -f template.yaml ]; then \
	  $(BIN)/sam validate --lint --template template.yaml --region $(AWS_DEFAULT_REGION) && \
	  $(BIN)/cfn-lint template.yaml nested/*.yaml; \
	else echo "validate: no template.yaml yet"; fi
	$(BIN)/python -m retrain.dev.iam_check
	@for f in statemachine/*.asl.json; do \
	  [ -e "$$f" ] || { echo "validate: no state machine yet"; break; }; \
	  $(BIN)/python -m retrain.dev.asl_check "$$f" | node_modules/.bin/asl-validator --json-path /dev/stdin; \
	done

# The Lambda dependencies must install for the template's runtime and the Lambda platform: python3.12 and
# later run on Amazon Linux 2023 (glibc 2.34), so wheels up to manylinux_2_34 load there (the platforms
# `sam build` accepts for those runtimes; Pillow 13 ships manylinux_2_28 wheels only).
LAMBDA_PLATFORMS := --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64
# The runtime's interpreter is found as the embedded Lambda runtime finds it (PATH, then pyenv's versions).
package-check: setup
	@if [ -z "$(LAMBDA_PYTHON)" ]; then echo "package-check: no Lambda runtime in template.yaml yet"; \
	elif bin=$$($(BIN)/python -c "from retrain.embedded.awslambda.interpreters import interpreter; \
	    print(interpreter('python$(LAMBDA_PYTHON)').executable.parent)" 2>/dev/null); then \
	  PATH="$$bin:$$PATH" $(BIN)/sam build --template template.yaml; \
	else rm -rf build/lambda-package && \
	  $(BIN)/python -m pip install -qq --disable-pip-version-check --only-binary=:all: \
	    --python-version $(LAMBDA_PYTHON) --implementation cp $(LAMBDA_PLATFORMS) \
	    -r functions/requirements.txt --target build/lambda-package && \
	  echo "package-check: functions/requirements.txt installs for python$(LAMBDA_PYTHON) on x86_64 (glibc <= 2.34)"; fi

# The training image's package set on the base image's Python (3.12): installs, pip check, the jobs' imports.
image-check: setup
	$(BIN)/python -m retrain.dev.image_check

# Four workers on the two cores: three carry the end-to-end runs, which wait on their stacks' clocks, the
# fourth runs quick tests meanwhile (tests/conftest.py orders them so). With two, 15-35% of the cores sat
# idle; with three, half of them for about a minute in all while every worker waited (BENCHMARKS.md).
pytest: setup
	$(BIN)/python -m pytest -n 4 --dist worksteal --durations=40 || { rc=$$?; \
	  [ $$rc -ne 5 ] || echo "pytest collected no tests: the suite is broken" >&2; exit $$rc; }

# The user guide (docs/) as a site: `make docs` serves it and rebuilds it on every edit; docs-check builds it
# strictly (a broken link or anchor, a page missing from mkdocs.yml's nav fails), as part of `make test`.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-check: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# The three gates are independent and mostly wait on one core each (mypy, sam build, pip): they run side by
# side, each one's output kept together, the guide's build (a few seconds) in the first free slot; then the
# suite, on both cores.
checks: setup
	$(MAKE) --no-print-directory -j3 --output-sync=target lint validate image-check docs-check

test: checks pytest

demo: setup
	$(BIN)/retrain demo

# Each benchmark measures side by side in one run and appends its table to BENCHMARKS.md.
bench: setup
	$(BIN)/python bench/lambda_import.py --append BENCHMARKS.md
	$(BIN)/python bench/checkpoint.py --append BENCHMARKS.md
	$(BIN)/python bench/debugger_hook.py --append BENCHMARKS.md
	$(BIN)/python bench/loader.py --append BENCHMARKS.md
	$(BIN)/python bench/snapshot.py --append BENCHMARKS.md
	$(BIN)/python bench/gatekeeper.py --append BENCHMARKS.md
	$(BIN)/python bench/ingest.py --append BENCHMARKS.md
	$(BIN)/python bench/transfer.py --append BENCHMARKS.md
	$(BIN)/python bench/transfer.py --recipes --append BENCHMARKS.md
	$(BIN)/python bench/run_jobs.py --append BENCHMARKS.md
	$(BIN)/python bench/rules.py --append BENCHMARKS.md
	$(BIN)/python bench/first_contact.py --repeat 3 --append BENCHMARKS.md

# The base image's URI in REGION comes from sagemaker-core's image-URI data (retrain/dev/base_image.py).
REGION ?= $(AWS_DEFAULT_REGION)
image: setup
	docker build -f training_image/Dockerfile $$($(BIN)/python -m retrain.dev.base_image --region $(REGION) --build-args) \
	  -t retrain-training:latest .

# The quick start's first step in one command: log in to the base image's registry, build the image, make
# this account's ECR repository retrain-training if it is missing, push, and print the URI to deploy with.
push: setup
	$(BIN)/aws ecr get-login-password --region $(REGION) | docker login --username AWS --password-stdin \
	  "$$($(BIN)/python -m retrain.dev.base_image --region $(REGION) | cut -d/ -f1)"
	$(MAKE) --no-print-directory image REGION=$(REGION)
	@registry=$$($(BIN)/aws sts get-caller-identity --query Account --output text).dkr.ecr.$(REGION).amazonaws.com; \
	$(BIN)/aws ecr describe-repositories --repository-names retrain-training --region $(REGION) >/dev/null 2>&1 || \
	  $(BIN)/aws ecr create-repository --repository-name retrain-training --region $(REGION) >/dev/null; \
	$(BIN)/aws ecr get-login-password --region $(REGION) | docker login --username AWS --password-stdin $$registry && \
	docker tag retrain-training:latest $$registry/retrain-training:latest && \
	docker push $$registry/retrain-training:latest && \
	echo "TrainingImageUri: $$registry/retrain-training:latest"

# Regenerate constraints.txt from what is installed (after changing a requirement file).
lock:
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' > constraints.txt

# Build outputs only: .retrain/ (the embedded stack's state) and runs/ (reports) are kept.
clean:
	rm -rf $(VENV) node_modules build .aws-sam .mypy_cache .ruff_cache .pytest_cache
