module github.com/containerd-shim-ipc/containerd-shim-ipc

go 1.26.0

require golang.org/x/sys v0.50.0
