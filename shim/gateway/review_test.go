package gateway_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/gateway"
	"github.com/containerd-shim-ipc/containerd-shim-ipc/shim/internal/harness"
	"golang.org/x/sys/unix"
)

// TestHandlerCallDifferential runs testdata/handlercall.c: a semop or
// msgrcv asleep is interrupted by a signal whose handler (SA_RESTART)
// makes an IPC call of its own, or siglongjmps out and the call is made
// again. Natively the interrupted call fails with EINTR whatever the
// handler calls, and a call made afresh after the siglongjmp sleeps.
func TestHandlerCallDifferential(t *testing.T) {
	bin := buildC(t, "testdata/handlercall.c")
	native, err := harness.NativeCommand(bin).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin)
	logStats(t, g)
	diff(t, native, trapped)
}

// TestHandlerLongjmpDifferential runs testdata/handlercall.c's siglongjmp
// cases: the handler (SA_RESTART) of a signal that interrupted a sleeping
// semop or msgrcv leaves through siglongjmp and the thread makes the same
// call again. Natively that is a new call, which sleeps; the gateway
// cannot tell it from the restart (doc.go, "What is not exact"): the
// test reports a difference as a skip (known inexact), and fails on it
// only when GATEWAY_KNOWN_INEXACT is set.
func TestHandlerLongjmpDifferential(t *testing.T) {
	bin := buildC(t, "testdata/handlercall.c")
	native, err := harness.NativeCommand(bin, "longjmp").Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "longjmp")
	logStats(t, g)
	if os.Getenv("GATEWAY_KNOWN_INEXACT") != "" {
		diff(t, native, trapped)
		return
	}
	if msg := firstDiff(string(native), string(trapped)); msg != "" {
		t.Skipf("known inexact (doc.go; GATEWAY_KNOWN_INEXACT=1 fails on it):\n%s", msg)
	}
}

// TestAwaitNextCallDifferential runs testdata/awaitdup.c: a receiver's
// answer in doubt (its process has a signal pending and blocked) is
// taken; the signal that then interrupts the receiver's next, identical
// msgrcv must not be read as the first answer's discard (the message
// requeued and received twice). The answers in doubt go through a
// vehicle (vehicle.go).
func TestAwaitNextCallDifferential(t *testing.T) {
	bin := buildC(t, "testdata/awaitdup.c")
	native, err := harness.NativeCommand(bin, "5").Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "5")
	logStats(t, g)
	diff(t, native, trapped)
	if n := g.Stats.ByKernel.Load(); n < 5 {
		t.Errorf("%d answers went through a vehicle, want one per rep (5)", n)
	}
}

// TestAwaitLateJudgeDifferential is TestAwaitNextCallDifferential with
// the receiver held after each first msgrcv's answer until the thread
// has taken the signal that interrupts its next, identical msgrcv: as a
// receiver preempted right after its answer is (TestAwaitNextCall failed
// this way once in 300 quiet runs, before vehicles). The one receiver is
// held, so the next call's notification goes unread and vanishes with
// the signal, and the thread's report of that interruption looks like a
// discard of the first answer; judged from it, the message was requeued
// and received twice. The vehicle's queue says the thread took it.
func TestAwaitLateJudgeDifferential(t *testing.T) {
	bin := buildC(t, "testdata/awaitdup.c")
	native, err := harness.NativeCommand(bin, "3").Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	held := holdFirstAnswers(t, false)
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "3")
	logStats(t, g)
	if n := held.Load(); n != 3 {
		t.Errorf("%d answers held, want 3 (one per rep)", n)
	}
	diff(t, native, trapped)
	if n := g.Stats.ByKernel.Load(); n < 3 {
		t.Errorf("%d answers went through a vehicle, want one per rep (3)", n)
	}
}

