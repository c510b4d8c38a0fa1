package kernelipc

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// InFreshNamespace runs f on an OS thread of its own that has left the
// process's IPC namespace for a new, empty one (unshare CLONE_NEWIPC).
// Every IPC syscall f makes from that thread, and every actor it starts,
// sees only that namespace. The thread is discarded afterwards.
func InFreshNamespace(f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: the thread dies with the
		// goroutine instead of returning to the pool in the namespace.
		if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWIPC): %w", err)
			return
		}
		finished := false
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic in fresh namespace: %v", r)
			} else if !finished {
				// f called runtime.Goexit, as t.FailNow does.
				errc <- errors.New("fresh namespace: f did not return (FailNow?)")
			}
		}()
		f()
		finished = true
		errc <- nil
	}()
	return <-errc
}

// Available reports whether this process may create IPC namespaces.
func Available() bool {
	return InFreshNamespace(func() {}) == nil
}
