package osthread

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNeverTheMainThread runs many times from the main goroutine, which
// sits on the main thread at start, and checks f never ran there.
func TestNeverTheMainThread(t *testing.T) {
	runtime.LockOSThread() // the test goroutine: likely not main, but hold one
	defer runtime.UnlockOSThread()
	for i := 0; i < 200; i++ {
		var tid int
		if err := Run(func() error { tid = unix.Gettid(); return nil }); err != nil {
			t.Fatal(err)
		}
		if tid == unix.Getpid() {
			t.Fatalf("run %d: f ran on the main thread", i)
		}
	}
}

func TestGoexitIsAnError(t *testing.T) {
	if err := Run(func() error { runtime.Goexit(); return nil }); err == nil {
		t.Fatal("Goexit not reported")
	}
}
