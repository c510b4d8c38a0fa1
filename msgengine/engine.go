package msgengine

import (
	"sync/atomic"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"golang.org/x/sys/unix"
)

// Engine is the message queues of one IPC namespace.
type Engine struct {
	ns  *ipcns.Resources
	ids *ipcns.Registry[Queue, *Queue]
	// reserved is the payload room all queues hold (reserve.go).
	reserved atomic.Int64
	// freed is set by Free: the namespace is gone, and a call that
	// found it before stores nothing more (its texts would outlive it).
	freed atomic.Bool
}

// New returns the empty message queue engine of namespace ns.
func New(ns *ipcns.Resources) *Engine {
	return &Engine{ns: ns, ids: ipcns.NewRegistry[Queue, *Queue]()}
}

// Resources returns the limits and account the engine shares with the
// other engine of its namespace.
func (e *Engine) Resources() *ipcns.Resources { return e.ns }

// Registry returns the engine's id registry (for msg_next_id and listings).
func (e *Engine) Registry() *ipcns.Registry[Queue, *Queue] { return e.ids }

// Msgget is msgget(2): the id of the queue with key, made as flg says
// (IPC_PRIVATE always makes one). Errors in Linux's order (ipcget): ENOENT
// without IPC_CREAT, EEXIST with IPC_CREAT|IPC_EXCL, EACCES for an
// existing queue, ENOSPC at msgmni queues.
func (e *Engine) Msgget(c *ipcns.Caller, key int32, flg int) (int32, error) {
	lim := e.ns.Limits()
	return e.ids.Get(&c.Creds, key, flg, lim.MsgMNI, ipcns.GetOps[*Queue]{
		New: func(ipcns.Perm) (*Queue, error) { return newQueue(e, lim), nil },
	})
}

// lookup finds msqid for msgsnd, msgrcv and IPC_STAT (EINVAL if absent).
func (e *Engine) lookup(msqid int32) (*Queue, error) {
	if msqid < 0 {
		return nil, unix.EINVAL
	}
	return e.ids.Lookup(msqid)
}
