# containerd-shim-ipc
GO ?= go
PKGS := ./...

.PHONY: all build test test-race bench vet fmt deps

all: build

build:
	$(GO) build $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -l -w .

# The test command of the README: everything a fresh Debian machine needs,
# then vet, unit and differential tests (the kernel is the oracle: they
# need root for unshare(CLONE_NEWIPC)), and the race detector.
test: deps vet
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race -short $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./semengine/

deps:
	@scripts/install-deps.sh
