package kernelipc

import (
	"fmt"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/internal/osthread"

	"golang.org/x/sys/unix"
)

// InFreshNamespace runs f on an OS thread of its own that has left the
// process's IPC namespace for a new, empty one (unshare CLONE_NEWIPC).
// Every IPC syscall f makes from that thread, and every actor it starts,
// sees only that namespace. The thread is discarded afterwards.
func InFreshNamespace(f func()) error {
	return runLocked(func() error {
		if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
			return fmt.Errorf("unshare(CLONE_NEWIPC): %w", err)
		}
		f()
		return nil
	})
}

// runLocked runs f on an OS thread that is thrown away afterwards, since
// f changes the thread's namespaces.
func runLocked(f func() error) error { return osthread.Run(f) }

// Available reports whether this process may create IPC namespaces.
func Available() bool {
	return InFreshNamespace(func() {}) == nil
}

// NamespaceFD holds a fresh kernel IPC namespace open (an nsfs fd) so that
// several threads can enter it, for benchmarks with concurrent workers.
type NamespaceFD struct {
	fd int
}

// NewNamespaceFD makes a fresh IPC namespace, kept alive until Close.
func NewNamespaceFD() (*NamespaceFD, error) {
	var ns *NamespaceFD
	var nerr error
	err := InFreshNamespace(func() {
		fd, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/ipc", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			nerr = err
			return
		}
		ns = &NamespaceFD{fd: fd}
	})
	if err == nil {
		err = nerr
	}
	return ns, err
}

// Run runs f on an OS thread of its own that has entered ns (setns); the
// thread is discarded afterwards.
func (ns *NamespaceFD) Run(f func()) error {
	return runLocked(func() error {
		if err := unix.Setns(ns.fd, unix.CLONE_NEWIPC); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		f()
		return nil
	})
}

// Close releases the namespace.
func (ns *NamespaceFD) Close() error { return unix.Close(ns.fd) }
