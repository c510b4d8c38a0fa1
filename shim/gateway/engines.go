package gateway

import (
	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
)

// Engines serves the trapped calls of one kernel IPC namespace: the
// semaphore calls from a semengine and the message-queue calls from a
// msgengine, both on one ipcns.Resources, so they share its limits. An
// EngineTable gives the gateway the Engines of each caller; the shim
// keeps one per container IPC namespace.
type Engines struct {
	sem *semengine.Engine
	msg *msgengine.Engine
}

// NewEngines returns the engines of a new, empty namespace; name labels
// it in /proc-style output and errors.
func NewEngines(name string, lim ipcns.Limits) *Engines {
	ns := ipcns.NewResources(name, lim)
	return &Engines{sem: semengine.New(ns), msg: msgengine.New(ns)}
}

// Sem returns the namespace's semaphore engine.
func (n *Engines) Sem() *semengine.Engine { return n.sem }

// Msg returns the namespace's message-queue engine.
func (n *Engines) Msg() *msgengine.Engine { return n.msg }

// Exit applies the SEM_UNDO adjustments of pid in this namespace.
func (n *Engines) Exit(pid *ipcns.Pid) { n.sem.Exit(pid) }

// Free gives back what the namespace's message queues hold, as their
// namespace dies: call it when the namespace is dropped, before its
// account is closed.
func (n *Engines) Free() { n.msg.Free() }