// TestAwaitAfterSendDifferential is TestAwaitLateJudgeDifferential with
// no signal pending when the first msgrcv is answered: the answer goes as
// a plain SEND, and the signal that interrupts the next, identical msgrcv
// is queued after the SEND, while the receiver is held before judging.
// Read from the thread's report of that interruption (await), the answer
// looked discarded and the message was received twice; a signal queued
// after the SEND returned cannot have discarded it (tasktrace's
// Event.Queued), so the answer is taken without await.
func TestAwaitAfterSendDifferential(t *testing.T) {
	bin := buildC(t, "testdata/awaitdup.c")
	native, err := harness.NativeCommand(bin, "plain", "3").Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	// The test, not the parent, sends the signal, from the held judge:
	// after the SEND returned however slow the receiver was, and once
	// the thread sleeps in its next msgrcv.
	t.Setenv("AWAITDUP_SIGNALLER", "test")
	held := holdFirstAnswers(t, true)
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "plain", "3")
	logStats(t, g)
	if n := held.Load(); n != 3 {
		t.Errorf("%d answers held, want 3 (one per rep)", n)
	}
	diff(t, native, trapped)
	if n := g.Stats.ByKernel.Load(); n != 0 {
		t.Errorf("%d answers went through a vehicle, want plain SENDs only", n)
	}
	if n := g.Stats.Awaited.Load(); n != 0 {
		t.Errorf("%d answers awaited, want 0: a signal queued after the SEND cannot have discarded it", n)
	}
}

// TestVehicleLately: msgrcv answers to a process signalled within
// signalMemory go by vehicle though no signal is known to race with them
// (testdata/msgself.c taken: a handled SIGUSR1, then msgsnd/msgrcv pairs
// to itself), so that a signal coming during one cannot leave its fate to
// await. Without the signal, or with no memory, they are plain SENDs.
func TestVehicleLately(t *testing.T) {
	if !gateway.VehiclesUsable() {
		t.Skip("vehicles are off on this host (SELinux or Smack)")
	}
	bin := buildC(t, "testdata/msgself.c")
	defer gateway.SetSignalMemory(time.Hour)()
	_, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, "20", "taken")
	logStats(t, g)
	if n, m := g.Stats.ByKernelLately.Load(), g.Stats.ByKernel.Load(); n != 20 || m != 20 {
		t.Errorf("signalled lately: %d answers by vehicle (%d for that), want 20 (20)", m, n)
	}
	_, g = serveWith(t, harness.NewEnginesByInode(), nil, bin, "20")
	if n := g.Stats.ByKernel.Load(); n != 0 {
		t.Errorf("never signalled: %d answers by vehicle, want 0", n)
	}
	gateway.SetSignalMemory(0)
	_, g = serveWith(t, harness.NewEnginesByInode(), nil, bin, "20", "taken")
	if n := g.Stats.ByKernel.Load(); n != 0 {
		t.Errorf("signalled, no memory: %d answers by vehicle, want 0", n)
	}
}

