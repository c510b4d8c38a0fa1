// Package osthread runs work that changes the calling OS thread's
// namespaces or filesystem context (setns, unshare) on a thread that is
// thrown away afterwards.
package osthread

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Run runs f on a goroutine locked to an OS thread that ends with it, so
// that nothing f does to the thread (entering another namespace,
// unshare(CLONE_FS)) leaks into the rest of the process. It never uses the
// process's main thread: the Go runtime cannot end that one and parks it
// forever instead, which would keep, say, a container's mount namespace
// alive after the container is gone. A panic or runtime.Goexit in f is
// returned as an error.
func Run(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// This is the main thread. While this goroutine holds it, the
			// one Run starts now must get another thread.
			errc <- Run(f)
			runtime.UnlockOSThread()
			return
		}
		// No UnlockOSThread: the thread dies with the goroutine.
		finished := false
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("osthread: panic: %v", r)
			} else if !finished {
				errc <- errors.New("osthread: f did not return (runtime.Goexit)")
			}
		}()
		err := f()
		finished = true
		errc <- err
	}()
	return <-errc
}
