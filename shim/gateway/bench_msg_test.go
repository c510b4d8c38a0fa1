package gateway_test

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/ipcfilter"
	"golang.org/x/sys/unix"
)

func init() {
	// msgpingpong N: two threads pass an 8-byte message back and forth
	// N times through one private queue (type 1 there, type 2 back);
	// prints "pid ns/roundtrip".
	harness.Register("msgpingpong", func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		ns, err := msgPingPong(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(os.Getpid(), ns)
		return 0
	})
}

// BenchmarkMsgrcvRaced: a thread's msgsnd/msgrcv pair to itself
// (testdata/msgself.c), native and trapped, with and without a signal
// pending and blocked: with it every msgrcv answer is one a signal may
// race with, carried by a vehicle (vehicle.go) or, vehicles off, sent
// and awaited as before them. All in the same run; ns/pair is measured
// by the child.
func BenchmarkMsgrcvRaced(b *testing.B) {
	bin := buildC(b, "testdata/msgself.c")
	b.Run("native", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 1000))
		b.ReportMetric(cNs(b, native(b, bin, n)), "ns/pair")
	})
	for _, c := range []struct {
		name     string
		blocked  bool
		vehicles bool
	}{{"trapped", false, true}, {"raced-vehicle", true, true}, {"raced-await", true, false}} {
		b.Run(c.name, func(b *testing.B) {
			defer gateway.SetVehicles(c.vehicles)()
			argv := []string{bin, strconv.Itoa(max(b.N, 200))}
			if c.blocked {
				argv = append(argv, "blocked")
			}
			out, g := serveWith(b, harness.NewEnginesByInode(), nil, argv...)
			logStats(b, g)
			b.ReportMetric(cNs(b, out), "ns/pair")
		})
	}
}

// cNs reads the one number a C benchmark program prints.
func cNs(b *testing.B, out []byte) float64 {
	b.Helper()
	var ns float64
	if _, err := fmt.Sscan(string(out), &ns); err != nil {
		b.Fatalf("child output %q: %v", out, err)
	}
	return ns
}

type msg8 struct {
	typ  int64
	text [8]byte
}

func msgPingPong(n int) (int64, error) {
	id, _, errno := unix.RawSyscall(unix.SYS_MSGGET, 0, 0o600, 0)
	if errno != 0 {
		return 0, fmt.Errorf("msgget: %v", errno)
	}
	defer unix.Syscall(unix.SYS_MSGCTL, id, 0, 0)
	// EINTR is retried: the Go runtime's preemption signal (SIGURG)
	// interrupts a blocked msgrcv, natively and trapped alike.
	call := func(snd bool, m *msg8, typ int64) error {
		errno := unix.EINTR
		for errno == unix.EINTR {
			if snd {
				m.typ = typ
				_, _, errno = unix.RawSyscall6(unix.SYS_MSGSND, id, uintptr(unsafe.Pointer(m)), 8, 0, 0, 0)
			} else {
				_, _, errno = unix.RawSyscall6(unix.SYS_MSGRCV, id, uintptr(unsafe.Pointer(m)), 8, uintptr(typ), 0, 0)
			}
		}
		if errno != 0 {
			return fmt.Errorf("msg (send=%v): %w", snd, errno)
		}
		return nil
	}
	echo := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var m msg8
		for i := 0; i < n; i++ {
			if err := call(false, &m, 1); err != nil {
				echo <- err
				return
			}
			if err := call(true, &m, 2); err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	runtime.LockOSThread()
	var m msg8
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := call(true, &m, 1); err != nil {
			return 0, err
		}
		if err := call(false, &m, 2); err != nil {
			return 0, err
		}
	}
	el := time.Since(start)
	if err := <-echo; err != nil {
		return 0, err
	}
	return el.Nanoseconds() / int64(max(n, 1)), nil
}

// native runs argv natively in a fresh IPC namespace (no filter) and
// returns its output.
func native(b *testing.B, argv ...string) []byte {
	b.Helper()
	out, err := harness.NativeCommand(argv...).Output()
	if err != nil {
		b.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	return out
}

// BenchmarkMsgPingPong: an 8-byte msgsnd/msgrcv round trip between two
// threads of one process, trapped (served by msgengine) and native, in
// the same run: ns/rt is measured by the child.
func BenchmarkMsgPingPong(b *testing.B) {
	b.Run("native", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 1000))
		b.ReportMetric(childNs(b, native(b, "go:msgpingpong", n)), "ns/rt")
	})
	b.Run("trapped", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 1000))
		out, g := serveWith(b, harness.NewEnginesByInode(), nil, "go:msgpingpong", n)
		logStats(b, g)
		b.ReportMetric(childNs(b, out), "ns/rt")
	})
}