// holdFirstAnswers holds the judging of the answer to each thread's
// first blocking msgrcv (testdata/awaitdup.c's) until the thread has
// taken a signal since: as a receiver preempted right after its SEND is.
// With signal, the hook sends that signal (SIGUSR1) itself once the
// thread sleeps in its next trapped call. It returns the count of
// answers held; the hook goes with the test.
func holdFirstAnswers(t *testing.T, signal bool) *atomic.Int32 {
	var held atomic.Int32
	var mu sync.Mutex
	seen := map[int]bool{}
	unhook := gateway.SetTakenHook(func(r *gateway.Request) {
		if r.Sysno != gateway.SysMsgrcv || r.MsgrcvFlags() != 0 {
			return
		}
		mu.Lock()
		first := !seen[r.Task.Tid]
		seen[r.Task.Tid] = true
		mu.Unlock()
		if !first {
			return
		}
		n := held.Add(1)
		deadline := time.Now().Add(10 * time.Second)
		if signal {
			for !asleepInTrap(r.Task.Tid) {
				if time.Now().After(deadline) {
					t.Errorf("answer %d: the thread did not sleep in a next call in 10 s", n)
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
			if err := unix.Tgkill(r.Task.Tgid, r.Task.Tid, unix.SIGUSR1); err != nil {
				t.Errorf("answer %d: tgkill: %v", n, err)
				return
			}
		}
		for !r.SignalTakenSinceAnswer() {
			if time.Now().After(deadline) {
				t.Errorf("answer %d: the thread took no signal in 10 s", n)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	t.Cleanup(unhook)
	return &held
}

// TestAwaitBlockedSignalStall measures msgrcv answers to a process that
// has a signal pending and blocked (or, the same to the gateway, one
// taken through signalfd or sigwaitinfo, which signal_deliver never
// reports): no signal can interrupt the receiver, yet each answer waits
// awaitLimit for a report, holding the queue's lock.
func TestAwaitBlockedSignalStall(t *testing.T) {
	bin := buildC(t, "testdata/awaitdup.c")
	const n = 20
	for _, mode := range []string{"", "blocked"} {
		args := []string{bin, "stall", "20"}
		if mode != "" {
			args = append(args, mode)
		}
		start := time.Now()
		out, g := serveWith(t, harness.NewEnginesByInode(), nil, args...)
		el := time.Since(start)
		logStats(t, g)
		t.Logf("%q: %s in %v (unsettled %d)", mode, strings.TrimSpace(string(out)), el, g.Stats.Unsettled.Load())
		if mode == "blocked" && g.Stats.Unsettled.Load() >= n/2 {
			t.Errorf("%d of %d answers waited awaitLimit for a signal report that cannot come (%v in all)", g.Stats.Unsettled.Load(), n, el)
		}
	}
}

// TestBigTimeoutDifferential runs testdata/bigtimeout.c: semtimedop with
// timeouts of 10^4 s up to LONG_MAX s sleeps until woken, natively.
func TestBigTimeoutDifferential(t *testing.T) { cDifferential(t, "testdata/bigtimeout.c") }

// TestFdZeroDifferential runs testdata/fdzero.c: semop answers that may
// race with a signal are confirmed through ADDFD, which installs a copy
// of the caller's fd 0 as its fd 0; for a thread with a file table of its
// own that copy must be taken from the thread's table, not its leader's.
func TestFdZeroDifferential(t *testing.T) {
	bin := buildC(t, "testdata/fdzero.c")
	native, err := harness.NativeCommand(bin).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin)
	logStats(t, g)
	if g.Stats.Confirmed.Load() == 0 {
		t.Log("no answer went through ADDFD: the case was not exercised")
	}
	diff(t, native, trapped)
}

// TestSignalRainDifferential runs testdata/signalrain.c: calls that never
// sleep (semget, SETVAL, IPC_SET, IPC_RMID, IPC_CREAT|IPC_EXCL) made
// while the caller takes SIGUSR1 (SA_RESTART) as fast as its parent can
// send it. Natively none fails and nothing is left. A signal that ends
// the trapped call after its effect was done makes the kernel restart
// it: the restart must get the call's answer (Request.deliver), not run
// it again. Before that, 3,000 rounds gave 4 to 35 IPC_RMIDs failing
// with EINVAL and 1 to 3 sets made twice. Run with the receivers as
// configured and with every read handing the turn on.
func TestSignalRainDifferential(t *testing.T) {
	bin := buildC(t, "testdata/signalrain.c")
	n := "2000"
	if testing.Short() {
		n = "500"
	}
	native, err := harness.NativeCommand(bin, n).Output()
	if err != nil {
		t.Skipf("native run (needs CAP_SYS_ADMIN for unshare -i): %v", err)
	}
	for _, handoff := range []bool{false, true} {
		name := "configured"
		if handoff {
			name = "handoff"
		}
		t.Run(name, func(t *testing.T) {
			if handoff {
				defer gateway.SetHandOffAlways(gateway.SetHandOffAlways(true))
			}
			trapped, g := serveWith(t, harness.NewEnginesByInode(), nil, bin, n)
			logStats(t, g)
			diff(t, native, trapped)
		})
	}
}

// asleepInTrap reports whether thread tid sleeps in a trapped call, the
// seccomp notifier's wait (/proc: state S, wchan
// seccomp_do_user_notification, maybe with a compiler suffix).
func asleepInTrap(tid int) bool {
	dir := "/proc/" + strconv.Itoa(tid) + "/"
	stat, err := os.ReadFile(dir + "stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] != 'S' {
		return false
	}
	wchan, _ := os.ReadFile(dir + "wchan")
	name, _, _ := strings.Cut(string(wchan), ".")
	return name == "seccomp_do_user_notification"
}
