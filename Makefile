# containerd-shim-ipc
GO ?= go
PKGS := ./...

.PHONY: all build test test-race bench vet fmt deps shim ipcctl demo integration integration-deps

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
# The integration tests (integration/) run the shim under a real containerd
# and runc (integration-deps installs them); they skip without root and in
# -short mode.
test: deps integration-deps vet
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race -short $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./semengine/

deps:
	@scripts/install-deps.sh

# The shim binary containerd runs for runtime type io.containerd.ipc.v2;
# `containerd-shim-ipc-v2 -v` prints SHIM_VERSION and the containerd it links.
SHIM_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
shim:
	$(GO) build -ldflags "-X main.version=$(SHIM_VERSION)" -o build/bin/containerd-shim-ipc-v2 ./cmd/containerd-shim-ipc-v2

# The host tool: pods' IPC objects, waiters, undo entries, metrics.
ipcctl:
	$(GO) build -o build/bin/ipcctl ./cmd/ipcctl

# runc and busybox-static (apt), containerd + ctr from the Go module proxy.
integration-deps:
	@scripts/install-runtime-deps.sh

integration: integration-deps
	$(GO) test -count=1 -v ./integration/

# The README's main command: a private containerd running a container whose
# processes share a semaphore and a message queue under the shim.
demo: deps integration-deps shim
	@scripts/demo.sh
