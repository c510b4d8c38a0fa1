package harness

import (
	"os"
	"strconv"
	"sync"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/ipcns"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/msgengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/semengine"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/memcharge"
)

// EnginesByInode is a gateway.EngineTable for callers in any kernel IPC
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
		if b := podBallast(); b != nil {
			_ = n.Sem().Resources().SetAccount(b)
		}
		e.nss[ino] = n
	}
	return n
}

// TextBallast returns the ballast that holds the tests' message text, or
// nil.
func TextBallast() *memcharge.Ballast { return podBallast() }

// podBallast is the account of every namespace the tests serve, as the
// shim's: message text in a memcharge arena whose helper sits in the test
// process's own memory cgroup, so that the gateway's tests take the path
// the shim takes. One ballast (one helper) for them all, as the shim
// shares one among the namespaces a cgroup's processes make. Nil when
// there is no memory cgroup to put the helper in (not root), or with
// GATEWAY_TEXT_ARENA=0.
var podBallast = sync.OnceValue(func() *memcharge.Ballast {
	if os.Getenv("GATEWAY_TEXT_ARENA") == "0" || os.Geteuid() != 0 {
		return nil
	}
	procs, err := memcharge.MemoryCgroup(os.Getpid())
	if err != nil {
		return nil
	}
	b, err := memcharge.New("tests", func() ([]memcharge.Place, error) { return []memcharge.Place{{Procs: procs}}, nil }, nil)
	if err != nil {
		return nil
	}
	return b
})

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

// EnginesOf returns the engines of t's namespace (gateway.EngineTable).
func (e *EnginesByInode) EnginesOf(t *gateway.Task) (*gateway.Engines, error) {
	return e.Engines(t.IPCNS), nil
}

// Exit applies the SEM_UNDO adjustments of pid in every namespace
// (gateway.EngineTable).
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
