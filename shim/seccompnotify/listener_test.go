package seccompnotify_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/listener"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/seccompnotify"
	"golang.org/x/sys/unix"
)

func init() {
	// nullcalls N [WANT]: N semget calls, each must return WANT (the null
	// handler's answer, default 42); prints the time per call in ns.
	harness.Register("nullcalls", func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		want := uintptr(42)
		if len(args) > 1 {
			w, _ := strconv.Atoi(args[1])
			want = uintptr(w)
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			r, _, errno := unix.RawSyscall(unix.SYS_SEMGET, 0, 1, 0)
			if errno != 0 || r != want {
				fmt.Fprintf(os.Stderr, "semget: %d %v\n", r, errno)
				return 1
			}
		}
		fmt.Println(time.Since(start).Nanoseconds() / int64(max(n, 1)))
		return 0
	})
}

func TestMain(m *testing.M) {
	harness.MaybeChild()
	os.Exit(m.Run())
}

func TestSizes(t *testing.T) {
	if why := harness.Supported(); why != "" {
		t.Skip(why)
	}
	if err := seccompnotify.CheckSizes(); err != nil {
		t.Fatal(err)
	}
}

// runNull runs "nullcalls n" under the filter with a null handler and
// returns the child's per-call time in ns. With confirmed, the handler
// answers 0 through ReplyZeroConfirmed (ADDFD|SEND, the task's fd 0
// replaced by /dev/null) instead of a SEND of 42.
func runNull(tb testing.TB, n int, syncWake bool, confirmed ...bool) (perCall int64, served int64) {
	tb.Helper()
	if why := harness.Supported(); why != "" {
		tb.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := listener.Listen(filepath.Join(tb.TempDir(), "l.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	var count atomic.Int64
	served1 := make(chan error, 1)
	go srv.Serve(ctx, func(ctx context.Context, m *listener.Message) error {
		l, err := seccompnotify.New(m.SeccompFile())
		if err != nil {
			served1 <- err
			return err
		}
		defer l.Close()
		if syncWake {
			if err := l.SetSyncWakeUp(); err != nil {
				tb.Logf("no sync wake-up: %v", err)
			}
		}
		devnull, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			served1 <- err
			return err
		}
		defer unix.Close(devnull)
		served1 <- l.Serve(ctx, func(n *seccompnotify.Notif) {
			count.Add(1)
			var err error
			if len(confirmed) > 0 && confirmed[0] {
				err = l.ReplyZeroConfirmed(n.ID, devnull)
			} else {
				err = l.Reply(n.ID, 42, 0)
			}
			if err != nil && !seccompnotify.IsGone(err) {
				tb.Errorf("reply: %v", err)
			}
		})
		return nil
	})
	want := "42"
	if len(confirmed) > 0 && confirmed[0] {
		want = "0"
	}
	cmd := harness.Command(srv.Addr(), "go:nullcalls", strconv.Itoa(n), want)
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("child: %v", err)
	}
	// The child has exited: the filter has no users, Serve must end.
	select {
	case err := <-served1:
		if err != nil {
			tb.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		tb.Fatal("Serve did not return after the child exited")
	}
	if _, err := fmt.Sscan(string(out), &perCall); err != nil {
		tb.Fatalf("child output %q: %v", out, err)
	}
	return perCall, count.Load()
}

func TestNullHandler(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncwake=%v", sync), func(t *testing.T) {
			_, served := runNull(t, 1000, sync)
			// More is possible: a signal (the Go runtime's SIGURG) to a
			// task waiting for its answer makes the kernel restart the
			// call with a new notification.
			if served < 1000 {
				t.Fatalf("served %d notifications, want at least 1000", served)
			}
		})
	}
}

// BenchmarkNullRoundTrip measures a trapped call answered at once; the
// metric ns/call is measured by the trapped child itself.
func BenchmarkNullRoundTrip(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("syncwake=%v", sync), func(b *testing.B) {
			per, _ := runNull(b, max(b.N, 1000), sync)
			b.ReportMetric(float64(per), "ns/call")
		})
	}
	// The floor of exact delivery: the same null call answered through
	// ReplyZeroConfirmed, which waits for the task to take the answer.
	b.Run("confirmed", func(b *testing.B) {
		per, _ := runNull(b, max(b.N, 1000), true, true)
		b.ReportMetric(float64(per), "ns/call")
	})
}

func BenchmarkNativeGetppid(b *testing.B) {
	for i := 0; i < b.N; i++ {
		unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
	}
}
