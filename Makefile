# The two commands: `make run` (the local stack) and `make test` (the whole suite).
# Each installs what it needs under .local/ first (scripts/install-local-deps.sh).

SHELL := /bin/bash
CARGO ?= cargo
TOOLS := $(CURDIR)/.local/tools-venv/bin

.PHONY: run test unit lint reset build deploy bench fmt clippy deps tools

deps:
	@scripts/install-local-deps.sh

tools:
	@scripts/install-local-deps.sh --tools

## run: the whole local stack in the foreground on http://127.0.0.1:$${PORT:-3000}; Ctrl-C stops it
run: deps
	@$(CARGO) build --bin careerctl
	@exec ./target/debug/careerctl local

## test: unit and integration tests against DynamoDB Local and the SQS emulator
test: deps
	$(CARGO) test --workspace --all-targets

## reset: wipe the local stack's DynamoDB data
reset:
	rm -rf .local/data

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
