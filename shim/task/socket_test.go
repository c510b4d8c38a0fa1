package task

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/log"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/listener"
)

// errorLog records the error-level lines logged through containerd's log
// (log.G of a context without a logger of its own).
type errorLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *errorLog) Levels() []log.Level { return []log.Level{log.ErrorLevel} }

func (h *errorLog) Fire(e *log.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, e.Message)
	return nil
}

// socketStops returns how many "listener socket stopped" errors were
// logged, and forgets them.
func (h *errorLog) socketStops() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.lines {
		if strings.Contains(l, "seccomp listener socket stopped") {
			n++
		}
	}
	h.lines = nil
	return n
}

var errorLogOnce = sync.OnceValue(func() *errorLog {
	h := &errorLog{}
	log.L.Logger.AddHook(h)
	return h
})

// The listener socket's stop is an error while the shim serves (runc can
// hand over no more listeners), not at the shim's own shutdown, which
// ends its context with shutdown.ErrShutdown.
func TestSocketStopLoggedOnlyWhileServing(t *testing.T) {
	h := errorLogOnce()
	h.socketStops()
	// serve runs the socket of a Service on ctx; wait returns once its
	// server has stopped (and what it logs is logged).
	serve := func(ctx context.Context) (srv *listener.Server, wait func()) {
		t.Helper()
		srv, err := listener.Listen(filepath.Join(t.TempDir(), "l.sock"))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			(&Service{ctx: ctx}).serveSocket(srv)
		}()
		return srv, func() { <-done }
	}

	// The shim shuts down: containerd's shutdown service ends the
	// context the shim serves on.
	ctx, sd := shutdown.WithShutdown(context.Background())
	_, wait := serve(ctx)
	sd.Shutdown()
	wait()
	if n := h.socketStops(); n != 0 {
		t.Fatalf("the shim's shutdown logged the socket's stop as an error %d time(s)", n)
	}

	// The socket fails while the shim serves.
	ctx, sd = shutdown.WithShutdown(context.Background())
	defer sd.Shutdown()
	srv, wait := serve(ctx)
	srv.Close()
	wait()
	if n := h.socketStops(); n != 1 {
		t.Fatalf("a stop while serving was logged %d time(s), want 1", n)
	}
}
