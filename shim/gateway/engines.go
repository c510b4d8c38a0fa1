package gateway

import (
	"sync"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"golang.org/x/sys/unix"
)

// Namespace serves the trapped calls of one kernel IPC namespace: the
// semaphore calls from a semengine and the message-queue calls from a
// msgengine, both on one ipcns.Namespace, so they share its limits. It is
// a Handler for a gateway whose callers are all in that namespace; the
// shim keeps one per container IPC namespace.
type Namespace struct {
	sem *semengine.Engine
	msg *msgengine.Engine
}

// NewNamespace returns the engines of a new, empty namespace; name labels
// it in /proc-style output and errors.
func NewNamespace(name string, lim ipcns.Limits) *Namespace {
	ns := ipcns.NewNamespace(name, lim)
	return &Namespace{sem: semengine.New(ns), msg: msgengine.New(ns)}
}

// Sem returns the namespace's semaphore engine.
func (n *Namespace) Sem() *semengine.Engine { return n.sem }

// Msg returns the namespace's message-queue engine.
func (n *Namespace) Msg() *msgengine.Engine { return n.msg }

// Handle serves one call (Handler).
func (n *Namespace) Handle(r *Request) {
	switch r.Sysno {
	case SysSemget:
		n.semget(r)
	case SysSemop:
		n.semop(r, false)
	case SysSemtimedop:
		n.semop(r, true)
	case SysSemctl:
		n.semctl(r)
	case SysMsgget:
		n.msgget(r)
	case SysMsgsnd:
		n.msgsnd(r)
	case SysMsgrcv:
		n.msgrcv(r)
	case SysMsgctl:
		n.msgctl(r)
	default:
		r.Reply(0, unix.ENOSYS)
	}
}

// Exit applies the SEM_UNDO adjustments of pid in this namespace
// (Handler).
func (n *Namespace) Exit(pid *ipcns.Pid) { n.sem.Exit(pid) }

// Engines is a Handler for callers in any kernel IPC namespace: it keeps a
// Namespace per namespace inode (the caller's Task.IPCNS), made on first
// use with Limits. The shim maps namespaces itself (shim/task); tests and
// tools serve whole process trees with this.
type Engines struct {
	// Limits are the limits of new namespaces.
	Limits ipcns.Limits

	// mu guards nss.
	mu  sync.Mutex
	nss map[uint64]*Namespace
}

// NewEngines returns an empty set of namespaces with Linux's default
// limits.
func NewEngines() *Engines {
	return &Engines{Limits: ipcns.DefaultLimits(), nss: make(map[uint64]*Namespace)}
}

// Namespace returns the engines of kernel IPC namespace ino, making them
// on first use.
func (e *Engines) Namespace(ino uint64) *Namespace {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.nss[ino]
	if n == nil {
		n = NewNamespace("ipc:"+uitoa(ino), e.Limits)
		e.nss[ino] = n
	}
	return n
}

// Sem returns the semaphore engine of kernel IPC namespace ino.
func (e *Engines) Sem(ino uint64) *semengine.Engine { return e.Namespace(ino).sem }

// Msg returns the message-queue engine of kernel IPC namespace ino.
func (e *Engines) Msg(ino uint64) *msgengine.Engine { return e.Namespace(ino).msg }

// Namespaces returns the kernel IPC namespace inodes that have engines.
func (e *Engines) Namespaces() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	inos := make([]uint64, 0, len(e.nss))
	for ino := range e.nss {
		inos = append(inos, ino)
	}
	return inos
}

// Handle serves one call in the caller's namespace (Handler).
func (e *Engines) Handle(r *Request) { e.Namespace(r.Task.IPCNS).Handle(r) }

// Exit applies the SEM_UNDO adjustments of pid in every namespace
// (Handler).
func (e *Engines) Exit(pid *ipcns.Pid) {
	e.mu.Lock()
	all := make([]*Namespace, 0, len(e.nss))
	for _, n := range e.nss {
		all = append(all, n)
	}
	e.mu.Unlock()
	for _, n := range all {
		n.Exit(pid)
	}
}

func uitoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
