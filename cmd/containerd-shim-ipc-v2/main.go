// Command containerd-shim-ipc-v2 is the containerd shim for runtime type
// io.containerd.ipc.v2: containerd's runc shim whose containers get System
// V semaphores and message queues served by the shim's engines through
// seccomp user notification.
package main

import (
	"context"

	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/task"
)

func main() {
	task.Register()
	shim.RunShim(context.Background(), task.NewManager())
}
