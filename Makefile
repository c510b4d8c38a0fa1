# containerd-shim-ipc
GO ?= go
PKGS := ./...
# scripts/install-deps.sh installs Go there on a machine without one.
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build test bench vet fmt deps shim ipcctl demo integration integration-deps

all: build

build:
	$(GO) build $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -l -w .

# The test command of the README (scripts/test.sh): named, timed steps and a
# summary: deps, runtime-deps (everything a fresh Debian 12 machine needs),
# vet, unit (unit and differential tests; the kernel is the oracle: they
# need root for unshare(CLONE_NEWIPC)), integration (the shim under a real
# containerd and runc; they need root: under make test a skip fails),
# race (-race -short) and deploy (the deploy/ module's manifests and
# installer).
test:
	@GO=$(GO) scripts/test.sh

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./semengine/

deps:
	@scripts/install-deps.sh

# The shim binary containerd runs for runtime type io.containerd.ipc.v2;
# `containerd-shim-ipc-v2 -v` prints SHIM_VERSION and the containerd it links.
# Static (CGO_ENABLED=0), as deploy/Dockerfile builds it and as containerd's
# runc shim is: containerd runs the binary three times per container (start,
# the daemon, delete), and the dynamic loader and cgo's start-up cost each
# ~7 ms of CPU (docs/bench-shim.md).
SHIM_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
shim:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(SHIM_VERSION)" -o build/bin/containerd-shim-ipc-v2 ./cmd/containerd-shim-ipc-v2

# The host tool: pods' IPC objects, waiters, undo entries, metrics.
ipcctl:
	$(GO) build -o build/bin/ipcctl ./cmd/ipcctl

# runc and busybox-static (apt); containerd, ctr and crictl from the Go module
# proxy; the Debian 12 rootfs (debootstrap, ~400 MB) unless NO_DEBIAN_ROOTFS=1.
# Needs Go (make deps installs it).
integration-deps:
	@scripts/install-runtime-deps.sh

integration: integration-deps
	INTEGRATION_REQUIRED=1 $(GO) test -count=1 -v ./integration/

# The README's main command: a private containerd running a container whose
# processes share a semaphore and a message queue under the shim. Builds
# what it needs first (Go modules, runc, containerd + ctr; not the Debian
# rootfs of the tests).
demo:
	@scripts/install-deps.sh go
	@NO_DEBIAN_ROOTFS=1 scripts/install-runtime-deps.sh
	@$(MAKE) --no-print-directory shim >/dev/null
	@scripts/demo.sh
