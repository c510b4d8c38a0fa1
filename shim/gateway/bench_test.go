package gateway_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
	"golang.org/x/sys/unix"
)

func init() {
	// semloop N: N lock/unlock pairs (semtimedop with a NULL timeout, as
	// glibc's semop does) on a private set; prints "pid ns/pair".
	harness.Register("semloop", func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		ns, err := semLoop(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(os.Getpid(), ns)
		return 0
	})
}

type sembuf struct{ num, op, flg int16 }

// semLoop does n semop -1/+1 pairs on a new private set and returns the
// time per pair in ns.
func semLoop(n int) (int64, error) {
	id, _, errno := unix.RawSyscall(unix.SYS_SEMGET, 0, 1, 0o600)
	if errno != 0 {
		return 0, fmt.Errorf("semget: %v", errno)
	}
	defer unix.Syscall6(unix.SYS_SEMCTL, id, 0, 0, 0, 0, 0)
	ops := [2]sembuf{{0, 1, 0}, {0, -1, 0}}
	start := time.Now()
	for i := 0; i < n; i++ {
		for j := range ops {
			if _, _, errno := unix.RawSyscall6(unix.SYS_SEMTIMEDOP, id, uintptr(unsafe.Pointer(&ops[j])), 1, 0, 0, 0); errno != 0 {
				return 0, fmt.Errorf("semtimedop: %v", errno)
			}
		}
	}
	return time.Since(start).Nanoseconds() / int64(max(n, 1)), nil
}

func childNs(b *testing.B, out []byte) float64 {
	var pid, ns int64
	if _, err := fmt.Sscan(string(out), &pid, &ns); err != nil {
		b.Fatalf("child output %q: %v", out, err)
	}
	return float64(ns)
}

// BenchmarkGatewayNull: a trapped semget of a key no set has, answered
// ENOENT by the engine after identification; ns/call is measured by the child. With
// cached=false every call rereads the thread's IPC namespace and
// credentials, as for a profile that lets them change unseen.
func BenchmarkGatewayNull(b *testing.B) {
	for _, cached := range []bool{true, false} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			out, _ := serveWith(b, harness.NewEnginesByInode(), func(g *gateway.Gateway) { g.Defaults.NSFixed, g.Defaults.IDsFixed = cached, cached },
				"go:calls", strconv.Itoa(max(b.N, 1000)), strconv.Itoa(unix.SYS_SEMGET))
			b.ReportMetric(childNs(b, out), "ns/call")
		})
	}
}

// BenchmarkGatewaySemop: a trapped lock/unlock pair served by semengine.
func BenchmarkGatewaySemop(b *testing.B) {
	for _, cached := range []bool{true, false} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			out, g := serveWith(b, harness.NewEnginesByInode(), func(g *gateway.Gateway) { g.Defaults.NSFixed, g.Defaults.IDsFixed = cached, cached },
				"go:semloop", strconv.Itoa(max(b.N, 1000)))
			logStats(b, g)
			b.ReportMetric(childNs(b, out)/2, "ns/call")
		})
	}
}

// BenchmarkNativeSemop: the same pair on the kernel, in a fresh IPC
// namespace (on a locked thread that is discarded afterwards).
func BenchmarkNativeSemop(b *testing.B) {
	done := make(chan error)
	var ns int64
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
			done <- err
			return
		}
		b.ResetTimer()
		var err error
		ns, err = semLoop(b.N)
		done <- err
	}()
	if err := <-done; err != nil {
		b.Skip(err)
	}
	b.ReportMetric(float64(ns), "ns/pair")
}

func BenchmarkNativeGetppid(b *testing.B) {
	for i := 0; i < b.N; i++ {
		unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
	}
}

// The costs of the identification choices, on the benchmark's own thread.

func BenchmarkPidfdGetInfo(b *testing.B) {
	fd, err := unix.PidfdOpen(unix.Gettid(), unix.PIDFD_THREAD)
	if err != nil {
		b.Skip(err)
	}
	defer unix.Close(fd)
	for i := 0; i < b.N; i++ {
		info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_CREDS}
		if err := unix.IoctlPidfdInfo(fd, &info); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadlinkIPCNS(b *testing.B) {
	p := "/proc/" + strconv.Itoa(unix.Gettid()) + "/ns/ipc"
	var buf [64]byte
	for i := 0; i < b.N; i++ {
		if _, err := unix.Readlink(p, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadStatus(b *testing.B) {
	p := "/proc/" + strconv.Itoa(os.Getpid()) + "/status"
	for i := 0; i < b.N; i++ {
		if _, err := os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
}

func logStats(tb testing.TB, g *gateway.Gateway) {
	s := &g.Stats
	tb.Logf("stats: interrupted=%d restarts=%d resumed=%d confirmed=%d refused=%d unconfirmed=%d awaited=%d bykernel=%d(lately %d)/%d discarded=%d unsettled=%d resent=%d exits=%d lost=%d/%d stale=%d parked=%d servedagain=%d",
		s.Interrupted.Load(), s.Restarts.Load(), s.Resumed.Load(), s.Confirmed.Load(), s.Refused.Load(), s.Unconfirmed.Load(),
		s.Awaited.Load(), s.ByKernel.Load(), s.ByKernelLately.Load(), s.NoVehicle.Load(), s.Discarded.Load(), s.Unsettled.Load(), s.Resent.Load(), s.Exits.Load(), s.SignalEventsLost.Load(), s.ExitEventsLost.Load(), s.Stale.Load(),
		s.Parked.Load(), s.ServedAgain.Load())
}

// BenchmarkCapget measures the capability read a permission check makes
// when ids and mode bits refuse (Task.liveCaps).
func BenchmarkCapget(b *testing.B) {
	tid := unix.Gettid()
	for b.Loop() {
		if _, err := gateway.CapEff(tid); err != nil {
			b.Fatal(err)
		}
	}
}
