# The two commands: `make run` (the local stack) and `make test` (the whole suite).
# Each installs what it needs under .local/ first (scripts/install-local-deps.sh).

SHELL := /bin/bash
CARGO ?= cargo
LINT := $(CURDIR)/.local/lint-venv/bin
TOOLS := $(CURDIR)/.local/tools-venv/bin
API_NODE := $(CURDIR)/.local/api-node/node_modules/.bin
FUNCTIONS := career-alerts career-data-sharing career-webhooks career-fanout career-deliver career-sweep
export SAM_CLI_TELEMETRY := 0
export REDOCLY_TELEMETRY := off
export REDOCLY_SUPPRESS_UPDATE_NOTICE := true

.PHONY: help run test test-checks test-build test-suite test-processes lint circles fmt-check template-lint api-check api-lint reset build deploy bench fmt clippy

## help: this list of targets (from their ## lines, and the ## lines that continue them)
help:
	@awk '/^## [a-z-]+: / { name = $$2; sub(/:$$/, "", name); sub(/^## [a-z-]+: /, ""); \
		printf "  %-16s%s\n", name, $$0; more = 1; next } \
		more && /^## / { sub(/^## /, ""); printf "  %-16s%s\n", "", $$0; next } { more = 0 }' $(MAKEFILE_LIST)

## run: the whole local stack in the foreground on http://127.0.0.1:${PORT:-3000}; Ctrl-C stops it
run:
	@scripts/install-local-deps.sh
	@$(CARGO) build --bin careerctl
	@exec ./target/debug/careerctl local

## test: formatting and clippy, the template and OpenAPI linters, then unit and integration tests (DynamoDB Local, moto for SQS and KMS, receivers in Python and Node.js, Schemathesis and a generated client, the portal in headless Chromium)
test:
	@$(MAKE) --no-print-directory -j2 test-checks test-build
	rm -rf target/iam-grants
	@$(MAKE) --no-print-directory -j2 test-suite test-processes
	$(CARGO) test --workspace $(foreach t,$(ALONE_TESTS),--test $(t))   # the scale model, on a quiet machine
	$(CARGO) test --workspace --test iam_grants -- --ignored --nocapture   # least privilege: grants no test used

# The steps of `make test`, two at a time: the installers (mostly downloads) and the
# linters they install beside the compiler; then the tests that own a process beside the
# unit tests and the one integration binary. Every step selects the whole workspace, so
# each builds with the same features and none compiles anything again.
# The tests that own a process: the files of tests/ (each a binary of its own; tests/it/ is
# the integration binary) but `iam_grants` (which reads what every other test used) and
# those run alone, and careerctl's.
# The tests that measure against quotas in units a second (tests/scale_model.rs): run alone,
# after the suite, so they measure the scale model rather than a starved machine.
ALONE_TESTS := scale_model
PROCESS_TESTS := $(filter-out iam_grants $(ALONE_TESTS),$(basename $(notdir $(wildcard tests/*.rs careerctl/tests/*.rs))))
# The integration tests mostly wait (on receivers and the emulators), so twice as many of them
# run at once as the machine has cores: 4 on two cores, where more starve the emulators.
IT_THREADS ?= $(shell echo $$(( 2 * $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2) )))

test-checks:
	@scripts/install-local-deps.sh --test
	@$(MAKE) --no-print-directory template-lint api-lint

# --tests builds the test harnesses the manifests ask for (none where a target says
# `test = false`) and `--bench service` make bench's; the process tests, which say `test =
# false`, build by name (in a command of their own: beside --tests, Cargo drops them).
test-build: fmt-check circles clippy
	$(CARGO) test --workspace --tests --bench service --no-run
	$(CARGO) test --workspace $(foreach t,$(PROCESS_TESTS) $(ALONE_TESTS),--test $(t)) --no-run

# --no-fail-fast: a failing test binary does not keep the others from running (each step
# still fails if any of its binaries did, and so does make test).
# --tests: every unit test and the integration binary `it` (the process tests say `test =
# false`; iam_grants's tests are ignored), and no empty harness.
test-suite:
	$(CARGO) test --workspace --no-fail-fast --tests -- --test-threads=$(IT_THREADS)

test-processes:
	$(CARGO) test --workspace --no-fail-fast $(foreach t,$(PROCESS_TESTS),--test $(t))

## lint: cargo fmt --check, no import circle and no AWS crate in the domain, clippy with warnings as errors, the template checks and the OpenAPI linters
lint: fmt-check circles clippy template-lint api-lint

## circles: no two source files of a crate import each other, directly or round a circle, and no file
## of the domain (shared/src but store/ and aws/) imports an AWS, Lambda or HTTP crate
circles:
	python3 scripts/import-circles.py

## api-lint: Redocly and Spectral on openapi.yaml (no errors, no warnings; redocly.yaml and .spectral.yaml)
api-lint:
	@scripts/install-local-deps.sh --api-tools
	$(API_NODE)/redocly lint --config redocly.yaml openapi.yaml
	$(API_NODE)/spectral lint --ruleset .spectral.yaml --fail-severity=warn openapi.yaml

## api-check: only the API tools: Redocly and Spectral, then Schemathesis and a generated Python client against a stack of their own (tests/it/api_tools.rs)
api-check: api-lint
	@scripts/install-local-deps.sh
	@scripts/install-local-deps.sh --api-tools
	$(CARGO) test --test it api_tools:: -- --nocapture

## template-lint: cfn-lint (no errors, no warnings) and sam validate --lint on template.yaml
template-lint:
	@scripts/install-local-deps.sh --lint
	$(LINT)/cfn-lint template.yaml
	AWS_DEFAULT_REGION=us-east-1 $(LINT)/sam validate --lint --template template.yaml

## build: every function as an arm64 Lambda bootstrap zip under target/lambda/, in one cargo build
build:
	@scripts/install-local-deps.sh --tools
	PATH="$(TOOLS):$$PATH" $(TOOLS)/cargo-lambda lambda build --release --arm64 --output-format zip \
		$(foreach f,$(FUNCTIONS),-p $(f))
	@for f in $(FUNCTIONS); do ls -l target/lambda/$$f/bootstrap.zip | awk -v f=$$f '{printf "%-22s %8.1f KiB\n", f, $$5/1024}'; done

## deploy: make build (the workspace compiled once), then sam deploy of those zips with samconfig.toml's answers (no prompts; region: AWS_REGION or your AWS configuration)
deploy: build
	@scripts/install-local-deps.sh --lint
	$(LINT)/sam deploy --template-file template.yaml --config-file samconfig.toml $(if $(AWS_REGION),--region $(AWS_REGION))

## bench: figures and ratios on the local stack (tests/bench), written to BENCHMARKS.md
bench:
	@scripts/install-local-deps.sh --bench
	$(CARGO) build --release --features career-core/extra-root-cert $(foreach f,$(FUNCTIONS) hello-lambda,-p $(f))
	$(CARGO) build --release --bin careerctl   # separately, so its features do not reach the functions
	$(CARGO) bench --bench service

## reset: wipe the local stack's DynamoDB data and stream checkpoints
reset:
	rm -rf .local/data

## fmt-check: cargo fmt --check (changes nothing)
fmt-check:
	$(CARGO) fmt --all -- --check

## fmt: format the workspace
fmt:
	$(CARGO) fmt --all

## clippy: clippy with warnings as errors
clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