// BenchmarkSemopPair: a semop +1/-1 pair, trapped (plain and exact
// delivery) and native, in the same run; plus the null trapped call, the
// ratio's denominator.
func BenchmarkSemopPair(b *testing.B) {
	b.Run("native", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 1000))
		b.ReportMetric(childNs(b, native(b, "go:semloop", n))/2, "ns/call")
	})
	b.Run("null", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 1000))
		out, _ := serveWith(b, harness.NewEnginesByInode(), nil, "go:calls", n, strconv.Itoa(unix.SYS_SEMGET))
		b.ReportMetric(childNs(b, out), "ns/call")
	})
	b.Run("trapped", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 1000))
		out, g := serveWith(b, harness.NewEnginesByInode(), nil, "go:semloop", n)
		logStats(b, g)
		b.ReportMetric(childNs(b, out)/2, "ns/call")
	})
}

// BenchmarkNonIPCSyscall: getppid in a loop with and without the IPC
// filter installed (the filter's cost on every other system call).
func BenchmarkNonIPCSyscall(b *testing.B) {
	nr := strconv.Itoa(unix.SYS_GETPPID)
	b.Run("nofilter", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 100000))
		b.ReportMetric(childNs(b, native(b, "go:calls", n, nr)), "ns/call")
	})
	b.Run("filter", func(b *testing.B) {
		n := strconv.Itoa(max(b.N, 100000))
		out, _ := serveWith(b, harness.NewEnginesByInode(), nil, "go:calls", n, nr)
		b.ReportMetric(childNs(b, out), "ns/call")
	})
}

func init() {
	// filtercost ROUNDS N: four threads of this process time N getppid
	// calls per round, taking turns for ROUNDS rounds: two without a
	// filter (the second is the noise floor), one under the IPC filter
	// and one under the same filter behind a load of the instruction
	// pointer, which the kernel's seccomp action cache cannot evaluate.
	// Seccomp filters belong to threads, so the four share everything
	// else. Prints each thread's minimum ns/call (noise only adds).
	harness.Register("filtercost", func(args []string) int {
		rounds, _ := strconv.Atoi(args[0])
		n, _ := strconv.Atoi(args[1])
		best, err := filterCost(rounds, n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("%.2f %.2f %.2f %.2f\n", best[0], best[1], best[2], best[3])
		return 0
	})
}

func filterCost(rounds, n int) ([4]float64, error) {
	prog, err := ipcfilter.Program()
	if err != nil {
		return [4]float64{}, err
	}
	const offIP = 8 // struct seccomp_data.instruction_pointer
	ldIP := unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offIP}
	uncached := append([]unix.SockFilter{ldIP}, prog...) // jumps are relative
	progs := [4][]unix.SockFilter{nil, nil, prog, uncached}
	var best [4]float64
	type turn struct{ done chan float64 }
	turns := make([]chan turn, 4)
	errs := make(chan error, 4)
	for i := range turns {
		turns[i] = make(chan turn)
		go func() {
			// Never unlocked: the thread ends with the goroutine, so its
			// filter cannot reach another goroutine.
			runtime.LockOSThread()
			if p := progs[i]; p != nil {
				if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
					errs <- err
					return
				}
				fprog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
				// No TSYNC: this thread only.
				if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
					errs <- fmt.Errorf("seccomp: %w", e)
					return
				}
			}
			errs <- nil
			for t := range turns[i] {
				start := time.Now()
				for j := 0; j < n; j++ {
					unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
				}
				t.done <- float64(time.Since(start).Nanoseconds()) / float64(n)
			}
		}()
	}
	for range turns {
		if err := <-errs; err != nil {
			return best, err
		}
	}
	for i := range best {
		best[i] = math.Inf(1)
	}
	for r := 0; r < rounds; r++ {
		for i, ch := range turns {
			t := turn{done: make(chan float64)}
			ch <- t
			best[i] = min(best[i], <-t.done)
		}
	}
	for _, ch := range turns {
		close(ch)
	}
	return best, nil
}

// BenchmarkFilterCost: what the IPC filter adds to a system call it does
// not trap (getppid), measured on threads of one process that take turns
// (see filtercost). The kernel's seccomp action cache (Linux >= 5.11)
// answers ALLOW for an nr-and-arch-only filter without running it; the
// uncached variant shows that the measurement does see a filter that
// runs, and the second filterless thread shows the noise floor.
func BenchmarkFilterCost(b *testing.B) {
	n := max(b.N/120, 20000)
	out := native(b, "go:filtercost", "30", strconv.Itoa(n))
	var best [4]float64
	if _, err := fmt.Sscan(string(out), &best[0], &best[1], &best[2], &best[3]); err != nil {
		b.Fatalf("child output %q: %v", out, err)
	}
	b.ReportMetric(best[0], "ns/call-nofilter")
	b.ReportMetric(best[1]-best[0], "ns-control")
	b.ReportMetric(best[2]-best[0], "ns-ipcfilter")
	b.ReportMetric(best[3]-best[0], "ns-uncached")
}
