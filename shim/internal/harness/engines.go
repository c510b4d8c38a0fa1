package harness

import (
	"strconv"
	"sync"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
)

// EnginesByInode is a gateway.Handler for callers in any kernel IPC
// namespace: it keeps a gateway.Engines per namespace inode (the caller's
// Task.IPCNS), made on first use with Limits. The shim maps namespaces to
// containers itself (shim/task); tests serve whole process trees with
// this.
type EnginesByInode struct {
	// Limits are the limits of new namespaces.
	Limits ipcns.Limits

	mu  sync.Mutex
	nss map[uint64]*gateway.Engines // guarded by mu
}

// NewEnginesByInode returns an empty set of namespaces with Linux's
// default limits.
func NewEnginesByInode() *EnginesByInode {
	return &EnginesByInode{Limits: ipcns.DefaultLimits(), nss: make(map[uint64]*gateway.Engines)}
}

// Engines returns the engines of kernel IPC namespace ino, making them on
// first use.
func (e *EnginesByInode) Engines(ino uint64) *gateway.Engines {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.nss[ino]
	if n == nil {
		n = gateway.NewEngines("ipc:"+strconv.FormatUint(ino, 10), e.Limits)
		e.nss[ino] = n
	}
	return n
}

// Sem returns the semaphore engine of kernel IPC namespace ino.
func (e *EnginesByInode) Sem(ino uint64) *semengine.Engine { return e.Engines(ino).Sem() }

// Msg returns the message-queue engine of kernel IPC namespace ino.
func (e *EnginesByInode) Msg(ino uint64) *msgengine.Engine { return e.Engines(ino).Msg() }

// Inodes returns the kernel IPC namespace inodes that have engines.
func (e *EnginesByInode) Inodes() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	inos := make([]uint64, 0, len(e.nss))
	for ino := range e.nss {
		inos = append(inos, ino)
	}
	return inos
}

// Handle serves one call in the caller's namespace (gateway.Handler).
func (e *EnginesByInode) Handle(r *gateway.Request) { e.Engines(r.Task.IPCNS).Handle(r) }

// Exit applies the SEM_UNDO adjustments of pid in every namespace
// (gateway.Handler).
func (e *EnginesByInode) Exit(pid *ipcns.Pid) {
	e.mu.Lock()
	all := make([]*gateway.Engines, 0, len(e.nss))
	for _, n := range e.nss {
		all = append(all, n)
	}
	e.mu.Unlock()
	for _, n := range all {
		n.Exit(pid)
	}
}
